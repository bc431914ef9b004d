import Crypto
import Foundation
import Logging
import PipelineKit
import Synchronization

/// What the service answers, before it is an HTTP response.
package struct ServeAnswer: Sendable {
    package var status: Int
    package var headers: [(String, String)] = []
    package var body = Data()
    /// A body too large to keep in memory (``ImagePipelines/Options/spoolThreshold``), sent from
    /// its file instead of ``body``.
    package var file: SpooledFile?
    /// The body's size in bytes.
    package var bodyBytes: Int { file?.byteCount ?? body.count }
    /// For the access log and the metrics.
    package var pipeline = "-"
    package var cache = "-"
    /// The request's source, without its query (which may hold an origin's token).
    package var source: String?
    /// The variant asked for, in a pipeline with variants.
    package var variant: String?
    /// The item, when one ran (for the run's metrics).
    package var item: ItemResult?
    /// Seconds the request waited for a job place, when it was admitted to one.
    package var queued: Double?
    /// The problem's kind (its body's `title`), for an answer made by ``problem(_:kind:_:pipeline:)``.
    package var problemKind: String?

    /// Names the pipeline and the source (without its query, which may hold an origin's token)
    /// for the access log and the metrics.
    package mutating func label(_ pipeline: String, source: String, variant: String?) {
        self.pipeline = pipeline
        self.variant = variant
        self.source = String(source.prefix { $0 != "?" })
    }

    /// 429 `busy` with `Retry-After`: the service is at its limit, not failing.
    package static func busy(_ detail: String) -> ServeAnswer {
        var busy = problem(429, kind: "busy", detail)
        busy.headers.append(("Retry-After", "1"))
        return busy
    }

    /// An `application/problem+json` answer naming the error's kind.
    package static func problem(_ status: Int, kind: String, _ detail: String, pipeline: String = "-") -> ServeAnswer {
        var body = JSONLine()
        body.add("type", "https://pipelinectl.dev/problems/" + kind)
        body.add("title", kind)
        body.add("status", status)
        body.add("detail", detail)
        // The request's trace, when traces are on: the key from this answer to its spans.
        if let trace = EngineSpans.currentTraceID { body.add("trace_id", trace) }
        let data = body.data
        var answer = ServeAnswer(status: status, headers: [("Content-Type", "application/problem+json"), ("Cache-Control", "no-store")], body: data)
        answer.pipeline = pipeline
        answer.problemKind = kind
        return answer
    }
}

/// One pipeline file as the service runs it.
package struct Preset: Sendable {
    package let name: String
    package let pipeline: Pipeline
    /// The runner of the file as written; requests with parameters or a variant get runners
    /// derived from it (``ImagePipelines/runner(pipeline:variant:params:format:)``).
    package let runner: PipelineRunner
    /// Where its sources may come from (`serve.sources`, local roots resolved at start): the
    /// library's, made once.
    package let boundary: SourceBoundary

    /// `text` as a source of this preset: its loads and redirects kept inside ``boundary``.
    package func source(_ text: String) -> Source { Source(text: text, index: 1, boundary: boundary) }
}

