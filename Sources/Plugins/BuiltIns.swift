import PipelineKit

/// The built-in plugins, registered through the same public API a custom plugin uses.
public enum BuiltIns: PluginBundle {
    /// Every built-in plugin, in slot order.
    public static let plugins: [Plugin] = [
        HTTPLoader.plugin, FileLoader.plugin, DataURLLoader.plugin, S3Loader.plugin,
        DiskDataCache.plugin, S3DataCache.plugin,
        ImageMagickDecoder.plugin,
        Analyze.plugin, DetectFaces.plugin, Redact.plugin, Resize.plugin, Crop.plugin, Trim.plugin, RoundedCorners.plugin, Circle.plugin,
        Blur.plugin, Sharpen.plugin, Unsharp.plugin,
        Grayscale.plugin, Sepia.plugin, Modulate.plugin, Tint.plugin, Negate.plugin, Contrast.plugin,
        Rotate.plugin, Flip.plugin, Flop.plugin, AutoOrient.plugin,
        Pad.plugin, Pad.extendPlugin, Border.plugin, Background.plugin,
        Watermark.plugin, Strip.plugin, MagickOperation.plugin,
        MemoryImageCache.plugin,
    ] + FormatTable.encoders + [
        AutoEncoder.plugin,
        LocalDirectory.plugin, S3Destination.plugin,
        FileList.plugin, S3List.plugin, SQSList.plugin, PostgresList.plugin,
        JSONReport.plugin, JSONLinesReport.plugin, HTMLReport.plugin, TextReport.plugin,
        VarnishPurger.plugin, CloudFrontPurger.plugin, CloudflarePurger.plugin, FastlyPurger.plugin,
        Webhook.plugin, SQSNotifier.plugin, SNSNotifier.plugin,
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
