import Crypto
import Foundation
import PipelineKit

/// `/info/SIGNATURE/PIPELINE/SOURCE`: a source's facts as JSON, made by the pipeline's loader,
/// data cache and decoder with the `analyze` processor (``ImagePipelines/infoRunner(pipeline:)``),
/// admitted like an image request (it decodes).
extension ImageService {
    /// A facts request whose signature (over `info:` and the path) holds: its answer or its job.
    func prepareInfo(target: String, ifNoneMatch: String?, client: String) async -> Prepared {
        if keys != nil, !Self.startsWithSignature(target) {
            return .answered(.problem(403, kind: "bad_signature", "the request has no signature: /info/SIGNATURE/PIPELINE/SOURCE (sign it with `pipelinectl sign --info`)"))
        }
        let request: ServeRequest
        do {
            // A facts request names no variant: the facts are the source's.
            request = try ServeRequest(target: target) { [presets] name in presets[name] != nil ? false : nil }
        } catch let failure as PipelineError {
            return .answered(.problem(failure.kind == .notFound ? 404 : 400, kind: failure.kind == .notFound ? "not_found" : "bad_request",
                                      failure.message))
        } catch { return .answered(.problem(400, kind: "bad_request", "\(error)")) }
        let preset = presets[request.pipeline]!
        func labelled(_ answer: ServeAnswer) -> Prepared {
            var answer = answer
            answer.label(preset.name, source: request.source, variant: nil)
            return .answered(answer)
        }
        if let refused = checkSignature(request, signed: ServeRequest.infoSigned(request.signed)) { return labelled(refused) }
        if let stranger = request.parameters.first(where: { !["expires", "v", "facts"].contains($0.name) }) {
            return labelled(.problem(400, kind: "bad_parameter", "facts take only facts=header|all (and expires, v); got '\(stranger.name)'"))
        }
        let scope = request.parameters.first { $0.name == "facts" }?.value ?? "all"
        guard ["header", "all"].contains(scope) else {
            return labelled(.problem(400, kind: "bad_parameter", "facts=\(scope): give header (what the header says, nothing decoded) or all"))
        }
        if let refused = checkSource(request.source, preset: preset) { return labelled(refused) }
        let memoKey = scope + "\u{1}" + preset.name + "\u{1}" + request.source
        let pinned = InfoMemo.version(of: preset.source(request.source), pinned: request.parameters.first { $0.name == "v" }?.value)
        if let pinned, var known = infoMemo.answer(memoKey, version: pinned) {
            known.cache = "memo"
            return labelled(Self.conditional(known, ifNoneMatch: ifNoneMatch))
        }
        let runner: PipelineRunner
        do { runner = try library.infoRunner(pipeline: preset.name) } catch {
            return labelled(.problem(500, kind: "failed", (error as? PipelineError)?.message ?? "\(error)"))
        }
        switch admission.tryEnter(client: client) {
        case .entered: break
        case .full: return labelled(.busy("every job and queue place is taken; retry shortly"))
        case .share: return labelled(.busy("this client holds its share of the places; the rest are kept for others; retry shortly"))
        case .tooSlow: return labelled(.busy("the queue would keep this request past --queue-wait; retry shortly"))
        }
        var job = AdmittedJob(preset: preset, runner: runner, source: request.source, ifNoneMatch: ifNoneMatch,
                              client: client, flightKey: "\u{2}info\u{1}" + scope + "\u{1}" + preset.name + "\u{1}" + request.source, info: true)
        job.headerOnly = scope == "header"
        job.memo = pinned.map { (memoKey, $0) }
        return .admitted(job)
    }

    /// `answer` (a whole 200), or its `304` when `ifNoneMatch` names its ETag.
    static func conditional(_ answer: ServeAnswer, ifNoneMatch: String?) -> ServeAnswer {
        guard answer.status == 200, let ifNoneMatch, let etag = answer.headers.first(where: { $0.0 == "ETag" })?.1,
              matches(ifNoneMatch, etag) else { return answer }
        var notModified = answer
        notModified.status = 304
        notModified.body = Data()
        notModified.headers.removeAll { $0.0 == "Content-Type" }
        return notModified
    }

    /// The JSON of a facts item: the pipeline, the source, its facts as reports name them, and
    /// both kinds of breakpoints, each named: the widths Client Hints choose among
    /// (`breakpoints.declared`) and, for each variant with breakpoints by bytes, the widths chosen
    /// for this image and their sizes (`breakpoints.by_bytes.VARIANT`).
    func infoAnswer(_ made: ProcessedItem, preset: Preset, source: String, ifNoneMatch: String?) -> ServeAnswer {
        guard made.result.status == .ok || made.result.status == .kept else { return failure(made.result.error) }
        var facts = made.facts
        var breakpoints: [String: FactValue] = [:]
        if case .object(let found)? = facts.removeValue(forKey: "breakpoints"), let byBytes = found["by_bytes"] { breakpoints["by_bytes"] = byBytes }
        var object: [String: FactValue] = ["pipeline": .string(preset.name), "source": .string(String(source.prefix { $0 != "?" })),
                                           "facts": .object(facts)]
        if let declared = preset.pipeline.serve.breakpoints {
            breakpoints["declared"] = .list(declared.widths.map { .int($0) })
            breakpoints["param"] = .string(declared.param)
            breakpoints["default"] = .int(declared.defaultWidth)
        }
        if !breakpoints.isEmpty { object["breakpoints"] = .object(breakpoints) }
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        let body = (try? encoder.encode(object)) ?? Data("{}".utf8)
        let etag = "\"" + SHA256.hash(data: body).prefix(16).map { String(format: "%02x", $0) }.joined() + "\""
        let tags = preset.pipeline.serve.cacheTags
        var answer = ServeAnswer(status: 200, headers: [("ETag", etag), ("Cache-Control", preset.pipeline.serve.cacheControl)]
            + tags.headerLines(tags.tags(source: source, pipeline: preset.name, variant: nil)))
        if let ifNoneMatch, Self.matches(ifNoneMatch, etag) {
            answer.status = 304
            return answer
        }
        answer.headers.append(("Content-Type", "application/json"))
        answer.body = body
        return answer
    }
}
