import Crypto
import Foundation

/// The cache tags a served answer carries (`Surrogate-Key` for Varnish's xkey and Fastly,
/// `Cache-Tag` for Cloudflare), so that a CDN can drop every answer of one source, pipeline or
/// variant at once; `pipelinectl cache purge` names the same tags to the purgers.
///
/// A source's tag is a hash of the source as requested (a URL may be longer than a CDN takes
/// and hold characters a tag may not): `PREFIXs-` and 24 hex digits of its SHA-256. A
/// pipeline's is `PREFIXp-NAME`, a variant's `PREFIXv-PIPELINE.VARIANT`.
public struct CacheTags: Sendable, Equatable {
    /// What an answer is tagged with.
    public enum Kind: String, Sendable, CaseIterable {
        case source, pipeline, variant
    }

    /// The tags answers carry (default: all three kinds).
    public var kinds: [Kind] = Kind.allCases
    /// The response headers the tags go in (default `Surrogate-Key`, space-separated, and
    /// `Cache-Tag`, comma-separated); empty: answers carry no tags.
    public var headers: [String] = ["Surrogate-Key", "Cache-Tag"]
    /// Put before every tag, to keep several services' tags apart on one CDN.
    public var prefix = "pk-"

    public init() {}

    /// The tag of `source`, as a request names it (its query kept: it may choose the object).
    public func source(_ source: String) -> String {
        let digest = SHA256.hash(data: Data(source.utf8))
        return prefix + "s-" + digest.prefix(12).map { String(format: "%02x", $0) }.joined()
    }

    /// The tag of every answer of `pipeline`.
    public func pipeline(_ pipeline: String) -> String { prefix + "p-" + Self.clean(pipeline) }

    /// The tag of every answer of one variant.
    public func variant(_ variant: String, of pipeline: String) -> String {
        prefix + "v-" + Self.clean(pipeline) + "." + Self.clean(variant)
    }

    /// The tags of one answer, in the order of ``kinds``.
    public func tags(source: String, pipeline: String, variant: String?) -> [String] {
        kinds.compactMap { kind in
            switch kind {
            case .source: return self.source(source)
            case .pipeline: return self.pipeline(pipeline)
            case .variant: return variant.map { self.variant($0, of: pipeline) }
            }
        }
    }

    /// The header lines that carry `tags`: space-separated, but comma-separated in `Cache-Tag`
    /// (Cloudflare's form).
    public func headerLines(_ tags: [String]) -> [(String, String)] {
        guard !tags.isEmpty else { return [] }
        return headers.map { name in (name, tags.joined(separator: name.lowercased() == "cache-tag" ? "," : " ")) }
    }

    /// Letters, digits, `_`, `-` and `.` kept; anything else becomes `_` (tags hold no spaces or commas).
    static func clean(_ text: String) -> String {
        String(text.map { $0.isASCII && ($0.isLetter || $0.isNumber || $0 == "_" || $0 == "-" || $0 == ".") ? $0 : "_" })
    }
}

extension Pipeline {
    /// The paths of the answers `serve` gives for `source` that can be named without a request:
    /// each variant (or the pipeline as written), without a width and at each declared width,
    /// signed with `keys` (`/SIGNATURE/PIPELINE[/VARIANT]/SOURCE[?W=…]`). Answers to URLs with
    /// other parameters cannot be listed; tags reach those.
    public func servedPaths(source: String, keys: SigningKeys) -> [String] {
        let variants: [String?] = hasVariants ? variants.compactMap(\.name) : [nil]
        let widths: [Int?] = [nil] + (serve.breakpoints?.widths ?? []).map { $0 }
        var paths: [String] = []
        for variant in variants {
            for width in widths {
                let parameters = width.map { [serve.breakpoints!.param: String($0)] } ?? [:]
                let path = ServeRequest.path(pipeline: name, variant: variant, source: source, parameters: parameters)
                paths.append("/" + keys.sign(path) + path)
            }
        }
        return paths
    }

    /// What `cache purge` asks this pipeline's purgers for `sources`.
    public func purgeRequest(sources: [String], keys: SigningKeys?) -> PurgeRequest {
        PurgeRequest(sources: sources, tags: sources.map { serve.cacheTags.source($0) },
                     paths: keys.map { keys in sources.flatMap { servedPaths(source: $0, keys: keys) } } ?? [])
    }
}
