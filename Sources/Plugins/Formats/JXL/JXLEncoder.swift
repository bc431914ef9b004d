import CJXL
import Foundation
import MagickKit
import PipelineKit

/// `jxl`: writes JPEG XL through libjxl 0.7, lossy (by `quality`, on cjxl's scale, or by
/// butteraugli `distance`) or lossless, at an `effort` from 1 (fastest) to 9, keeping alpha.
///
/// The pixels are written in 8 bits a sample, in sRGB; a lossless file keeps the image's ICC
/// profile when the pipeline keeps profiles (a lossy one is converted to sRGB first: libjxl's
/// lossy mode works in its own colour space and records the encoding). The first frame of an
/// animation is written. EXIF and XMP that the pipeline's `metadata:` keeps are written as the
/// file's `Exif` and `xml ` boxes (IPTC has no JPEG XL box), and an image that was not turned
/// upright keeps its EXIF orientation in the codestream, where JPEG XL readers take it from.
///
/// With `lossless_jpeg`, a JPEG source that reaches the encoder untouched (no processor changed
/// it) is recompressed losslessly from its DCT coefficients, as `cjxl` does: `djxl` rebuilds the
/// JPEG byte for byte. Its metadata segments are first replaced by what the pipeline's
/// `metadata:` keeps, so the rebuilt JPEG is the source itself only under `keep: [all, gps]`, and
/// otherwise the source with those segments replaced (the same scan data). Anything else (a
/// processed image, another format, a JPEG libjxl cannot take, or one whose orientation or ICC
/// profile the kept metadata would lose) is encoded from its pixels; the output's
/// `lossless_jpeg` fact says which.
public struct JXLEncoder: ImageEncoding {
    public static let plugin = Plugin.encoder(
        PluginSpec(
            name: "jxl",
            summary: "Writes JPEG XL (lossy or lossless) through libjxl, keeping transparency.",
            options: [
                .int("quality", default: 80, range: 1...100,
                     doc: "Quality on cjxl's scale (90 is distance 1, visually lossless; 80 is distance 1.9). Ignored with `distance` or `lossless`."),
                .number("distance", range: 0.1...25, doc: "Butteraugli distance instead of quality: 1 is visually lossless, higher is smaller."),
                .int("effort", default: 7, range: 1...9, doc: "Encoder effort: 1 fastest, 9 smallest (libjxl's default is 7)."),
                .bool("lossless", default: false, doc: "Lossless (modular) compression: every pixel as it was."),
                .bool("lossless_jpeg", default: false,
                      doc: "Recompress an untouched JPEG source losslessly from its DCT coefficients (about a fifth smaller), so that djxl rebuilds the JPEG; other images are encoded from their pixels. The rebuilt JPEG carries the metadata that `metadata:` keeps: under keep: [all, gps] it is the source byte for byte."),
            ],
            exclusive: [["distance", "lossless"]]),
        make: { options in JXLEncoder(options: options) })

    /// The butteraugli distance, or `nil` for lossless.
    public let distance: Float?
    public let effort: Int
    /// Whether an untouched JPEG source is recompressed from its coefficients.
    public let losslessJPEG: Bool
    public var wantsSourceBytes: Bool { losslessJPEG }
    public var fileExtension: String { "jxl" }
    public let identifier: String

    init(options: PluginOptions) {
        if options.bool("lossless") == true {
            distance = nil
        } else if let set = options.number("distance") {
            distance = Float(set)
        } else {
            distance = Self.distance(quality: Double(options.int("quality") ?? 80))
        }
        effort = options.int("effort") ?? 7
        losslessJPEG = options.bool("lossless_jpeg") ?? false
        identifier = "jxl(\(options.canonical))"
    }

    /// Lossy at `distance` (`nil`: lossless), at libjxl's default effort, as `auto` writes it.
    init(distance: Float?, effort: Int = 7) {
        self.distance = distance
        self.effort = effort
        losslessJPEG = false
        identifier = "jxl(distance: \(distance.map { "\($0)" } ?? "lossless"), effort: \(effort))"
    }

    /// cjxl 0.7's mapping of a quality to a distance.
    static func distance(quality: Double) -> Float {
        quality >= 30 ? Float(0.1 + (100 - quality) * 0.09) : Float(6.4 + pow(2.5, (30 - quality) / 5) / 6.25)
    }

