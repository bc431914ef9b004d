import PipelineKit

/// This package's plugins, registered together.
public enum CustomPlugins: PluginBundle {
    public static let plugins = [Duotone.plugin, CatalogLoader.plugin, ImageFactsEncoder.plugin, TarArchive.plugin]
}
