import Foundation
import PipelineKit
import Synchronization

/// `disk`: keeps loaded bytes (and, with `store: processed|all`, encoded outputs) on disk across
/// runs, one file per entry, least recently used swept first when the size limit is crossed.
///
/// An entry is named by the SHA-256 of its key and written to a temporary file, then renamed, so
/// a reader (in this process or another sharing the directory) sees a whole entry or none. It
/// starts with a header holding the body's length and SHA-256; a read that finds a short, damaged
/// or foreign file deletes it and reports a miss, so a damaged entry is never served. The
/// checksum is computed on the first read of an entry in this process and again whenever its file
/// changes (inode, size, modification or change time); unchanged hits skip it.
///
/// Freshness (`policy`): `http` follows the response's `Cache-Control` (`max-age`, `no-cache`,
/// `no-store`, `immutable`) or `Expires`, and `ttl` when the response gives no lifetime; a stale
/// entry with an `ETag` or `Last-Modified` is revalidated with a conditional request. `ttl` ignores
/// HTTP headers: an entry is fresh for `ttl`, then fetched again. `off` neither reads nor writes.
/// Entries of local files are checked against the file's size and modification time on every use.
public final class DiskDataCache: DataCaching, DataCacheMaintenance {
    public typealias Policy = CacheRules.Policy
    public typealias Store = CacheRules.Store

    public static let spec = PluginSpec(
        name: "disk",
        summary: "Keeps downloaded bytes and encoded outputs on disk across runs: HTTP freshness and revalidation, checksummed, LRU within a size limit.",
        options: [
            .path("path", default: ".cache/pipelinectl/data", access: .writableDirectory, doc: "Directory of the cache (relative to the working directory)."),
            .size("size_limit", default: "1GB", min: "1MB", doc: "Most bytes kept; a write that crosses it sweeps the least recently used entries."),
            .number("sweep_to", default: 0.7, range: 0.1...1.0, doc: "Fraction of size_limit kept after a sweep."),
        ] + CacheRules.options)

    public static let plugin = Plugin.dataCache(spec) { options in try DiskDataCache(options: options) }

    public let root: String
    public let sizeLimit: Int
    let sweepTo: Double
    let rules: CacheRules
    public var ttl: Double { rules.ttl }
    public var policy: Policy { rules.policy }
    let now: @Sendable () -> Date
    /// Bytes on disk (known after the first scan), and bytes of writes in progress.
    private struct Usage {
        var total: Int?
        var inFlight = 0
    }
    private let usage = Mutex(Usage())
    /// Held by a sweep, and by a write recording its size, so a write that lands during a sweep is
    /// counted once at least (never lost from the total).
    private let sweeping = Mutex(())
    /// Entry files whose checksum held when this process last read them, as they were then: a
    /// hit on one that has not changed since (same inode, size, modification and change times)
    /// is not hashed again, so a stored result is served without reading its body twice.
    private let verified = Mutex([String: FileIdentity]())
    static let verifiedCapacity = 65_536

    /// - Parameter now: the clock freshness is judged by (tests inject one).
    public init(path: String, sizeLimit: Int, sweepTo: Double = 0.7, ttl: Double = 7 * 86_400,
                policy: Policy = .http, store: Store = .original, now: @escaping @Sendable () -> Date = { Date() }) {
        self.root = path
        self.sizeLimit = sizeLimit
        self.sweepTo = sweepTo
        self.rules = CacheRules(policy: policy, store: store, ttl: ttl)
        self.now = now
    }

    /// Makes the cache from validated options, judging freshness by `now`.
    public convenience init(options: PluginOptions, now: @escaping @Sendable () -> Date = { Date() }) throws {
        self.init(path: options.string("path")!, sizeLimit: options.bytes("size_limit")!,
                  sweepTo: options.number("sweep_to")!, ttl: options.seconds("ttl")!,
                  policy: Policy(rawValue: options.string("policy")!)!, store: Store(rawValue: options.string("store")!)!,
                  now: now)
    }

    public var storesOriginals: Bool { rules.storesOriginals }
    public var storesOutputs: Bool { rules.storesOutputs }

