import Foundation
import Logging
import Synchronization

/// Pipeline files loaded once, ready for app code to process images with: the object a Swift
/// server creates at start-up and keeps.
///
/// ```swift
/// let images = try ImagePipelines(paths: ["pipelines"], registry: BuiltIns.registry())
/// let made = try await images.process(bytes: upload, pipeline: "avatars")
/// let avatar = try made.outputs[0].data()        // the encoded bytes, with made.outputs[0].mediaType
/// ```
///
/// Every file is validated as `pipelinectl validate` does, and every problem of every file is
/// thrown at once (``PipelineLoadError``). Each pipeline's stages are built once; all pipelines
/// share one set of CPU workers and one decode-memory budget, and identical work in flight
/// (the same source fetched or decoded for several requests) is done once, exactly as in
/// `pipelinectl serve`, which is built on this type. Sources keep to each pipeline's
/// `serve.sources` (else `sources:`); private addresses are refused to the `http` loader unless the
/// file allows them.
///
/// Nothing global is set up: logging, metrics and tracing are the app's to bootstrap.
public final class ImagePipelines: Sendable {
    /// How the pipelines run; every default is `pipelinectl serve`'s.
    public struct Options: Sendable {
        /// CPU workers for decode, process and encode, shared by every pipeline (default: one per
        /// CPU the process may use).
        public var workers: Int = UsableCores.count
        /// Memory decodes in progress may take together, estimated from each header. Default 200 MiB.
        public var decodeMemory: Int = 200 << 20
        /// Longest time one item may take, waits for shared resources not counted. Default 30 s;
        /// `nil`: no limit.
        public var itemTimeout: Double? = 30
        /// Outputs larger than this are handed back in a temporary file (``ImageOutput/Body``).
        /// Default 32 MiB.
        public var spoolThreshold: Int = 32 << 20
        /// Where those files go; `nil`: the system's temporary directory.
        public var spoolDirectory: String?
        /// Keys for ``signedPath(pipeline:source:variant:params:expires:version:)``.
        public var keys: SigningKeys?
        /// Where the engine logs (a failure per item at `warning`).
        public var logger = Logger(label: "pipelinekit")

        public init() {}
    }

    /// The pipelines by name (each file's `name:`).
    public let pipelines: [String: Pipeline]
    /// The keys signed paths are made with, when given.
    public let keys: SigningKeys?
    let registry: PluginRegistry
    let runners: [String: PipelineRunner]
    /// Each pipeline's `serve.sources` (else `sources:`), local roots resolved once.
    package let boundaries: [String: SourceBoundary]
    private let derived = Mutex(DerivedRunners())

    /// Loads and validates every pipeline file named, and every `*.yaml`/`*.yml` file of every
    /// directory named, and builds their stages.
    /// - Parameter registry: the plugins the files may name: `BuiltIns.registry()` (module `Plugins`),
    ///   or a registry with the app's own bundles too.
    /// - Throws: ``PipelineLoadError`` listing every problem in every file (the same messages as
    ///   `pipelinectl validate`), or two files with one name.
    public init(paths: [String], registry: PluginRegistry, options: Options = Options()) throws {
        var problems: [PipelineValidationError] = []
        var pipelines: [String: Pipeline] = [:]
        for file in try Self.files(paths) {
            do {
                let loaded = try PipelineFile.load(path: file, registry: registry)
                if let other = pipelines[loaded.name] {
                    problems.append(PipelineValidationError(diagnostics: [Diagnostic(
                        file: file, line: 1, column: 1, message: "a pipeline named '\(loaded.name)' is already loaded from \(other.file); rename one")], source: nil))
                    continue
                }
                pipelines[loaded.name] = try loaded.forService(registry: registry)
            } catch let invalid as PipelineValidationError {
                problems.append(invalid)
            } catch {
                problems.append(PipelineValidationError(diagnostics: [Diagnostic(file: file, line: 1, column: 1, message: "\(error)")], source: nil))
            }
        }
        if !problems.isEmpty { throw PipelineLoadError(files: problems) }
        var run = RunOptions()
        run.workers = max(1, options.workers)
        run.decodeMemory = options.decodeMemory
        run.itemTimeout = options.itemTimeout
        run.dedupeWindow = 0  // a later request must see a changed source
        run.spoolThreshold = options.spoolThreshold
        run.spoolDirectory = options.spoolDirectory
        run.buildsDestinationOnUse = true
        run.logger = options.logger
        var runners: [String: PipelineRunner] = [:]
        var first: PipelineRunner?
        for (name, pipeline) in pipelines.sorted(by: { $0.key < $1.key }) {
            let runner = try first.map { try $0.derived(pipeline, registry: registry, sharingLoaders: false) }
                ?? PipelineRunner(pipeline: pipeline, registry: registry, options: run)
            first = first ?? runner
            runners[name] = runner
        }
        self.pipelines = pipelines
        self.runners = runners
        self.registry = registry
        self.keys = options.keys
        boundaries = pipelines.mapValues { SourceBoundary($0.servedSources) }
    }

