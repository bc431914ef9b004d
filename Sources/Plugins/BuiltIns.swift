import PipelineKit

/// The built-in plugins, registered through the same public API a custom plugin uses.
public enum BuiltIns: PluginBundle {
    /// Every built-in plugin, in slot order.
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
        for plugin in plugins { try registry.register(plugin, origin: bundleName) }
    }

    /// A registry holding the built-ins only.
    public static func registry() -> PluginRegistry {
        // Built-in names are distinct; a clash is a programming error that the tests catch.
        try! PluginRegistry(bundles: [BuiltIns.self])
    }
}
