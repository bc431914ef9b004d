import Foundation

/// The slots of a pipeline, in the order data flows through them: the six stages, then where
/// outputs go.
public enum Slot: String, Sendable, CaseIterable, Codable {
    case loader
    case dataCache = "data_cache"
    case decoder
    case processor
    case imageCache = "image_cache"
    case encoder
    /// Where outputs are stored, chosen by the scheme of `output.dir`.
    case destination
    /// Where a run's sources come from: a list file, standard input, an object, a queue.
    case list
    /// How a run's report is written (`--report-format`).
    case report
    /// A CDN or cache in front of `serve` that `cache purge` asks to drop answers (`purge:`).
    case purger
    /// Where "ready" events of `run` and `work` go (`notify:`): a webhook, a queue, a topic.
    case notifier

    /// How the slot is named in messages (`a processor`, `an encoder`).
    public var article: String {
        switch self {
        case .loader: return "a loader"
        case .dataCache: return "a data cache"
        case .decoder: return "a decoder"
        case .processor: return "a processor"
        case .imageCache: return "an image cache"
        case .encoder: return "an encoder"
        case .destination: return "an output destination"
        case .list: return "a source list"
        case .report: return "a report format"
        case .purger: return "a purger"
        case .notifier: return "a notifier"
        }
    }

    /// Whether its plugins are chosen by URL scheme (`http://`, `s3://`, a plain path).
    public var isChosenByScheme: Bool { self == .loader || self == .destination || self == .list }
}

/// A registrable stage: a spec plus a factory that makes the stage from validated options.
///
/// Built-in plugins are made with exactly these constructors; so are custom ones:
/// ```swift
/// let pixelate = Plugin.processor(PluginSpec(name: "pixelate", summary: "Blocky mosaic.",
///     options: [.int("block", default: 8, range: 2...256, doc: "Block size in pixels.")])) { options in
///     Pixelate(block: options.int("block")!)
/// }
/// ```
/// A factory may throw a ``PipelineError`` to reject an option combination; validation reports it
/// at the stage's position.
public struct Plugin: Sendable {
    public typealias Factory<T> = @Sendable (PluginOptions) throws -> T

    enum Maker: Sendable {
        case loader(Factory<any DataLoading>)
        case dataCache(Factory<any DataCaching>)
        case decoder(Factory<any ImageDecoding>)
        case processor(Factory<any ImageProcessing>)
        case imageCache(Factory<any ImageCaching>)
        case encoder(Factory<any ImageEncoding>)
        case destination(Factory<any OutputDestination>)
        case list(Factory<any SourceListing>)
        case report(Factory<any ReportWriting>)
        case purger(Factory<any CachePurging>)
        case notifier(Factory<any EventSending>)
    }

    public let spec: PluginSpec
    /// The slot this plugin fills.
    public let slot: Slot
    /// For loaders, destinations and lists: the URL schemes served; `""` stands for plain paths
    /// without a scheme. Empty for the other slots.
    public let schemes: [String]
    let maker: Maker
    /// For plugins built by the run rather than at validation (loaders, destinations, report
    /// formats): what validation runs instead of the factory, to reject option combinations
    /// without building anything (no thread, no connection, no credentials needed).
    public let check: (@Sendable (PluginOptions) throws -> Void)?

    init(spec: PluginSpec, slot: Slot, schemes: [String] = [], maker: Maker, check: (@Sendable (PluginOptions) throws -> Void)? = nil) {
        self.spec = spec
        self.slot = slot
        self.schemes = schemes.map { $0.lowercased() }
        self.maker = maker
        self.check = check
    }

    /// A loader for the given URL schemes (lower case; `""` for plain paths). A run builds it
    /// when the first source of its schemes comes, not before; validation runs `check`.
    public static func loader(_ spec: PluginSpec, schemes: [String], check: (@Sendable (PluginOptions) throws -> Void)? = nil,
                              make: @escaping Factory<any DataLoading>) -> Plugin {
        Plugin(spec: spec, slot: .loader, schemes: schemes, maker: .loader(make), check: check)
    }
    public static func dataCache(_ spec: PluginSpec, make: @escaping Factory<any DataCaching>) -> Plugin {
        Plugin(spec: spec, slot: .dataCache, maker: .dataCache(make))
    }
    public static func decoder(_ spec: PluginSpec, make: @escaping Factory<any ImageDecoding>) -> Plugin {
        Plugin(spec: spec, slot: .decoder, maker: .decoder(make))
    }
    public static func processor(_ spec: PluginSpec, make: @escaping Factory<any ImageProcessing>) -> Plugin {
        Plugin(spec: spec, slot: .processor, maker: .processor(make))
    }
    public static func imageCache(_ spec: PluginSpec, make: @escaping Factory<any ImageCaching>) -> Plugin {
        Plugin(spec: spec, slot: .imageCache, maker: .imageCache(make))
    }
    public static func encoder(_ spec: PluginSpec, make: @escaping Factory<any ImageEncoding>) -> Plugin {
        Plugin(spec: spec, slot: .encoder, maker: .encoder(make))
    }
    /// An output destination for `output.dir` values of the given URL schemes (lower case; `""`
    /// for plain paths). The factory gets every `output:` option: `dir` (the URL or path), `name`,
    /// and the destination's own options from its spec.
    public static func destination(_ spec: PluginSpec, schemes: [String], check: (@Sendable (PluginOptions) throws -> Void)? = nil,
                                   make: @escaping Factory<any OutputDestination>) -> Plugin {
        Plugin(spec: spec, slot: .destination, schemes: schemes, maker: .destination(make), check: check)
    }
    /// A source list for lists named by URLs of the given schemes (`""`: paths and `-`). The
    /// factory gets `url` (what the command line named) and the list's own options.
    public static func list(_ spec: PluginSpec, schemes: [String], check: (@Sendable (PluginOptions) throws -> Void)? = nil,
                            make: @escaping Factory<any SourceListing>) -> Plugin {
        Plugin(spec: spec, slot: .list, schemes: schemes, maker: .list(make), check: check)
    }
    /// A report format, chosen by `--report-format NAME`. The factory gets `path` (the local file
    /// to write) and the format's own options.
    public static func report(_ spec: PluginSpec, make: @escaping Factory<any ReportWriting>) -> Plugin {
        Plugin(spec: spec, slot: .report, maker: .report(make))
    }