    /// Files named, and the `*.yaml`/`*.yml` files of directories named (sorted): what
    /// ``init(paths:registry:options:)`` loads. Throws ``PipelineLoadError`` for a directory
    /// without any.
    public static func files(_ paths: [String]) throws -> [String] {
        var files: [String] = []
        for path in paths {
            var isDirectory: ObjCBool = false
            if FileManager.default.fileExists(atPath: path, isDirectory: &isDirectory), isDirectory.boolValue {
                let names = (try? FileManager.default.contentsOfDirectory(atPath: path)) ?? []
                let yaml = names.filter { $0.hasSuffix(".yaml") || $0.hasSuffix(".yml") }.sorted()
                if yaml.isEmpty {
                    throw PipelineLoadError(files: [PipelineValidationError(diagnostics: [Diagnostic(
                        file: path, line: 1, column: 1, message: "no pipeline files (*.yaml) in this directory")], source: nil)])
                }
                files += yaml.map { (path as NSString).appendingPathComponent($0) }
            } else {
                files.append(path)
            }
        }
        return files
    }

    /// The names of the pipelines, sorted.
    public var names: [String] { pipelines.keys.sorted() }

    // MARK: Processing

    /// Processes the source `source` (a URL, a path, `s3://bucket/key`) with the pipeline named
    /// `pipeline` and returns its outputs as values.
    /// - Parameters:
    ///   - variant: the one variant to make, in a pipeline with `variants:` (`nil`: all of them).
    ///   - params: values for the parameters the pipeline declares in `params:`, checked against
    ///     their specs as the service checks a request's query.
    ///   - accept: a client's `Accept` header, for pipelines whose encoder is `auto`: a format the
    ///     client did not name is never chosen.
    ///   - delivery: ``OutputDelivery/values`` (the default), ``OutputDelivery/store`` to have the
    ///     pipeline's own `output:` store them, or ``OutputDelivery/factsOnly``.
    /// - Throws: a ``PipelineError`` whose ``PipelineError/kind`` is what a report says
    ///   (`source_not_allowed`, `not_found`, `too_large`, `not_an_image`, `decode_failed`,
    ///   `timeout`, `cancelled`, ...), or `invalid_option` for an unknown pipeline, variant or
    ///   parameter.
    public func process(_ source: String, pipeline: String, variant: String? = nil, params: [String: String] = [:],
                        accept: String? = nil, delivery: OutputDelivery = .values) async throws -> ProcessedItem {
        try await process(try self.source(source, pipeline: pipeline), pipeline: pipeline, variant: variant, params: params,
                          accept: accept, delivery: delivery)
    }

