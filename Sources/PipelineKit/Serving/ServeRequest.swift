import Foundation

/// One request to `pipelinectl serve`, read from its target:
/// `/{signature}/{pipeline}[/{variant}]/{source}[?name=value&...]`.
///
/// The source is written plain (`https://img.example.com/a.jpg`), percent-encoded, or as `b64:`
/// and its base64url; a source with a query of its own must be encoded, since the request's query
/// holds the pipeline's parameters. What the signature covers is everything after it: the path
/// from the pipeline's name on, and the query as sent.
public struct ServeRequest: Sendable {
    public let signature: String
    public let pipeline: String
    public let variant: String?
    public let source: String
    /// The query's parameters, percent-decoded, in the order sent (`expires` included).
    public let parameters: [(name: String, value: String)]
    /// The part of the target the signature covers.
    public let signed: String

    /// Reads `target` (the raw request target); `hasVariants` says, for a pipeline's name, whether it
    /// has variants (so that the next segment names one), or `nil` when no pipeline has that name.
    /// Throws a `notFound` error for an unknown pipeline, `invalidSource` for a malformed target.
    public init(target: String, hasVariants: (String) -> Bool?) throws {
        let (path, query) = Self.split(target)
        guard path.hasPrefix("/") else { throw PipelineError(.invalidSource, "the path must start with '/'") }
        let segments = path.dropFirst().split(separator: "/", maxSplits: 1, omittingEmptySubsequences: false)
        guard segments.count == 2, !segments[0].isEmpty else {
            throw PipelineError(.invalidSource, "expected /SIGNATURE/PIPELINE[/VARIANT]/SOURCE")
        }
        signature = String(segments[0])
        signed = "/" + segments[1] + (query.map { "?" + $0 } ?? "")
        var rest = Substring(segments[1])
        func next() throws -> String {
            guard let slash = rest.firstIndex(of: "/") else {
                throw PipelineError(.invalidSource, "expected /SIGNATURE/PIPELINE[/VARIANT]/SOURCE")
            }
            let segment = String(rest[..<slash])
            rest = rest[rest.index(after: slash)...]
            return segment.removingPercentEncoding ?? segment
        }
        pipeline = try next()
        guard let variants = hasVariants(pipeline) else {
            throw PipelineError(.notFound, "no pipeline '\(pipeline)' is served here")
        }
        variant = variants ? try next() : nil
        source = try Self.decodeSource(String(rest))
        parameters = try Self.parameters(query)
    }

    /// The path and the query of a target (the query `nil` when there is none or it is empty).
    static func split(_ target: String) -> (String, String?) {
        guard let mark = target.firstIndex(of: "?") else { return (target, nil) }
        let query = String(target[target.index(after: mark)...])
        return (String(target[..<mark]), query.isEmpty ? nil : query)
    }

    /// The source as written in the path: `b64:` and base64url, or percent-encoded text.
    static func decodeSource(_ text: String) throws -> String {
        guard !text.isEmpty else { throw PipelineError(.invalidSource, "the request names no source") }
        var source: String
        if text.hasPrefix("b64:") {
            guard let data = SigningKeys.base64URLDecode(String(text.dropFirst(4))), let decoded = String(data: data, encoding: .utf8) else {
                throw PipelineError(.invalidSource, "the source after 'b64:' is not base64url of UTF-8 text")
            }
            source = decoded
        } else {
            guard let decoded = text.removingPercentEncoding else {
                throw PipelineError(.invalidSource, "the source has a malformed percent-encoding")
            }
            source = decoded
        }
        // A proxy may have merged the two slashes of `https://`.
        for scheme in ["http:/", "https:/", "s3:/"] where source.hasPrefix(scheme) && !source.hasPrefix(scheme + "/") {
            source.insert("/", at: source.index(source.startIndex, offsetBy: scheme.count))
        }
        guard !source.contains(where: { $0.isNewline || $0 == "\0" }) else {
            throw PipelineError(.invalidSource, "the source contains a line break or NUL")
        }
        return source
    }

    static func parameters(_ query: String?) throws -> [(name: String, value: String)] {
        guard let query else { return [] }
        return try query.split(separator: "&", omittingEmptySubsequences: true).map { pair in
            let parts = pair.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false).map(String.init)
            guard let name = parts[0].removingPercentEncoding, !name.isEmpty,
                  let value = (parts.count > 1 ? parts[1] : "").replacingOccurrences(of: "+", with: " ").removingPercentEncoding else {
                throw PipelineError(.invalidSource, "the query parameter '\(pair)' is malformed")
            }
            return (name, value)
        }
    }

    /// The path (without the signature) that asks `pipeline` for `source`: the source
    /// percent-encoded (but for `/`, `:` and `;`, which a path may hold as they are, and which
    /// Vapor's request URL turns back from `%3B` into `;`, so that a signature over `%3B` would
    /// not match there), the parameters sorted by name, then `v` (a version of the source, which
    /// only makes the URL new) and `expires` (Unix seconds) when given.
    public static func path(pipeline: String, variant: String?, source: String, parameters: [String: String],
                            expires: Int? = nil, version: String? = nil) -> String {
        var path = "/" + encode(pipeline, allowing: "") + (variant.map { "/" + encode($0, allowing: "") } ?? "")
        path += "/" + encode(source, allowing: "/:;")
        var pairs = parameters.sorted { $0.key < $1.key }.map { encode($0.key, allowing: "") + "=" + encode($0.value, allowing: ",") }
        if let version { pairs.append("v=" + encode(version, allowing: "")) }
        if let expires { pairs.append("expires=\(expires)") }
        return pairs.isEmpty ? path : path + "?" + pairs.joined(separator: "&")
    }

    /// Where the service answers facts: `/info/SIGNATURE/PIPELINE/SOURCE`.
    public static let infoPrefix = "/info/"

    /// What the signature of a facts request covers: `info:` and the path after the signature,
    /// which no image request's signed text can be (those start with `/`).
    public static func infoSigned(_ signed: String) -> String { "info:" + signed }

    /// `text` percent-encoded as one path segment (only unreserved characters kept).
    public static func pathSegment(_ text: String) -> String { encode(text, allowing: "") }

    static func encode(_ text: String, allowing extra: String) -> String {
        var allowed = CharacterSet(charactersIn: "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-._~")
        allowed.insert(charactersIn: extra)
        return text.addingPercentEncoding(withAllowedCharacters: allowed) ?? text
    }
}