    typealias Meta = CacheEntry.Meta

    /// The entry file of `key`: `ROOT/ab/abcdef...` (first two hex digits as a subdirectory).
    public func entryPath(for key: String) -> String { "\(root)/\(CacheEntry.name(for: key))" }

    func freshness(_ meta: Meta) -> Bool? { rules.freshness(meta, now: now()) }

    public func entry(for key: String) async -> CachedEntry? {
        guard policy != .off else { return nil }
        let path = entryPath(for: key)
        return try? await WorkerPool.io.run { [self] () -> CachedEntry? in
            let fd = open(path, O_RDONLY | O_CLOEXEC)
            guard fd >= 0 else { return nil }
            defer { close(fd) }
            guard let (file, identity) = Self.readWhole(fd) else { return nil }
            let checked = verified.withLock { $0[path] == identity }
            guard let (meta, body) = CacheEntry.decode(file, verify: !checked), meta.key == key else {
                unlink(path)  // damaged or foreign: never served, refetched by the caller
                verified.withLock { $0[path] = nil }
                return nil
            }
            guard let fresh = freshness(meta) else { return nil }
            futimens(fd, nil)  // last access, for LRU
            var after = stat()
            if fstat(fd, &after) == 0 {
                verified.withLock { known in
                    if known.count >= Self.verifiedCapacity { known.removeAll(keepingCapacity: true) }
                    known[path] = FileIdentity(after)
                }
            }
            return CachedEntry(data: LoadedData(data: body, contentType: meta.contentType, finalURL: meta.finalURL,
                                                directives: meta.directives),
                               isFresh: fresh, output: meta.output)
        }
    }

    /// Which file, and which version of it: any write to it (or a new file renamed into its
    /// place) changes its inode, size or change time.
    struct FileIdentity: Equatable {
        let device: UInt64
        let inode: UInt64
        let size: Int64
        let modified: timespec
        let changed: timespec

        init(_ info: stat) {
            device = UInt64(info.st_dev)
            inode = UInt64(info.st_ino)
            size = Int64(info.st_size)
            modified = info.st_mtim
            changed = info.st_ctim
        }

        static func == (a: Self, b: Self) -> Bool {
            a.device == b.device && a.inode == b.inode && a.size == b.size
                && a.modified.tv_sec == b.modified.tv_sec && a.modified.tv_nsec == b.modified.tv_nsec
                && a.changed.tv_sec == b.changed.tv_sec && a.changed.tv_nsec == b.changed.tv_nsec
        }
    }

    /// The whole file open at `fd` and its identity when read; `nil` when it cannot be read.
    static func readWhole(_ fd: Int32) -> (Data, FileIdentity)? {
        var info = stat()
        guard fstat(fd, &info) == 0, info.st_size >= 0 else { return nil }
        let size = Int(info.st_size)
        var data = Data(count: size)
        let read = data.withUnsafeMutableBytes { buffer -> Int in
            var done = 0
            while done < size {
                let n = Glibc.read(fd, buffer.baseAddress! + done, size - done)
                if n < 0, errno == EINTR { continue }
                guard n > 0 else { break }
                done += n
            }
            return done
        }
        // A file that shrank while read fails its length check in decode; one that grew is not this entry.
        guard read == size else { return nil }
        return (data, FileIdentity(info))
    }

    public func store(_ loaded: LoadedData, for key: String, output: OutputStamp?) async throws {
        guard policy != .off else { return }
        if policy == .http, loaded.directives.noStore {
            await remove(key)
            return
        }
        let meta = Meta(key: key, contentType: loaded.contentType, finalURL: loaded.finalURL,
                        storedAt: now().timeIntervalSince1970, directives: loaded.directives, output: output)
        // A body left in a local file is stored whole, never its first bytes.
        let body = try await loaded.readWhole().data
        try await write(meta: meta, body: body, key: key)
    }

