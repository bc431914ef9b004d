import Foundation
import PipelineKit

/// PNG: its row in ``FormatTable``, its header probe and chunk walker, and its fuzz target.
enum PNGFormat {
    static let entry = FormatEntry(
        name: "png", formats: [.png],
        // A local file is read in place by the reduced path (libpng a megabyte at a time).
        reader: { _, loaded, _ in
            if let file = loaded.file { return try PNGReader(.file(file), head: loaded.data) }
            let data = try loaded.wholeData()
            return try PNGReader(.memory(data), head: data)
        },
        dimensions: dimensions,
        encoders: [PNGEncoder.plugin],
        fuzzTargets: ["png": fuzz])

    /// The signature, IHDR's length and type, then its width and height.
    @Sendable static func dimensions(_ data: Data) -> PixelSize? {
        let head = HeadBytes(data)
        guard head.count >= 24, head.text(12..<16) == "IHDR" else { return nil }
        return PixelSize(width: head.be32(16), height: head.be32(20))
    }

    /// The data of the first chunk of `type` in PNG `data`, walking chunk by chunk (lengths checked).
    static func chunk(_ type: String, in data: Data) -> Data? {
        chunks(type, in: data) { _ in true }
    }

    /// The data of the first chunk of `type` that `accept` takes (every chunk's length is checked
    /// against the file's).
    static func chunks(_ type: String, in data: Data, first accept: (Data) -> Bool) -> Data? {
        let wanted = Array(type.utf8), end = Array("IEND".utf8)
        var at = data.startIndex + 8
        while at + 12 <= data.endIndex {
            let length = Int(data[at]) << 24 | Int(data[at + 1]) << 16 | Int(data[at + 2]) << 8 | Int(data[at + 3])
            guard length <= data.endIndex - at - 12 else { return nil }
            let name = Array(data[(at + 4)..<(at + 8)])
            if name == wanted {
                let body = Data(data[(at + 8)..<(at + 8 + length)])
                if accept(body) { return body }
            }
            if name == end { return nil }
            at += 12 + length
        }
        return nil
    }

    /// The XMP packet of an iTXt chunk with the keyword `XML:com.adobe.xmp`, as XMP's PNG part
    /// says to store it (uncompressed: a compressed one is left unread).
    static func xmp(in data: Data) -> Data? {
        let keyword = Data("XML:com.adobe.xmp\0".utf8)
        guard let chunk = chunks("iTXt", in: data, first: { $0.starts(with: keyword) }) else { return nil }
        // keyword NUL, compression flag, method, language NUL, translated keyword NUL, text.
        var at = chunk.startIndex + keyword.count
        guard at + 2 <= chunk.endIndex, chunk[at] == 0 else { return nil }
        at += 2
        for _ in 0..<2 {
            guard let nul = chunk[at...].firstIndex(of: 0) else { return nil }
            at = nul + 1
        }
        return at < chunk.endIndex ? Data(chunk[at...]) : nil
    }

    /// The PNG reduce-on-load reader (libpng on the file, or on the copy libdeflate inflated, every
    /// other input each; and the zlib stream inflated in parts: small parts, so that guesses and
    /// joins are exercised), and the whole-image reader (libpng through our shim).
    @Sendable static func fuzz(_ data: Data) {
        guard FuzzTargets.fits(dimensions(data)) else { return }
        let failOn = FailOn.allCases[data.count % 4]
        _ = try? PNGReducer.decode(.memory(data), factor: 1 + data.count % 3, toSRGB: data.count % 2 == 0, failOn: failOn,
                                   inflating: data.count / 2 % 2 == 0)
        _ = PNGParts.rows(.memory(data), partBytes: 1024 << (data.count % 4)) { _ in }
        _ = try? PNGReducer.decodeWhole(data, failOn: failOn)
    }
}
