import Foundation
import MagickKit
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

    /// Renders a screened SVG with ImageMagick's own renderer.
    ///
    /// ImageMagick 6 first offers any SVG to an external program (its `svg:decode` delegate,
    /// Inkscape); PipelineKit's security policy forbids delegates, so that attempt is refused, no
    /// program runs, and ImageMagick falls back to its internal renderer. Two side effects are
    /// dealt with here: the refusal is reported as an error although the image was rendered, and
    /// the symbolic link made for the program's input is left behind in the temporary directory.
    static func render(_ data: Data, into wand: Wand) throws {
        let temporary = temporaryDirectory()
        let before = Set(links(in: temporary))
        defer {
            for name in links(in: temporary) where !before.contains(name) {
                unlink((temporary as NSString).appendingPathComponent(name))
            }
        }
        try wand.read(data, format: "MSVG")
        guard wand.frameCount > 0 else { throw PipelineError(.decodeFailed, "the SVG rendered no image") }
        if let (severity, message) = wand.pendingException(), severity.rawValue >= 400,
           !message.contains("not allowed by the security policy") {
            throw PipelineError(.decodeFailed, message)
        }
    }

    /// The size the root `<svg>` element declares (`width`/`height` in pixels, else the `viewBox`),
    /// for the decoder's limits; ImageMagick's own ping would already start rendering. 100x100
    /// (ImageMagick's default) when it declares none.
    static func declaredSize(_ data: Data) -> PixelSize {
        let text = String(decoding: data.prefix(65_536), as: UTF8.self)
        guard let open = text.range(of: "<svg", options: .caseInsensitive),
              let close = text.range(of: ">", range: open.upperBound..<text.endIndex) else { return PixelSize(width: 100, height: 100) }
        let tag = String(text[open.upperBound..<close.lowerBound])
        func attribute(_ name: String) -> String? {
            guard let found = tag.range(of: #"(^|\s)\#(name)\s*=\s*["']([^"']*)["']"#, options: .regularExpression) else { return nil }
            let value = tag[found].split(separator: "=", maxSplits: 1).last ?? ""
            return value.trimmingCharacters(in: CharacterSet(charactersIn: "\"' \t\n"))
        }
        func number(_ text: String?) -> Double? {
            guard let text else { return nil }
            return Double(text.prefix(while: { $0.isNumber || $0 == "." || $0 == "-" }))
        }
        let box = attribute("viewBox")?.split(whereSeparator: { $0 == " " || $0 == "," }).compactMap { Double($0) }
        let width = number(attribute("width")) ?? (box?.count == 4 ? box![2] : nil) ?? 100
        let height = number(attribute("height")) ?? (box?.count == 4 ? box![3] : nil) ?? 100
        return PixelSize(width: Int(min(1e9, max(0, width)).rounded(.up)), height: Int(min(1e9, max(0, height)).rounded(.up)))
    }

    /// ImageMagick's temporary directory, found as it finds it.
    static func temporaryDirectory() -> String {
        let environment = ProcessInfo.processInfo.environment
        for key in ["MAGICK_TEMPORARY_PATH", "MAGICK_TMPDIR", "TMPDIR"] {
            if let value = environment[key], !value.isEmpty { return value }
        }
        return "/tmp"
    }

    /// Names of ImageMagick's symbolic links (`magick-*`) in `directory`.
    static func links(in directory: String) -> [String] {
        let names = (try? FileManager.default.contentsOfDirectory(atPath: directory)) ?? []
        return names.filter { name in
            guard name.hasPrefix("magick-") else { return false }
            var info = stat()
            return lstat((directory as NSString).appendingPathComponent(name), &info) == 0 && (info.st_mode & S_IFMT) == S_IFLNK
        }
    }
}
