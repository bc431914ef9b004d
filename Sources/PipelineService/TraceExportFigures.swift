import Prometheus
import Synchronization

/// What the process's trace exporter lost, for the Prometheus expositions of `serve`, `work` and
/// `run --metrics`: spans dropped because the span queue was full or a batch could not be sent
/// (the exporter down, slow, or answering an error). Counted by the exporter's diagnostics,
/// which say the first loss once; shown only while traces are on.
package enum TraceExportFigures {
    private static let state = Mutex<(on: Bool, dropped: Int, failing: Bool, said: Bool)>((false, 0, false, false))

    /// Traces are on: the counter appears (at zero until a span is lost).
    package static func turnOn() { state.withLock { $0.on = true } }

    /// Counts `count` spans lost.
    package static func dropped(_ count: Int) { state.withLock { $0.dropped += count } }

    /// Whether the loss of spans is yet to be said (true once): the process says it once.
    package static func sayOnce() -> Bool {
        state.withLock { state in
            defer { state.said = true }
            return !state.said
        }
    }

    /// Whether an export failed in this process: the endpoint down, refusing or too slow.
    package static var exportFailing: Bool {
        get { state.withLock { $0.failing } }
        set { state.withLock { $0.failing = newValue } }
    }

    /// Brings `registry`'s counter up to the spans lost so far; `seen` is what it counted before.
    package static func expose(in registry: PrometheusCollectorRegistry, seen: borrowing Mutex<Int>) {
        let (on, dropped) = state.withLock { ($0.on, $0.dropped) }
        guard on else { return }
        let delta = seen.withLock { seen in
            defer { seen = dropped }
            return dropped - seen
        }
        registry.makeCounter(descriptor: MetricNameDescriptor(namespace: "pipelinectl", metricName: "trace_spans_dropped", unitName: "total",
                                                              helpText: "Spans the trace exporter dropped: its queue was full, or a batch could not be sent."))
            .increment(by: Int64(delta))
    }
}
