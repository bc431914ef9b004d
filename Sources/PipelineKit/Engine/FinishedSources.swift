import Crypto
import Foundation
import Synchronization

/// What this run already made of each source, so that a line repeated later in the list reuses
/// the result (its outputs are copied, or are the very same files) instead of loading again.
///
/// Memory is bounded: at most `capacity` sources are remembered, about 200 bytes each with one
/// output (the 128-bit digest of the key, the relative output paths, a few numbers), so the
/// default 100,000 is about 20 MB whatever the length of the list. It keeps the most recently
/// finished or reused sources, in two generations: when the newer one fills half the capacity,
/// the older is dropped. A duplicate further away than that is made again, or served by the data
/// cache when the pipeline has one. Failures of the source itself (HTTP status, not an image,
/// decode) are remembered too; time limits, cancellations and write failures are not.
final class FinishedSources: Sendable {
    enum Entry: Sendable {
        case made(ItemOutcome)
        case failed(PipelineError)
    }
    /// A 128-bit digest of a source's key.
    struct Key: Hashable, Sendable {
        let high: UInt64
        let low: UInt64
        init(_ text: String) {
            let digest = Array(SHA256.hash(data: Data(text.utf8)))
            high = digest[0..<8].reduce(0) { $0 << 8 | UInt64($1) }
            low = digest[8..<16].reduce(0) { $0 << 8 | UInt64($1) }
        }
    }
    private struct Generations: ~Copyable {
        var newer: [Key: Entry] = [:]
        var older: [Key: Entry] = [:]
    }
    private let generations = Mutex(Generations())
    /// Sources remembered at most (0: none).
    let capacity: Int

    init(capacity: Int) { self.capacity = max(0, capacity) }

    /// What this run made of the source with `key`, if it is still remembered.
    func entry(for key: String) -> Entry? {
        guard capacity > 0 else { return nil }
        let digest = Key(key)
        return generations.withLock { generations in
            if let entry = generations.newer[digest] { return entry }
            guard let entry = generations.older.removeValue(forKey: digest) else { return nil }
            insert(entry, digest, into: &generations)
            return entry
        }
    }

    /// Remembers what was made of the source with `key`.
    func record(_ entry: Entry, for key: String) {
        guard capacity > 0 else { return }
        if case .failed(let failure) = entry, !Self.belongsToTheSource(failure) { return }
        let digest = Key(key)
        generations.withLock { insert(entry, digest, into: &$0) }
    }

    /// Sources remembered now.
    var count: Int { generations.withLock { $0.newer.count + $0.older.count } }

    private func insert(_ entry: Entry, _ digest: Key, into generations: inout Generations) {
        generations.newer[digest] = entry
        if generations.newer.count >= max(1, capacity / 2) {
            generations.older = generations.newer
            generations.newer = [:]
        }
    }

    /// A failure that the same source would meet again: not a time limit, a cancellation, or a
    /// failure to write this item's own output.
    static func belongsToTheSource(_ failure: PipelineError) -> Bool {
        ![.timeout, .cancelled, .writeFailed, .outputCollision].contains(failure.kind)
    }
}
