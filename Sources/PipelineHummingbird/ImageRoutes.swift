import Foundation
import HTTPTypes
import Hummingbird
import NIOCore
import PipelineKit
@_exported import struct PipelineService.ImageServiceOptions
@_exported import enum PipelineService.AccessLogDestination
import PipelineService

/// Served pipelines on a Hummingbird app's own `Router`: exactly what `pipelinectl serve`
/// answers, which is built on it.
///
/// ```swift
/// let images = try ImagePipelines(paths: ["pipelines"], registry: BuiltIns.registry(), options: options)
/// let routes = ImageRoutes(library: images)
/// let router = Router(context: ImageRequestContext.self)
/// routes.add(to: router, atPath: "/img")   // GET /img/SIGNATURE/PIPELINE[/VARIANT]/SOURCE
/// routes.operations.add(to: router)        // /livez, /readyz, /metrics
/// ```
///
/// What comes with the routes: signatures (`ImagePipelines.keys`; none checked when `nil`),
/// `expires`, params checked by their specs, the source boundary, `ETag`/`304`, `Accept`
/// negotiation and `Vary`, admission (jobs, a queue shared fairly by client, `429` with
/// `Retry-After`), a time limit (`504`), problem+json errors, one JSON access-log line per
/// request, and Prometheus metrics. A request whose client goes away stops its work (unless
/// another request shares it) when the router's context is a ``ClientConnectionContext`` and the
/// server runs a ``ClientCloseWatcher`` on each connection.
///
/// What belongs to the app's server: connection timeouts, caps and the open-file limit
/// (docs/library.md shows how to set them, with `pipelinectl serve`'s defaults).
public final class ImageRoutes: Sendable {
    /// How requests are admitted and answered; every default is `pipelinectl serve`'s.
    public typealias Options = ImageServiceOptions
    /// Where the access log's lines go.
    public typealias AccessLog = AccessLogDestination

    package let front: ServiceFront
    package var service: ImageService { front.service }
    package var metrics: ServeMetrics { front.metrics }
    /// The server's connection table, when it keeps one (its counts go into the metrics).
    package let connections: ConnectionTable?

    /// Routes for every pipeline of `library`, signed with its `ImagePipelines.keys` (`nil`:
    /// unsigned, for development only).
    public convenience init(library: ImagePipelines, options: Options = Options()) {
        self.init(library: library, options: options, connections: nil)
    }

    package init(library: ImagePipelines, options: Options, connections: ConnectionTable?) {
        front = ServiceFront(library: library, options: options)
        self.connections = connections
    }

    /// Adds `GET` and `HEAD` of `PATH/SIGNATURE/PIPELINE[/VARIANT]/SOURCE[?PARAMS]` to `router`
    /// (other methods there: `405`).
    /// - Parameter path: where the routes go (`""`: at the root, as `pipelinectl serve` has them).
    public func add<Context: RequestContext>(to router: Router<Context>, atPath path: String = "") {
        let prefix = ServiceFront.prefix(path)
        let group = prefix.isEmpty ? router.group() : router.group(RouterPath(prefix))
        let handler: @Sendable (Request, Context) async throws -> Response = { [self] request, context in
            await respond(request, prefix: prefix, channel: (context as? any ClientConnectionContext)?.channel)
        }
        group.get(use: handler)  // the bare prefix: refused as unsigned, as anything else
        group.head(use: handler)
        group.get("**", use: handler)
        group.head("**", use: handler)
        for method in [HTTPRequest.Method.post, .put, .delete, .patch] {
            group.on("**", method: method) { [front] request, _ in
                front.record(method: request.method.rawValue, ServiceFront.methodNotAllowed, seconds: 0)
                return Self.response(ServiceFront.methodNotAllowed, head: false)
            }
        }
    }

