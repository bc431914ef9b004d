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
    /// One generation's entries, without a heap allocation per entry: outcomes are encoded one
    /// after another into a single growing byte buffer, and the dictionary maps a key to its
    /// bytes. Thousands of small long-lived allocations (an outcome's arrays) scattered among the
    /// decode buffers freed around them kept glibc from giving those pages back: on a 20,000-line
    /// list peak RSS grew with the list, 62 MiB at 1,000 lines to 336 MiB.
    private struct Generation {
        var places: [Key: (start: Int, count: Int)] = [:]
        var bytes: [UInt8] = []
        /// Failures of the source itself (rare; kept as they are).
        var failures: [Key: PipelineError] = [:]
        var count: Int { places.count + failures.count }

        func entry(_ key: Key) -> Entry? {
            if let place = places[key] { return .made(OutcomeCoding.decode(bytes[place.start..<(place.start + place.count)])) }
            return failures[key].map { .failed($0) }
        }

        mutating func insert(_ entry: Entry, _ key: Key) {
            switch entry {
            case .made(let outcome):
                let start = bytes.count
                OutcomeCoding.encode(outcome, into: &bytes)
                places[key] = (start, bytes.count - start)
                failures[key] = nil
            case .failed(let failure):
                failures[key] = failure
                places[key] = nil
            }
        }
    }
    private struct Generations: ~Copyable {
        var newer = Generation()
        var older = Generation()
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
            if let entry = generations.newer.entry(digest) { return entry }
            guard let entry = generations.older.entry(digest) else { return nil }
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
        generations.newer.insert(entry, digest)
        if generations.newer.count >= max(1, capacity / 2) {
            generations.older = generations.newer
            generations.newer = Generation()
        }
    }

    /// A failure that the same source would meet again: not a time limit, a cancellation, or a
    /// failure to write this item's own output.
    static func belongsToTheSource(_ failure: PipelineError) -> Bool {
        ![.timeout, .cancelled, .writeFailed, .outputCollision].contains(failure.kind)
    }
}

/// ``ItemOutcome`` as bytes and back, for `FinishedSources`' arena: lengths and numbers as
/// 64-bit little-endian words, strings as their length and UTF-8 bytes.
enum OutcomeCoding {
    static func encode(_ outcome: ItemOutcome, into bytes: inout [UInt8]) {
        func word(_ value: Int) { withUnsafeBytes(of: Int64(value).littleEndian) { bytes.append(contentsOf: $0) } }
        func number(_ value: Double) { withUnsafeBytes(of: value.bitPattern.littleEndian) { bytes.append(contentsOf: $0) } }
        func text(_ value: String) { word(value.utf8.count); bytes.append(contentsOf: value.utf8) }
        word(outcome.planned.count); outcome.planned.forEach(text)
        word(outcome.written.count); outcome.written.forEach(text)
        word(outcome.chosenExtensions.count)
        for chosen in outcome.chosenExtensions {
            if let chosen { word(1); text(chosen) } else { word(0) }
        }
        word(outcome.size.width); word(outcome.size.height); word(outcome.bytesIn); word(outcome.bytesOut)
        text(outcome.cacheData.rawValue); text(outcome.cacheImage.rawValue)
        [outcome.timings.load, outcome.timings.decode, outcome.timings.process, outcome.timings.encode].forEach(number)
        if let degraded = outcome.degraded { word(1); text(degraded) } else { word(0) }
        text(outcome.facts.jsonText)
        word(outcome.states.count); outcome.states.forEach { text($0.rawValue) }
        word(outcome.fingerprints.count); outcome.fingerprints.forEach { text($0.description) }
        if let sidecar = outcome.sidecar {
            word(1); text(sidecar.path); text(sidecar.state.rawValue); text(sidecar.fingerprint.description)
        } else { word(0) }
        text(outcome.sourceIdentity)
        word(outcome.outputSizes.count)
        for (size, count) in zip(outcome.outputSizes, outcome.outputBytes) { word(size.width); word(size.height); word(count) }
        word(outcome.variantOf.count); outcome.variantOf.forEach(word)
        if let srcset = outcome.srcset {
            word(1); text(srcset.path); text(srcset.state.rawValue); text(srcset.fingerprint.description)
        } else { word(0) }
    }

    static func decode(_ bytes: ArraySlice<UInt8>) -> ItemOutcome {
        var at = bytes.startIndex
        func word() -> Int {
            var value: UInt64 = 0
            for k in 0..<8 { value |= UInt64(bytes[at + k]) << (8 * k) }
            at += 8
            return Int(Int64(bitPattern: value))
        }
        func number() -> Double { Double(bitPattern: UInt64(bitPattern: Int64(word()))) }
        func text() -> String {
            let n = word()
            defer { at += n }
            return String(decoding: bytes[at..<(at + n)], as: UTF8.self)
        }
        var outcome = ItemOutcome()
        outcome.planned = (0..<word()).map { _ in text() }
        outcome.written = (0..<word()).map { _ in text() }
        outcome.chosenExtensions = (0..<word()).map { _ in word() == 1 ? text() : nil }
        outcome.size = PixelSize(width: word(), height: word())
        outcome.bytesIn = word()
        outcome.bytesOut = word()
        outcome.cacheData = CacheOutcome(rawValue: text()) ?? .off
        outcome.cacheImage = CacheOutcome(rawValue: text()) ?? .off
        outcome.timings = StageTimings(load: number(), decode: number(), process: number(), encode: number())
        outcome.degraded = word() == 1 ? text() : nil
        let facts = text()
        outcome.facts = facts.isEmpty ? [:] : ImageFacts(jsonText: facts)
        outcome.states = (0..<word()).map { _ in OutputState(rawValue: text()) ?? .written }
        outcome.fingerprints = (0..<word()).compactMap { _ in OutputFingerprint(stored: text()) }
        if word() == 1 {
            let path = text(), state = OutputState(rawValue: text()) ?? .written
            if let fingerprint = OutputFingerprint(stored: text()) { outcome.sidecar = (path, state, fingerprint) }
        }
        outcome.sourceIdentity = text()
        for _ in 0..<word() {
            outcome.outputSizes.append(PixelSize(width: word(), height: word()))
            outcome.outputBytes.append(word())
        }
        outcome.variantOf = (0..<word()).map { _ in word() }
        if word() == 1 {
            let path = text(), state = OutputState(rawValue: text()) ?? .written
            if let fingerprint = OutputFingerprint(stored: text()) { outcome.srcset = (path, state, fingerprint) }
        }
        return outcome
    }
}
