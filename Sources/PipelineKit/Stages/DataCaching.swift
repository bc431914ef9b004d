import Foundation

/// The data cache slot: keeps bytes across runs, by key: what loaders produced (originals) and,
/// when the cache is told to, the encoded outputs made from them (processed entries).
///
/// A data cache must never return an entry that was not completely written, and never return
/// bytes that differ from what was stored (it checks and drops damaged entries instead). It
/// decides, under its own policy, what may be stored and whether an entry is still fresh; the
/// engine revalidates stale entries through the loader.
public protocol DataCaching: Sendable {
    /// Whether loaded bytes are kept (`store: original` or `all`).
    var storesOriginals: Bool { get }
    /// Whether encoded outputs are kept (`store: processed` or `all`), so that an unchanged item
    /// is neither loaded, decoded nor encoded again.
    var storesOutputs: Bool { get }

    /// The entry for `key` and whether it is fresh, or `nil` when there is none (or it was
    /// damaged, or has expired beyond use). Throws when the cache could not be read (a shared
    /// store out of reach): the engine logs it and loads the source as for a miss.
    func entry(for key: String) async throws -> CachedEntry?

    /// Stores `data` for `key`; `output` marks an encoded output and says what it was made from.
    /// The cache may decline (`no-store`). Failing to store is not an error for the item; the
    /// engine logs it.
    func store(_ data: LoadedData, for key: String, output: OutputStamp?) async throws

    /// After a revalidation answered "not modified": the entry is fresh again, under `directives`.
    func refresh(_ key: String, directives: CacheDirectives) async

    /// Deletes the entry for `key`; returns whether there was one.
    @discardableResult
    func remove(_ key: String) async -> Bool

    /// Called once at the end of a run with what the run saw, for `cache stats`.
    func recordRun(_ usage: CacheUsage) async

    /// Checks, before a run starts, that the cache can be used (a shared store's credentials and
    /// bucket); a message naming the cache when not. Nothing to check by default.
    func preflight() async -> PipelineError?
}

extension DataCaching {
    public var storesOriginals: Bool { true }
    public var storesOutputs: Bool { false }
    public func refresh(_ key: String, directives: CacheDirectives) async {}
    public func recordRun(_ usage: CacheUsage) async {}
    public func preflight() async -> PipelineError? { nil }

    /// The bytes stored for `key`, fresh or not.
    public func data(for key: String) async -> LoadedData? { try? await entry(for: key)?.data }

    /// Stores loaded bytes (an original).
    public func store(_ data: LoadedData, for key: String) async throws {
        try await store(data, for: key, output: nil)
    }
}

/// One cache entry as read.
public struct CachedEntry: Sendable {
    /// The stored bytes and the directives they were stored under.
    public var data: LoadedData
    /// Whether the entry may be used without asking the source.
    public var isFresh: Bool
    /// For an encoded output: what it was made from and its size.
    public var output: OutputStamp?

    public init(data: LoadedData, isFresh: Bool, output: OutputStamp? = nil) {
        self.data = data
        self.isFresh = isFresh
        self.output = output
    }
}

/// What an encoded output stored in the data cache was made from, and its pixel size.
public struct OutputStamp: Sendable, Codable, Equatable {
    /// SHA-256 (hex) of the source bytes the output was made from: an output is reused only for
    /// the same bytes.
    public var sourceDigest: String
    public var width: Int
    public var height: Int
    /// The output's file extension, when the encoder chose it from the image (`auto`).
    public var fileExtension: String?
    /// What analysing processors found about the image the output was made from, so that a run
    /// that reuses the output reports them without decoding again.
    public var facts: ImageFacts?

    public init(sourceDigest: String, width: Int, height: Int, fileExtension: String? = nil) {
        self.sourceDigest = sourceDigest
        self.width = width
        self.height = height
        self.fileExtension = fileExtension
    }
}

/// What a run did with the data cache, recorded for `cache stats`.
public struct CacheUsage: Sendable, Codable, Equatable {
    /// The data cache outcomes of the run's items.
    public var counts: RunStatistics.CacheCounts
    public var finishedAt: Date

    enum CodingKeys: String, CodingKey { case counts, finishedAt = "finished_at" }

    public init(counts: RunStatistics.CacheCounts, finishedAt: Date = Date()) {
        self.counts = counts
        self.finishedAt = finishedAt
    }
}

/// Maintenance a data cache may offer (`pipelinectl cache stats|prune|clear`).
public protocol DataCacheMaintenance: Sendable {
    /// Entries, bytes and ages now, and the last run's usage when recorded.
    func statistics() async throws -> DataCacheStatistics
    /// Applies the expiry and the size limit now, and deletes entries unused (or, in a store that
    /// does not record use, unwritten) for `olderThan` seconds when given; returns the entries and
    /// bytes deleted.
    func prune(olderThan: Double?) async throws -> (entries: Int, bytes: Int)
    /// Deletes every entry; returns how many there were.
    func clear() async throws -> Int
    /// Deletes every entry whose key `matches` (all the stored results of a source, whatever their
    /// parameters); returns the entries and bytes deleted. Reads every entry's header: the keys
    /// are not in the entries' names.
    func removeEntries(where matches: @escaping @Sendable (String) -> Bool) async throws -> (entries: Int, bytes: Int)
}

/// What `cache stats` shows.
public struct DataCacheStatistics: Sendable, Codable, Equatable {
    /// The cache's directory or URL.
    public var path: String
    public var entries = 0
    public var bytes = 0
    /// Entries of loaded bytes and of encoded outputs; `nil` where telling them apart would mean
    /// reading every entry (a shared store lists keys and sizes only).
    public var originals: Int?
    public var outputs: Int?
    /// The size limit in bytes; 0 for none (a shared store expires entries by age).
    public var sizeLimit = 0
    public var oldest: Date?
    public var newest: Date?
    public var lastRun: CacheUsage?

    enum CodingKeys: String, CodingKey {
        case path, entries, bytes, originals, outputs, sizeLimit = "size_limit", oldest, newest, lastRun = "last_run"
    }

    public init(path: String) { self.path = path }
}
