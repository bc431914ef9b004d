import Foundation
import PipelineKit

/// What every ImageMagick-backed encoder does: work on a copy, flatten alpha where the format has
/// none, strip metadata, write 8 bits per channel with an explicit coder.
struct MagickEncoding: Sendable {
    let format: String
    let quality: Int?
    let strip: Bool
    /// The colour alpha is flattened onto, for formats without alpha; `nil` keeps alpha.
    let flattenOnto: String?
    let coderOptions: [String: String]

    func encode(_ image: Image) throws -> Data {
        try image.withCopy { wand in
            if let flattenOnto { try wand.flatten(onto: flattenOnto) }
            if strip { try wand.strip() }
            return try wand.encode(format: format, quality: quality, depth: 8, options: coderOptions)
        }
    }

    /// Throws at validation time when this ImageMagick cannot write `format`.
    static func requireWriter(_ format: String) throws {
        guard Magick.canWrite(format) else {
            throw PipelineError(.unsupportedFormat, "this ImageMagick build cannot write \(format)")
        }
    }
}
