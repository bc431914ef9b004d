import Foundation
import Synchronization
import PipelineKit

/// `s3`: a data cache in an S3-compatible bucket, shared by every machine of a fleet: what one
/// machine downloaded (or, with `store: processed|all`, encoded) another reads instead of loading
/// it again.
///
/// An entry is the object `PREFIX/ab/abcdef...` (the SHA-256 of its key, as on disk), holding the
/// same checksummed format as the `disk` cache: a PUT makes it visible only when whole, and a read
/// that finds it short, damaged or foreign deletes it and reports a miss, so a damaged entry is
/// never served. Freshness (`policy`, `ttl`) means what it means for `disk`.
///
/// There is no size limit and no sweep: one process cannot see a fleet's use of a shared store.
/// Entries expire by age, through the bucket's lifecycle rules or `pipelinectl cache prune`
/// (entries not written for `prune_after`).
public final class S3DataCache: DataCaching, DataCacheMaintenance {
    public static let spec = PluginSpec(
        name: "s3",
        summary: "Keeps downloaded bytes and encoded outputs in an S3-compatible bucket shared by all machines: checksummed, HTTP freshness, expiry by age.",
        options: [
            .string("url", required: true, doc: "Where entries are kept: s3://BUCKET/PREFIX.").example("s3://my-cache/pipelinectl"),
            .duration("prune_after", default: "30d", min: "1s", max: "3650d",
                      doc: "`cache prune` deletes entries not written for this long (a bucket lifecycle rule can do the same)."),
            .duration("timeout", default: "60s", min: "1ms", max: "1d", doc: "Longest time for one request to the store."),
            .int("retry_attempts", default: 4, range: 1...20, doc: "Attempts in all for 5xx, SlowDown and broken connections."),
            .size("max_bytes", default: "1GB", min: "1KB", doc: "Largest entry read back."),
        ] + CacheRules.options + S3Settings.options)

    public static let plugin = Plugin.dataCache(spec) { options in
        try S3DataCache(options: options, environment: ProcessInfo.processInfo.environment)
    }

    /// The bucket and the key prefix (ending in `/`, or empty) entries live under.
    let root: S3Location
    /// The client, or why there is none (no credentials): said by ``preflight()`` before a run, so
    /// that `validate` and `explain` work on a machine without the store's keys.
    let connection: Result<S3Client, PipelineError>
    var client: S3Client { get throws { try connection.get() } }
    let rules: CacheRules
    let pruneAfter: Double
    let now: @Sendable () -> Date

    init(options: PluginOptions, environment: [String: String], now: @escaping @Sendable () -> Date = { Date() }) throws {
        let url = options.string("url")!
        let location: S3Location
        do { location = try S3Location(url) } catch {
            throw PipelineError(.invalidOption, "url '\(url)' is not an s3://BUCKET/PREFIX URL")
        }
        let prefix = location.key.isEmpty || location.key.hasSuffix("/") ? location.key : location.key + "/"
        root = S3Location(bucket: location.bucket, key: prefix)
        do {
            connection = .success(S3Client(settings: try S3Settings(options: options, environment: environment),
                                           maxBytes: options.bytes("max_bytes")!, timeout: options.seconds("timeout")!,
                                           attempts: options.int("retry_attempts")!))
        } catch let error as PipelineError {
            connection = .failure(error)
        }
        rules = CacheRules(options: options)
        pruneAfter = options.seconds("prune_after")!
        self.now = now
    }

    public var storesOriginals: Bool { rules.storesOriginals }
    public var storesOutputs: Bool { rules.storesOutputs }

    /// `s3://bucket/prefix` as written (without the trailing slash).
    var url: String { root.key.isEmpty ? "s3://\(root.bucket)" : "s3://\(root.bucket)/\(root.key.dropLast())" }

    func object(for key: String) -> S3Location {
        S3Location(bucket: root.bucket, key: root.key + CacheEntry.name(for: key))
    }

    public func entry(for key: String) async throws -> CachedEntry? {
        guard rules.policy != .off else { return nil }
        let location = object(for: key)
        guard let stored = try await client.get(location) else { return nil }
        guard let (meta, body) = CacheEntry.decode(stored.data), meta.key == key else {
            try? await client.delete(location)  // damaged or foreign: never served, stored again by the caller
            return nil
        }
        guard let fresh = rules.freshness(meta, now: now()) else { return nil }
        return CachedEntry(data: LoadedData(data: body, contentType: meta.contentType, finalURL: meta.finalURL,
                                            directives: meta.directives),
                           isFresh: fresh, output: meta.output)
    }

    public func store(_ loaded: LoadedData, for key: String, output: OutputStamp?) async throws {
        guard rules.policy != .off else { return }
        if rules.policy == .http, loaded.directives.noStore {
            await remove(key)
            return
        }
        let meta = CacheEntry.Meta(key: key, contentType: loaded.contentType, finalURL: loaded.finalURL,
                                   storedAt: now().timeIntervalSince1970, directives: loaded.directives, output: output)
        // A body left in a local file is stored whole, never its first bytes.
        let body = try await loaded.readWhole().data
        try await client.put(object(for: key), try CacheEntry.encode(meta: meta, body: body),
                             contentType: "application/octet-stream")
    }

