#if Vapor
import Foundation
import MultipartKit
import NIOCore
import NIOHTTP1
@_exported import enum PipelineService.AccessLogDestination
@_exported import struct PipelineService.ImageServiceOptions
import PipelineKit
import PipelineService
import Vapor

/// Served pipelines on a Vapor 4 app: exactly what `pipelinectl serve` answers, as a
/// `RouteCollection`.
///
/// ```swift
/// let images = try ImagePipelines(paths: ["pipelines"], registry: BuiltIns.registry(), options: options)
/// let routes = ImageRouteCollection(library: images, atPath: "img")
/// try app.register(collection: routes)               // GET /img/SIGNATURE/PIPELINE[/VARIANT]/SOURCE
/// try app.register(collection: routes.operations)    // /livez, /readyz, /metrics
/// app.middleware.use(ImageRouteCollection.problems)  // problem+json for thrown upload errors
/// ```
///
/// What comes with the routes: signatures (`ImagePipelines.keys`; none checked when `nil`),
/// `expires`, params checked by their specs, the source boundary, `ETag`/`304`, `Accept`
/// negotiation and `Vary`, admission (jobs, a queue shared fairly by client, `429` with
/// `Retry-After`), a time limit (`504`), problem+json errors, one JSON access-log line per
/// request, and Prometheus metrics.
///
/// Unlike Hummingbird's `ImageRoutes`, a request whose client goes away runs to its end (or its
/// time limit): Vapor 4 does not tell a handler that its connection closed (vapor/vapor#3354).
///
/// What belongs to the app's server (`app.http.server.configuration`): the idle timeout,
/// connection limits and the open-file limit (docs/library.md shows them with `pipelinectl
/// serve`'s defaults).
public final class ImageRouteCollection: RouteCollection, Sendable {
    /// How requests are admitted and answered; every default is `pipelinectl serve`'s.
    public typealias Options = ImageServiceOptions

    let front: ServiceFront
    let path: [PathComponent]
    let prefix: String

    /// Routes for every pipeline of `library` under `path` (`""`: at the root), signed with its
    /// `ImagePipelines.keys` (`nil`: unsigned, for development only).
    public init(library: ImagePipelines, atPath path: String = "", options: Options = Options()) {
        front = ServiceFront(library: library, options: options)
        self.path = path.split(separator: "/").map { PathComponent(stringLiteral: String($0)) }
        prefix = path.isEmpty ? "" : "/" + path.split(separator: "/").joined(separator: "/")
    }

    /// Adds `GET` (and so `HEAD`) of `PATH/SIGNATURE/PIPELINE[/VARIANT]/SOURCE[?PARAMS]`; other
    /// methods there: `405`.
    public func boot(routes: any RoutesBuilder) throws {
        let group = routes.grouped(path)
        let handler: @Sendable (Request) async -> Response = { [self] request in await respond(request) }
        group.on(.GET, [], use: handler)  // the bare prefix: refused as unsigned, as anything else
        group.on(.GET, [.catchall], use: handler)
        for method in [HTTPMethod.POST, .PUT, .DELETE, .PATCH] {
            group.on(method, [.catchall], body: .stream) { [front] request -> Response in
                front.record(method: request.method.rawValue, ServiceFront.methodNotAllowed, seconds: 0)
                return Self.response(ServiceFront.methodNotAllowed)
            }
        }
    }

    /// `/livez`, `/readyz` (503 once ``drain()`` was called) and `/metrics` for these routes.
    public var operations: Operations { Operations(front: front) }

    /// From now on `/readyz` answers 503 (load balancers move to the instances that stay);
    /// requests are still served.
    public func drain() { front.service.drain() }

    /// Requests admitted or joined now.
    public var requestsInFlight: Int { front.service.requestsInFlight }

    func respond(_ request: Request) async -> Response {
        let start = ContinuousClock.now
        let target = ServiceFront.target(request.url.string, under: prefix)
        let client = ClientAddress.of(peer: request.remoteAddress?.ipAddress, forwardedFor: request.headers["X-Forwarded-For"],
                                      trusting: front.options.trustedProxies)
        let hints = ServiceFront.hints { request.headers.first(name: $0) }
        let answer = ServiceFront.mounted(await front.service.answer(target: target, accept: request.headers.first(name: .accept),
                                                                     ifNoneMatch: request.headers.first(name: .ifNoneMatch), client: client,
                                                                     hints: hints), prefix: prefix)
        front.record(method: request.method.rawValue, answer, seconds: (ContinuousClock.now - start).seconds)
        return Self.response(answer)
    }

