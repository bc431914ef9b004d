import CLinux
import Foundation
import HTTPTypes
import Hummingbird
import Logging
import NIOCore
import NIOHTTPTypes
import PipelineKit
import Prometheus
import ServiceLifecycle
import Synchronization

/// The service on HTTP (Hummingbird): the image route, `/livez`, `/readyz`, `/metrics`, one
/// access-log line per request, and the drain on SIGTERM.
struct ServiceHTTP: Sendable {
    let service: ImageService
    let settings: ServeSettings
    let accessLog: Bool
    let metrics: ServeMetrics
    let connections: ConnectionTable

    init(service: ImageService, settings: ServeSettings, accessLog: Bool) {
        self.service = service
        self.settings = settings
        self.accessLog = accessLog
        metrics = ServeMetrics(presets: Array(service.presets.keys))
        connections = ConnectionTable(limits: Self.fittedLimits(settings))
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
        let responder = CallbackResponder<ServeRequestContext> { request, context in await self.respond(request, channel: context.channel) }
        var serverLogger = Logger(label: "pipelinectl.http")
        serverLogger.logLevel = .warning
        let table = connections
        let app = Application(
            responder: responder,
            server: .http1(configuration: .init(additionalChannelHandlers: [ConnectionGuard(table: table), ClientCloseWatcher()])),
            configuration: ApplicationConfiguration(address: .hostname(settings.listen.host, port: settings.listen.port),
                                                    serverName: "pipelinectl/\(PipelineCtl.version)"),
            onServerRunning: { [settings, service] channel in
                let port = channel.localAddress?.port ?? settings.listen.port
                let names = service.presets.keys.sorted().joined(separator: ", ")
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
        var services: [any Service] = [app]
        if let address = settings.metricsListen {
            let operations = CallbackResponder<BasicRequestContext> { request, _ in
                let path = String(request.uri.string.prefix { $0 != "?" })
                let answer = self.operations(path) ?? .problem(404, kind: "not_found", "only /livez, /readyz and /metrics here")
                return Self.response(answer, head: request.method == .head)
            }
            services.append(Application(responder: operations,
                                        configuration: ApplicationConfiguration(address: .hostname(address.host, port: address.port),
                                                                                serverName: "pipelinectl/\(PipelineCtl.version)"),
                                        onServerRunning: { channel in
                                            let port = channel.localAddress?.port ?? address.port
                                            FileHandle.standardOutput.write(Data("operations on http://\(address.host):\(port) (/livez, /readyz, /metrics)\n".utf8))
                                        },
                                        logger: serverLogger))
        }
        let group = ServiceGroup(services: services, logger: serverLogger)
        let signals = DrainSignals(service: service, group: group, settings: settings)
        try await group.run()
        signals.finished()
    }

    func respond(_ request: Request, channel: any Channel) async -> Response {
        let start = ContinuousClock.now
        let target = request.uri.string
        let path = String(target.prefix { $0 != "?" })
        var answer: ServeAnswer
        switch (request.method, path) {
        case (.get, "/livez"), (.head, "/livez"), (.get, "/readyz"), (.head, "/readyz"):
            answer = operations(path)!
        case (.get, "/metrics") where settings.metricsListen == nil:
            return Self.response(operations(path)!, head: false)
        case (.get, _), (.head, _):
            answer = await answerCancellingOnClose(request, target: target, channel: channel)
        default:
            answer = .problem(405, kind: "method_not_allowed", "only GET and HEAD")
            answer.headers.append(("Allow", "GET, HEAD"))
        }
        let seconds = (ContinuousClock.now - start).seconds
        metrics.record(answer, seconds: seconds)
        if accessLog, !["/livez", "/readyz"].contains(path) { Self.log(request, answer, seconds: seconds) }
        // While draining, each answer closes its connection: clients move to the pods that stay.
        if service.isDraining { answer.headers.append(("Connection", "close")) }
        return Self.response(answer, head: request.method == .head)
    }

    /// `/livez`, `/readyz` and `/metrics`, on the public port or on `--metrics-listen`'s.
    /// Readiness means "can serve": 503 only while draining. Overload shows as 429 answers and in
    /// the metrics, never by leaving the load balancer (a pod that leaves under a burst makes
    /// the burst worse for the rest).
    func operations(_ path: String) -> ServeAnswer? {
        switch path {
        case "/livez":
            return ServeAnswer(status: 200, headers: [("Content-Type", "text/plain")], body: Data("ok\n".utf8))
        case "/readyz":
            let ready = !service.isDraining
            return ServeAnswer(status: ready ? 200 : 503, headers: [("Content-Type", "text/plain")],
                               body: Data((ready ? "ready\n" : "draining\n").utf8))
        case "/metrics":
            return ServeAnswer(status: 200, headers: [("Content-Type", "text/plain; version=0.0.4")],
                               body: metrics.exposition(inFlight: service.requestsInFlight,
                                                        loadsWaiting: service.presets.values.reduce(0) { $0 + $1.runner.loadsWaiting },
                                                        connections: connections))
        default:
            return nil
        }
    }

    /// The image answer. A job is cancelled when the client closes the connection first (work
    /// that another request waits for goes on: the engine shares it); every answer keeps the
    /// connection open for the client's next request.
    ///
    /// The close is seen by the connection's `ClientCloseWatcher`, not by reading the request
    /// stream: Hummingbird closes a connection whose stream a handler has read, so answers made
    /// by a job would each cost the client a new connection.
    func answerCancellingOnClose(_ request: Request, target: String, channel: any Channel) async -> ServeAnswer {
        let accept = request.headers[.accept], ifNoneMatch = request.headers[.ifNoneMatch]
        let job: ImageService.AdmittedJob
        let client = ClientAddress.of(peer: channel.remoteAddress?.ipAddress, forwardedFor: request.headers[values: .xForwardedFor],
                                      trusting: settings.trustedProxies)
        switch await service.prepare(target: target, accept: accept, ifNoneMatch: ifNoneMatch, client: client) {
        case .answered(let answer): return answer
        case .admitted(let admitted): job = admitted
        }
        guard let watcher = try? await channel.pipeline.handler(type: ClientCloseWatcher.self).get() else {
            return await service.run(job)
        }
        return await withTaskGroup(of: ServeAnswer?.self) { group in
            group.addTask { await service.run(job) }
            group.addTask {
                await watcher.clientClosed()
                return nil
            }
            let first = await group.next() ?? nil
            group.cancelAll()
            return first ?? .problem(499, kind: "cancelled", "the client closed the connection")
        }
    }

    static func response(_ answer: ServeAnswer, head: Bool) -> Response {
        var fields = HTTPFields()
        for (name, value) in answer.headers { if let field = HTTPField.Name(name) { fields.append(HTTPField(name: field, value: value)) } }
        if answer.status != 304 { fields[.contentLength] = String(answer.bodyBytes) }
        let body: ResponseBody
        if head || answer.status == 304 {
            body = ResponseBody()
        } else if let file = answer.file {
            body = Self.streaming(file)
        } else {
            body = ResponseBody(byteBuffer: ByteBuffer(bytes: answer.body))
        }
        return Response(status: HTTPResponse.Status(code: answer.status), headers: fields, body: body)
    }

    /// A spooled output sent in parts of 256 KiB, read on the engine's I/O threads; the file goes
    /// when the last part is written (the body holds the last reference).
    static func streaming(_ file: SpooledFile) -> ResponseBody {
        ResponseBody(contentLength: file.byteCount) { writer in
            let handle = try await WorkerPool.io.run { try FileHandle(forReadingFrom: URL(fileURLWithPath: file.path)) }
            defer { try? handle.close() }
            while true {
                let part = try await WorkerPool.io.run { try handle.read(upToCount: 256 << 10) ?? Data() }
                if part.isEmpty { break }
                try await writer.write(ByteBuffer(bytes: part))
            }
            try await writer.finish(nil)
        }
    }

    /// One JSON line on standard output: no signature, no query of the source.
    static func log(_ request: Request, _ answer: ServeAnswer, seconds: Double) {
        var line = JSONLine()
        line.add("time", Date().formatted(.iso8601))
        line.add("method", request.method.rawValue)
        line.add("status", answer.status)
        line.add("pipeline", answer.pipeline)
        line.add("bytes", answer.bodyBytes)
        line.add("ms", (seconds * 10_000).rounded() / 10)
        line.add("cache", answer.cache)
        if let source = answer.source { line.add("source", source) }
        if let variant = answer.variant { line.add("variant", variant) }
        if let type = answer.headers.first(where: { $0.0 == "Content-Type" })?.1, type.hasPrefix("image/") { line.add("type", type) }
        if let error = answer.item?.error { line.add("error", error.kind.rawValue) }
        if let queued = answer.queued { line.add("queue_ms", (queued * 10_000).rounded() / 10) }
        if let timings = answer.item?.timings {
            for (name, ms) in [("load_ms", timings.load), ("decode_ms", timings.decode), ("process_ms", timings.process),
                               ("encode_ms", timings.encode)] where ms > 0 {
                line.add(name, (ms * 10).rounded() / 10)
            }
        }
        FileHandle.standardOutput.write(Data((line.text + "\n").utf8))
    }
}

/// The request context of the service: Hummingbird's, plus the connection, whose
/// `ClientCloseWatcher` tells when the client leaves.
struct ServeRequestContext: RequestContext {
    var coreContext: CoreRequestContextStorage
    let channel: any Channel

    init(source: ApplicationRequestContextSource) {
        coreContext = CoreRequestContextStorage(source: source)
        channel = source.channel
    }
}

/// Sees the client close its side of a connection (or the connection fail) while an answer is
/// being made, without reading the request stream. It sits in each connection's pipeline after
/// the HTTP decoder and passes everything on unchanged; NIO keeps reading the socket while the
/// handler works, so the end of the input arrives here as an event.
final class ClientCloseWatcher: ChannelInboundHandler, RemovableChannelHandler, Sendable {
    typealias InboundIn = HTTPRequestPart

    private let closed = OneTimeSignal()

    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        if let event = event as? ChannelEvent, event == .inputClosed { closed.fire() }
        context.fireUserInboundEventTriggered(event)
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        if error is IOError { closed.fire() }  // reset by the peer, broken pipe
        context.fireErrorCaught(error)
    }

    func channelInactive(context: ChannelHandlerContext) {
        closed.fire()
        context.fireChannelInactive()
    }

    /// Returns once the client has closed its side of the connection (at once if it already
    /// has), or when the calling task is cancelled.
    func clientClosed() async { await closed.wait() }
}

/// Request counts and durations by pipeline and status, and the run's item metrics, in one
/// Prometheus exposition.
final class ServeMetrics: Sendable {
    private let registry = PrometheusCollectorRegistry()
    private let items: [String: RunMetrics]
    /// Connection closes already added to the counters, by reason.
    private let exportedClosures = Mutex<[String: Int]>([:])
    private static let buckets: [Duration] = [.milliseconds(1), .milliseconds(2), .milliseconds(5), .milliseconds(10), .milliseconds(25),
                                              .milliseconds(50), .milliseconds(100), .milliseconds(250), .milliseconds(500),
                                              .seconds(1), .seconds(2.5), .seconds(5), .seconds(10), .seconds(30)]