    /// A CDN purger, listed under `purge:` and built only by `cache purge` (and `work` when a
    /// re-upload purges); validation runs `check` instead of the factory.
    public static func purger(_ spec: PluginSpec, check: (@Sendable (PluginOptions) throws -> Void)? = nil,
                              make: @escaping Factory<any CachePurging>) -> Plugin {
        Plugin(spec: spec, slot: .purger, maker: .purger(make), check: check)
    }

    /// A notifier, listed under `notify:` and built only by a run that announces items;
    /// validation runs `check` instead of the factory. Its spec should include
    /// ``EventRetry/options`` (the engine's retry policy reads them).
    public static func notifier(_ spec: PluginSpec, check: (@Sendable (PluginOptions) throws -> Void)? = nil,
                                make: @escaping Factory<any EventSending>) -> Plugin {
        Plugin(spec: spec, slot: .notifier, maker: .notifier(make), check: check)
    }

    /// The defaults of every option, as the factory would receive them when nothing is set.
    public var defaultOptions: PluginOptions {
        var values: [String: OptionValue] = [:]
        for option in spec.options { values[option.name] = option.defaultValue }
        return PluginOptions(values)
    }
}

/// A set of plugins registered together: the built-ins (`BuiltIns`), or a team's own.
///
/// ```swift
/// enum MyPlugins: PluginBundle {
///     static let plugins = [Duotone.plugin, CatalogLoader.plugin]
/// }
/// let registry = try PluginRegistry(bundles: [BuiltIns.self, MyPlugins.self])
/// ```
public protocol PluginBundle {
    /// Names the bundle in messages; defaults to the type's name.
    static var bundleName: String { get }
    /// The bundle's plugins.
    static var plugins: [Plugin] { get }
    /// The libraries the bundle's plugins run with, read from the libraries themselves where they
    /// can tell (`pipelinectl --version` lists them); defaults to none.
    static var libraries: [LibraryVersion] { get }
}

extension PluginBundle {
    public static var bundleName: String { String(describing: self) }
    public static var libraries: [LibraryVersion] { [] }
}

/// A library and the version of it a program runs with, as `pipelinectl --version` lists it.
public struct LibraryVersion: Sendable, Equatable {
    /// The library's name, such as `libcurl`.
    public var name: String
    /// Its version, such as `7.88.1`; for a library that is opened on first use and cannot be
    /// opened, why not.
    public var version: String

    public init(name: String, version: String) {
        self.name = name
        self.version = version
    }
}

/// The plugins a program knows, by slot and name.
///
/// Build one from bundles (``init(bundles:)``) or plugin by plugin (``register(_:origin:)``); it is
/// a value, so a finished registry can be shared freely.
public struct PluginRegistry: Sendable {
    private var bySlot: [Slot: [String: (plugin: Plugin, origin: String)]] = [:]
    /// The first plugin registered in each slot, by name.
    private var firstBySlot: [Slot: String] = [:]

    public init() {}

    /// A registry holding every plugin of `bundles`, in order.
    /// - Throws: ``PipelineError`` of kind `duplicate_plugin` naming both origins when two plugins
    ///   of one slot share a name.
    public init(bundles: [any PluginBundle.Type]) throws {
        for bundle in bundles {
            for plugin in bundle.plugins { try register(plugin, origin: bundle.bundleName) }
        }
    }

