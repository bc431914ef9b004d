import Foundation
import Logging
import PipelineKit
#if OTLP
import NIOCore
import NIOPosix
import OTel
#endif
import PipelineService
import ServiceLifecycle
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

    /// With traces on, what each log line adds: the task's `trace_id`, `span_id` and
    /// `trace_flags`, as the process's tracer propagates them; `nil` when off.
    static var logMetadata: Logger.MetadataProvider? {
        guard wanted(ProcessInfo.processInfo.environment) else { return nil }
        return Logger.MetadataProvider {
            guard let context = ServiceContext.current,
                  let parent = Traceparent(EngineSpans.propagation(of: context)) else { return [:] }
            return ["trace_id": "\(parent.traceID)", "span_id": "\(parent.spanID)", "trace_flags": "\(parent.sampled ? "01" : "00")"]
        }
    }

    /// Sets the process's tracer up when the environment asks (once), and returns the service
    /// that exports its spans, to run beside the command; `nil` when off. A configuration the
    /// exporter refuses is said, and the command goes on without traces.
    static func start(logger: Logger) -> (any Service)? {
        let environment = ProcessInfo.processInfo.environment
        guard wanted(environment) else { return nil }
        #if OTLP
        return startExporter(environment, logger: logger)
        #else
        logger.warning("traces are off: this pipelinectl was built without the OTLP exporter (the .deb, the image and make install have it; or build with: swift build --traits OTLP)")
        return nil
        #endif
    }

    #if OTLP
    /// The exporter and the process's tracer, configured by `environment`.
    static func startExporter(_ environment: [String: String], logger: Logger) -> (any Service)? {
        var configuration = OTel.Configuration.default
        configuration.serviceName = "pipelinectl"
        configuration.metrics.enabled = false
        configuration.logs.enabled = false
        configuration.traces.enabled = true
        configuration.traces.exporter = .otlp
        let endpoint = Self.endpoint(environment)
        configuration.diagnosticLogger = .custom(Logger(label: "pipelinectl.traces") { _ in
            ExportDiagnostics(said: logger, endpoint: endpoint)
        })
        configuration.diagnosticLogLevel = .warning
        // A span queue of bounded size: an exporter that is down costs at most this many spans
        // of memory (about 1 KiB each), the rest dropped.
        configuration.traces.batchSpanProcessor.maxQueueSize = 4096
        configuration.traces.batchSpanProcessor.exportTimeout = .seconds(10)
        // The sampler is ours (FailureKeepingTracer: a failed item is exported whatever the
        // rate); the exporter takes every span it is given. swift-otel reads the sampler
        // variables from the process's environment over its configuration, so they are taken
        // out of it first, before any other thread reads the environment.
        let (sampler, problem) = TraceSampler.from(environment)
        if let problem { logger.warning("traces: \(problem)") }
        unsetenv("OTEL_TRACES_SAMPLER")
        unsetenv("OTEL_TRACES_SAMPLER_ARG")
        configuration.traces.sampler = .alwaysOn
        do {
            let backend = try OTel.makeTracingBackend(configuration: configuration)
            InstrumentationSystem.bootstrap(FailureKeepingTracer(base: backend.factory, sampler: sampler))
            TraceExportFigures.turnOn()
            return BoundedExport(exporter: backend.service, endpoint: endpoint, logger: logger)
        } catch {
            logger.warning("traces are off: the OTLP exporter refused its configuration", metadata: ["error": "\(error)"])
            return nil
        }
    }
    #endif

    /// Whether this build has the exporter (the `OTLP` trait).
    static var exporterBuilt: Bool {
        #if OTLP
        true
        #else
        false
        #endif
    }

    /// Runs `body` with traces exported as the environment asks, then flushes the spans still
    /// queued (a run's last items) before returning, within ``BoundedExport``'s bounds: the
    /// outcome stays the body's.
    static func around<T: Sendable>(logger: Logger, _ body: () async throws -> T) async throws -> T {
        guard let service = start(logger: logger) else { return try await body() }
        let group = ServiceGroup(configuration: .init(services: [.init(service: service)], gracefulShutdownSignals: [], logger: logger))
        let exporting = Task { _ = try? await group.run() }
        let result: Result<T, any Error>
        do { result = .success(try await body()) } catch { result = .failure(error) }
        await group.triggerGracefulShutdown()
        await exporting.value
        return try result.get()
    }

    /// The traces endpoint the environment names (`OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`, else
    /// `OTEL_EXPORTER_OTLP_ENDPOINT`), or the exporter's default, `http://localhost:4318`.
    static func endpoint(_ environment: [String: String]) -> String {
        [environment["OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"], environment["OTEL_EXPORTER_OTLP_ENDPOINT"]]
            .compactMap { $0 }.first { !$0.isEmpty } ?? "http://localhost:4318"
    }

    /// Runs `body` under a span `name` of its own trace, which the items `body` runs link to
    /// (each item a trace of its own); nothing when traces are off.
    static func withRunSpan<T: Sendable>(_ name: String, list: String, _ body: () async throws -> T) async throws -> T {
        guard wanted(ProcessInfo.processInfo.environment), exporterBuilt else { return try await body() }
        let span = InstrumentationSystem.tracer.startSpan(name, context: .topLevel)
        span.attributes["pipelinectl.list"] = list
        defer { span.end() }
        var context = ServiceContext.topLevel
        context.batchRun = span.context
        do {
            return try await ServiceContext.$current.withValue(context) { try await body() }
        } catch {
            span.recordError(error)
            throw error
        }
    }

    /// Why nothing accepts a TCP connection at `endpoint`'s host and port within `within`;
    /// `nil` when something does (or the endpoint is not a URL: the exporter says so itself).
    static func unreachable(_ endpoint: String, within: Duration = .seconds(1)) async -> String? {
        #if OTLP
        guard let url = URL(string: endpoint), let host = url.host, !host.isEmpty,
              let port = url.port ?? url.scheme.flatMap({ SourceBoundary.defaultPort($0.lowercased()) }) else { return nil }
        do {
            let channel = try await ClientBootstrap(group: MultiThreadedEventLoopGroup.singleton)
                .connectTimeout(TimeAmount(within))
                .connect(host: host, port: port).get()
            try? await channel.close()
            return nil
        } catch {
            return "\(error)"
        }
        #else
        return nil
        #endif
    }
}

