import Foundation
import Logging
import OTel
import ServiceLifecycle
import Synchronization
import Tracing

/// OpenTelemetry traces from `run`, `work` and `serve`, exported over OTLP/HTTP (protobuf) by
/// swift-otel and configured by the standard variables: `OTEL_EXPORTER_OTLP_ENDPOINT` (or
/// `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`), `OTEL_SERVICE_NAME` (default `pipelinectl`),
/// `OTEL_RESOURCE_ATTRIBUTES`, `OTEL_TRACES_SAMPLER` and its argument, `OTEL_BSP_*`.
///
/// Off unless an endpoint is set or `OTEL_TRACES_EXPORTER=otlp`; `OTEL_SDK_DISABLED=true` turns
/// it off whatever else is set. Off, nothing is bootstrapped: the engine's spans go to the no-op
/// tracer. Only traces: metrics stay with Prometheus, logs with the process's log handler.
enum Telemetry {
    /// Whether `environment` asks for traces.
    static func wanted(_ environment: [String: String]) -> Bool {
        if environment["OTEL_SDK_DISABLED"]?.lowercased() == "true" { return false }
        if let exporter = environment["OTEL_TRACES_EXPORTER"]?.lowercased() { return exporter == "otlp" }
        return [environment["OTEL_EXPORTER_OTLP_ENDPOINT"], environment["OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"]]
            .contains { !($0 ?? "").isEmpty }
    }

    /// Sets the process's tracer up when the environment asks (once), and returns the service
    /// that exports its spans, to run beside the command; `nil` when off. A configuration the
    /// exporter refuses is said, and the command goes on without traces.
    static func start(logger: Logger) -> (any Service)? {
        let environment = ProcessInfo.processInfo.environment
        guard wanted(environment) else { return nil }
        var configuration = OTel.Configuration.default
        configuration.serviceName = "pipelinectl"
        configuration.metrics.enabled = false
        configuration.logs.enabled = false
        configuration.traces.enabled = true
        configuration.traces.exporter = .otlp
        configuration.diagnosticLogger = .custom(logger)
        configuration.diagnosticLogLevel = .warning
        // A span queue of bounded size: an exporter that is down costs at most this many spans
        // of memory (about 1 KiB each), the rest dropped.
        configuration.traces.batchSpanProcessor.maxQueueSize = 4096
        configuration.traces.batchSpanProcessor.exportTimeout = .seconds(10)
        do {
            let backend = try OTel.makeTracingBackend(configuration: configuration)
            InstrumentationSystem.bootstrap(backend.factory)
            return backend.service
        } catch {
            logger.warning("traces are off: the OTLP exporter refused its configuration", metadata: ["error": "\(error)"])
            return nil
        }
    }

    /// Runs `body` with traces exported as the environment asks, then flushes the spans still
    /// queued (a run's last items) before returning, waiting at most `flushWithin` for an
    /// exporter that does not answer: its spans are dropped, the outcome stays the body's.
    static func around<T: Sendable>(logger: Logger, flushWithin: Duration = .seconds(15),
                                    _ body: () async throws -> T) async throws -> T {
        guard let service = start(logger: logger) else { return try await body() }
        let group = ServiceGroup(configuration: .init(services: [.init(service: service)], gracefulShutdownSignals: [], logger: logger))
        let exporting = Task { _ = try? await group.run() }
        let result: Result<T, any Error>
        do { result = .success(try await body()) } catch { result = .failure(error) }
        await flush(group, exporting, within: flushWithin)
        return try result.get()
    }

    /// Asks the exporter to send what it holds and stop; gives up after `within` (the export
    /// goes on in the background, and ends with the process).
    static func flush(_ group: ServiceGroup, _ exporting: Task<Void, Never>, within: Duration) async {
        await group.triggerGracefulShutdown()
        let resumed = Mutex(false)
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let once: @Sendable () -> Void = {
                if resumed.withLock({ done in defer { done = true }; return !done }) { continuation.resume() }
            }
            Task { await exporting.value; once() }
            Task { try? await Task.sleep(for: within); once() }
        }
    }
}
