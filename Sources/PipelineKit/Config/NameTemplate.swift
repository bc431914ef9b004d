
import Foundation

/// An output file name template such as `{stem}-{hash8}.{ext}`.
///
/// Placeholders:
/// - `{stem}`: the last path component of the source without its extension, reduced to
///   `A-Z a-z 0-9 . _ -` (anything else becomes `_`; empty becomes `image`);
/// - `{hash}` / `{hash8}`: hex SHA-256 of the source's cache key, whole or its first 8 digits;
/// - `{index}`: the 1-based line number in the URL list;
/// - `{ext}`: the encoder's file extension;
/// - `{variant}`: the variant's name (empty without variants);
/// - `{width}`: the output's width in pixels, in a variant with breakpoints by bytes (``BytesBreakpoints``).
///
/// A template may contain `/` to make subdirectories, but never an absolute path or a `..`
/// component, and placeholder values never contain `/`: a name cannot escape the output directory.
public struct NameTemplate: Sendable, Hashable, CustomStringConvertible {
    enum Part: Sendable, Hashable {
        case literal(String)
        case placeholder(String)
    }

    /// The default: collision-free, since the full hash differs for every distinct source.
    public static let defaultText = "{stem}-{hash}.{ext}"
    /// The default when the pipeline has variants.
    public static let defaultVariantText = "{stem}-{hash}-{variant}.{ext}"
    /// The default name of an item's facts sidecar (`output.facts_sidecar`).
    public static let defaultFactsText = "{stem}-{hash8}.json"
    /// Placeholder names a template may use.
    public static let placeholders = ["stem", "hash", "hash8", "index", "ext", "variant", "width"]

    let parts: [Part]
    public let text: String
    public var description: String { text }

    /// Whether two sources can plausibly get the same name: the template has none of `{hash}`,
    /// `{hash8}` or `{index}`. (`{hash8}` is 32 bits: clashes are rare but possible in lists of
    /// millions; the engine reports them as `output_collision`.)
    public var mayCollide: Bool {
        !parts.contains { $0 == .placeholder("hash") || $0 == .placeholder("hash8") || $0 == .placeholder("index") }
    }

    /// Whether two different sources always get different names (the template uses `{hash}` or `{index}`).
    public var isCollisionFree: Bool {
        parts.contains { $0 == .placeholder("hash") || $0 == .placeholder("index") }
    }

    /// Parses `text`; throws a message (without position) when it is malformed.
    public init(_ text: String) throws {
        self.text = text
        var parts: [Part] = []
        var literal = ""
        var index = text.startIndex
        while index < text.endIndex {
            let char = text[index]
            if char == "{" {
                guard let close = text[index...].firstIndex(of: "}") else {
                    throw PipelineError(.invalidTemplate, "unclosed '{' in name template '\(text)'")
                }
                let name = String(text[text.index(after: index)..<close])
                guard NameTemplate.placeholders.contains(name) else {
                    throw PipelineError(.invalidTemplate, "unknown placeholder '{\(name)}' in name template"
                        + Suggest.hint(for: name, in: NameTemplate.placeholders))
                }
                if !literal.isEmpty { parts.append(.literal(literal)); literal = "" }
                parts.append(.placeholder(name))
                index = text.index(after: close)
            } else if char == "}" {
                throw PipelineError(.invalidTemplate, "unmatched '}' in name template '\(text)'")
            } else {
                literal.append(char)
                index = text.index(after: index)
            }
        }
        if !literal.isEmpty { parts.append(.literal(literal)) }
        self.parts = parts
        if text.isEmpty { throw PipelineError(.invalidTemplate, "the name template is empty") }
        if text.hasPrefix("/") || text.hasPrefix("~") {
            throw PipelineError(.invalidTemplate, "the name template must be relative to the output directory")
        }
        for part in parts {
            guard case .literal(let lit) = part else { continue }
            if lit.contains("\0") || lit.contains("\\") {
                throw PipelineError(.invalidTemplate, "the name template may not contain NUL or '\\'")
            }
        }
        let components = text.split(separator: "/", omittingEmptySubsequences: false)
        if components.contains(where: { $0 == ".." || $0 == "." || $0.isEmpty }) {
            throw PipelineError(.invalidTemplate, "the name template may not contain empty, '.' or '..' path components")
        }
    }

    /// The placeholders this template uses.
    public var placeholdersUsed: [String] {
        parts.compactMap { if case .placeholder(let name) = $0 { return name } else { return nil } }
    }

    /// The relative output path for one item (`{width}` empty).
    public func render(source: Source, cacheKey: String, fileExtension: String, variant: String? = nil) -> String {
        render(source: source, cacheKey: cacheKey, fileExtension: fileExtension, variant: variant, width: nil)
    }

    /// The relative output path for one output of an item; `width`: the output's width, for
    /// `{width}` (empty when `nil`).
    public func render(source: Source, cacheKey: String, fileExtension: String, variant: String?, width: Int?) -> String {
        var hashHex: String?
        func hash() -> String {
            if let hashHex { return hashHex }
            let digest = Hashing.sha256Hex(cacheKey)
            hashHex = digest
            return digest
        }
        var out = ""
        for part in parts {
            switch part {
            case .literal(let text): out += text
            case .placeholder("stem"): out += NameTemplate.stem(of: source.text)
            case .placeholder("hash"): out += hash()
            case .placeholder("hash8"): out += String(hash().prefix(8))
            case .placeholder("index"): out += String(source.index)
            case .placeholder("ext"): out += NameTemplate.safe(fileExtension)
            case .placeholder("variant"): out += NameTemplate.safe(variant ?? "")
            case .placeholder("width"): out += width.map(String.init) ?? ""
            case .placeholder: break
            }
        }
        return out
    }

    /// The last path component of a URL or path without extension or query, in safe characters.
    static func stem(of text: String) -> String {
        var path = text
        if Source.scheme(of: text) == "data" { return "data" }
        if let components = URLComponents(string: text), components.scheme != nil {
            path = components.percentEncodedPath.removingPercentEncoding ?? components.percentEncodedPath
            // A custom scheme's identifier is often all host (catalog://SKU-1001): use it.
            if path.isEmpty, let host = components.host { path = host }
        }
        let last = path.split(separator: "/").last.map(String.init) ?? ""
        var base = last
        if let dot = last.lastIndex(of: "."), dot != last.startIndex { base = String(last[..<dot]) }
        let cleaned = safe(base)
        return cleaned.isEmpty ? "image" : String(cleaned.prefix(80))
    }

    /// `text` with every character outside `A-Z a-z 0-9 . _ -` replaced by `_`, and no leading dot.
    static func safe(_ text: String) -> String {
        var out = ""
        for scalar in text.unicodeScalars {
            let ok = (scalar >= "a" && scalar <= "z") || (scalar >= "A" && scalar <= "Z")
                || (scalar >= "0" && scalar <= "9") || scalar == "." || scalar == "_" || scalar == "-"
            out.unicodeScalars.append(ok ? scalar : "_")
        }
        while out.hasPrefix(".") { out.removeFirst() }
        return out
    }
}