    public func refresh(_ key: String, directives: CacheDirectives) async {
        let path = entryPath(for: key)
        try? await WorkerPool.io.run { [self] in
            // Checked on every use and unchanged (a local file's size and time): nothing to record,
            // and no lifetime counts from the store time, so the entry is not rewritten and synced
            // on every hit. (The lookup already marked it used.)
            if policy == .http, directives.revalidateAlways || directives.noCache,
               let stored = CacheEntry.readMeta(path), stored.key == key, stored.directives == directives { return }
            guard let file = FileManager.default.contents(atPath: path),
                  case (var meta, let body)? = CacheEntry.decode(file), meta.key == key else { return }
            meta.directives = directives
            meta.storedAt = now().timeIntervalSince1970
            if policy == .http, directives.noStore {
                unlink(path)
                return
            }
            try writeNow(meta: meta, body: body, path: path)
        }
    }

    @discardableResult
    public func remove(_ key: String) async -> Bool {
        let path = entryPath(for: key)
        return (try? await WorkerPool.io.run { [self] () -> Bool in
            var info = stat()
            guard stat(path, &info) == 0, unlink(path) == 0 else { return false }
            usage.withLock { if let value = $0.total { $0.total = value - Int(info.st_size) } }
            return true
        }) ?? false
    }

    public func recordRun(_ usage: CacheUsage) async {
        guard policy != .off, usage.counts.used > 0 else { return }
        let path = "\(root)/last-run.json"
        try? await WorkerPool.io.run {
            let encoder = JSONEncoder()
            encoder.dateEncodingStrategy = .iso8601
            encoder.outputFormatting = [.prettyPrinted, .sortedKeys]
            try AtomicFile.write(try encoder.encode(usage), to: path)
        }
    }

    private func write(meta: Meta, body: Data, key: String) async throws {
        let path = entryPath(for: key)
        try await WorkerPool.io.run { [self] in try writeNow(meta: meta, body: body, path: path) }
    }

    /// Writes an entry within the size limit: its room is reserved first, counting the other
    /// writes in progress, and least recently used entries are swept before it lands when it would
    /// not fit. (Sweeping after the write let several concurrent writes pass the limit together.)
    private func writeNow(meta: Meta, body: Data, path: String) throws {
        let file = try CacheEntry.encode(meta: meta, body: body)
        if usage.withLock({ $0.total }) == nil {
            let scanned = scanSize()
            usage.withLock { if $0.total == nil { $0.total = scanned } }
        }
        var previous = stat()
        let growth = file.count - (stat(path, &previous) == 0 ? Int(previous.st_size) : 0)
        let projected = usage.withLock { usage -> Int in
            usage.inFlight += growth
            return usage.total! + usage.inFlight
        }
        if projected > sizeLimit { sweep() }
        do {
            try AtomicFile.write(file, to: path)
        } catch {
            usage.withLock { $0.inFlight -= growth }
            throw error
        }
        sweeping.withLock { _ in
            usage.withLock { usage in
                usage.inFlight -= growth
                usage.total! += growth
            }
        }
    }

    private struct EntryFile {
        let path: String
        let size: Int
        let accessed: Double
    }

    /// Entry files, and temporary files left by killed writers.
    private func files() -> (entries: [EntryFile], temporary: [EntryFile]) {
        var entries: [EntryFile] = [], temporary: [EntryFile] = []
        guard let shards = try? FileManager.default.contentsOfDirectory(atPath: root) else { return ([], []) }
        for shard in shards where shard.count == 2 {
            let dir = "\(root)/\(shard)"
            for name in (try? FileManager.default.contentsOfDirectory(atPath: dir)) ?? [] {
                var info = stat()
                let path = "\(dir)/\(name)"
                guard stat(path, &info) == 0, (info.st_mode & S_IFMT) == S_IFREG else { continue }
                let file = EntryFile(path: path, size: Int(info.st_size),
                                     accessed: Double(info.st_mtim.tv_sec) + Double(info.st_mtim.tv_nsec) / 1e9)
                if name.hasPrefix(".") { temporary.append(file) } else { entries.append(file) }
            }
        }
        return (entries, temporary)
    }

    private func scanSize() -> Int { files().entries.reduce(0) { $0 + $1.size } }

