import Foundation

/// A file's first bytes read as numbers, for the header probes of the formats' folders: every
/// read past the end is zero, so a probe checks `count` once and cannot run out of bounds.
struct HeadBytes {
    let b: [UInt8]
    init(_ data: Data, count: Int = 64) { b = [UInt8](data.prefix(count)) }

    var count: Int { b.count }
    func byte(_ i: Int) -> Int { i >= 0 && i < b.count ? Int(b[i]) : 0 }
    func be16(_ i: Int) -> Int { byte(i) << 8 | byte(i + 1) }
    func le16(_ i: Int) -> Int { byte(i + 1) << 8 | byte(i) }
    func be32(_ i: Int) -> Int { be16(i) << 16 | be16(i + 2) }
    func le32(_ i: Int) -> Int { le16(i + 2) << 16 | le16(i) }
    func le24(_ i: Int) -> Int { byte(i + 2) << 16 | byte(i + 1) << 8 | byte(i) }
    /// The bytes at `range` as ASCII text (a chunk's or box's type).
    func text(_ range: Range<Int>) -> String { String(decoding: range.map { UInt8(byte($0)) }, as: UTF8.self) }
}
