import PipelineKit

/// The built-in plugins, registered through the same public API a custom plugin uses.
public enum BuiltIns {
    /// Every built-in plugin, by slot order.
    public static let plugins: [Plugin] = [
        HTTPLoader.plugin, FileLoader.plugin, DataURLLoader.plugin,
        DiskDataCache.plugin,
        ImageMagickDecoder.plugin,
        Resize.plugin,
        MemoryImageCache.plugin,
        JPEGEncoder.plugin, PNGEncoder.plugin, WebPEncoder.plugin,
    ]

    /// Adds every built-in to `registry`.
    public static func register(into registry: inout PluginRegistry) throws {
        for plugin in plugins { try registry.register(plugin) }
    }

    /// A registry holding the built-ins only.
    public static func registry() -> PluginRegistry {
        var registry = PluginRegistry()
        // Built-in names are distinct; a clash is a programming error caught by the tests.
        try! register(into: &registry)
        return registry
    }
}