    /// The source list `name` names: a path, `-` (standard input), or a URL of a list plugin's
    /// scheme (`s3://bucket/urls.txt`); made, not opened. `plugin` chooses the list plugin by name
    /// instead (a queue given by its https URL), and `options` set its options. Throws naming the
    /// scheme when no list plugin reads it.
    public func makeList(_ name: String, plugin pluginName: String? = nil, options: [String: OptionValue] = [:]) throws -> any SourceListing {
        let scheme = Source.urlScheme(of: name) ?? ""
        let chosen = pluginName.map { wanted in plugins(in: .list).first { $0.spec.name == wanted } } ?? listPlugin(for: name)
        guard let plugin = chosen, case .list(let make) = plugin.maker else {
            throw PipelineError(.invalidSource, "cannot read a URL list from \(scheme):// URLs ('\(name)')")
        }
        var values = plugin.defaultOptions.values
        for (key, value) in options { values[key] = value }
        values["url"] = .string(name)
        return try make(PluginOptions(values))
    }

    /// The list plugin that reads `name` (a path, `-`, or a URL), by the URL's scheme.
    public func listPlugin(for name: String) -> Plugin? {
        let scheme = Source.urlScheme(of: name) ?? ""
        return plugins(in: .list).first { $0.schemes.contains(scheme) }
    }

    /// The destination plugin for `output.dir` values of `scheme` (`""` for plain paths).
    public func destination(forScheme scheme: String) -> Plugin? {
        plugins(in: .destination).first { $0.schemes.contains(scheme) }
    }

    /// The destination plugin for `dir`, a path or a URL; throws naming the scheme when none serves it.
    public func destinationPlugin(for dir: String) throws -> Plugin {
        let scheme = Source.urlScheme(of: dir) ?? ""
        guard let plugin = destination(forScheme: scheme) else {
            let served = plugins(in: .destination).flatMap(\.schemes).map { $0.isEmpty ? "local paths" : "\($0)://" }
            throw PipelineError(.invalidOption, scheme.isEmpty ? "no output destination serves local paths"
                : "no output destination for \(scheme):// URLs ('\(dir)'); this build writes to: " + served.joined(separator: ", "))
        }
        return plugin
    }

    /// Makes the report writer of format `name` writing to `path`; throws naming the formats there are.
    public func makeReport(_ name: String, path: String) throws -> any ReportWriting {
        guard let plugin = plugin(name, in: .report) else {
            throw PipelineError(.invalidOption, "unknown report format '\(name)'" + Suggest.hint(for: name, in: plugins(in: .report).map(\.spec.name)))
        }
        var values = plugin.defaultOptions.values
        values["path"] = .string(path)
        guard case .report(let make) = plugin.maker else { throw PipelineError(.wrongSlot, "'\(name)' is not a report format") }
        return try make(PluginOptions(values))
    }

    /// Makes the destination for `dir` (a path or URL) from `options` (every `output:` option;
    /// `dir` is set to `dir`).
    public func makeDestination(_ dir: String, options: PluginOptions) throws -> any OutputDestination {
        let plugin = try destinationPlugin(for: dir)
        var values = options.values
        values["dir"] = .string(dir)
        for option in plugin.spec.options where values[option.name] == nil { values[option.name] = option.defaultValue }
        return try plugin.makeDestination(PluginOptions(values))
    }

    /// Adds `plugin`, remembering where it came from. Throws when its slot already has a plugin of
    /// that name.
    public mutating func register(_ plugin: Plugin, origin: String = "custom code") throws {
        if let existing = bySlot[plugin.slot]?[plugin.spec.name] {
            throw PipelineError(.duplicatePlugin,
                                "two plugins named '\(plugin.spec.name)' were registered as \(plugin.slot.article): "
                                    + "one from \(existing.origin), one from \(origin)")
        }
        bySlot[plugin.slot, default: [:]][plugin.spec.name] = (plugin, origin)
        if firstBySlot[plugin.slot] == nil { firstBySlot[plugin.slot] = plugin.spec.name }
    }

    /// The first plugin registered in `slot`: the decoder a pipeline without `decoder:` gets
    /// (the built-ins register theirs first).
    public func firstRegistered(in slot: Slot) -> Plugin? { firstBySlot[slot].flatMap { plugin($0, in: slot) } }

    /// The plugin named `name` in `slot`.
    public func plugin(_ name: String, in slot: Slot) -> Plugin? { bySlot[slot]?[name]?.plugin }

    /// Where the plugin named `name` in `slot` was registered from (a bundle's name).
    public func origin(of name: String, in slot: Slot) -> String? { bySlot[slot]?[name]?.origin }

    /// Every plugin of `slot`, sorted by name.
    public func plugins(in slot: Slot) -> [Plugin] {
        (bySlot[slot] ?? [:]).values.map(\.plugin).sorted { $0.spec.name < $1.spec.name }
    }

    /// The slots that have a plugin named `name` (to say "'resize' is a processor").
    public func slots(of name: String) -> [Slot] {
        Slot.allCases.filter { bySlot[$0]?[name] != nil }
    }

    /// The loader plugin serving `scheme` (`""` for plain paths).
    public func loader(forScheme scheme: String) -> Plugin? {
        plugins(in: .loader).first { $0.schemes.contains(scheme) }
    }
}