    /// Rewrites the entry with its new directives and store time (S3 objects cannot be changed in
    /// place). An entry checked on every use whose directives did not change is left as it is.
    public func refresh(_ key: String, directives: CacheDirectives) async {
        let location = object(for: key)
        guard let client = try? client, let stored = try? await client.get(location),
              case (var meta, let body)? = CacheEntry.decode(stored.data), meta.key == key else { return }
        if rules.policy == .http, directives.noStore {
            try? await client.delete(location)
            return
        }
        if rules.policy == .http, directives.revalidateAlways || directives.noCache, meta.directives == directives { return }
        meta.directives = directives
        meta.storedAt = now().timeIntervalSince1970
        guard let file = try? CacheEntry.encode(meta: meta, body: body) else { return }
        _ = try? await client.put(location, file, contentType: "application/octet-stream")
    }

    @discardableResult
    public func remove(_ key: String) async -> Bool {
        let location = object(for: key)
        guard let client = try? client, (try? await client.head(location)) != nil else { return false }
        return (try? await client.delete(location)) != nil
    }

    /// Lists one key under the prefix: refused credentials or a missing bucket are said once,
    /// before the run, instead of as a miss on every item.
    public func preflight() async -> PipelineError? {
        do {
            _ = try await client.list(bucket: root.bucket, prefix: root.key, after: nil, maxKeys: 1)  // also: no credentials
            return nil
        } catch {
            let problem = error as? PipelineError ?? PipelineError(.io, "\(error)")
            return PipelineError(problem.kind, "the data cache \(url) cannot be used: \(problem.message)")
        }
    }

    /// One listed entry: its key, size and when it was last written.
    struct Listed {
        var key: String
        var size: Int
        var written: Date?
    }

    /// Calls `body` with each page of entries under the prefix (keys that are not entries' names
    /// are left out: the prefix may hold other objects).
    func forEachPage(_ body: ([Listed]) async throws -> Void) async throws {
        let dates = ISO8601DateFormatter()
        dates.formatOptions = [.withInternetDateTime, .withFractionalSeconds]
        let plain = ISO8601DateFormatter()
        var token: String?
        repeat {
            let page = try await client.list(bucket: root.bucket, prefix: root.key, after: token)
            let entries = page.keys.filter { CacheEntry.isEntryName($0.key.dropFirst(root.key.count)) }
                .map { Listed(key: $0.key, size: $0.size, written: dates.date(from: $0.modified) ?? plain.date(from: $0.modified)) }
            try await body(entries)
            token = page.next
        } while token != nil
    }

    public func statistics() async throws -> DataCacheStatistics {
        var stats = DataCacheStatistics(path: url)
        try await forEachPage { page in
            for entry in page {
                stats.entries += 1
                stats.bytes += entry.size
                guard let written = entry.written else { continue }
                stats.oldest = min(stats.oldest ?? written, written)
                stats.newest = max(stats.newest ?? written, written)
            }
        }
        return stats
    }

    /// Deletes entries not written for `olderThan` (default `prune_after`), and under `policy: ttl`
    /// those older than `ttl`, in batches of up to 1,000 keys.
    public func prune(olderThan: Double? = nil) async throws -> (entries: Int, bytes: Int) {
        var age = olderThan ?? pruneAfter
        if rules.policy == .ttl { age = min(age, rules.ttl) }
        let cutoff = now().addingTimeInterval(-age)
        return try await deleteEntries { ($0.written ?? .distantPast) <= cutoff }
    }

    /// Reads the first 4 KiB of every entry (more when its meta is longer) to find its key.
    public func removeEntries(where matches: @escaping @Sendable (String) -> Bool) async throws -> (entries: Int, bytes: Int) {
        var doomed = Set<String>()
        try await forEachPage { page in
            for entry in page {
                let location = S3Location(bucket: root.bucket, key: entry.key)
                guard var head = try await client.get(location, offset: 0, length: 4096) else { continue }
                if let end = CacheEntry.metaEnd(head), end > head.count, let whole = try await client.get(location, offset: 0, length: end) {
                    head = whole
                }
                if let meta = CacheEntry.meta(prefix: head), matches(meta.key) { doomed.insert(entry.key) }
            }
        }
        guard !doomed.isEmpty else { return (0, 0) }
        return try await deleteEntries { doomed.contains($0.key) }
    }

    public func clear() async throws -> Int {
        try await deleteEntries { _ in true }.entries
    }

    /// Deletes the listed entries `chosen` picks; returns how many and their bytes. Keys the store
    /// refused to delete are an error naming the first of them.
    func deleteEntries(_ chosen: (Listed) -> Bool) async throws -> (entries: Int, bytes: Int) {
        var removed = 0, bytes = 0
        var refused: [(key: String, reason: String)] = []
        try await forEachPage { page in
            let doomed = page.filter(chosen)
            guard !doomed.isEmpty else { return }
            let failed = try await client.delete(bucket: root.bucket, keys: doomed.map(\.key))
            let failedKeys = Set(failed.map(\.key))
            for entry in doomed where !failedKeys.contains(entry.key) {
                removed += 1
                bytes += entry.size
            }
            refused += failed
        }
        if let first = refused.first {
            throw PipelineError(.io, "deleted \(removed) entries, but the store refused \(refused.count), "
                                + "e.g. s3://\(root.bucket)/\(first.key): \(first.reason)")
        }
        return (removed, bytes)
    }
}