    init(presets: [String]) {
        var items: [String: RunMetrics] = [:]
        for name in presets { items[name] = RunMetrics(pipeline: name, registry: registry) }
        self.items = items
    }

    func record(_ answer: ServeAnswer, seconds: Double) {
        let labels = [("pipeline", answer.pipeline), ("status", String(answer.status))]
        registry.makeCounter(descriptor: MetricNameDescriptor(namespace: "pipelinectl", metricName: "requests", unitName: "total",
                                                              helpText: "Requests by pipeline and HTTP status."), labels: labels).increment()
        registry.makeDurationHistogram(descriptor: MetricNameDescriptor(namespace: "pipelinectl", metricName: "request_duration",
                                                                        unitName: "seconds", helpText: "Time to answer, by pipeline and HTTP status."),
                                       labels: labels, buckets: Self.buckets).record(.microseconds(Int64(seconds * 1_000_000)))
        if let item = answer.item { items[answer.pipeline]?.record(item) }
    }

    func exposition(inFlight: Int, loadsWaiting: Int, connections: ConnectionTable) -> Data {
        registry.makeGauge(descriptor: MetricNameDescriptor(namespace: "pipelinectl", metricName: "connections_open", unitName: "",
                                                            helpText: "HTTP connections open now."))
            .set(Double(connections.count))
        let closed = connections.closed
        for reason in ConnectionTable.CloseReason.allCases.map(\.rawValue) {
            // The table counts; the counter catches up with it at each scrape.
            let now = closed[ConnectionTable.CloseReason(rawValue: reason)!] ?? 0
            let delta = exportedClosures.withLock { seen in
                defer { seen[reason] = now }
                return now - (seen[reason] ?? 0)
            }
            registry.makeCounter(descriptor: MetricNameDescriptor(namespace: "pipelinectl", metricName: "connections_closed", unitName: "total",
                                                                  helpText: "Connections the service closed, by reason: evicted at the cap, refused (every one busy), a deadline passed."),
                                 labels: [("reason", reason)])
                .increment(by: Int64(delta))
        }
        registry.makeGauge(descriptor: MetricNameDescriptor(namespace: "pipelinectl", metricName: "source_loads_waiting", unitName: "",
                                                            helpText: "Requests waiting for a source load in progress (one load serves them all)."))
            .set(Double(loadsWaiting))
        registry.makeGauge(descriptor: MetricNameDescriptor(namespace: "pipelinectl", metricName: "requests_in_flight", unitName: "",
                                                            helpText: "Requests admitted now, running or waiting for a job."))
            .set(Double(inFlight))
        return Data(registry.emitToBuffer())
    }
}

/// SIGTERM and SIGINT for the service: the first makes `/readyz` answer 503, keeps serving for
/// the drain delay, then shuts the server down gracefully (no new connections; requests in flight
/// finish). Past the grace period the process exits 1; a second signal exits at once.
final class DrainSignals: Sendable {
    private let done = Atomic(false)
    private let seen = Atomic(false)

    init(service: ImageService, group: ServiceGroup, settings: ServeSettings) {
        _ = StopSignalPipe.install { [self] number in
            if seen.exchange(true, ordering: .relaxed) { Foundation.exit(128 + number) }
            service.drain()
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


extension HTTPField.Name {
    static let xForwardedFor = HTTPField.Name("X-Forwarded-For")!
}

/// Who a request comes from, for sharing places between clients: the peer's address, or, when
/// the peer is a proxy the operator trusts (`--trusted-proxy`), the nearest address in
/// `X-Forwarded-For` that is not one of them. A client cannot pick its own share by sending
/// the header: from an untrusted peer it is ignored.
enum ClientAddress {
    static func of(peer: String?, forwardedFor: [String], trusting proxies: Set<String>) -> String {
        let peer = peer ?? ""
        guard proxies.contains(peer) else { return peer }
        let hops = forwardedFor.flatMap { $0.split(separator: ",") }.map { $0.trimmingCharacters(in: .whitespaces) }.filter { !$0.isEmpty }
        return hops.reversed().first { !proxies.contains($0) } ?? hops.first ?? peer
    }
}
