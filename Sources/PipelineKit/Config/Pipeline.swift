import Foundation

/// Where in a pipeline file something was written.
public struct SourcePosition: Sendable, Hashable {
    public let line: Int
    public let column: Int
    public init(line: Int, column: Int) {
        self.line = line
        self.column = column
    }
}

/// One configured stage: the plugin, its validated options, and where it was written.
public struct StageConfig: Sendable {
    public let plugin: Plugin
    public let options: PluginOptions
    public let position: SourcePosition

    public init(plugin: Plugin, options: PluginOptions, position: SourcePosition) {
        self.plugin = plugin
        self.options = options
        self.position = position
    }
}

/// Where and under which names outputs are written.
public struct OutputConfig: Sendable {
    /// The output directory (relative paths are relative to the working directory).
    public var dir: String
    /// The file name template.
    public var name: NameTemplate
}

/// A validated pipeline file: every stage resolved to a plugin with checked options.
///
/// Produced by ``PipelineFile/load(path:registry:)``; turned into running stages by the engine.
public struct Pipeline: Sendable {
    /// The pipeline file's path as given.
    public let file: String
    public let version: Int
    public let name: String
    public let description: String
    /// The configured network loader; `nil` uses every loader's defaults.
    public let loader: StageConfig?
    public let dataCache: StageConfig?
    public let decoder: StageConfig
    public let processors: [StageConfig]
    public let imageCache: StageConfig?
    public let encoder: StageConfig
    public var output: OutputConfig
}
