import PipelineKit

extension Plugin {
    /// The plugin's defaults with `overrides` applied, as validation would produce them.
    public func options(_ overrides: [String: OptionValue] = [:]) -> PluginOptions {
        var values = defaultOptions.values
        for (key, value) in overrides { values[key] = value }
        return PluginOptions(values)
    }
}