    public func encoded(_ image: PipelineImage) throws -> EncodedImage {
        guard losslessJPEG else { return EncodedImage(data: try encode(image), fileExtension: "jxl") }
        if let jpeg = recompressible(image), let data = try? recompress(jpeg) {
            return EncodedImage(data: data, fileExtension: "jxl", facts: ["lossless_jpeg": .bool(true)])
        }
        return EncodedImage(data: try encode(image), fileExtension: "jxl", facts: ["lossless_jpeg": .bool(false)])
    }

    /// The JPEG `image` can be rebuilt as: its source with the kept metadata, or nil (see the type's notes).
    func recompressible(_ image: PipelineImage) -> Data? {
        guard image.sourceFormat == "JPEG", let source = image.sourceBytes else { return nil }
        let metadata = image.metadata ?? ImageMetadata()
        if metadata.keepsEverything { return source }
        guard JPEGMarkers.orientation(source) == 1, metadata.keepsICC || !JPEGMarkers.hasICCProfile(source) else { return nil }
        return JPEGMarkers.withMetadata(source, metadata)
    }

    /// `jpeg` recompressed from its DCT coefficients, with what rebuilds it byte for byte.
    func recompress(_ jpeg: Data) throws -> Data {
        guard let encoder = JxlEncoderCreate(nil) else { throw failure("libjxl could not start an encoder") }
        defer { JxlEncoderDestroy(encoder) }
        guard JxlEncoderUseContainer(encoder, 1) == JXL_ENC_SUCCESS, JxlEncoderStoreJPEGMetadata(encoder, 1) == JXL_ENC_SUCCESS,
              let settings = JxlEncoderFrameSettingsCreate(encoder, nil) else { throw failure("JPEG reconstruction was refused") }
        _ = JxlEncoderFrameSettingsSetOption(settings, JXL_ENC_FRAME_SETTING_EFFORT, Int64(effort))
        let added = jpeg.withUnsafeBytes { JxlEncoderAddJPEGFrame(settings, $0.bindMemory(to: UInt8.self).baseAddress, jpeg.count) }
        guard added == JXL_ENC_SUCCESS else { throw failure("libjxl cannot recompress this JPEG") }
        JxlEncoderCloseInput(encoder)
        return try output(encoder, expected: jpeg.count)
    }

    public func encode(_ image: PipelineImage) throws -> Data {
        let metadata = image.metadata ?? ImageMetadata()
        let keepsICC = metadata.keepsICC
        if let pixels = image.rgb8 {
            // 8-bit pixels are sRGB without a profile (see RGB8Pixels).
            return try pixels.bytes.withUnsafeBytes {
                try write($0, width: pixels.width, height: pixels.height, alpha: pixels.channels == 4, profile: nil, metadata: metadata)
            }
        }
        return try image.withCopy { wand in
            if distance != nil || !keepsICC || wand.colorspaceName != "sRGB" { try wand.convertToSRGB() }
            let alpha = wand.hasAlpha
            let samples = try wand.bytes(channels: alpha ? "RGBA" : "RGB")
            let profile = distance == nil && keepsICC ? wand.iccProfile : nil
            return try samples.withUnsafeBytes {
                try write($0, width: wand.width, height: wand.height, alpha: alpha, profile: profile, metadata: metadata)
            }
        }
    }