    /// `/livez`, `/readyz` (503 once ``drain()`` was called) and `/metrics` for these routes.
    public var operations: OperationsRoutes {
        OperationsRoutes(notReady: "draining\n", ready: { [service] in !service.isDraining }) { [front, connections] in
            front.exposition(connections: connections?.counts)
        }
    }

    /// From now on `/readyz` answers 503 and every answer closes its connection (clients move to
    /// the instances that stay); requests are still served.
    public func drain() { service.drain() }

    /// Requests admitted or joined now.
    public var requestsInFlight: Int { service.requestsInFlight }

    func respond(_ request: Request, prefix: String, channel: (any Channel)?) async -> Response {
        let start = ContinuousClock.now
        let target = ServiceFront.target(request.uri.string, under: prefix)
        let answer = ServiceFront.mounted(await answerCancellingOnClose(request, target: target, channel: channel), prefix: prefix)
        front.record(method: request.method.rawValue, answer, seconds: (ContinuousClock.now - start).seconds)
        return Self.response(answer, head: request.method == .head)
    }

    /// Middleware that closes each answer's connection once ``drain()`` was called, so that
    /// kept-alive clients move to the instances that stay. Add it before the routes it covers.
    public func drainMiddleware<Context: RequestContext>(context: Context.Type = Context.self) -> DrainMiddleware<Context> {
        DrainMiddleware(isDraining: { [service] in service.isDraining })
    }

    /// The image answer. A job is cancelled when the client closes the connection first (work
    /// that another request waits for goes on: the engine shares it).
    func answerCancellingOnClose(_ request: Request, target: String, channel: (any Channel)?) async -> ServeAnswer {
        let accept = request.headers[.accept], ifNoneMatch = request.headers[.ifNoneMatch]
        let job: ImageService.AdmittedJob
        let client = ClientAddress.of(peer: channel?.remoteAddress?.ipAddress, forwardedFor: request.headers[values: .xForwardedFor],
                                      trusting: front.options.trustedProxies)
        let hints = ServiceFront.hints { name in HTTPField.Name(name).flatMap { request.headers[$0] } }
        switch await service.prepare(target: target, accept: accept, ifNoneMatch: ifNoneMatch, client: client, hints: hints) {
        case .answered(let answer): return answer
        case .admitted(let admitted): job = admitted
        }
        guard let channel, let watcher = try? await channel.pipeline.handler(type: ClientCloseWatcher.self).get() else {
            return await service.run(job)
        }
        return await withTaskGroup(of: ServeAnswer?.self) { [service] group in
            group.addTask { await service.run(job) }
            group.addTask {
                await watcher.clientClosed()
                return nil
            }
            let first = await group.next() ?? nil
            group.cancelAll()
            return first ?? service.cancelled(job)
        }
    }

