import Foundation
import Histogram

/// Figures over a run's items: milliseconds per stage (p50, p95, max, over the items that ran the
/// stage) and cache outcomes.
public struct RunStatistics: Sendable, Codable, Equatable {
    public struct Times: Sendable, Codable, Equatable {
        public let p50: Double
        public let p95: Double
        public let max: Double
        public let count: Int
    }
    public struct CacheCounts: Sendable, Codable, Equatable {
        public var hit = 0
        public var miss = 0
        public var off = 0
        public var revalidated = 0
        public var processedHit = 0

        enum CodingKeys: String, CodingKey { case hit, miss, off, revalidated, processedHit = "processed_hit" }

        public init() {}

        public init(from decoder: any Decoder) throws {
            let c = try decoder.container(keyedBy: CodingKeys.self)
            hit = try c.decodeIfPresent(Int.self, forKey: .hit) ?? 0
            miss = try c.decodeIfPresent(Int.self, forKey: .miss) ?? 0
            off = try c.decodeIfPresent(Int.self, forKey: .off) ?? 0
            revalidated = try c.decodeIfPresent(Int.self, forKey: .revalidated) ?? 0
            processedHit = try c.decodeIfPresent(Int.self, forKey: .processedHit) ?? 0
        }

        /// Counts one item's outcome.
        public mutating func add(_ outcome: CacheOutcome) {
            switch outcome {
            case .hit: hit += 1
            case .miss: miss += 1
            case .off: off += 1
            case .revalidated: revalidated += 1
            case .processedHit: processedHit += 1
            }
        }

        /// Items that used the cache.
        public var used: Int { hit + miss + revalidated + processedHit }
        /// Items served without a full load, over those that used the cache.
        public var hitRate: Double? { used == 0 ? nil : Double(hit + revalidated + processedHit) / Double(used) }
    }

    /// By stage name (`load`, `decode`, `process`, `encode`), in milliseconds.
    public let stagesMs: [String: Times]
    /// By cache (`data`, `image`).
    public let cache: [String: CacheCounts]

    enum CodingKeys: String, CodingKey { case stagesMs = "stages_ms", cache }

    public init(_ items: [ItemResult]) {
        var builder = Builder()
        for item in items { builder.add(item) }
        self = builder.statistics
    }

    init(stagesMs: [String: Times], cache: [String: CacheCounts]) {
        self.stagesMs = stagesMs
        self.cache = cache
    }

    /// Collects the figures item by item in fixed memory, however long the run: each stage's
    /// times go into an HDR histogram (microseconds, three significant digits, so a percentile is
    /// within 0.1% of the exact one; the maximum is exact) and cache outcomes into counts.
    public struct Builder: Sendable {
        private var times: [String: Histogram<UInt64>] = [:]
        private var maxima: [String: Double] = [:]
        private var cache = ["data": CacheCounts(), "image": CacheCounts()]
        /// An hour in microseconds: longer stage times are recorded as an hour (the maximum stays exact).
        static let longest: UInt64 = 3_600_000_000

        public init() {}

        public mutating func add(_ item: ItemResult) {
            for (name, value) in [("load", item.timings.load), ("decode", item.timings.decode),
                                  ("process", item.timings.process), ("encode", item.timings.encode)] where value > 0 {
                let micros = Swift.min(Self.longest, Swift.max(1, UInt64((value * 1000).rounded())))
                if times[name] == nil {
                    times[name] = Histogram<UInt64>(highestTrackableValue: Self.longest, numberOfSignificantValueDigits: .three)
                }
                _ = times[name]!.record(micros)
                maxima[name] = Swift.max(maxima[name] ?? 0, value)
            }
            cache["data"]!.add(item.cacheData)
            cache["image"]!.add(item.cacheImage)
        }

        public var statistics: RunStatistics {
            var stages: [String: Times] = [:]
            for (name, histogram) in times where histogram.totalCount > 0 {
                func rank(_ p: Double) -> Double {
                    let micros = histogram.highestEquivalentForValue(histogram.valueAtPercentile(p * 100))
                    return Swift.min(maxima[name] ?? 0, Double(micros) / 1000)
                }
                stages[name] = Times(p50: rank(0.5), p95: rank(0.95), max: maxima[name] ?? 0, count: Int(histogram.totalCount))
            }
            return RunStatistics(stagesMs: stages, cache: cache)
        }
    }
}