    /// The HTTP response for an answer (Vapor leaves the body out for `HEAD`).
    static func response(_ answer: ServeAnswer) -> Response {
        var headers = HTTPHeaders(answer.headers)
        let status = HTTPResponseStatus(statusCode: answer.status)
        if answer.status == 304 { return Response(status: status, version: .http1_1, headersNoUpdate: headers, body: .empty) }
        let body: Response.Body
        if let file = answer.file {
            body = streaming(file)
        } else {
            body = Response.Body(data: answer.body)
        }
        headers.replaceOrAdd(name: .contentLength, value: String(answer.bodyBytes))
        return Response(status: status, version: .http1_1, headersNoUpdate: headers, body: body)
    }

    /// A spooled output sent in parts of 256 KiB, read on the engine's I/O threads; the file goes
    /// when the last part is written (the body holds the last reference).
    static func streaming(_ file: SpooledFile) -> Response.Body {
        Response.Body(asyncStream: { writer in
            do {
                let handle = try await WorkerPool.io.run { try FileHandle(forReadingFrom: URL(fileURLWithPath: file.path)) }
                defer { try? handle.close() }
                while true {
                    let part = try await WorkerPool.io.run { try handle.read(upToCount: 256 << 10) ?? Data() }
                    if part.isEmpty { break }
                    try await writer.write(.buffer(ByteBuffer(bytes: part)))
                }
                try await writer.write(.end)
            } catch {
                try? await writer.write(.error(error))
            }
        }, count: file.byteCount)
    }

    /// `/livez`, `/readyz` and `/metrics` of an ``ImageRouteCollection``.
    public struct Operations: RouteCollection, Sendable {
        let front: ServiceFront

        public func boot(routes: any RoutesBuilder) throws {
            routes.get("livez") { _ in Self.text(.ok, "ok\n") }
            routes.get("readyz") { [front] _ in front.service.isDraining ? Self.text(.serviceUnavailable, "draining\n") : Self.text(.ok, "ready\n") }
            routes.get("metrics") { [front] _ -> Response in
                var headers = HTTPHeaders()
                headers.contentType = HTTPMediaType(type: "text", subType: "plain", parameters: ["version": "0.0.4"])
                return Response(status: .ok, headers: headers, body: .init(data: front.exposition(connections: nil)))
            }
        }

        static func text(_ status: HTTPResponseStatus, _ body: String) -> Response {
            var headers = HTTPHeaders()
            headers.contentType = .plainText
            return Response(status: status, headers: headers, body: .init(string: body))
        }
    }
}

// MARK: Uploads

extension ImageRouteCollection {
    /// An upload turned into the pipeline's outputs: the image in a `multipart/form-data` body
    /// (the part named `field`, or else the first part with a file name), or the whole body sent
    /// as `image/*` or `application/octet-stream`; processed by `pipeline`, the outputs going to
    /// `delivery`'s sink (stored by the pipeline's `output:` by default).
    ///
    /// Register the route with `body: .stream`, so that the body is read here, with this limit:
    /// ```swift
    /// app.on(.POST, "upload", ":pipeline", body: .stream) { request in
    ///     let made = try await routes.upload(request, pipeline: request.parameters.get("pipeline")!)
    ///     return made.result.outputs.joined(separator: "\n")
    /// }
    /// ```
    ///
    /// Refused with ``ProblemError`` (problem+json with ``problems``) before anything is written:
    /// a body past `maxBytes` (`413`, read no further), another Content-Type (`415`), a multipart
    /// body without the file part or an empty body (`400`); an image that cannot be made gets the
    /// status its failure kind has in the service (`415 not_an_image`, `413 too_large` for a
    /// decompression bomb, refused from its header, `422 decode_failed`, ...).
    /// - Parameter name: names the upload in reports and `{stem}` in output names (default: the
    ///   part's file name, else "upload").
    public func upload(_ request: Request, pipeline: String, field: String = "file", name: String? = nil,
                       maxBytes: Int = 50 << 20, delivery: OutputDelivery = .store) async throws -> ProcessedItem {
        let contentType = request.headers.first(name: .contentType)
        let multipart = ServiceFront.mediaType(contentType) == "multipart/form-data"
        // A multipart body carries its boundaries and part headers beside the image's bytes.
        let bodyLimit = multipart ? maxBytes + (64 << 10) : maxBytes
        if let refused = ServiceFront.uploadRefusal(contentType: contentType, contentLength: request.headers.first(name: .contentLength),
                                                    maxBytes: bodyLimit, accepting: { multipart || ServiceFront.isImageType($0) }) {
            throw ProblemError(refused)
        }
        let body: ByteBuffer
        if let collected = request.body.data {
            guard collected.readableBytes <= bodyLimit else { throw ProblemError(ServiceFront.uploadTooLarge(maxBytes)) }
            body = collected
        } else {
            do { body = try await request.body.collect(max: bodyLimit).get() ?? ByteBuffer() } catch {
                throw ProblemError(ServiceFront.uploadTooLarge(maxBytes))
            }
        }
        var bytes = Data(buffer: body)
        var uploadName = name ?? "upload"
        if multipart {
            let part = try Self.filePart(of: body, contentType: contentType ?? "", field: field)
            guard part.body.count <= maxBytes else { throw ProblemError(ServiceFront.uploadTooLarge(maxBytes)) }
            bytes = part.body
            if name == nil, let file = part.fileName, !file.isEmpty { uploadName = file }
        }
        do {
            return try await front.processUpload(bytes, name: uploadName, pipeline: pipeline, delivery: delivery)
        } catch { throw ProblemError(error.answer) }
    }