    /// Deletes least recently used entries until the cache, with the writes in progress, holds
    /// `sweep_to` of its limit.
    private func sweep() {
        sweeping.withLock { _ in
            let all = files().entries.sorted { $0.accessed < $1.accessed }
            var size = all.reduce(0) { $0 + $1.size }
            let target = Int(Double(sizeLimit) * sweepTo) - usage.withLock { $0.inFlight }
            for entry in all where size > target {
                if unlink(entry.path) == 0 { size -= entry.size }
            }
            usage.withLock { $0.total = size }
        }
    }

    public func statistics() async throws -> DataCacheStatistics {
        try await WorkerPool.io.run { [self] in
            var stats = DataCacheStatistics(path: root)
            stats.sizeLimit = sizeLimit
            stats.originals = 0
            stats.outputs = 0
            for file in files().entries {
                stats.entries += 1
                stats.bytes += file.size
                guard let meta = CacheEntry.readMeta(file.path) else { continue }
                if meta.output == nil { stats.originals! += 1 } else { stats.outputs! += 1 }
                let stored = Date(timeIntervalSince1970: meta.storedAt)
                stats.oldest = min(stats.oldest ?? stored, stored)
                stats.newest = max(stats.newest ?? stored, stored)
            }
            if let data = FileManager.default.contents(atPath: "\(root)/last-run.json") {
                let decoder = JSONDecoder()
                decoder.dateDecodingStrategy = .iso8601
                stats.lastRun = try? decoder.decode(CacheUsage.self, from: data)
            }
            return stats
        }
    }

    /// Deletes damaged entries, entries of no further use (expired without validators; under
    /// `http`, also stale ones unused for `ttl`), temporary files over an hour old, then sweeps
    /// least recently used entries if the cache is over its size limit. With `olderThan`, entries
    /// unused for that long go too.
    public func prune(olderThan: Double? = nil) async throws -> (entries: Int, bytes: Int) {
        try await WorkerPool.io.run { [self] in
            var removed = 0, bytes = 0
            let clock = now().timeIntervalSince1970
            let (entries, temporary) = files()
            for file in temporary where clock - file.accessed > 3600 {
                if unlink(file.path) == 0 { bytes += file.size }
            }
            var kept: [EntryFile] = []
            for file in entries {
                let meta = CacheEntry.readMeta(file.path)
                let useless = meta.map { meta in
                    freshness(meta) == nil || (policy == .http && freshness(meta) == false && clock - file.accessed > ttl)
                } ?? true
                let unused = olderThan.map { clock - file.accessed >= $0 } ?? false
                if useless || unused, unlink(file.path) == 0 {
                    removed += 1
                    bytes += file.size
                } else {
                    kept.append(file)
                }
            }
            var size = kept.reduce(0) { $0 + $1.size }
            if size > sizeLimit {
                let target = Int(Double(sizeLimit) * sweepTo)
                for file in kept.sorted(by: { $0.accessed < $1.accessed }) where size > target {
                    if unlink(file.path) == 0 {
                        size -= file.size
                        removed += 1
                        bytes += file.size
                    }
                }
            }
            usage.withLock { $0.total = size }
            return (removed, bytes)
        }
    }

    public func removeEntries(where matches: @escaping @Sendable (String) -> Bool) async throws -> (entries: Int, bytes: Int) {
        try await WorkerPool.io.run { [self] in
            var removed = 0, bytes = 0
            for file in files().entries {
                guard let meta = CacheEntry.readMeta(file.path), matches(meta.key), unlink(file.path) == 0 else { continue }
                removed += 1
                bytes += file.size
            }
            usage.withLock { usage in usage.total = usage.total.map { max(0, $0 - bytes) } }
            return (removed, bytes)
        }
    }

    public func clear() async throws -> Int {
        try await WorkerPool.io.run { [self] in
            let (entries, temporary) = files()
            var removed = 0
            for file in entries where unlink(file.path) == 0 { removed += 1 }
            for file in temporary { unlink(file.path) }
            unlink("\(root)/last-run.json")
            usage.withLock { $0.total = 0 }
            return removed
        }
    }
}
