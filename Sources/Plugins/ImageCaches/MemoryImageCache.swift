import Foundation
import PipelineKit
import Synchronization

/// `memory`: keeps decoded and partly processed images in memory for the run.
///
/// Bounded by the pixel bytes it holds (`cost_limit`) and by a count. When a store crosses either
/// limit, least recently used images are purged until the cache is down to
/// `preferred_after_purge` (AlamofireImage's auto-purging cache), so purges are rare and batched.
/// Images costing more than `entry_cost_limit` are never kept; entries older than `ttl` are not
/// served.
public final class MemoryImageCache: ImageCaching {
    public static let spec = PluginSpec(
        name: "memory",
        summary: "Keeps decoded and processed images in memory, LRU, bounded by pixel bytes, purged to a preferred size.",
        options: [
            .size("cost_limit", default: "100MB", doc: "Most pixel bytes held (an image costs width x height x 8)."),
            .int("count_limit", default: 10_000, range: 1...10_000_000, doc: "Most images held."),
            .size("preferred_after_purge", doc: "Pixel bytes kept after a purge (default: 60% of cost_limit)."),
            .size("entry_cost_limit", doc: "Images costing more are not cached (default: cost_limit / 4)."),
            .duration("ttl", default: "0s", doc: "Age after which an entry is not served (0: no expiry)."),
        ])

    public static let plugin = Plugin.imageCache(spec) { options in try MemoryImageCache(options: options) }

    private struct Entry {
        let image: PipelineImage
        let storedAt: Date
        var tick: UInt64
    }
    private struct State: ~Copyable {
        var entries: [String: Entry] = [:]
        var cost = 0
        var tick: UInt64 = 0
        var evictions = 0
    }

    public let costLimit: Int
    public let countLimit: Int
    public let preferredAfterPurge: Int
    public let entryCostLimit: Int
    public let ttl: Double
    let now: @Sendable () -> Date
    private let state = Mutex(State())

    /// - Parameters:
    ///   - preferredAfterPurge: pixel bytes kept after a purge; default 60% of `costLimit`.
    ///   - entryCostLimit: larger images are not kept; default a quarter of `costLimit`.
    ///   - ttl: seconds an entry is served (0: forever).
    ///   - now: the clock (tests inject one).
    public init(costLimit: Int, countLimit: Int = 10_000, preferredAfterPurge: Int? = nil, entryCostLimit: Int? = nil,
                ttl: Double = 0, now: @escaping @Sendable () -> Date = { Date() }) {
        self.costLimit = costLimit
        self.countLimit = countLimit
        self.preferredAfterPurge = min(costLimit, preferredAfterPurge ?? costLimit * 6 / 10)
        self.entryCostLimit = min(costLimit, entryCostLimit ?? costLimit / 4)
        self.ttl = ttl
        self.now = now
    }

    public convenience init(options: PluginOptions, now: @escaping @Sendable () -> Date = { Date() }) throws {
        let limit = options.bytes("cost_limit")!
        if let preferred = options.bytes("preferred_after_purge"), preferred > limit {
            throw PipelineError(.invalidOption, "preferred_after_purge (\(Units.formatSize(preferred))) is larger than cost_limit (\(Units.formatSize(limit)))")
        }
        self.init(costLimit: limit, countLimit: options.int("count_limit")!,
                  preferredAfterPurge: options.bytes("preferred_after_purge"),
                  entryCostLimit: options.bytes("entry_cost_limit"), ttl: options.seconds("ttl")!, now: now)
    }

    public func image(for key: String) -> PipelineImage? {
        let clock = now()
        return state.withLock { state in
            guard var entry = state.entries[key] else { return nil }
            if ttl > 0, clock.timeIntervalSince(entry.storedAt) >= ttl {
                state.entries[key] = nil
                state.cost -= entry.image.cost
                return nil
            }
            state.tick += 1
            entry.tick = state.tick
            state.entries[key] = entry
            return entry.image
        }
    }

    public func store(_ image: PipelineImage, for key: String) {
        guard image.cost <= entryCostLimit else { return }
        let clock = now()
        state.withLock { state in
            state.tick += 1
            if let old = state.entries[key] { state.cost -= old.image.cost }
            state.entries[key] = Entry(image: image, storedAt: clock, tick: state.tick)
            state.cost += image.cost
            guard state.cost > costLimit || state.entries.count > countLimit else { return }
            // Purge least recently used down to the preferred size (and within the count).
            let countTarget = min(countLimit, max(1, countLimit * 9 / 10))
            for (oldKey, entry) in state.entries.sorted(by: { $0.value.tick < $1.value.tick }) {
                guard state.cost > preferredAfterPurge || state.entries.count > countTarget else { break }
                state.entries.removeValue(forKey: oldKey)
                state.cost -= entry.image.cost
                state.evictions += 1
            }
        }
    }

    /// Pixel bytes held now.
    public var totalCost: Int { state.withLock { $0.cost } }
    /// Images held now.
    public var count: Int { state.withLock { $0.entries.count } }
    /// Images dropped to stay under the limits.
    public var evictions: Int { state.withLock { $0.evictions } }
    public var evictionCount: Int? { evictions }
}