    /// The image part of a multipart body: the part named `field`, else the first with a file name.
    static func filePart(of body: ByteBuffer, contentType: String, field: String) throws -> (body: Data, fileName: String?) {
        guard let boundary = Self.parameter("boundary", of: contentType),
              !boundary.isEmpty else {
            throw ProblemError(.problem(400, kind: "bad_multipart", "a multipart/form-data body needs a boundary= in its Content-Type"))
        }
        struct Part { var headers: [(String, String)] = []; var body = Data() }
        var parts: [Part] = []
        var current = Part()
        let parser = MultipartParser(boundary: boundary)
        parser.onHeader = { name, value in current.headers.append((name.lowercased(), value)) }
        parser.onBody = { buffer in current.body.append(contentsOf: buffer.readableBytesView) }
        parser.onPartComplete = {
            parts.append(current)
            current = Part()
        }
        do { try parser.execute(body) } catch {
            throw ProblemError(.problem(400, kind: "bad_multipart", "the multipart body cannot be read: \(error)"))
        }
        func disposition(_ part: Part, _ key: String) -> String? {
            part.headers.first { $0.0 == "content-disposition" }.flatMap { Self.parameter(key, of: $0.1) }
        }
        guard let part = parts.first(where: { disposition($0, "name") == field }) ?? parts.first(where: { disposition($0, "filename") != nil }) else {
            throw ProblemError(.problem(400, kind: "missing_file", "the multipart body has no part named '\(field)' and no file part"))
        }
        let type = ServiceFront.mediaType(part.headers.first { $0.0 == "content-type" }?.1 ?? "application/octet-stream")
        guard ServiceFront.isImageType(type) else {
            throw ProblemError(.problem(415, kind: "unsupported_media_type",
                                        "the file part is '\(type)'; send the image's bytes as image/* or application/octet-stream"))
        }
        return (part.body, disposition(part, "filename"))
    }

    /// A parameter of a header value (`name="x"` or `name=x`), unquoted.
    static func parameter(_ key: String, of header: String) -> String? {
        for item in header.split(separator: ";").dropFirst() {
            let pair = item.split(separator: "=", maxSplits: 1).map { $0.trimmingCharacters(in: .whitespaces) }
            guard pair.count == 2, pair[0].lowercased() == key else { continue }
            var value = pair[1]
            if value.count >= 2, value.hasPrefix("\""), value.hasSuffix("\"") { value = String(value.dropFirst().dropLast()) }
            return value
        }
        return nil
    }

    /// Middleware that answers a thrown ``ProblemError`` with its problem+json (Vapor's
    /// `ErrorMiddleware` would answer `{"error":true,"reason":...}` with the same status).
    public static var problems: ProblemMiddleware { ProblemMiddleware() }
}

/// A problem+json answer thrown from a route
/// (``ImageRouteCollection/upload(_:pipeline:field:name:maxBytes:delivery:)``); also an
/// `AbortError` with the same status and detail.
public struct ProblemError: AbortError {
    let answer: ServeAnswer

    init(_ answer: ServeAnswer) { self.answer = answer }

    /// The HTTP status.
    public var status: HTTPResponseStatus { HTTPResponseStatus(statusCode: answer.status) }
    /// The kind of problem (`too_large`, `not_an_image`, `missing_file`, ...).
    public var kind: String { answer.problemKind ?? "" }
    /// What went wrong, for people.
    public var reason: String { ((try? JSONSerialization.jsonObject(with: answer.body)) as? [String: Any])?["detail"] as? String ?? kind }
}

/// Answers a thrown ``ProblemError`` with its problem+json body (``ImageRouteCollection/problems``).
public struct ProblemMiddleware: AsyncMiddleware {
    public func respond(to request: Request, chainingTo next: any AsyncResponder) async throws -> Response {
        do { return try await next.respond(to: request) } catch let problem as ProblemError {
            return ImageRouteCollection.response(problem.answer)
        }
    }
}
#endif
