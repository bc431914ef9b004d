import Foundation
import PipelineKit

/// How served pipelines admit and answer requests, for every adapter (Hummingbird's
/// `ImageRoutes`, Vapor's `ImageRouteCollection`); every default is `pipelinectl serve`'s.
public struct ImageServiceOptions: Sendable {
    /// Requests processed at once (default: one per CPU the process may use).
    public var jobs: Int = UsableCores.count
    /// Requests that may wait for a job; past jobs + queue, `429` at once (`nil`: 64 per job,
    /// at least 128).
    public var queue: Int?
    /// Longest a request waits for a job place, actual or expected from recent jobs (then
    /// `429`); 0: no limit. Seconds.
    public var queueWait: Double = 5
    /// Longest time a request may take, waiting included (then `504`). Seconds.
    public var timeout: Double = 30
    /// Addresses of proxies in front, whose `X-Forwarded-For` names the client that queue
    /// places are shared by.
    public var trustedProxies: Set<String> = []
    /// Where the access log goes: one JSON line per request.
    public var accessLog: AccessLogDestination = .standardOutput
    /// The clock jobs are timed by (the expected wait of a request comes from their times): the
    /// machine's, unless a test moves one by hand.
    package var timers: any TimerSource = DispatchTimers.shared

    public init() {}
}

/// Where the access log's lines go.
public enum AccessLogDestination: Sendable {
    case off
    /// Standard output, one JSON line per request.
    case standardOutput
    /// Handed to the app, one JSON line (without its newline) per request.
    case custom(@Sendable (String) -> Void)
}

