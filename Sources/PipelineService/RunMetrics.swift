import CBuildInfo
import Foundation
import PipelineKit
import Prometheus
import Synchronization

/// The run's figures as Prometheus text exposition, for node_exporter's textfile collector
/// (`--metrics FILE`): items by status and failure kind, bytes, stage durations, cache outcomes.
package final class RunMetrics: Sendable {
    package let registry: PrometheusCollectorRegistry
    /// Dropped spans already added to the counter.
    private let exportedDrops = Mutex(0)
    private let pipeline: String
    private static let buckets: [Duration] = [.milliseconds(1), .milliseconds(5), .milliseconds(10), .milliseconds(25),
                                              .milliseconds(50), .milliseconds(100), .milliseconds(250), .milliseconds(500),
                                              .seconds(1), .seconds(2.5), .seconds(5), .seconds(10), .seconds(30), .seconds(60)]

    /// `registry`: shared by the service's presets, so that one exposition holds them all.
    package init(pipeline: String, registry: PrometheusCollectorRegistry = PrometheusCollectorRegistry()) {
        self.pipeline = pipeline
        self.registry = registry
        // Created up front so every series appears, at zero, even when nothing happened.
        for status in ["ok", "failed", "skipped"] { _ = items(status) }
        _ = deliveries()
        _ = duplicates()
        // The version of these figures, the report's: 3 counts an item once however often it was
        // delivered (docs/operating.md, "Versions of the report and the metrics").
        registry.makeGauge(descriptor: name("metrics_version", nil, "The version of pipelinectl's figures, as the report's report_version (3: duplicates counted apart)."),
                           labels: []).set(Double(RunReport.currentVersion))
        // Which build produced the figures, in the usual form of a gauge at 1 with labels.
        registry.makeGauge(descriptor: name("build_info", nil, "The pipelinectl build: its version and source revision."),
                           labels: [("version", PipelineKitVersion.current), ("revision", String(cString: pk_build_revision()))]).set(1.0)
    }

    private func name(_ metric: String, _ unit: String? = nil, _ help: String) -> MetricNameDescriptor {
        MetricNameDescriptor(namespace: "pipelinectl", metricName: metric, unitName: unit ?? "", helpText: help)
    }

    private func items(_ status: String) -> Counter {
        registry.makeCounter(descriptor: name("items", "total", "Items by how they ended."),
                             labels: [("pipeline", pipeline), ("status", status)])
    }

    private func deliveries() -> Counter {
        registry.makeCounter(descriptor: name("deliveries", "total", "Lines or queue messages worked: items and duplicate deliveries (what items_total counted before version 3)."),
                             labels: [("pipeline", pipeline)])
    }

    private func duplicates() -> Counter {
        registry.makeCounter(descriptor: name("duplicate_deliveries", "total", "Lines or messages naming a source (same version) already worked in this run: not items."),
                             labels: [("pipeline", pipeline)])
    }

    /// Counts one finished line: an item, or a duplicate delivery.
    package func record(_ item: ItemResult) {
        deliveries().increment()
        if item.duplicate {
            duplicates().increment()
            return
        }
        items(item.status.rawValue).increment()
        if item.shared {
            registry.makeCounter(descriptor: name("items_shared", "total", "Items made from this run's work for another line of the same source, copied under their own names."),
                                 labels: [("pipeline", pipeline)]).increment()
        }
        if item.degraded != nil {
            registry.makeCounter(descriptor: name("items_degraded", "total", "Items decoded despite damage (fail_on)."),
                                 labels: [("pipeline", pipeline)]).increment()
        }
        if item.decodeShared {
            registry.makeCounter(descriptor: name("decodes_shared", "total", "Items that used another item's decode of the same source, made at the same time."),
                                 labels: [("pipeline", pipeline)]).increment()
        }
        if let error = item.error {
            registry.makeCounter(descriptor: name("item_failures", "total", "Failed items by kind of failure."),
                                 labels: [("pipeline", pipeline), ("stage", error.stage.rawValue), ("kind", error.kind.rawValue)])
                .increment()
        }
        registry.makeCounter(descriptor: name("bytes_in", "total", "Bytes loaded or read from the data cache."),
                             labels: [("pipeline", pipeline)]).increment(by: Int64(item.bytesIn))
        registry.makeCounter(descriptor: name("bytes_out", "total", "Bytes written."),
                             labels: [("pipeline", pipeline)]).increment(by: Int64(item.bytesOut))
        let t = item.timings
        for (stage, ms) in [("load", t.load), ("decode", t.decode), ("process", t.process), ("encode", t.encode)] where ms > 0 {
            registry.makeDurationHistogram(descriptor: name("stage_duration", "seconds", "Time in each stage per item."),
                                           labels: [("pipeline", pipeline), ("stage", stage)], buckets: Self.buckets)
                .record(.microseconds(Int64(ms * 1000)))
        }
        for (cache, outcome) in [("data", item.cacheData), ("image", item.cacheImage)] where outcome != .off {
            registry.makeCounter(descriptor: name("cache_requests", "total", "Cache lookups by cache and result."),
                                 labels: [("pipeline", pipeline), ("cache", cache), ("result", outcome.rawValue)]).increment()
        }
    }

    /// The exposition now, with the queue's depth (`pipelinectl work --listen`'s /metrics): a
    /// gauge for each figure the queue tells.
    package func exposition(depth: ListDepth?, queue: String) -> Data {
        let labels = [("queue", queue)]
        let figures: [(String, String?, String, Double?)] = [
            ("queue_waiting", nil, "Items waiting in the queue (SQS: ApproximateNumberOfMessages).", depth?.waiting.map(Double.init)),
            ("queue_in_flight", nil, "Items received by a worker and not yet acknowledged.", depth?.inFlight.map(Double.init)),
            ("queue_failed", nil, "Items kept in the queue as failed for good (PostgreSQL).", depth?.failed.map(Double.init)),
            ("queue_oldest_age", "seconds", "Age of the oldest waiting item.", depth?.oldestSeconds),
        ]
        for (metric, unit, help, value) in figures {
            guard let value else { continue }
            registry.makeGauge(descriptor: name(metric, unit, help), labels: labels).set(value)
        }
        TraceExportFigures.expose(in: registry, seen: exportedDrops)
        return Data(registry.emitToBuffer())
    }

    /// Writes the exposition atomically (the textfile collector must never read half a file).
    package func write(to path: String, summary: RunSummary) throws {
        registry.makeGauge(descriptor: name("run_duration", "seconds", "Wall time of the last run."),
                           labels: [("pipeline", pipeline)]).set(summary.wallSeconds)
        registry.makeGauge(descriptor: name("last_run_timestamp", "seconds", "When the last run ended (Unix time)."),
                           labels: [("pipeline", pipeline)]).set(Date().timeIntervalSince1970)
        if let evictions = summary.imageCacheEvictions {
            registry.makeGauge(descriptor: name("image_cache_evictions", nil, "Images the image cache dropped in the last run."),
                               labels: [("pipeline", pipeline)]).set(Double(evictions))
        }
        TraceExportFigures.expose(in: registry, seen: exportedDrops)
        try AtomicFile.write(Data(registry.emitToBuffer()), to: path)
    }
}
