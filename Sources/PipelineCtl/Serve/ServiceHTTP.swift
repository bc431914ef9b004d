import CLinux
import Foundation
import HTTPTypes
import Hummingbird
import Logging
import NIOCore
import NIOHTTPTypes
import PipelineHummingbird
import PipelineService
import PipelineKit
import Prometheus
import ServiceLifecycle
import Synchronization
import Tracing

/// The service on HTTP: a Hummingbird `Router` with the pipelines' ``ImageRoutes`` (the library
/// product apps mount too), the operations routes, the connection guard, and the drain on
/// SIGTERM.
struct ServiceHTTP: Sendable {
    let routes: ImageRoutes
    let settings: ServeSettings
    let connections: ConnectionTable

    init(library: ImagePipelines, settings: ServeSettings, accessLog: Bool) {
        self.settings = settings
        let connections = ConnectionTable(limits: Self.fittedLimits(settings))
        self.connections = connections
        var options = ImageRoutes.Options()
        options.jobs = settings.jobs
        options.queue = settings.queue
        options.queueWait = settings.queueWait
        options.timeout = settings.timeout
        options.trustedProxies = settings.trustedProxies
        options.accessLog = accessLog ? .standardOutput : .off
        routes = ImageRoutes(library: library, options: options, connections: connections)
    }

    /// The router of the public port: the operations routes (`/metrics` too unless it has a port
    /// of its own), then the images at the root. `traced`: each request is a server span that
    /// continues the request's `traceparent` (a malformed one starts a new trace), and the items
    /// it runs are its children.
    func router(traced: Bool = false) -> Router<ImageRequestContext> {
        let router = Router(context: ImageRequestContext.self)
        if traced {
            router.add(middleware: TracingMiddleware())
            router.add(middleware: TraceResponseMiddleware())
        }
        router.add(middleware: routes.drainMiddleware())
        routes.operations.add(to: router, metrics: settings.metricsListen == nil)
        routes.add(to: router)
        return router
    }

    /// The connection limits, the cap fitted under the open-file limit (raised to the hard limit
    /// first); both limits and the cap are said on standard error.
    static func fittedLimits(_ settings: ServeSettings) -> ConnectionLimits {
        var limits = settings.connections
        var before = 0, hard = 0
        let soft = pk_raise_open_files(&before, &hard)
        func text(_ limit: Int) -> String { limit < 0 ? "unlimited" : String(limit) }
        // Files, origin connections, caches and the operations port keep 256 descriptors.
        if soft > 0 {
            let fitting = max(16, soft - 256)
            if limits.cap > fitting {
                if settings.connectionCapGiven {
                    printError("warning: --max-connections \(limits.cap) does not fit the open-file limit \(soft); using \(fitting)")
                }
                limits.cap = fitting
            }
        }
        let raised = before != soft ? " (raised from \(text(before)))" : ""
        printError("open files: soft limit \(text(soft))\(raised), hard limit \(text(hard)); at most \(limits.cap) connections")
        return limits
    }

    func run() async throws {
        var serverLogger = Logger(label: "pipelinectl.http")
        serverLogger.logLevel = .warning
        let table = connections
        let traces = Telemetry.start(logger: Logger(label: "pipelinectl.traces"))
        let app = Application(
            router: router(traced: traces != nil),
            server: .http1(configuration: .init(additionalChannelHandlers: [ConnectionGuard(table: table), ClientCloseWatcher()])),
            configuration: ApplicationConfiguration(address: .hostname(settings.listen.host, port: settings.listen.port),
                                                    serverName: "pipelinectl/\(PipelineCtl.version)"),
            onServerRunning: { [settings, routes] channel in
                let port = channel.localAddress?.port ?? settings.listen.port
                let names = routes.service.presets.keys.sorted().joined(separator: ", ")
                let jobs = "\(settings.jobs) job\(settings.jobs == 1 ? "" : "s"), \(settings.workers) worker\(settings.workers == 1 ? "" : "s")"
                FileHandle.standardOutput.write(Data("listening on http://\(settings.listen.host):\(port) (pipelines: \(names); \(jobs))\n".utf8))
            },
            logger: serverLogger)
        if settings.httpNice > 0 {
            // NIO's event loops read, parse and write every request; lowered once, here. Swift's
            // shared threads, which run the handlers, are left alone: the engine's own steps
            // between a job's stages run there too, and lowered they held image work back.
            let nice = Int32(settings.httpNice)
            let logger = serverLogger
            for loop in app.eventLoopGroup.makeIterator() {
                loop.execute {
                    if pk_thread_nice_at_least(nice) == -100 {
                        logger.warning("could not lower an HTTP thread's priority (--http-nice): \(String(cString: strerror(errno)))")
                    }
                }
            }
        }
        // Services stop in the reverse order: the exporter last, after the requests it traces.
        var services: [any Service] = (traces.map { [$0] } ?? []) + [app]
        if let address = settings.metricsListen {
            let operations = Router()
            routes.operations.add(to: operations)
            services.append(Application(router: operations,
                                        configuration: ApplicationConfiguration(address: .hostname(address.host, port: address.port),
                                                                                serverName: "pipelinectl/\(PipelineCtl.version)"),
                                        onServerRunning: { channel in
                                            let port = channel.localAddress?.port ?? address.port
                                            FileHandle.standardOutput.write(Data("operations on http://\(address.host):\(port) (/livez, /readyz, /metrics)\n".utf8))
                                        },
                                        logger: serverLogger))
        }
        let group = ServiceGroup(services: services, logger: serverLogger)
        let signals = DrainSignals(routes: routes, group: group, settings: settings)
        try await group.run()
        signals.finished()
    }
}

/// SIGTERM and SIGINT for the service: the first makes `/readyz` answer 503, keeps serving for
/// the drain delay, then shuts the server down gracefully (no new connections; requests in flight
/// finish). Past the grace period the process exits 1; a second signal exits at once.
final class DrainSignals: Sendable {
    private let done = Atomic(false)
    private let seen = Atomic(false)

    init(routes: ImageRoutes, group: ServiceGroup, settings: ServeSettings) {
        _ = StopSignalPipe.install { [self] number in
            if seen.exchange(true, ordering: .relaxed) { Foundation.exit(128 + number) }
            routes.drain()
            printError("draining: /readyz answers 503; requests in flight finish within \(Units.formatDuration(settings.grace))")
            Task {
                try? await Task.sleep(for: .seconds(settings.drainDelay))
                await group.triggerGracefulShutdown()
            }
            DispatchQueue.global().asyncAfter(deadline: .now() + settings.drainDelay + settings.grace) { [self] in
                guard !done.load(ordering: .relaxed) else { return }
                printError("error: requests still in flight after the grace period; exiting")
                Foundation.exit(1)
            }
        }
    }

    func finished() { done.store(true, ordering: .relaxed) }
}



/// Names the request's trace in each answer, as W3C Trace Context's `traceresponse` header
/// (`00-TRACEID-SPANID-FLAGS`, the request's server span): the key from an answer a client got
/// to its spans. Runs inside ``TracingMiddleware``'s span.
struct TraceResponseMiddleware<Context: RequestContext>: RouterMiddleware {
    static var name: HTTPField.Name { HTTPField.Name("traceresponse")! }

    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        var response = try await next(request, context)
        if let traceparent = EngineSpans.traceparent(of: ServiceContext.current) { response.headers[Self.name] = traceparent }
        return response
    }
}
