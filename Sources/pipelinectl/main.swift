// The stock pipelinectl: the controller with the built-in plugins. A custom build is this file
// with its own bundles added (see README, "Extend it in Swift").
import PipelineCtl
import Plugins

await PipelineCtl.main(plugins: [BuiltIns.self])
