import Foundation
import PipelineKit
import Synchronization

/// `memory`: keeps images in memory for the run, least recently used dropped first, bounded by the
/// pixel bytes they hold.
public final class MemoryImageCache: ImageCaching {
    public static let plugin = Plugin.imageCache(
        PluginSpec(
            name: "memory",
            summary: "Keeps decoded and processed images in memory, LRU, bounded by pixel bytes.",
            options: [
                .size("cost_limit", default: "100MB", doc: "Most pixel bytes held (an image costs width x height x 8)."),
                .int("count_limit", default: 10_000, range: 1...10_000_000, doc: "Most images held."),
            ]),
        make: { options in MemoryImageCache(costLimit: options.bytes("cost_limit")!, countLimit: options.int("count_limit")!) })

    private struct Entry {
        let image: Image
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
    private let state = Mutex(State())

    public init(costLimit: Int, countLimit: Int = 10_000) {
        self.costLimit = costLimit
        self.countLimit = countLimit
    }

    public func image(for key: String) -> Image? {
        state.withLock { state in
            guard var entry = state.entries[key] else { return nil }
            state.tick += 1
            entry.tick = state.tick
            state.entries[key] = entry
            return entry.image
        }
    }

    public func store(_ image: Image, for key: String) {
        guard image.cost <= costLimit else { return }
        state.withLock { state in
            state.tick += 1
            if let old = state.entries[key] { state.cost -= old.image.cost }
            state.entries[key] = Entry(image: image, tick: state.tick)
            state.cost += image.cost
            while state.cost > costLimit || state.entries.count > countLimit {
                guard let oldest = state.entries.min(by: { $0.value.tick < $1.value.tick }) else { break }
                state.entries.removeValue(forKey: oldest.key)
                state.cost -= oldest.value.image.cost
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
