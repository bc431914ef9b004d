import Foundation

/// `on_failure:`: what a run does for an item whose source fails with one of `kinds`: load each of
/// `alternatives` in turn instead, then run `fallback` (a placeholder image) through the same
/// processors and encoder, writing under the item's own names.
public struct FailurePolicy: Sendable {
    /// A kind the policy applies to, with the HTTP statuses it is limited to (empty: any).
    public struct Match: Sendable, Equatable {
        public let kind: ErrorKind
        public let statuses: Set<Int>
    }

    /// The kinds it applies to unless `kinds` says otherwise: the source's own problems, never
    /// a time limit, a cancellation or a failure to write.
    public static let defaultKinds = ["not_found", "http_status", "not_an_image", "unsupported_format", "decode_failed", "too_large"]

    /// The placeholders an alternative may use, each replaced by that part of the failed source's URL.
    public static let placeholders = ["url", "scheme", "host", "path", "query", "name", "stem", "ext", "dir"]

    public let matches: [Match]
    public let alternatives: [String]
    /// The fallback image's bytes, when there is one.
    public let fallback: LoadedData?
    /// The fallback's path as written, for messages.
    public let fallbackPath: String?

    /// The policy of `options` (``PipelineFileSpec/onFailure``), with the fallback read from disk;
    /// throws `invalid_option` naming what is wrong.
    public init(options: PluginOptions, fallbackBase: String? = nil) throws {
        matches = try (options.list("kinds")?.map(\.description) ?? Self.defaultKinds).map(Self.match)
        alternatives = options.list("alternatives")?.map(\.description) ?? []
        for template in alternatives { try Self.check(template) }
        fallbackPath = options.string("fallback")
        if let path = fallbackPath {
            let resolved = path.hasPrefix("/") || fallbackBase == nil ? path : fallbackBase! + "/" + path
            guard let bytes = FileManager.default.contents(atPath: resolved), !bytes.isEmpty else {
                throw PipelineError(.invalidOption, "on_failure: the fallback '\(path)' cannot be read")
            }
            fallback = LoadedData(data: bytes, contentType: nil)
        } else {
            fallback = nil
        }
        guard !alternatives.isEmpty || fallback != nil else {
            throw PipelineError(.invalidOption, "on_failure needs 'alternatives', a 'fallback', or both")
        }
    }

    /// Checks `options` as ``init(options:fallbackBase:)`` reads them, without reading the fallback.
    public static func check(_ options: PluginOptions) throws {
        if let (_, message) = problems(options).first { throw PipelineError(.invalidOption, message) }
    }

    /// What is wrong with `options`, each with the option it is about (`nil`: the section).
    static func problems(_ options: PluginOptions) -> [(option: String?, message: String)] {
        var found: [(String?, String)] = []
        for kind in options.list("kinds")?.map(\.description) ?? [] {
            do { _ = try match(kind) } catch let error as PipelineError { found.append(("kinds", error.message)) } catch {}
        }
        let alternatives = options.list("alternatives")?.map(\.description) ?? []
        for template in alternatives {
            do { try check(template) } catch let error as PipelineError { found.append(("alternatives", error.message)) } catch {}
        }
        if alternatives.isEmpty, options.string("fallback") == nil {
            found.append((nil, "on_failure needs 'alternatives', a 'fallback', or both"))
        }
        return found
    }

    /// `kind` or `kind:status` (`http_status:404`).
    static func match(_ text: String) throws -> Match {
        let parts = text.split(separator: ":", maxSplits: 1).map(String.init)
        guard let name = parts.first, name.range(of: "^[a-z][a-z0-9_]*$", options: .regularExpression) != nil else {
            throw PipelineError(.invalidOption, "on_failure: '\(text)' is not an error kind (such as not_found, or http_status:404)")
        }
        guard parts.count == 2 else { return Match(kind: ErrorKind(name), statuses: []) }
        guard name == "http_status", let status = Int(parts[1]), (100...599).contains(status) else {
            throw PipelineError(.invalidOption, "on_failure: '\(text)': only http_status takes a status (such as http_status:404)")
        }
        return Match(kind: .httpStatus, statuses: [status])
    }

    /// Throws when `template` uses a placeholder this policy does not fill.
    static func check(_ template: String) throws {
        let used = template.matches(of: /\{([a-z]+)\}/).map { String($0.1) }
        if let unknown = used.first(where: { !placeholders.contains($0) }) {
            throw PipelineError(.invalidOption, "on_failure: '{\(unknown)}' in '\(template)' is not one of "
                + placeholders.map { "{\($0)}" }.joined(separator: " "))
        }
    }

    /// Whether the policy applies to `failure`.
    public func applies(to failure: PipelineError) -> Bool {
        let status = failure.message.firstMatch(of: /^HTTP (\d{3})/).flatMap { Int($0.1) }
        return matches.contains { match in
            guard match.kind == failure.kind else { return false }
            return match.statuses.isEmpty || status.map(match.statuses.contains) == true
        }
    }

    /// `template` with the parts of `source` in place of its placeholders.
    public static func render(_ template: String, source: String) -> String {
        let url = URL(string: source)
        let isURL = url?.scheme != nil && url?.host != nil
        let path = isURL ? (url!.path.isEmpty ? "/" : url!.path) : source
        let name = (path as NSString).lastPathComponent
        let values: [String: String] = [
            "url": source, "scheme": isURL ? url!.scheme! : "", "host": isURL ? url!.host! : "",
            "path": path, "query": url?.query.map { "?" + $0 } ?? "", "name": name,
            "stem": (name as NSString).deletingPathExtension, "ext": (name as NSString).pathExtension,
            "dir": (path as NSString).deletingLastPathComponent,
        ]
        var out = template
        for (key, value) in values { out = out.replacingOccurrences(of: "{\(key)}", with: value) }
        return out
    }
}
