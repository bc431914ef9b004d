import Foundation
import PipelineKit

/// `data`: decodes `data:` URLs (RFC 2397) in the list itself, base64 or percent-encoded.
public struct DataURLLoader: DataLoading {
    public static let plugin = Plugin.loader(
        PluginSpec(
            name: "data",
            summary: "Decodes data: URLs (base64 or percent-encoded) written in the list itself.",
            options: [
                .size("max_bytes", default: "50MB", min: "1B", doc: "Largest decoded payload accepted."),
            ]),
        schemes: ["data"]
    ) { options in DataURLLoader(maxBytes: options.bytes("max_bytes")!) }

    let maxBytes: Int
    public var usesDataCache: Bool { false }
    public var maxConcurrentLoads: Int { 8 }

    /// A data: URL is its own content: key it by a hash rather than by megabytes of text.
    public func cacheKey(for source: Source) -> String { "data:sha256:" + Hashing.sha256Hex(source.text) }

    public func load(_ source: Source) async throws -> LoadedData {
        let text = source.text
        guard let comma = text.firstIndex(of: ",") else {
            throw PipelineError(.invalidSource, "a data: URL needs a ',' before its payload")
        }
        let header = text[text.index(text.startIndex, offsetBy: 5)..<comma]
        let payload = String(text[text.index(after: comma)...])
        let parameters = header.split(separator: ";").map { $0.trimmingCharacters(in: .whitespaces) }
        let isBase64 = parameters.last?.lowercased() == "base64"
        let mediaType = parameters.first.flatMap { $0.contains("/") ? $0 : nil }
        // Base64 is 4 characters for 3 bytes: refuse before decoding what would be too large.
        guard payload.utf8.count / 4 * 3 <= maxBytes + 3 else {
            throw PipelineError(.tooLarge, "data: URL payload exceeds max_bytes (\(Units.formatSize(maxBytes)))")
        }
        let data: Data
        if isBase64 {
            guard let decoded = Data(base64Encoded: payload.removingPercentEncoding ?? payload, options: .ignoreUnknownCharacters) else {
                throw PipelineError(.invalidSource, "the data: URL's base64 payload is malformed")
            }
            data = decoded
        } else {
            guard let decoded = payload.removingPercentEncoding else {
                throw PipelineError(.invalidSource, "the data: URL's payload has malformed percent-encoding")
            }
            data = Data(decoded.utf8)
        }
        guard data.count <= maxBytes else {
            throw PipelineError(.tooLarge, "data: URL payload exceeds max_bytes (\(Units.formatSize(maxBytes)))")
        }
        return LoadedData(data: data, contentType: mediaType, directives: CacheDirectives(immutable: true))
    }
}