/// The service's logic, apart from HTTP: reads a request, checks its signature, parameters and
/// source, admits it, runs the item on the preset's engine and answers with the output.
package final class ImageService: Sendable {
    /// The pipelines, loaded once: the same object app code processes images with.
    package let library: ImagePipelines
    package let presets: [String: Preset]
    package let keys: SigningKeys?
    package let admission: RequestAdmission
    package let timeout: Double
    private let draining = Atomic(false)
    /// Recent facts answers of pinned sources (``InfoMemo``).
    let infoMemo = InfoMemo()
    /// Requests running now, by preset and source: a request for a source already being made
    /// joins that work (one fetch, one decode) without taking a place of its own.
    private let sourcesInFlight = Mutex<[String: Int]>([:])
    /// Requests that may join one source's work at once; past it they are admitted as any other
    /// (a client asking for every width of one source cannot bypass admission without bound).
    package static let joinsPerSource = 64
    private let joinedNow = Atomic(0)

    /// Requests in flight: admitted ones (running or waiting) and those that joined running work.
    package var requestsInFlight: Int { admission.inFlight + joinedNow.load(ordering: .relaxed) }

    /// The clock jobs are timed by.
    private let timers: any TimerSource

    package init(library: ImagePipelines, keys: SigningKeys?, admission: RequestAdmission, timeout: Double,
                 timers: any TimerSource = DispatchTimers.shared) {
        self.timers = timers
        self.library = library
        var presets: [String: Preset] = [:]
        for (name, runner) in library.baseRunners {
            presets[name] = Preset(name: name, pipeline: library.pipelines[name]!, runner: runner, boundary: library.boundaries[name]!)
        }
        self.presets = presets
        self.keys = keys
        self.admission = admission
        self.timeout = timeout
    }

    /// Readiness goes 503 from now on (SIGTERM); requests in flight and new ones are still served.
    package func drain() { draining.store(true, ordering: .relaxed) }
    package var isDraining: Bool { draining.load(ordering: .relaxed) }

    /// Answers `GET`/`HEAD` `target` (the raw request target) with the request's `Accept` and
    /// `If-None-Match`: ``prepare(target:accept:ifNoneMatch:)``, then the job if one was admitted.
    package func answer(target: String, accept: String?, ifNoneMatch: String?, client: String = "",
                        hints: [String: String] = [:]) async -> ServeAnswer {
        switch await prepare(target: target, accept: accept, ifNoneMatch: ifNoneMatch, client: client, hints: hints) {
        case .answered(let answer): return answer
        case .admitted(let job): return await run(job)
        }
    }

    /// What a request needs before any image work: its answer when that needs no job (a refusal,
    /// a stored result, a 304 for one, or 429 when every place is taken), else its admitted job,
    /// which holds a place until ``run(_:)`` returns. Only a job is worth cancelling when the
    /// client leaves; everything else is answered at once.
    /// `hints`: the request's Client Hints (``Breakpoints/headerNames``), by lowercased name.
    package func prepare(target: String, accept: String?, ifNoneMatch: String?, client: String = "",
                         hints: [String: String] = [:]) async -> Prepared {
        if target.hasPrefix(ServeRequest.infoPrefix) {
            return await prepareInfo(target: String(target.dropFirst(ServeRequest.infoPrefix.count - 1)), ifNoneMatch: ifNoneMatch, client: client)
        }
        // No signature where one must be (a path that starts with a pipeline's name, say): 403,
        // as for a wrong one, before the target is read any further.
        if keys != nil, !Self.startsWithSignature(target) {
            return .answered(.problem(403, kind: "bad_signature",
                                      "the request has no signature: /SIGNATURE/PIPELINE[/VARIANT]/SOURCE (sign it with `pipelinectl sign`)"))
        }
        let request: ServeRequest
        do {
            request = try ServeRequest(target: target) { [presets] name in presets[name].map(\.pipeline.hasVariants) }
        } catch let failure as PipelineError {
            return .answered(.problem(failure.kind == .notFound ? 404 : 400, kind: failure.kind == .notFound ? "not_found" : "bad_request",
                                      failure.message))
        } catch { return .answered(.problem(400, kind: "bad_request", "\(error)")) }
        let preset = presets[request.pipeline]!
        if var refused = checkSignature(request) {
            refused.pipeline = preset.name
            return .answered(refused)
        }
        var prepared = await prepare(request, preset: preset, accept: accept, ifNoneMatch: ifNoneMatch, client: client, hints: hints)
        if case .answered(var answer) = prepared {
            answer.label(preset.name, source: request.source, variant: request.variant)
            prepared = .answered(answer)
        }
        return prepared
    }

    /// Whether the target's first segment has a signature's form (32 bytes of base64url).
    package static func startsWithSignature(_ target: String) -> Bool {
        let first = target.dropFirst().prefix { $0 != "/" && $0 != "?" }
        return SigningKeys.base64URLDecode(String(first))?.count == 32
    }

    /// A request's answer, or its admitted job (see ``prepare(target:accept:ifNoneMatch:)``).
    package enum Prepared: Sendable {
        case answered(ServeAnswer)
        case admitted(AdmittedJob)
    }

    /// A request admitted to run on its preset's engine: it holds a place (running or waiting)
    /// until ``ImageService/run(_:)`` returns.
    package struct AdmittedJob: Sendable {
        let preset: Preset
        let runner: PipelineRunner
        let source: String
        let ifNoneMatch: String?
        /// The variant asked for, for the access log.
        var variant: String?
        /// Who asked (the peer address, or the one a trusted proxy names): places are shared by it.
        var client = ""
        /// Joined a request for the same source already running: it holds no admission place.
        var joined = false
        /// The key it is counted under in ``ImageService/sourcesInFlight``.
        var flightKey = ""
        /// The Client Hints read to choose its width (its answer's `Vary`).
        var hintsRead: [String] = []
        /// A facts request (`/info/...`): answered with JSON, not an image.
        var info = false
        /// `/info/...?facts=header`: the header's facts only, nothing decoded.
        var headerOnly = false
        /// Where a facts answer is kept for its pinned source (``InfoMemo``): its key and version.
        var memo: (key: String, version: String)?
    }

    /// A request whose signature holds: its answer, or its admitted job.
    package func prepare(_ request: ServeRequest, preset: Preset, accept: String?, ifNoneMatch: String?, client: String,
                         hints: [String: String] = [:]) async -> Prepared {
        var values: [String: String] = [:]
        // `expires` is checked with the signature; `v` only versions the URL (the signature covers it).
        for (name, value) in request.parameters where name != "expires" && name != "v" {
            guard values[name] == nil else { return .answered(.problem(400, kind: "bad_parameter", "parameter '\(name)' is given twice")) }
            values[name] = value
        }
        if let refused = checkSource(request.source, preset: preset) { return .answered(refused) }
        // Client Hints pick among the declared widths when the URL does not set the width itself.
        var hintsRead: [String] = []
        if let breakpoints = preset.pipeline.serve.breakpoints, breakpoints.mode != .off, values[breakpoints.param] == nil {
            let choice = breakpoints.choose { hints[$0.lowercased()] }
            if breakpoints.mode == .redirect { return .answered(redirect(request, to: choice, of: breakpoints)) }
            values[breakpoints.param] = String(choice.width)
            hintsRead = choice.read
        }
        let described = Described(source: request.source, variant: request.variant, hintsRead: hintsRead)
        let format = preset.pipeline.negotiatesFormat ? Pipeline.negotiatedFormat(accept: accept) : nil
        let runner: PipelineRunner
        do { runner = try self.runner(preset, variant: request.variant, values: values, format: format) } catch let failure as PipelineError {
            return .answered(failure.kind == .notFound ? .problem(404, kind: "not_found", failure.message)
                : .problem(400, kind: "bad_parameter", failure.message))
        } catch { return .answered(.problem(400, kind: "bad_parameter", "\(error)")) }
        // A stored result needs no job: answered at once, whatever the load.
        let source = preset.source(request.source)
        if let stored = await runner.stored(source, delivery: .values) {
            var answer = respond(stored, preset: preset, negotiated: preset.pipeline.negotiatesFormat, ifNoneMatch: ifNoneMatch,
                                 described: described)
            answer.item = stored.result
            if answer.status < 500 { return .answered(answer) }
        }
        // Work for this source is running: join it (the engine shares the fetch and the decode,
        // and an identical request its whole job) instead of queueing behind unrelated work.
        // A page asking for a new image in several sizes is then never refused for it.
        let flightKey = preset.name + "\u{1}" + request.source
        let sharing = runner.isSharingWork(for: source)
        let joined = sharing && sourcesInFlight.withLock { flights -> Bool in
            guard let running = flights[flightKey], running > 0, running <= Self.joinsPerSource else { return false }
            flights[flightKey] = running + 1
            return true
        }
        if joined {
            joinedNow.add(1, ordering: .relaxed)
            return .admitted(AdmittedJob(preset: preset, runner: runner, source: request.source, ifNoneMatch: ifNoneMatch,
                                         variant: request.variant, client: client, joined: true, flightKey: flightKey, hintsRead: hintsRead))
        }
        switch admission.tryEnter(client: client) {
        case .entered: break
        case .full: return .answered(.busy("every job and queue place is taken; retry shortly"))
        case .share: return .answered(.busy("this client holds its share of the places; the rest are kept for others; retry shortly"))
        case .tooSlow(let wait):
            return .answered(.busy("the queue would keep this request about \(Units.formatDuration((wait * 1000).rounded() / 1000)), past --queue-wait; retry shortly"))
        }
        sourcesInFlight.withLock { $0[flightKey, default: 0] += 1 }
        return .admitted(AdmittedJob(preset: preset, runner: runner, source: request.source, ifNoneMatch: ifNoneMatch,
                                     variant: request.variant, client: client, flightKey: flightKey, hintsRead: hintsRead))
    }

    /// The answer for a job whose client went away before it was done: 499, labelled as the job.
    package func cancelled(_ job: AdmittedJob) -> ServeAnswer {
        var answer = ServeAnswer.problem(499, kind: "cancelled", "the client closed the connection")
        answer.label(job.preset.name, source: job.source, variant: job.variant)
        return answer
    }

    /// Runs an admitted job (waiting for a job place first, unless it joined running work) and
    /// gives its place back.
    package func run(_ job: AdmittedJob) async -> ServeAnswer {
        defer {
            if job.joined { joinedNow.subtract(1, ordering: .relaxed) } else { admission.leave(client: job.client) }
            sourcesInFlight.withLock { flights in
                let left = (flights[job.flightKey] ?? 1) - 1
                flights[job.flightKey] = left > 0 ? left : nil
            }
        }
        var answer = await running(job)
        answer.label(job.preset.name, source: job.source, variant: job.variant)
        return answer
    }

    private func running(_ job: AdmittedJob) async -> ServeAnswer {
        let arrived = timers.now
        // A joined request whose shared work ended meanwhile would make the image alone: it
        // takes a job place for that, as any other (so joins never add work beyond the places).
        let holdsPlace = !job.joined || !job.runner.isSharingWork(for: job.preset.source(job.source))
        if holdsPlace {
            switch await admission.waitForJob(client: job.client) {
            case .granted: break
            case .cancelled: return .problem(499, kind: "cancelled", "the client went away")
            case .timedOut:
                return .busy("no job place came free within --queue-wait (\(Units.formatDuration(admission.queueWait))); retry shortly")
            }
        }
        defer { if holdsPlace { admission.finishJob(client: job.client) } }
        let runner = job.runner
        let started = timers.now
        let source = job.preset.source(job.source)
        // The engine's own limit on each caller's item, when it is as strict, is the only clock:
        // it answers `timeout` (504) the same way, without a second timer per request.
        let made: ProcessedItem?
        let delivery: OutputDelivery = job.info ? .factsOnly : .values
        let headerOnly = job.headerOnly
        let work: @Sendable () async -> ProcessedItem = {
            headerOnly ? await runner.headerFacts(source) : await runner.process(source, delivery: delivery)
        }
        if let limit = runner.itemTimeout, limit <= timeout {
            made = await work()
        } else {
            made = await withinTimeLimit(work)
        }
        // A job cut short by its client's leaving says nothing about how long jobs take.
        // A joined request shares another's work: its time says nothing about a job's either.
        if holdsPlace, made?.result.error?.kind != .cancelled { admission.recordJob(seconds: (timers.now - started).seconds) }
        var answer: ServeAnswer
        if let made, job.info {
            // Made whole once (and kept so for a pinned source); a 304 is made from it.
            let whole = infoAnswer(made, preset: job.preset, source: job.source, ifNoneMatch: nil)
            if let memo = job.memo, whole.status == 200 { infoMemo.keep(memo.key, version: memo.version, whole) }
            answer = Self.conditional(whole, ifNoneMatch: job.ifNoneMatch)
        } else if let made {
            answer = respond(made, preset: job.preset, negotiated: job.preset.pipeline.negotiatesFormat, ifNoneMatch: job.ifNoneMatch,
                             described: Described(source: job.source, variant: job.variant, hintsRead: job.hintsRead))
            answer.item = made.result
        } else {
            answer = .problem(504, kind: "timeout", "the image was not ready within \(Units.formatDuration(timeout))")
        }
        answer.queued = (started - arrived).seconds
        return answer
    }

    /// `307` to the URL of the width `choice` names: the request's own URL with the width
    /// parameter set, signed anew (a redirect is never stored by a shared cache; its target may be
    /// stored anywhere). The `Location` is relative to the routes' mount path.
    func redirect(_ request: ServeRequest, to choice: Breakpoints.Choice, of breakpoints: Breakpoints) -> ServeAnswer {
        var values: [String: String] = [:]
        for (name, value) in request.parameters where name != "expires" && name != "v" { values[name] = value }
        values[breakpoints.param] = String(choice.width)
        let expires = request.parameters.first { $0.name == "expires" }.flatMap { Int($0.value) }
        let version = request.parameters.first { $0.name == "v" }?.value
        let path = ServeRequest.path(pipeline: request.pipeline, variant: request.variant, source: request.source, parameters: values,
                                     expires: expires, version: version)
        let signature = keys?.sign(path) ?? request.signature
        var answer = ServeAnswer(status: 307, headers: [("Location", "/" + signature + path), ("Cache-Control", "no-store"),
                                                        ("Vary", choice.read.joined(separator: ", ")), ("Accept-CH", Breakpoints.acceptCH)])
        answer.cache = "redirect"
        return answer
    }

    /// 403 for a missing, wrong or expired signature; `nil` when the request may go on.
    /// `signed`: what the signature covers (default: the request's path and query).
    package func checkSignature(_ request: ServeRequest, signed: String? = nil) -> ServeAnswer? {
        if let keys, keys.verify(request.signature, of: signed ?? request.signed) == nil {
            return .problem(403, kind: "bad_signature", "the signature does not match the path (sign it with `pipelinectl sign`)")
        }
        if let expires = request.parameters.first(where: { $0.name == "expires" })?.value {
            guard let seconds = Int(expires) else { return .problem(400, kind: "bad_request", "expires must be Unix seconds, got '\(expires)'") }
            if Double(seconds) < Date().timeIntervalSince1970 { return .problem(403, kind: "expired", "the link expired at \(seconds) (Unix seconds)") }
        }
        return nil
    }

    /// Sources outside `serve.sources` are refused (``SourceBoundary`` decides, on what the loader
    /// will open); so are local paths unless a directory is listed.
    package func checkSource(_ source: String, preset: Preset) -> ServeAnswer? {
        guard let refusal = preset.boundary.refusal(for: source) else { return nil }
        return .problem(403, kind: "source_not_allowed", refusal)
    }

    /// The result of `work`, or `nil` when it did not finish within the time limit (then cancelled).
    package func withinTimeLimit(_ work: @escaping @Sendable () async -> ProcessedItem) async -> ProcessedItem? {
        await withTaskGroup(of: ProcessedItem?.self) { group in
            group.addTask { await work() }
            group.addTask { [timeout] in
                try? await Task.sleep(for: .seconds(timeout))
                return nil
            }
            let first = await group.next()!
            group.cancelAll()
            return first
        }
    }

    /// The runner for a request: the preset's own, or one derived with its variant, parameters and
    /// negotiated format (kept by the library for later requests of the same kind).
    package func runner(_ preset: Preset, variant: String?, values: [String: String], format: NegotiatedFormat?) throws -> PipelineRunner {
        try library.runner(pipeline: preset.name, variant: variant, params: values, format: format)
    }

    /// What an answer's headers say about the request beyond its result: the tags of its
    /// source and variant, and the hints that chose its width.
    package struct Described: Sendable {
        var source: String
        var variant: String?
        var hintsRead: [String] = []
    }

    /// The HTTP answer for an item's result.
    package func respond(_ made: ProcessedItem, preset: Preset, negotiated: Bool, ifNoneMatch: String?,
                         described: Described? = nil) -> ServeAnswer {
        let result = made.result
        // One output per request, except a variant with breakpoints by bytes: its widest answers
        // (the widths chosen for the image are what `/info` reports).
        guard result.status == .ok || result.status == .kept, let output = made.outputs.last else {
            return failure(result.error)
        }
        let etag = "\"" + output.fingerprint.description + "\""
        var headers: [(String, String)] = [("ETag", etag)]
        let vary = (negotiated ? ["Accept"] : []) + (described?.hintsRead ?? [])
        if !vary.isEmpty { headers.append(("Vary", vary.joined(separator: ", "))) }
        if let breakpoints = preset.pipeline.serve.breakpoints, breakpoints.mode != .off { headers.append(("Accept-CH", Breakpoints.acceptCH)) }
        if let described {
            let tags = preset.pipeline.serve.cacheTags
            headers += tags.headerLines(tags.tags(source: described.source, pipeline: preset.name, variant: described.variant))
        }
        if result.fallback {
            headers.append(("Cache-Control", "no-cache"))
            headers.append(("X-Pipelinectl-Fallback", result.recoveredFrom?.kind.rawValue ?? "failed"))
        } else {
            headers.append(("Cache-Control", preset.pipeline.serve.cacheControl))
        }
        var answer = ServeAnswer(status: 200, headers: headers)
        answer.cache = result.cacheData == .processedHit ? "stored" : (result.cacheData == .hit || result.cacheData == .revalidated ? "data_hit" : "miss")
        if let ifNoneMatch, Self.matches(ifNoneMatch, etag) {
            answer.status = 304
            return answer
        }
        answer.headers.append(("Content-Type", output.mediaType))
        switch output.body {
        case .data(let data): answer.body = data
        case .file(let file): answer.file = file
        }
        return answer
    }

    /// Whether an `If-None-Match` value names `etag` (or is `*`).
    package static func matches(_ header: String, _ etag: String) -> Bool {
        header.split(separator: ",").contains { part in
            let tag = part.trimmingCharacters(in: .whitespaces)
            return tag == "*" || tag == etag || tag == "W/" + etag
        }
    }

    /// The problem answer for a failed item, by the kind of failure.
    package func failure(_ error: ItemError?) -> ServeAnswer {
        guard let error else { return .problem(500, kind: "failed", "the image could not be made") }
        let detail = "\(error.stage.rawValue): \(error.message)"
        switch error.kind {
        case .notFound: return .problem(404, kind: "not_found", detail)
        case .httpStatus where error.message.hasPrefix("HTTP 404") || error.message.hasPrefix("HTTP 410"):
            return .problem(404, kind: "not_found", detail)
        case .notAnImage: return .problem(415, kind: "not_an_image", detail)
        case .unsupportedFormat: return .problem(415, kind: "unsupported_format", detail)
        case .decodeFailed: return .problem(422, kind: "decode_failed", detail)
        case .tooLarge: return .problem(413, kind: "too_large", detail)
        case .timeout: return .problem(504, kind: "timeout", detail)
        case .blockedAddress, .blockedProtocol, .sourceNotAllowed: return .problem(403, kind: error.kind.rawValue, detail)
        case .invalidSource: return .problem(400, kind: "invalid_source", detail)
        case .cancelled: return .problem(499, kind: "cancelled", detail)
        case .httpStatus, .dns, .connect, .tls, .network, .truncated, .tooManyRedirects, .auth:
            return .problem(502, kind: error.kind.rawValue, detail)
        default: return .problem(500, kind: error.kind.rawValue, detail)
        }
    }
}
