import Foundation
import MagickKit
import PipelineKit

/// JPEG XL, read by libjxl (``JXLCodec``): ImageMagick 6 in Debian 12 has no JPEG XL coder, so
/// every decode is this reader's. The header is read once, when the reader is made. The first
/// frame of an animation is decoded.
///
/// Reduce-on-load: libjxl 0.7 decodes the whole picture (its progressive steps give an upsampled
/// preview, not a smaller picture), so the samples are averaged in blocks afterwards, as for
/// HEIF: what is saved is the resize's work on the full picture, not the decode's.
struct JXLReader: FormatReader {
    let format: ImageFormat
    let data: Data
    let header: JXLCodec.Header

    init(_ format: ImageFormat, _ data: Data) throws {
        self.format = format
        self.data = data
        guard let header = JXLCodec.header(data) else { throw JXLCodec.failure("the header cannot be read") }
        self.header = header
    }

    var size: PixelSize { header.size }

    func plan(_ hint: DecodeHint, _ settings: DecodeSettings) -> ReadPlan {
        let factor = settings.block(size, hint: hint, headroom: settings.headroom) ?? 1
        let data = self.data, limits = (settings.maxWidth, settings.maxHeight, settings.maxPixels)
        return ReadPlan(reduced: {
            let decoded = try JXLCodec.decode(data, sixteen: factor == 1, limits: limits)
            let wand = try Self.wand(decoded, factor: factor)
            if settings.toSRGB { try wand.convertToSRGB() }
            return (.wand(wand), nil)
        }, estimatedMemory: Self.estimatedMemory(header, factor: factor) + data.count)
    }

    /// Memory at the peak: libjxl's own and the decoded 8-bit samples, 7 bytes a pixel (9 with
    /// alpha), then either the reduced pixels twice (16-bit, then the wand's) or, unreduced, the
    /// wand (8 bytes a pixel) and for a 16-bit file its samples in 16 bits and their copy. Measured
    /// on 12 MP files (peak RSS over a run of a 16x16 one): 5.6 bytes a pixel for a lossy file, 3.7
    /// for a recompressed JPEG, 4.5 for a lossless one, all reduced for a 256 px thumbnail.
    static func estimatedMemory(_ header: JXLCodec.Header, factor: Int) -> Int {
        let pixels = header.width * header.height
        let decoded = pixels * (header.alpha ? 9 : 7)
        guard factor == 1 else { return decoded + ((header.width + factor - 1) / factor) * ((header.height + factor - 1) / factor) * 16 }
        return decoded + pixels * 8 + (header.bits > 8 ? pixels * 16 : 0)
    }

    /// A wand of the decoded samples, averaged in blocks of `factor`, with their profile.
    static func wand(_ decoded: JXLCodec.Decoded, factor: Int) throws -> Wand {
        let header = decoded.header
        let wand: Wand
        if factor > 1 {
            let box = BoxReducer(width: header.width, height: header.height, factor: factor, alpha: header.alpha)
            let rowBytes = header.width * decoded.channels
            // A reduced decode is of 8-bit samples (``plan(_:_:)`` asks for 16 only unreduced).
            precondition(!decoded.sixteen, "a reduced JPEG XL decode is of 8-bit samples")
            let pixels = try decoded.samples.withUnsafeBufferPointer { samples in
                try box.reduce(as: UInt16.self, feeding: { y, take in take(UnsafeBufferPointer(rebasing: samples[(y * rowBytes)..<((y + 1) * rowBytes)])) })
            }
            wand = try Wand.fromPixels(pixels, width: box.outWidth, height: box.outHeight, hasAlpha: header.alpha)
        } else if decoded.sixteen {
            let samples = decoded.samples.withUnsafeBytes { Array($0.bindMemory(to: UInt16.self)) }
            wand = try Wand.fromPixels(samples, width: header.width, height: header.height, hasAlpha: header.alpha)
        } else {
            wand = try Wand.fromPixels(decoded.samples, width: header.width, height: header.height, hasAlpha: header.alpha)
        }
        if let profile = decoded.profile { try wand.setICCProfile(profile) }
        return wand
    }

    /// The facts from the header and the metadata from the file's EXIF and XMP boxes, no pixel
    /// decoded. The pixels are always upright: libjxl applies the orientation itself.
    func headerFacts(facts: Bool, metadata: Bool, upright: (Int) -> Bool) -> HeaderFacts {
        var read = HeaderFacts()
        if facts {
            read.facts["colorspace"] = .string(header.grey ? "Gray" : "sRGB")
            read.facts["orientation"] = .int(header.orientation)
            if header.animated { read.facts["animated"] = .bool(true) }
        }
        if metadata {
            let boxes = JXLCodec.metadataBoxes(data)
            read.metadata = ImageMetadata(exif: boxes.exif, xmp: boxes.xmp, orientation: 1, upright: true)
        }
        return read
    }
}
