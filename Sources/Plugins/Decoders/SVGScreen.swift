import Foundation
import PipelineKit

/// Refuses SVG documents that could make ImageMagick read or fetch anything but the document.
///
/// ImageMagick renders SVG by turning it into its own drawing language, where an `<image>` or a
/// `url()` names a file or URL to read (the ImageTragick family of attacks), and its XML parser
/// would expand external entities. Only self-contained documents pass: no DOCTYPE with entities
/// or external identifiers, no reference other than to an element of the same document (`#id`),
/// no `@import`, no `<script>` and no `<foreignObject>`.
enum SVGScreen {
    /// Throws `unsupported_format` naming the first thing that is refused.
    static func check(_ data: Data) throws {
        guard let text = String(data: data, encoding: .utf8) else {
            throw PipelineError(.unsupportedFormat, "the SVG is not UTF-8 text")
        }
        let lower = text.lowercased()
        func refuse(_ what: String) -> PipelineError {
            PipelineError(.unsupportedFormat, "the SVG \(what); only self-contained SVG is accepted")
        }
        if let doctype = lower.range(of: "<!doctype") {
            let rest = lower[doctype.upperBound...].prefix(while: { $0 != ">" })
            if rest.contains("[") || rest.contains("system") || rest.contains("public") {
                throw refuse("declares entities or an external DTD")
            }
        }
        if lower.contains("<!entity") { throw refuse("declares entities") }
        if lower.contains("<script") { throw refuse("contains a script") }
        if lower.contains("<foreignobject") { throw refuse("contains a foreignObject") }
        if lower.contains("@import") { throw refuse("imports a style sheet") }
        // Every href (plain or xlink:) must point inside the document.
        var search = lower.startIndex..<lower.endIndex
        while let found = lower.range(of: "href", range: search) {
            var i = found.upperBound
            while i < lower.endIndex, lower[i].isWhitespace { i = lower.index(after: i) }
            if i < lower.endIndex, lower[i] == "=" {
                i = lower.index(after: i)
                while i < lower.endIndex, lower[i].isWhitespace { i = lower.index(after: i) }
                if i < lower.endIndex, lower[i] == "\"" || lower[i] == "'" { i = lower.index(after: i) }
                if i >= lower.endIndex || lower[i] != "#" {
                    let value = lower[i...].prefix(while: { $0 != "\"" && $0 != "'" && $0 != ">" }).prefix(60)
                    throw refuse("refers to '\(value)' (only #fragment references are allowed)")
                }
            }
            search = found.upperBound..<lower.endIndex
        }
        var urls = lower.startIndex..<lower.endIndex
        while let found = lower.range(of: "url(", range: urls) {
            let value = lower[found.upperBound...].drop(while: { $0 == " " || $0 == "\"" || $0 == "'" })
            if value.first != "#" { throw refuse("refers to url(\(value.prefix(while: { $0 != ")" }).prefix(60)))") }
            urls = found.upperBound..<lower.endIndex
        }
    }
}
