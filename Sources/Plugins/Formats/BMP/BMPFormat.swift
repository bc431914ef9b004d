import Foundation
import PipelineKit

/// BMP: its row in ``FormatTable`` (ImageMagick's coder reads it) and its header probe.
enum BMPFormat {
    static let entry = FormatEntry(name: "bmp", formats: [.bmp], dimensions: dimensions)

    /// The size in the info header: OS/2's 16-bit one (12 bytes), or Windows' signed 32-bit one
    /// (a negative height is a top-down bitmap).
    @Sendable static func dimensions(_ data: Data) -> PixelSize? {
        let head = HeadBytes(data)
        guard head.count >= 26 else { return nil }
        if head.le32(14) == 12 { return PixelSize(width: head.le16(18), height: head.le16(20)) }
        let height = Int(Int32(bitPattern: UInt32(head.le32(22))))
        return PixelSize(width: Int(Int32(bitPattern: UInt32(head.le32(18)))), height: abs(height))
    }
}