    /// Processes bytes in memory (an upload) with the pipeline named `pipeline`; see
    /// the call with a source given as text.
    /// The bytes are sniffed, never trusted by their name or type, and an image whose header
    /// claims more pixels than the decoder allows is refused before any decode memory is taken.
    /// - Parameter name: names the upload in reports, and stands for `{stem}` in output names.
    public func process(bytes: Data, name: String = "upload", pipeline: String, variant: String? = nil,
                        params: [String: String] = [:], accept: String? = nil,
                        delivery: OutputDelivery = .values) async throws -> ProcessedItem {
        try await process(Source(bytes: bytes, name: name), pipeline: pipeline, variant: variant, params: params, accept: accept,
                          delivery: delivery)
    }

    /// Processes `source` (made with ``source(_:pipeline:)`` or ``Source/init(bytes:name:contentType:index:)``).
    public func process(_ source: Source, pipeline: String, variant: String? = nil, params: [String: String] = [:],
                        accept: String? = nil, delivery: OutputDelivery = .values) async throws -> ProcessedItem {
        let runner = try self.runner(pipeline: pipeline, variant: variant, params: params,
                                     format: pipelines[pipeline]?.negotiatesFormat == true ? Pipeline.negotiatedFormat(accept: accept) : nil)
        if let stored = await runner.stored(source, delivery: delivery) { return stored }
        let made = await runner.process(source, delivery: delivery)
        if let error = made.result.error { throw PipelineError(error) }
        return made
    }

    /// What the pipeline's analysing stages find in `source` (dimensions, colour, hashes): the
    /// image is decoded and processed, nothing is encoded or stored.
    public func facts(_ source: String, pipeline: String, variant: String? = nil) async throws -> ImageFacts {
        try await process(source, pipeline: pipeline, variant: variant, delivery: .factsOnly).facts
    }

    /// `text` as a source of the pipeline named `pipeline`: its loads and redirects kept inside the
    /// pipeline's `serve.sources` (else `sources:`). Throws `source_not_allowed` for a source
    /// outside them, before any byte is read.
    public func source(_ text: String, pipeline: String) throws -> Source {
        guard let boundary = boundaries[pipeline] else { throw unknown(pipeline) }
        if let refusal = boundary.refusal(for: text) { throw PipelineError(.sourceNotAllowed, refusal, stage: .load) }
        return Source(text: text, index: 1, boundary: boundary)
    }

    /// The runner for one kind of request: the pipeline's own, or one derived with its variant,
    /// parameters and negotiated format, kept for later requests of the same kind (at most 256
    /// kinds; the least recently used go). Every runner shares the workers, the decode budget and
    /// the pipeline's loads.
    public func runner(pipeline name: String, variant: String? = nil, params: [String: String] = [:],
                       format: NegotiatedFormat? = nil) throws -> PipelineRunner {
        guard let pipeline = pipelines[name], let base = runners[name] else { throw unknown(name) }
        if variant == nil, params.isEmpty, format == nil { return base }
        let key = ([name, variant ?? "", format?.description ?? ""] + params.sorted { $0.key < $1.key }.map { $0.key + "=" + $0.value })
            .joined(separator: "\u{1}")
        if let made = derived.withLock({ $0.get(key) }) { return made }
        let made = try base.derived(pipeline.restricted(toVariant: variant).applying(params).encoding(format, registry: registry),
                                    registry: registry)
        derived.withLock { $0.put(key, made) }
        return made
    }

