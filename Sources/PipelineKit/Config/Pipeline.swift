import Foundation
import Synchronization

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
///
/// A stage is built once: validation makes it (its factory is what rejects option combinations)
/// and the stage keeps what was made, which every run and every variant that shares it then uses.
/// Stages whose building has effects or needs the environment (loaders, destinations) are only
/// checked at validation and built by the run, when first needed.
public struct StageConfig: Sendable {
    public let plugin: Plugin
    public let options: PluginOptions
    /// Where the plugin's name was written.
    public let position: SourcePosition
    /// Where each option set in the file was written (options left at their default are absent).
    public let optionPositions: [String: SourcePosition]
    /// Where the stage sits in the file, as a key path (`loader.http`, `processors.2.resize`), for
    /// messages; `nil` for a stage the file does not name (a default).
    public var keyPath: String?
    /// What the factory made, once made; shared by the copies of this value.
    let built = BuiltStage()

    public init(plugin: Plugin, options: PluginOptions, position: SourcePosition,
                optionPositions: [String: SourcePosition] = [:]) {
        self.plugin = plugin
        self.options = options
        self.position = position
        self.optionPositions = optionPositions
    }
}

extension StageConfig {
    /// `plugin` (a processor that takes `width`, such as `resize`) with every option at its
    /// default: the scaler of breakpoints by bytes, given a width by ``atWidth(_:)``.
    static func scaling(_ plugin: Plugin, position: SourcePosition) -> StageConfig {
        var values: [String: OptionValue] = [:]
        for option in plugin.spec.options { if let value = option.defaultValue { values[option.name] = value } }
        return StageConfig(plugin: plugin, options: PluginOptions(values), position: position)
    }

    /// This stage with its `width` option set to `width` (a new stage, built on its own).
    func atWidth(_ width: Int) -> StageConfig {
        var values = options.values
        values["width"] = .int(width)
        var copy = StageConfig(plugin: plugin, options: PluginOptions(values), position: position)
        copy.keyPath = keyPath
        return copy
    }
}

/// The one instance of a configured stage, made on first use.
final class BuiltStage: Sendable {
    // Only ever holds a stage: every stage protocol refines Sendable.
    private let instance = Mutex<Any?>(nil)

    /// The instance, made by `make` the first time.
    func get<T>(_ make: () throws -> T) throws -> T {
        try instance.withLock { instance in
            if let made = instance as? T { return made }
            let made = try make()
            instance = made
            return made
        }
    }
}

/// Where and under which names outputs are written.
public struct OutputConfig: Sendable {
    /// The output directory (relative paths are relative to the working directory), or a URL of
    /// the destination's scheme (`s3://bucket/prefix`).
    public var dir: String
    /// The file name template.
    public var name: NameTemplate
    /// Every option of `output:` (``PipelineFileSpec/output`` and the destination's own), with
    /// defaults filled in.
    public var options: PluginOptions
    /// Where `dir` and `name` were written, when they were.
    public var dirPosition: SourcePosition?
    public var namePosition: SourcePosition?

    /// What happens to an output already at its path (`existing`).
    public var existing: ExistingOutputs {
        options.string("existing").flatMap(ExistingOutputs.init(rawValue:)) ?? .replaceIfChanged
    }

    /// The facts sidecar's name template, when `facts_sidecar` is on.
    public var factsName: NameTemplate? {
        guard options.bool("facts_sidecar") == true else { return nil }
        return try? NameTemplate(options.string("facts_name") ?? NameTemplate.defaultFactsText)
    }
}

/// One output per source: a processor chain, an encoder and a name template.
///
/// A pipeline without `variants:` has one unnamed variant made of its `processors` and
/// `encoder`. With `variants:`, each variant's chain is the top-level `processors` followed by its
/// own, so the shared start of the chains is computed once per source.
public struct Variant: Sendable {
    /// The variant's name (`small`, `large`), or `nil` for a pipeline without variants.
    public let name: String?
    /// The whole chain: the pipeline's shared processors, then the variant's own.
    public internal(set) var processors: [StageConfig]
    /// How many of ``processors`` are the pipeline's shared ones.
    public let sharedCount: Int
    public internal(set) var encoder: StageConfig
    public internal(set) var template: NameTemplate
    /// Where the variant was declared.
    public let position: SourcePosition?
    /// Breakpoints by bytes (`breakpoints:`): one output per width, chosen for each image;
    /// `nil` for a variant with one output.
    public internal(set) var byBytes: BytesBreakpoints? = nil
    /// The processor that scales the variant's image to each width of ``byBytes`` (the
    /// registry's `resize`, its options at their defaults).
    public internal(set) var scaler: StageConfig? = nil
}

/// A validated pipeline file: every stage resolved to a plugin with checked options.
///
/// Produced by ``PipelineFile/load(path:registry:environment:machineFacts:)``; turned into running stages by the engine.
public struct Pipeline: Sendable {
    /// The pipeline file's path as given.
    public let file: String
    public let version: Int
    public let name: String
    public let description: String
    /// The configured network loader; `nil` uses every loader's defaults.
    public internal(set) var loader: StageConfig?
    public let dataCache: StageConfig?
    public internal(set) var decoder: StageConfig
    /// The top-level processors (shared by every variant).
    public internal(set) var processors: [StageConfig]
    public let imageCache: StageConfig?
    /// The outputs made from each source: one, or one per declared variant.
    public internal(set) var variants: [Variant]
    public var output: OutputConfig
    /// Whether the file declared `variants:`.
    public let hasVariants: Bool

    /// The encoder of the first variant (the top-level one when there are no variants).
    public var encoder: StageConfig { variants[0].encoder }
    /// Warnings found while validating (the pipeline runs; a person may still want to act).
    public var warnings: [Diagnostic] = []
    /// The options of `on_failure:`, when the file has it (see ``FailurePolicy``).
    public var onFailure: PluginOptions?
    /// The options of `metadata:`, when the file has it (see ``MetadataPolicy``).
    public var metadata: PluginOptions?
    /// The top-level `encoder`, which variants without their own use; `nil` when every variant has its own.
    public internal(set) var topEncoder: StageConfig?
    /// What a request to `pipelinectl serve` may set (`params:`), by name.
    public var params: [String: ParamSpec] = [:]
    /// How `pipelinectl serve` serves this pipeline (`serve:`).
    public var serve = ServeConfig()
    /// The CDNs in front of `serve` that `cache purge` also purges (`purge:`), built only then.
    public var purgers: [StageConfig] = []
    /// Where `run` and `work` announce finished items (`notify:`), built only by a run.
    public var notifiers: [StageConfig] = []
    /// Where sources may come from in every mode (`sources:`): directories, URL prefixes or
    /// schemes, decided by ``SourceBoundary``; empty: anywhere the loaders allow. `serve` uses
    /// ``ServeConfig/sources`` instead when that is set.
    public var sources: [String] = []

    /// What the outputs keep of the sources' metadata (``MetadataPolicy/defaults`` without a
    /// `metadata:` section).
    public var metadataPolicy: MetadataPolicy {
        metadata.flatMap { try? MetadataPolicy(options: $0) } ?? .defaults
    }
}
