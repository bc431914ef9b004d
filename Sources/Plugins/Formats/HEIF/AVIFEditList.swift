import Foundation
import PipelineKit

/// The loop count of an AVIF sequence, written as libavif 1.0 writes it and as Chromium and
/// libavif's readers take it: an edit list (`edts`/`elst`) in each track, whose one entry spans
/// the frames once, with the "repeat" flag unless the animation plays once, and track and movie
/// durations of every play (all ones for forever). libavif 0.11 writes no edit list.
///
/// The boxes are inserted into the `moov` box libavif wrote; because `moov` comes before `mdat`,
/// the file offsets that point past it (the `stco` chunk offsets, the `iloc` extents of the still
/// image) move by the bytes inserted.
enum AVIFEditList {
    struct Box {
        let type: String
        /// Where the box starts, and where its contents start and end, in the data it was read from.
        let start: Int, body: Int, end: Int
    }

    /// The boxes in `data[range]`; nil when one is malformed.
    static func boxes(_ data: Data, _ range: Range<Int>) -> [Box]? {
        var boxes: [Box] = [], at = range.lowerBound
        while at + 8 <= range.upperBound {
            var size = Int(read(data, at, 4)), body = at + 8
            if size == 1 {
                guard at + 16 <= range.upperBound else { return nil }
                size = Int(read(data, at + 8, 8))
                body = at + 16
            } else if size == 0 {
                size = range.upperBound - at
            }
            guard size >= body - at, at + size <= range.upperBound else { return nil }
            let type = String(decoding: data[data.startIndex + at + 4 ..< data.startIndex + at + 8], as: UTF8.self)
            boxes.append(Box(type: type, start: at, body: body, end: at + size))
            at += size
        }
        return at == range.upperBound ? boxes : nil
    }

    static func read(_ data: Data, _ at: Int, _ count: Int) -> UInt64 {
        (0..<count).reduce(UInt64(0)) { $0 << 8 | UInt64(data[data.startIndex + at + $1]) }
    }

    static func write(_ value: UInt64, _ count: Int, into data: inout Data, at: Int) {
        for index in 0..<count { data[data.startIndex + at + index] = UInt8(truncatingIfNeeded: value >> (8 * (count - 1 - index))) }
    }

    static func bytes(_ value: UInt64, _ count: Int) -> Data {
        var data = Data(count: count)
        write(value, count, into: &data, at: 0)
        return data
    }

    static func box(_ type: String, _ body: Data) -> Data { bytes(UInt64(8 + body.count), 4) + Data(type.utf8) + body }

    /// `data` (libavif 0.11's sequence) playing `plays` times, 0 for forever.
    static func settingLoops(_ data: Data, plays: Int) throws -> Data {
        let malformed = PipelineError(.encodeFailed, "AVIF sequence: libavif's file has no moov box before its mdat to take a loop count")
        guard let top = boxes(data, 0..<data.count), let moov = top.first(where: { $0.type == "moov" }),
              let mdat = top.first(where: { $0.type == "mdat" }), moov.end <= mdat.start,
              let children = boxes(data, moov.body..<moov.end),
              let mvhd = children.first(where: { $0.type == "mvhd" }), read(data, mvhd.body, 1) == 1 else { throw malformed }
        // Version 1 mvhd: creation and modification (8 each), timescale (4), duration (8).
        let once = read(data, mvhd.body + 4 + 16 + 4, 8)
        let total = plays == 0 ? UInt64.max : once * UInt64(plays)
        var rebuilt = Data()
        for child in children {
            var bytes = data.subdata(in: child.start..<child.end)
            if child.type == "mvhd" { write(total, 8, into: &bytes, at: child.body - child.start + 24) }
            if child.type == "trak" { bytes = try track(data, child, total: total, once: once, repeats: plays != 1) }
            rebuilt += bytes
        }
        var newMoov = box("moov", rebuilt)
        let shift = newMoov.count - (moov.end - moov.start)
        try shiftChunkOffsets(&newMoov, by: shift, past: moov.start)
        var out = data.subdata(in: 0..<moov.start) + newMoov + data.subdata(in: moov.end..<data.count)
        if let meta = top.first(where: { $0.type == "meta" }), meta.end <= moov.start {
            try shiftItemLocations(&out, meta: meta, by: shift, past: moov.start)
        }
        return out
    }

