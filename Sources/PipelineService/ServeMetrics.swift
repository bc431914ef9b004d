import Foundation
import PipelineKit
import Prometheus
import Synchronization

/// Request counts and durations by pipeline and status, and the run's item metrics, in one
/// Prometheus exposition.
package final class ServeMetrics: Sendable {
    private let registry = PrometheusCollectorRegistry()
    private let items: [String: RunMetrics]
    /// Connection closes already added to the counters, by reason.
    private let exportedClosures = Mutex<[String: Int]>([:])
    /// Dropped spans already added to the counter.
    private let exportedDrops = Mutex(0)
    private static let buckets: [Duration] = [.milliseconds(1), .milliseconds(2), .milliseconds(5), .milliseconds(10), .milliseconds(25),
                                              .milliseconds(50), .milliseconds(100), .milliseconds(250), .milliseconds(500),
                                              .seconds(1), .seconds(2.5), .seconds(5), .seconds(10), .seconds(30)]

    package init(presets: [String]) {
        var items: [String: RunMetrics] = [:]
        for name in presets { items[name] = RunMetrics(pipeline: name, registry: registry) }
        self.items = items
    }

    package func record(_ answer: ServeAnswer, seconds: Double) {
        let labels = [("pipeline", answer.pipeline), ("status", String(answer.status))]
        registry.makeCounter(descriptor: MetricNameDescriptor(namespace: "pipelinectl", metricName: "requests", unitName: "total",
                                                              helpText: "Requests by pipeline and HTTP status."), labels: labels).increment()
        registry.makeDurationHistogram(descriptor: MetricNameDescriptor(namespace: "pipelinectl", metricName: "request_duration",
                                                                        unitName: "seconds", helpText: "Time to answer, by pipeline and HTTP status."),
                                       labels: labels, buckets: Self.buckets).record(.microseconds(Int64(seconds * 1_000_000)))
        if let item = answer.item { items[answer.pipeline]?.record(item) }
    }

    /// The exposition; `connections`: the server's connection table, when it has one (its open
    /// connections and the closes by reason).
    package func exposition(inFlight: Int, loadsWaiting: Int, connections: ConnectionCounts?) -> Data {
        if let connections { exposeConnections(connections) }
        registry.makeGauge(descriptor: MetricNameDescriptor(namespace: "pipelinectl", metricName: "source_loads_waiting", unitName: "",
                                                            helpText: "Requests waiting for a source load in progress (one load serves them all)."))
            .set(Double(loadsWaiting))
        registry.makeGauge(descriptor: MetricNameDescriptor(namespace: "pipelinectl", metricName: "requests_in_flight", unitName: "",
                                                            helpText: "Requests admitted now, running or waiting for a job."))
            .set(Double(inFlight))
        TraceExportFigures.expose(in: registry, seen: exportedDrops)
        return Data(registry.emitToBuffer())
    }

    private func exposeConnections(_ connections: ConnectionCounts) {
        registry.makeGauge(descriptor: MetricNameDescriptor(namespace: "pipelinectl", metricName: "connections_open", unitName: "",
                                                            helpText: "HTTP connections open now."))
            .set(Double(connections.open))
        for (reason, now) in connections.closed {
            // The table counts; the counter catches up with it at each scrape.
            let delta = exportedClosures.withLock { seen in
                defer { seen[reason] = now }
                return now - (seen[reason] ?? 0)
            }
            registry.makeCounter(descriptor: MetricNameDescriptor(namespace: "pipelinectl", metricName: "connections_closed", unitName: "total",
                                                                  helpText: "Connections the service closed, by reason: evicted at the cap, refused (every one busy), a deadline passed."),
                                 labels: [("reason", reason)])
                .increment(by: Int64(delta))
        }
    }
}

/// A server's connections at a scrape: open now, and closed by the service so far by reason
/// (every reason listed, so that each series appears at zero).
package struct ConnectionCounts: Sendable {
    package var open: Int
    package var closed: [(reason: String, count: Int)]

    package init(open: Int, closed: [(reason: String, count: Int)]) {
        self.open = open
        self.closed = closed
    }
}