    package static func response(_ answer: ServeAnswer, head: Bool) -> Response {
        var fields = HTTPFields()
        for (name, value) in answer.headers { if let field = HTTPField.Name(name) { fields.append(HTTPField(name: field, value: value)) } }
        if answer.status != 304 { fields[.contentLength] = String(answer.bodyBytes) }
        let body: ResponseBody
        if head || answer.status == 304 {
            body = ResponseBody()
        } else if let file = answer.file {
            body = streaming(file)
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
}

/// `/livez`, `/readyz` and `/metrics`: one operations group for `pipelinectl serve`, `work` and
/// apps. Readiness means "can serve": 503 only while stopping.
public struct OperationsRoutes: Sendable {
    let notReady: String
    let ready: @Sendable () -> Bool
    let metrics: @Sendable () async -> Data

    /// - Parameters:
    ///   - notReady: the body of a 503 from `/readyz` (`draining\n`).
    ///   - ready: whether `/readyz` answers 200.
    ///   - metrics: the Prometheus text exposition `/metrics` answers.
    public init(notReady: String = "stopping\n", ready: @escaping @Sendable () -> Bool,
                metrics: @escaping @Sendable () async -> Data) {
        self.notReady = notReady
        self.ready = ready
        self.metrics = metrics
    }

    /// Adds the routes (`GET` and `HEAD`) to `router`; `/metrics` only with `metrics: true`.
    public func add<Context: RequestContext>(to router: Router<Context>, metrics includeMetrics: Bool = true) {
        for (path, answer) in [("/livez", { @Sendable () async -> Response in Self.text(200, "ok\n") }),
                               ("/readyz", { @Sendable [self] () async -> Response in ready() ? Self.text(200, "ready\n") : Self.text(503, notReady) })] {
            router.get(RouterPath(path)) { _, _ in await answer() }
            router.head(RouterPath(path)) { _, _ in await answer() }
        }
        guard includeMetrics else { return }
        router.get("/metrics") { [metrics] _, _ in
            let body = await metrics()
            var fields = HTTPFields()
            fields[.contentType] = "text/plain; version=0.0.4"
            fields[.contentLength] = String(body.count)
            return Response(status: .ok, headers: fields, body: ResponseBody(byteBuffer: ByteBuffer(bytes: body)))
        }
    }

    static func text(_ status: Int, _ body: String) -> Response {
        var fields = HTTPFields()
        fields[.contentType] = "text/plain"
        fields[.contentLength] = String(body.utf8.count)
        return Response(status: HTTPResponse.Status(code: status), headers: fields, body: ResponseBody(byteBuffer: ByteBuffer(string: body)))
    }
}

/// Adds `Connection: close` to every answer while the service drains (``ImageRoutes/drainMiddleware(context:)``).
public struct DrainMiddleware<Context: RequestContext>: RouterMiddleware {
    let isDraining: @Sendable () -> Bool

    public func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        var response = try await next(request, context)
        if isDraining() { response.headers[.connection] = "close" }
        return response
    }
}

// MARK: Uploads

extension ImageRoutes {
    /// An upload turned into the pipeline's outputs: the request's body (the image's bytes, sent
    /// as `image/*` or `application/octet-stream`) processed by `pipeline`, the outputs going to
    /// `delivery`'s sink (stored by the pipeline's `output:` by default).
    ///
    /// Refused with problem+json before anything is written: a body past `maxBytes` (`413`, read
    /// no further), another Content-Type (`415`), an empty body (`400`); an image that cannot be
    /// made gets the status its failure kind has in the service (`415 not_an_image`, `413
    /// too_large` for a decompression bomb, refused from its header, `422 decode_failed`, ...).
    /// - Parameter name: names the upload in reports, and `{stem}` in output names.
    public func upload(_ request: Request, pipeline: String, name: String = "upload", maxBytes: Int = 50 << 20,
                       delivery: OutputDelivery = .store) async throws -> ProcessedItem {
        if let refused = ServiceFront.uploadRefusal(contentType: request.headers[.contentType], contentLength: request.headers[.contentLength],
                                                    maxBytes: maxBytes) {
            throw ProblemError(refused)
        }
        let body: ByteBuffer
        do { body = try await request.body.collect(upTo: maxBytes) } catch { throw ProblemError(ServiceFront.uploadTooLarge(maxBytes)) }
        do {
            return try await front.processUpload(Data(buffer: body), name: name, pipeline: pipeline, delivery: delivery)
        } catch { throw ProblemError(error.answer) }
    }
}

/// A problem+json answer thrown from a route (``ImageRoutes/upload(_:pipeline:name:maxBytes:delivery:)``).
public struct ProblemError: HTTPResponseError {
    let answer: ServeAnswer

    init(_ answer: ServeAnswer) { self.answer = answer }

    /// The HTTP status.
    public var status: HTTPResponse.Status { HTTPResponse.Status(code: answer.status) }
    /// The kind of problem (`too_large`, `not_an_image`, ...).
    public var kind: String { answer.problemKind ?? "" }

    public func response(from request: Request, context: some RequestContext) throws -> Response {
        ImageRoutes.response(answer, head: request.method == .head)
    }
}
