import Foundation

/// The stage a configuration names: made once (``BuiltStage``), then the same instance each time.
extension StageConfig {
    func makeLoader() throws -> any DataLoading {
        guard case .loader(let make) = plugin.maker else { throw wrongSlot(.loader) }
        return try built.get { try make(options) }
    }
    func makeDataCache() throws -> any DataCaching {
        guard case .dataCache(let make) = plugin.maker else { throw wrongSlot(.dataCache) }
        return try built.get { try make(options) }
    }
    func makeDecoder() throws -> any ImageDecoding {
        guard case .decoder(let make) = plugin.maker else { throw wrongSlot(.decoder) }
        return try built.get { try make(options) }
    }
    func makeProcessor() throws -> any ImageProcessing {
        guard case .processor(let make) = plugin.maker else { throw wrongSlot(.processor) }
        return try built.get { try make(options) }
    }
    func makeImageCache() throws -> any ImageCaching {
        guard case .imageCache(let make) = plugin.maker else { throw wrongSlot(.imageCache) }
        return try built.get { try make(options) }
    }
    func makeEncoder() throws -> any ImageEncoding {
        guard case .encoder(let make) = plugin.maker else { throw wrongSlot(.encoder) }
        return try built.get { try make(options) }
    }
    /// The purger this stage names (built anew: `cache purge` makes each once).
    public func makePurger() throws -> any CachePurging {
        guard case .purger(let make) = plugin.maker else { throw wrongSlot(.purger) }
        return try make(options)
    }
    /// The notifier this stage names (built anew: a run makes each once).
    public func makeNotifier() throws -> any EventSending {
        guard case .notifier(let make) = plugin.maker else { throw wrongSlot(.notifier) }
        return try make(options)
    }
    func makeDestination() throws -> any OutputDestination {
        guard case .destination(let make) = plugin.maker else { throw wrongSlot(.destination) }
        return try built.get { try make(options) }
    }

    /// Validation's part: builds the stage (and keeps it) where building only computes; for a
    /// loader, a destination, a list or a report format, runs the plugin's `check` instead.
    func validate() throws {
        switch plugin.maker {
        case .loader, .destination, .list, .report, .purger, .notifier: try plugin.check?(options)
        case .dataCache: _ = try makeDataCache()
        case .decoder: _ = try makeDecoder()
        case .processor: _ = try makeProcessor()
        case .imageCache: _ = try makeImageCache()
        case .encoder: _ = try makeEncoder()
        }
    }
    private func wrongSlot(_ slot: Slot) -> PipelineError {
        PipelineError(.wrongSlot, "'\(plugin.spec.name)' is \(plugin.slot.article), not \(slot.article)")
    }
}

extension Plugin {
    /// The processor this plugin makes with `options` (for embedding a stage without a pipeline
    /// file, and for tests); throws when the options are refused or the plugin is not a processor.
    public func makeProcessor(_ options: PluginOptions) throws -> any ImageProcessing {
        try StageConfig(plugin: self, options: options, position: SourcePosition(line: 1, column: 1)).makeProcessor()
    }

    /// The encoder this plugin makes with `options`.
    public func makeEncoder(_ options: PluginOptions) throws -> any ImageEncoding {
        try StageConfig(plugin: self, options: options, position: SourcePosition(line: 1, column: 1)).makeEncoder()
    }

    /// The output destination this plugin makes with `options` (every `output:` option, `dir` included).
    public func makeDestination(_ options: PluginOptions) throws -> any OutputDestination {
        try StageConfig(plugin: self, options: options, position: SourcePosition(line: 1, column: 1)).makeDestination()
    }

    /// The decoder this plugin makes with `options`.
    public func makeDecoder(_ options: PluginOptions) throws -> any ImageDecoding {
        try StageConfig(plugin: self, options: options, position: SourcePosition(line: 1, column: 1)).makeDecoder()
    }
}