/// What both adapters share past their framework's request type: the service, its metrics, the
/// access log, and the checks of an upload.
package final class ServiceFront: Sendable {
    package let service: ImageService
    package let metrics: ServeMetrics
    package let options: ImageServiceOptions

    package init(library: ImagePipelines, options: ImageServiceOptions) {
        let jobs = max(1, options.jobs)
        service = ImageService(library: library, keys: library.keys,
                               admission: RequestAdmission(jobs: jobs, queue: options.queue ?? max(128, 64 * jobs), queueWait: options.queueWait),
                               timeout: options.timeout, timers: options.timers)
        metrics = ServeMetrics(presets: library.names)
        self.options = options
    }

    /// The Prometheus exposition; `connections`: the server's, when it counts them.
    package func exposition(connections: ConnectionCounts?) -> Data {
        metrics.exposition(inFlight: service.requestsInFlight,
                           loadsWaiting: service.presets.values.reduce(0) { $0 + $1.runner.loadsWaiting }, connections: connections)
    }

    /// Counts an answer in the metrics and writes its access-log line.
    package func record(method: String, _ answer: ServeAnswer, seconds: Double) {
        metrics.record(answer, seconds: seconds)
        switch options.accessLog {
        case .off: break
        case .standardOutput: FileHandle.standardOutput.write(Data((Self.logLine(method: method, answer, seconds: seconds) + "\n").utf8))
        case .custom(let write): write(Self.logLine(method: method, answer, seconds: seconds))
        }
    }

    /// 405 for a method other than `GET` and `HEAD` on the image routes.
    package static let methodNotAllowed: ServeAnswer = {
        var answer = ServeAnswer.problem(405, kind: "method_not_allowed", "only GET and HEAD")
        answer.headers.append(("Allow", "GET, HEAD"))
        return answer
    }()

    /// `target` with the routes' mount path taken off its front.
    package static func target(_ target: String, under prefix: String) -> String {
        if !prefix.isEmpty, target.hasPrefix(prefix) { return String(target.dropFirst(prefix.count)) }
        return target
    }

    /// A request's Client Hints (``Breakpoints/headerNames``) by lowercased name, from its
    /// framework's header lookup.
    package static func hints(_ header: (String) -> String?) -> [String: String] {
        var hints: [String: String] = [:]
        for name in Breakpoints.headerNames { if let value = header(name) { hints[name.lowercased()] = value } }
        return hints
    }

    /// `answer` with a redirect's `Location` (a path from the routes' root) under the mount path.
    package static func mounted(_ answer: ServeAnswer, prefix: String) -> ServeAnswer {
        guard !prefix.isEmpty, (300..<400).contains(answer.status) else { return answer }
        var answer = answer
        answer.headers = answer.headers.map { $0.0 == "Location" && $0.1.hasPrefix("/") ? ($0.0, prefix + $0.1) : $0 }
        return answer
    }

    /// The mount path without a trailing slash (`""` at the root).
    package static func prefix(_ path: String) -> String {
        path.hasSuffix("/") ? String(path.dropLast()) : path
    }

    /// One access-log line: no signature, no query of the source.
    package static func logLine(method: String, _ answer: ServeAnswer, seconds: Double) -> String {
        var line = JSONLine()
        line.add("time", Date().formatted(.iso8601))
        line.add("method", method)
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
        if let trace = EngineSpans.currentTraceID ?? answer.item?.traceID { line.add("trace_id", trace) }
        if let timings = answer.item?.timings {
            for (name, ms) in [("load_ms", timings.load), ("decode_ms", timings.decode), ("process_ms", timings.process),
                               ("encode_ms", timings.encode)] where ms > 0 {
                line.add(name, (ms * 10).rounded() / 10)
            }
        }
        return line.text
    }

    // MARK: Uploads

    /// A refusal from an upload's headers, before its body is read: another Content-Type
    /// (`415`), or a `Content-Length` past `maxBytes` (`413`).
    package static func uploadRefusal(contentType: String?, contentLength: String?, maxBytes: Int,
                                      accepting accepts: (String) -> Bool = isImageType) -> ServeAnswer? {
        let type = mediaType(contentType)
        guard accepts(type) else {
            return .problem(415, kind: "unsupported_media_type",
                            "send the image's bytes as image/* or application/octet-stream, not '\(type.isEmpty ? "(none)" : type)'")
        }
        if let length = contentLength.flatMap(Int.init), length > maxBytes {
            return .problem(413, kind: "too_large", "the upload is \(length) bytes; at most \(maxBytes) are taken")
        }
        return nil
    }

    /// A body that grew past `maxBytes` while it was read.
    package static func uploadTooLarge(_ maxBytes: Int) -> ServeAnswer {
        .problem(413, kind: "too_large", "the upload is larger than \(maxBytes) bytes")
    }

    /// `image/*` or `application/octet-stream`: the bytes of an image.
    package static func isImageType(_ type: String) -> Bool { type.hasPrefix("image/") || type == "application/octet-stream" }

    /// A Content-Type's media type, lowercased, without its parameters.
    package static func mediaType(_ contentType: String?) -> String {
        (contentType ?? "").split(separator: ";").first.map { $0.trimmingCharacters(in: .whitespaces).lowercased() } ?? ""
    }

    /// An upload's bytes made into `pipeline`'s outputs for `delivery`'s sink; a failure is the
    /// problem answer the service gives for its kind (`415 not_an_image`, `413 too_large` for a
    /// decompression bomb, refused from its header, ...).
    package func processUpload(_ bytes: Data, name: String, pipeline: String, delivery: OutputDelivery) async throws(ServeProblem) -> ProcessedItem {
        guard !bytes.isEmpty else { throw ServeProblem(.problem(400, kind: "empty_upload", "the request has no body")) }
        do {
            return try await service.library.process(bytes: bytes, name: name, pipeline: pipeline, delivery: delivery)
        } catch let failure as PipelineError {
            let item = ItemError(stage: failure.stage ?? .load, kind: failure.kind, message: failure.message, plugin: failure.plugin)
            throw ServeProblem(failure.kind == .notFound && failure.stage == nil
                ? .problem(404, kind: "not_found", failure.message) : service.failure(item))
        } catch {
            throw ServeProblem(.problem(500, kind: "failed", "\(error)"))
        }
    }
}

/// A problem answer, thrown.
package struct ServeProblem: Error {
    package let answer: ServeAnswer

    package init(_ answer: ServeAnswer) { self.answer = answer }

    /// The problem's kind (`too_large`, `not_an_image`, ...).
    package var kind: String { answer.problemKind ?? "" }
}
