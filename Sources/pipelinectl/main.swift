// The stock pipelinectl: the controller with the built-in plugins. A custom build is this file
// with its own bundles added (see docs/extending.md).
import PipelineCtl
import Plugins

await PipelineCtl.main(plugins: [BuiltIns.self])