/// The exporter's service, whose last flush (at graceful shutdown: the end of a run, a SIGTERM
/// to `serve` or `work`) is bounded: it is waited for at most `flushWithin` (5 s, or 2 s once an
/// export failed), and not at all once a probe of the endpoint finds nothing accepting
/// connections there (swift-otel would retry its connection for its export timeout, 10 s: every
/// short run and every stop paid it). Spans not sent are said once.
struct BoundedExport: Service {
    /// How the last flush ended.
    enum Outcome: Sendable, Equatable {
        case finished
        /// Not within its bound (the export goes on in the background, and ends with the process).
        case timedOut(Duration)
        /// Nothing accepts connections at the endpoint (the error says why).
        case unreachable(String)
    }

    let exporter: any Service
    let endpoint: String
    let logger: Logger
    var flushWithin: Duration = .seconds(5)

    func run() async throws {
        await withTaskGroup(of: Outcome?.self) { group in
            group.addTask {
                try? await exporter.run()  // returns after its own last flush
                return .finished
            }
            group.addTask {
                do { try await gracefulShutdown() } catch { return nil }  // cancelled
                return await bound(within: TraceExportFigures.exportFailing ? .seconds(2) : flushWithin)
            }
            // Said before the exporter is cancelled: its cancelled export would say it less well.
            if let outcome = await group.next() ?? nil { say(outcome) }
            group.cancelAll()
        }
    }

    /// The spans not sent, said once (nothing when the flush finished).
    private func say(_ outcome: Outcome) {
        let why: String
        switch outcome {
        case .finished: return
        case .timedOut(let within): why = "the exporter did not take the last ones within \(within)"
        case .unreachable(let error): why = "the exporter at \(endpoint) cannot be reached: \(error)"
        }
        if TraceExportFigures.sayOnce() {
            logger.warning("traces: spans are being dropped (\(why)); counted in pipelinectl_trace_spans_dropped_total, said once",
                           metadata: ["endpoint": "\(endpoint)"])
        }
    }

    /// Ends after `within`, or as soon as the probe finds the endpoint unreachable; `nil` when
    /// cancelled (the flush finished first).
    private func bound(within: Duration) async -> Outcome? {
        await withTaskGroup(of: Outcome?.self) { group in
            group.addTask {
                do { try await Task.sleep(for: within) } catch { return nil }
                return .timedOut(within)
            }
            group.addTask { await Telemetry.unreachable(endpoint).map(Outcome.unreachable) }
            for await outcome in group {
                if let outcome {
                    group.cancelAll()
                    return outcome
                }
            }
            return nil
        }
    }
}

/// The exporter's own warnings, made quiet: swift-otel warns at every batch it could not send and
/// at every tick with a full queue, which for an exporter that is down is a line every few
/// seconds for as long as it is down. The spans lost are counted instead
/// (`pipelinectl_trace_spans_dropped_total`), and the first loss is said once; other warnings
/// (a configuration it refuses) pass through.
struct ExportDiagnostics: LogHandler {
    let said: Logger
    let endpoint: String
    var logLevel: Logger.Level = .warning
    var metadata: Logger.Metadata = [:]

    subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { metadata[key] }
        set { metadata[key] = newValue }
    }

    func log(event: LogEvent) {
        note(event.level, event.message, event.metadata, error: event.error)
    }

    func log(level: Logger.Level, message: Logger.Message, metadata explicit: Logger.Metadata?,
             source: String, file: String, function: String, line: UInt) {
        note(level, message, explicit, error: nil)
    }

    private func note(_ level: Logger.Level, _ message: Logger.Message, _ explicit: Logger.Metadata?, error: (any Error)?) {
        let all = metadata.merging(explicit ?? [:]) { $1 }
        if message.description.hasPrefix("Failed to export batch") { TraceExportFigures.exportFailing = true }
        guard let lost = Self.spansLost(message.description, all) else {
            said.log(level: level, message, metadata: explicit)
            return
        }
        TraceExportFigures.dropped(lost)
        guard TraceExportFigures.sayOnce() else { return }
        var details: Logger.Metadata = ["endpoint": "\(endpoint)", "dropped": "\(lost)"]
        if let error { details["error"] = "\(error)" }
        said.warning("traces: spans are being dropped (the exporter cannot send them, or its queue is full); counted in pipelinectl_trace_spans_dropped_total, said once", metadata: details)
    }

    /// The spans an exporter's warning says were lost: a full queue's dropped count, or a batch
    /// that could not be sent; `nil` for any other message.
    static func spansLost(_ message: String, _ metadata: Logger.Metadata) -> Int? {
        func count(_ key: String) -> Int { metadata[key].flatMap { Int("\($0)") } ?? 1 }
        if message.hasPrefix("Spans were dropped") { return count("dropped_count") }
        if message.hasPrefix("Failed to export batch") { return count("batch_size") }
        return nil
    }
}