    /// The runner whose facts-only items answer `/info` for `pipeline`: the pipeline's loaders,
    /// data cache and decoder, with the `analyze` processor (source format and size, alpha,
    /// frames, orientation, EXIF, BlurHash, ThumbHash, dominant colour, palette, dHash) on a copy
    /// that fits in 400x400 (the decoder may shrink on load). Made once and kept. Throws when the
    /// registry has no `analyze` processor.
    public func infoRunner(pipeline name: String) throws -> PipelineRunner {
        guard let pipeline = pipelines[name], let base = runners[name] else { throw unknown(name) }
        let key = "\u{2}info\u{1}" + name
        if let made = derived.withLock({ $0.get(key) }) { return made }
        guard let analyze = registry.plugin("analyze", in: .processor) else {
            throw PipelineError(.invalidOption, "facts need the 'analyze' processor, which this program does not register")
        }
        let stage = StageConfig(plugin: analyze, options: analyze.defaultOptions, position: SourcePosition(line: 1, column: 1))
        // `analyze` computes its hashes and colours on at most 100x100 pixels: a copy that fits in
        // 400x400 serves it as well as the whole image, and lets the decoder shrink on load. Its
        // size facts are the source's (read from the header).
        var chain = [stage]
        if let resize = registry.plugin("resize", in: .processor) {
            var values = resize.defaultOptions.values
            values["width"] = .int(400)
            values["height"] = .int(400)
            chain.insert(StageConfig(plugin: resize, options: PluginOptions(values), position: SourcePosition(line: 1, column: 1)), at: 0)
        }
        var info = try pipeline.restricted(toVariant: pipeline.variants.first?.name)
        info.processors = chain
        info.variants = info.variants.prefix(1).map {
            Variant(name: nil, processors: chain, sharedCount: chain.count, encoder: $0.encoder, template: $0.template, position: nil)
        }
        // Breakpoints by bytes are facts of the image too: their widths are chosen by encoding
        // (the files are dropped), from the same decode.
        info.variants += pipeline.variants.filter { $0.byBytes != nil }
        let made = try base.derived(info, registry: registry)
        derived.withLock { $0.put(key, made) }
        return made
    }

    /// Every pipeline's base runner (the service sums their waiting loads).
    public var baseRunners: [String: PipelineRunner] { runners }

    func unknown(_ name: String) -> PipelineError {
        var message = "no pipeline named '\(name)'; loaded: " + names.joined(separator: ", ")
        if let near = Suggest.nearest(name, in: names) { message += "; did you mean '\(near)'?" }
        return PipelineError(.notFound, message)
    }

    // MARK: URLs

    /// The signed path `pipelinectl serve` (or a mounted adapter) answers for `source`, as
    /// `pipelinectl sign` prints it: `/SIGNATURE/PIPELINE[/VARIANT]/SOURCE[?PARAMS]`. The variant,
    /// parameters and source are checked as the service would check them.
    /// - Parameters:
    ///   - expires: when the link stops working (Unix seconds), or `nil` for never.
    ///   - version: the source's version (its ETag, upload time): a new version is a new URL.
    public func signedPath(pipeline: String, source: String, variant: String? = nil, params: [String: String] = [:],
                           expires: Int? = nil, version: String? = nil) throws -> String {
        guard let keys else { throw PipelineError(.invalidOption, "no signing keys: set Options.keys to sign paths") }
        guard let loaded = pipelines[pipeline] else { throw unknown(pipeline) }
        _ = try loaded.restricted(toVariant: variant).applying(params)
        _ = try self.source(source, pipeline: pipeline)
        let path = ServeRequest.path(pipeline: pipeline, variant: variant, source: source, parameters: params, expires: expires,
                                     version: version)
        return "/" + keys.sign(path) + path
    }

    /// The signed path of `source`'s facts as `pipelinectl serve` answers them (JSON):
    /// `/info/SIGNATURE/PIPELINE/SOURCE`. The signature covers `info:` and the path after it, so
    /// an image's URL cannot be turned into a facts URL or the other way round.
    public func signedInfoPath(pipeline: String, source: String, expires: Int? = nil) throws -> String {
        try signedInfoPath(pipeline: pipeline, source: source, headerOnly: false, expires: expires)
    }

