// Every pipelinectl command (validate, explain, run, fetch, test, plugins, schema), with the
// built-in plugins and ours.
import CustomPlugins
import PipelineCtl
import Plugins

await PipelineCtl.main(plugins: [BuiltIns.self, CustomPlugins.self])