    /// A `trak` box with its `tkhd` duration set to `total` and an edit list after it.
    static func track(_ data: Data, _ trak: Box, total: UInt64, once: UInt64, repeats: Bool) throws -> Data {
        guard let children = boxes(data, trak.body..<trak.end), let tkhd = children.first(where: { $0.type == "tkhd" }),
              read(data, tkhd.body, 1) == 1, !children.contains(where: { $0.type == "edts" }) else {
            throw PipelineError(.encodeFailed, "AVIF sequence: a track of libavif's file is not as expected")
        }
        // One edit of the frames once, from media time 0 at rate 1; flag 1: repeat it.
        let elst = bytes(1 << 24 | (repeats ? 1 : 0), 4) + bytes(1, 4) + bytes(once, 8) + bytes(0, 8) + bytes(1, 2) + bytes(0, 2)
        var body = Data()
        for child in children {
            var bytes = data.subdata(in: child.start..<child.end)
            if child.type == "tkhd" {
                // Version 1 tkhd: creation, modification (8 each), track ID, reserved (4 each), duration.
                write(total, 8, into: &bytes, at: child.body - child.start + 4 + 16 + 8)
                bytes += box("edts", box("elst", elst))
            }
            body += bytes
        }
        return box("trak", body)
    }

    /// Adds `shift` to every `stco` entry of `moov` that points past `past`.
    static func shiftChunkOffsets(_ moov: inout Data, by shift: Int, past: Int) throws {
        func visit(_ range: Range<Int>) throws {
            guard let children = boxes(moov, range) else { throw PipelineError(.encodeFailed, "AVIF sequence: malformed moov") }
            for child in children {
                switch child.type {
                case "trak", "mdia", "minf", "stbl": try visit(child.body..<child.end)
                case "stco":
                    let count = Int(read(moov, child.body + 4, 4))
                    guard child.body + 8 + 4 * count <= child.end else { throw PipelineError(.encodeFailed, "AVIF sequence: malformed stco") }
                    for entry in 0..<count {
                        let at = child.body + 8 + 4 * entry, offset = read(moov, at, 4)
                        if offset >= UInt64(past) { write(offset + UInt64(shift), 4, into: &moov, at: at) }
                    }
                case "co64": throw PipelineError(.encodeFailed, "AVIF sequence: 64-bit chunk offsets are not moved")
                default: break
                }
            }
        }
        try visit(8..<moov.count)
    }

    /// Adds `shift` to the file offsets of `meta`'s `iloc` (construction method 0) past `past`.
    static func shiftItemLocations(_ file: inout Data, meta: Box, by shift: Int, past: Int) throws {
        let malformed = PipelineError(.encodeFailed, "AVIF sequence: malformed iloc")
        // meta is a full box: its children start 4 bytes into its contents.
        guard let iloc = boxes(file, meta.body + 4..<meta.end)?.first(where: { $0.type == "iloc" }) else { return }
        let version = Int(read(file, iloc.body, 1))
        var at = iloc.body + 4
        func field(_ size: Int) throws -> (at: Int, value: UInt64) {
            guard at + size <= iloc.end else { throw malformed }
            defer { at += size }
            return (at, size == 0 ? 0 : read(file, at, size))
        }
        let sizes = try field(1).value, more = try field(1).value
        let offsetSize = Int(sizes >> 4), lengthSize = Int(sizes & 15), baseSize = Int(more >> 4)
        let indexSize = version >= 1 ? Int(more & 15) : 0
        guard [0, 4, 8].contains(offsetSize), [0, 4, 8].contains(baseSize) else { throw malformed }
        let items = Int(try field(version < 2 ? 2 : 4).value)
        for _ in 0..<items {
            _ = try field(version < 2 ? 2 : 4)
            let method = version >= 1 ? Int(try field(2).value & 15) : 0
            _ = try field(2)
            let base = try field(baseSize)
            let extents = Int(try field(2).value)
            var moved = false
            if method == 0, baseSize > 0, base.value >= UInt64(past) {
                write(base.value + UInt64(shift), baseSize, into: &file, at: base.at)
                moved = true
            }
            for _ in 0..<extents {
                _ = try field(indexSize)
                let offset = try field(offsetSize)
                _ = try field(lengthSize)
                if method == 0, !moved, offsetSize > 0, base.value + offset.value >= UInt64(past) {
                    write(offset.value + UInt64(shift), offsetSize, into: &file, at: offset.at)
                }
            }
        }
    }
}