    /// ``signedInfoPath(pipeline:source:expires:)``, for the header's facts alone when
    /// `headerOnly` (`?facts=header`: format, size, orientation, colour space, ICC, EXIF; nothing
    /// decoded).
    public func signedInfoPath(pipeline: String, source: String, headerOnly: Bool, expires: Int? = nil) throws -> String {
        guard let keys else { throw PipelineError(.invalidOption, "no signing keys: set Options.keys to sign paths") }
        guard pipelines[pipeline] != nil else { throw unknown(pipeline) }
        _ = try self.source(source, pipeline: pipeline)
        let path = ServeRequest.path(pipeline: pipeline, variant: nil, source: source, parameters: headerOnly ? ["facts": "header"] : [:],
                                     expires: expires)
        return "/info/" + keys.sign(ServeRequest.infoSigned(path)) + path
    }

    /// A `srcset` attribute for `source`: one signed URL per width, each followed by its width
    /// (`/SIG/responsive/small/a.jpg 320w, ...`).
    ///
    /// With `widthParam`, one URL per width in `widths` with that parameter set (a pipeline whose
    /// `params:` sets a resize width), of `variant` when given; without, one URL per variant of
    /// the pipeline whose first sizing stage sets a width (`widths` and `variant` ignored).
    /// - Parameter base: put before each path (`https://img.example.com`).
    public func srcset(pipeline: String, source: String, variant: String? = nil, widthParam: String? = nil, widths: [Int] = [],
                       params: [String: String] = [:], base: String = "") throws -> String {
        var entries: [String] = []
        if let widthParam {
            for width in widths {
                var values = params
                values[widthParam] = String(width)
                entries.append(base + (try signedPath(pipeline: pipeline, source: source, variant: variant, params: values)) + " \(width)w")
            }
        } else {
            guard let runner = runners[pipeline] else { throw unknown(pipeline) }
            for (name, width) in runner.variantWidths {
                guard let name else { continue }
                entries.append(base + (try signedPath(pipeline: pipeline, source: source, variant: name, params: params)) + " \(width)w")
            }
            if entries.isEmpty {
                throw PipelineError(.invalidOption, "pipeline '\(pipeline)' has no variants with a width; pass widthParam and widths")
            }
        }
        return entries.joined(separator: ", ")
    }
}

/// Every problem found in the pipeline files an ``ImagePipelines`` was asked to load, file by
/// file, in the words `pipelinectl validate` uses.
public struct PipelineLoadError: Error, Sendable, CustomStringConvertible {
    /// One entry per file with problems: its diagnostics and its text.
    public let files: [PipelineValidationError]
    /// Every diagnostic of every file.
    public var diagnostics: [Diagnostic] { files.flatMap(\.diagnostics) }
    /// Each diagnostic rendered as `validate` prints it (with the line it points at), one per line.
    public var description: String {
        files.flatMap { file in file.diagnostics.map { $0.rendered(source: file.source) } }.joined(separator: "\n")
    }
}

/// Derived runners by request kind, the least recently used dropped past 256.
struct DerivedRunners {
    private var runners: [String: (PipelineRunner, UInt64)] = [:]
    private var clock: UInt64 = 0
    static let capacity = 256

    mutating func get(_ key: String) -> PipelineRunner? {
        guard let (runner, _) = runners[key] else { return nil }
        clock += 1
        runners[key] = (runner, clock)
        return runner
    }

    mutating func put(_ key: String, _ runner: PipelineRunner) {
        clock += 1
        runners[key] = (runner, clock)
        if runners.count > Self.capacity, let oldest = runners.min(by: { $0.value.1 < $1.value.1 }) { runners[oldest.key] = nil }
    }
}

extension PipelineRunner {
    /// Each variant's name and the width its first sizing stage asks for, when it sets one.
    var variantWidths: [(name: String?, width: Int)] {
        variants.compactMap { variant in
            guard let hint = variant.processors.first(where: { !$0.onlyReads && !$0.onlyReorients })?.decodeHint, hint.width > 1 else { return nil }
            return (variant.name, hint.width)
        }
    }
}

extension PipelineError {
    /// An item's failure as a typed error: its kind, stage, plugin and message.
    public init(_ error: ItemError) {
        self.init(error.kind, error.message, stage: error.stage, plugin: error.plugin)
    }
}
