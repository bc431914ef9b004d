import Foundation

/// The item references of a HEIF/AVIF file's `meta` box, read before libheif decodes it: an image
/// derived from itself (a grid or overlay whose `dimg` references lead back to it) sends libheif
/// 1.15 into endless recursion, which ends the process (fuzzing found it). Such files, and
/// derivations nested deeper than any real file has, are refused first.
enum HEIFReferences {
    /// Deepest derivation accepted: a grid of overlays of grids is already more than files have.
    static let maxDepth = 8

    /// Why `data`'s primary image cannot be decoded safely, or `nil`.
    static func problem(_ data: Data) -> String? {
        let bytes = [UInt8](data)
        guard let meta = box("meta", in: bytes, from: 0, to: bytes.count), meta.body + 4 <= meta.end else { return nil }
        let start = meta.body + 4  // a full box: version and flags first
        guard let pitm = box("pitm", in: bytes, from: start, to: meta.end), pitm.body + 4 < pitm.end else { return nil }
        let primary = bytes[pitm.body] == 0 ? number(bytes, pitm.body + 4, 2) : number(bytes, pitm.body + 4, 4)
        guard let primary, let iref = box("iref", in: bytes, from: start, to: meta.end), iref.body + 4 <= iref.end else { return nil }
        let width = bytes[iref.body] == 0 ? 2 : 4
        var derived: [Int: [Int]] = [:]
        var at = iref.body + 4
        while let header = boxHeader(bytes, at, iref.end) {
            if header.type == "dimg", let from = number(bytes, header.body, width), let count = number(bytes, header.body + width, 2) {
                for k in 0..<count {
                    if let to = number(bytes, header.body + width + 2 + k * width, width), header.body + width + 2 + (k + 1) * width <= header.end {
                        derived[from, default: []].append(to)
                    }
                }
            }
            at = header.end
        }
        // Depth-first from the primary image along 'dimg'.
        var path: [Int] = []
        func visit(_ item: Int) -> String? {
            if path.contains(item) { return "HEIF: image \(item) is derived from itself (its 'dimg' references form a cycle)" }
            if path.count >= maxDepth { return "HEIF: the primary image is derived more than \(maxDepth) levels deep" }
            path.append(item)
            defer { path.removeLast() }
            for next in derived[item] ?? [] { if let found = visit(next) { return found } }
            return nil
        }
        return visit(primary)
    }

    struct Header { let type: String; let body: Int; let end: Int }

    /// The box at `at` (before `limit`): its type, where its body starts and where it ends.
    static func boxHeader(_ bytes: [UInt8], _ at: Int, _ limit: Int) -> Header? {
        guard at >= 0, at + 8 <= limit, let size32 = number(bytes, at, 4) else { return nil }
        let type = String(decoding: bytes[(at + 4)..<(at + 8)], as: UTF8.self)
        var size = size32, body = at + 8
        if size32 == 1 {
            guard let large = number(bytes, at + 8, 8) else { return nil }
            size = large
            body = at + 16
        } else if size32 == 0 {
            size = limit - at
        }
        guard size >= body - at, size <= limit - at else { return nil }
        return Header(type: type, body: body, end: at + size)
    }

    /// The first box of `type` among those from `from` to `to`.
    static func box(_ type: String, in bytes: [UInt8], from: Int, to: Int) -> Header? {
        var at = from
        while let header = boxHeader(bytes, at, to) {
            if header.type == type { return header }
            at = header.end
        }
        return nil
    }

    /// A big-endian number of `width` bytes at `at`, or `nil` past the end (or beyond Int's range).
    static func number(_ bytes: [UInt8], _ at: Int, _ width: Int) -> Int? {
        guard at >= 0, at + width <= bytes.count else { return nil }
        var value: UInt64 = 0
        for k in 0..<width { value = value << 8 | UInt64(bytes[at + k]) }
        return value > UInt64(Int.max) ? nil : Int(value)
    }
}