    /// JPEG XL of 8-bit RGB(A) `samples`, in sRGB or in `profile`, with what `metadata` keeps.
    func write(_ samples: UnsafeRawBufferPointer, width: Int, height: Int, alpha: Bool, profile: Data?,
               metadata: ImageMetadata = ImageMetadata()) throws -> Data {
        guard let encoder = JxlEncoderCreate(nil) else { throw failure("libjxl could not start an encoder") }
        defer { JxlEncoderDestroy(encoder) }
        var info = JxlBasicInfo()
        JxlEncoderInitBasicInfo(&info)
        info.xsize = UInt32(width)
        info.ysize = UInt32(height)
        if !metadata.upright, (2...8).contains(metadata.orientation) {
            info.orientation = JxlOrientation(rawValue: UInt32(metadata.orientation))
        }
        info.bits_per_sample = 8
        info.num_color_channels = 3
        info.num_extra_channels = alpha ? 1 : 0
        info.alpha_bits = alpha ? 8 : 0
        info.uses_original_profile = distance == nil ? 1 : 0
        guard JxlEncoderSetBasicInfo(encoder, &info) == JXL_ENC_SUCCESS else { throw failure("the image's size or layout was refused") }
        if let profile {
            let set = profile.withUnsafeBytes { JxlEncoderSetICCProfile(encoder, $0.bindMemory(to: UInt8.self).baseAddress, profile.count) }
            guard set == JXL_ENC_SUCCESS else { throw failure("the ICC profile was refused") }
        } else {
            var encoding = JxlColorEncoding()
            JxlColorEncodingSetToSRGB(&encoding, 0)
            guard JxlEncoderSetColorEncoding(encoder, &encoding) == JXL_ENC_SUCCESS else { throw failure("sRGB was refused") }
        }
        try addBoxes(encoder, metadata)
        guard let settings = JxlEncoderFrameSettingsCreate(encoder, nil) else { throw failure("no frame settings") }
        if let distance {
            guard JxlEncoderSetFrameDistance(settings, distance) == JXL_ENC_SUCCESS else { throw failure("distance \(distance) was refused") }
        } else {
            guard JxlEncoderSetFrameLossless(settings, 1) == JXL_ENC_SUCCESS else { throw failure("lossless was refused") }
        }
        _ = JxlEncoderFrameSettingsSetOption(settings, JXL_ENC_FRAME_SETTING_EFFORT, Int64(effort))
        var format = JxlPixelFormat(num_channels: alpha ? 4 : 3, data_type: JXL_TYPE_UINT8, endianness: JXL_NATIVE_ENDIAN, align: 0)
        guard JxlEncoderAddImageFrame(settings, &format, samples.baseAddress, samples.count) == JXL_ENC_SUCCESS else {
            throw failure("the pixels were refused")
        }
        JxlEncoderCloseInput(encoder)
        return try output(encoder, expected: samples.count / 8)
    }

    /// The `Exif` box (its TIFF data behind a 4-byte offset of 0) and the `xml ` box, in a
    /// container; none, and the bare codestream, when neither is kept.
    func addBoxes(_ encoder: OpaquePointer, _ metadata: ImageMetadata) throws {
        let boxes = [("Exif", metadata.exif.map { Data(count: 4) + $0 }), ("xml ", metadata.xmp)].compactMap { type, data in
            data.map { (type, $0) }
        }
        guard !boxes.isEmpty else { return }
        guard JxlEncoderUseContainer(encoder, 1) == JXL_ENC_SUCCESS, JxlEncoderUseBoxes(encoder) == JXL_ENC_SUCCESS else {
            throw failure("the container for metadata was refused")
        }
        for (type, data) in boxes {
            let added = type.withCString { name in
                data.withUnsafeBytes { JxlEncoderAddBox(encoder, name, $0.bindMemory(to: UInt8.self).baseAddress, data.count, 0) }
            }
            guard added == JXL_ENC_SUCCESS else { throw failure("the \(type) box was refused") }
        }
        JxlEncoderCloseBoxes(encoder)
    }

    /// What the encoder writes, in a buffer that doubles as it fills.
    func output(_ encoder: OpaquePointer, expected: Int) throws -> Data {
        var out = [UInt8](repeating: 0, count: max(4096, expected))
        var used = 0
        while true {
            var available = out.count - used
            let status = out.withUnsafeMutableBufferPointer { buffer -> JxlEncoderStatus in
                var next: UnsafeMutablePointer<UInt8>? = buffer.baseAddress! + used
                let status = JxlEncoderProcessOutput(encoder, &next, &available)
                used = next.map { $0 - buffer.baseAddress! } ?? used
                return status
            }
            if status == JXL_ENC_SUCCESS { return Data(out.prefix(used)) }
            guard status == JXL_ENC_NEED_MORE_OUTPUT else { throw failure("the encoder stopped (status \(status.rawValue))") }
            out += [UInt8](repeating: 0, count: out.count)
        }
    }

    func failure(_ what: String) -> PipelineError { PipelineError(.encodeFailed, "JXL: " + what) }
}
