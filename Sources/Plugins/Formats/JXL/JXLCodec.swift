import CJXL
import Foundation
import PipelineKit

/// libjxl 0.7's decoder and encoder on one image, on the calling thread: no thread pool of
/// libjxl's own, since the engine's workers decode and encode items side by side.
///
/// The decoder applies the file's orientation (the pixels come out upright), and gives the pixels
/// in the colour encoding the file describes, with that encoding as an ICC profile (libjxl makes
/// one for an encoding given by its fields): what `djxl` writes. The decoder's caller converts to
/// sRGB as for any file with a profile.
enum JXLCodec {
    /// What a JPEG XL header says.
    struct Header: Sendable, Equatable {
        /// The size of the upright picture (its orientation applied).
        var width: Int, height: Int
        /// Bits per sample of the original (8, 10, 12, 16; 32 for float).
        var bits: Int
        var alpha: Bool
        var grey: Bool
        /// EXIF's orientation, 1-8, that the decoder applies.
        var orientation: Int
        var animated: Bool

        var size: PixelSize { PixelSize(width: width, height: height) }
    }

    /// One decoded image: interleaved samples (RGB or RGBA; grey files are expanded to RGB), 8 or 16
    /// bits, and the ICC profile of their encoding (`nil` when it is sRGB).
    struct Decoded {
        var header: Header
        var samples: [UInt8]
        var sixteen: Bool
        var profile: Data?

        var channels: Int { header.alpha ? 4 : 3 }
    }

    /// Boxes bigger than this are not read (an EXIF or XMP block never is).
    static let maxBox = 4 << 20

    /// The header of `data`, or `nil` when it is not a JPEG XL file or its header cannot be read.
    static func header(_ data: Data) -> Header? {
        guard let decoder = JxlDecoderCreate(nil) else { return nil }
        defer { JxlDecoderDestroy(decoder) }
        guard JxlDecoderSubscribeEvents(decoder, Int32(JXL_DEC_BASIC_INFO.rawValue)) == JXL_DEC_SUCCESS else { return nil }
        return data.withUnsafeBytes { bytes -> Header? in
            guard let base = bytes.bindMemory(to: UInt8.self).baseAddress,
                  JxlDecoderSetInput(decoder, base, bytes.count) == JXL_DEC_SUCCESS else { return nil }
            JxlDecoderCloseInput(decoder)
            guard JxlDecoderProcessInput(decoder) == JXL_DEC_BASIC_INFO else { return nil }
            return basicInfo(decoder)
        }
    }

    private static func basicInfo(_ decoder: OpaquePointer) -> Header? {
        var info = JxlBasicInfo()
        guard JxlDecoderGetBasicInfo(decoder, &info) == JXL_DEC_SUCCESS, info.xsize > 0, info.ysize > 0 else { return nil }
        let orientation = Int(info.orientation.rawValue)
        let turned = orientation >= 5
        return Header(width: Int(turned ? info.ysize : info.xsize), height: Int(turned ? info.xsize : info.ysize),
                      bits: Int(info.bits_per_sample), alpha: info.alpha_bits > 0, grey: info.num_color_channels == 1,
                      orientation: (1...8).contains(orientation) ? orientation : 1, animated: info.have_animation != 0)
    }

    /// The first frame of `data`, in 16 bits a sample when `sixteen` (and the file has more than
    /// 8). Throws `decode_failed` for a corrupt or truncated file, `too_large` when the header is
    /// over `limits`.
    static func decode(_ data: Data, sixteen: Bool, limits: (width: Int, height: Int, pixels: Int)) throws -> Decoded {
        guard let decoder = JxlDecoderCreate(nil) else { throw PipelineError(.decodeFailed, "JXL: libjxl could not start a decoder") }
        defer { JxlDecoderDestroy(decoder) }
        let events = JXL_DEC_BASIC_INFO.rawValue | JXL_DEC_COLOR_ENCODING.rawValue | JXL_DEC_FULL_IMAGE.rawValue
        guard JxlDecoderSubscribeEvents(decoder, Int32(events)) == JXL_DEC_SUCCESS else { throw failure("could not subscribe to events") }
        return try data.withUnsafeBytes { bytes in
            guard let base = bytes.bindMemory(to: UInt8.self).baseAddress,
                  JxlDecoderSetInput(decoder, base, bytes.count) == JXL_DEC_SUCCESS else { throw failure("could not take the input") }
            JxlDecoderCloseInput(decoder)
            var state = DecodeState(sixteen: sixteen, limits: limits)
            while true {
                let status = JxlDecoderProcessInput(decoder)
                // The first frame of an animation is the image.
                if status == JXL_DEC_FULL_IMAGE {
                    state.haveImage = true
                    break
                }
                try state.handle(status, decoder)
            }
            return try state.decoded()
        }
    }

    /// What a decode has read so far, event by event.
    private struct DecodeState {
        let sixteen: Bool
        let limits: (width: Int, height: Int, pixels: Int)
        var header: Header?
        var format = JxlPixelFormat(num_channels: 3, data_type: JXL_TYPE_UINT8, endianness: JXL_NATIVE_ENDIAN, align: 0)
        var samples: [UInt8] = []
        var haveImage = false
        var profile: Data?

        init(sixteen: Bool, limits: (width: Int, height: Int, pixels: Int)) {
            self.sixteen = sixteen
            self.limits = limits
        }

        mutating func handle(_ status: JxlDecoderStatus, _ decoder: OpaquePointer) throws {
            switch status {
            case JXL_DEC_BASIC_INFO:
                guard let read = basicInfo(decoder) else { throw failure("the header cannot be read") }
                guard read.width <= limits.width, read.height <= limits.height, read.width * read.height <= limits.pixels else {
                    throw PipelineError(.tooLarge, "JXL: \(read.width)x\(read.height) is beyond the limits")
                }
                header = read
                format.num_channels = UInt32((read.grey ? 1 : 3) + (read.alpha ? 1 : 0))
                format.data_type = sixteen && read.bits > 8 ? JXL_TYPE_UINT16 : JXL_TYPE_UINT8
            case JXL_DEC_COLOR_ENCODING:
                profile = Self.profile(decoder, &format, grey: header?.grey ?? false)
            case JXL_DEC_NEED_IMAGE_OUT_BUFFER:
                var size = 0
                guard JxlDecoderImageOutBufferSize(decoder, &format, &size) == JXL_DEC_SUCCESS, size > 0 else { throw failure("no output size") }
                samples = [UInt8](repeating: 0, count: size)
                let set = samples.withUnsafeMutableBytes { JxlDecoderSetImageOutBuffer(decoder, &format, $0.baseAddress, size) }
                guard set == JXL_DEC_SUCCESS else { throw failure("the output buffer was refused") }
            case JXL_DEC_SUCCESS:
                throw failure("the file has no image")
            case JXL_DEC_NEED_MORE_INPUT:
                throw failure("the file ends early")
            default:
                throw failure(header == nil ? "not a JPEG XL file libjxl can read" : "the file is corrupt or ends early")
            }
        }

        /// The ICC profile of the decoded samples' encoding, or `nil` for sRGB (and for grey, which
        /// is given as sRGB's grey: a grey profile cannot go on RGB samples).
        static func profile(_ decoder: OpaquePointer, _ format: inout JxlPixelFormat, grey: Bool) -> Data? {
            var encoding = JxlColorEncoding()
            if JxlDecoderGetColorAsEncodedProfile(decoder, &format, JXL_COLOR_PROFILE_TARGET_DATA, &encoding) == JXL_DEC_SUCCESS,
               encoding.color_space == JXL_COLOR_SPACE_GRAY || (encoding.color_space == JXL_COLOR_SPACE_RGB
                   && encoding.white_point == JXL_WHITE_POINT_D65 && encoding.primaries == JXL_PRIMARIES_SRGB
                   && encoding.transfer_function == JXL_TRANSFER_FUNCTION_SRGB) {
                return nil
            }
            if grey { return nil }
            var size = 0
            guard JxlDecoderGetICCProfileSize(decoder, &format, JXL_COLOR_PROFILE_TARGET_DATA, &size) == JXL_DEC_SUCCESS,
                  size > 0, size < maxBox else { return nil }
            var bytes = [UInt8](repeating: 0, count: size)
            guard JxlDecoderGetColorAsICCProfile(decoder, &format, JXL_COLOR_PROFILE_TARGET_DATA, &bytes, size) == JXL_DEC_SUCCESS else { return nil }
            return Data(bytes)
        }

        func decoded() throws -> Decoded {
            guard let header, haveImage, !samples.isEmpty else { throw failure("the file has no image") }
            let sixteen = format.data_type == JXL_TYPE_UINT16
            var samples = self.samples
            if header.grey { samples = JXLCodec.expandGrey(samples, alpha: header.alpha, sampleBytes: sixteen ? 2 : 1) }
            return Decoded(header: header, samples: samples, sixteen: sixteen, profile: profile)
        }
    }

    /// The EXIF and XMP boxes of `data`, read without decoding the image (libjxl passes over the
    /// codestream's box); `nil`s for a bare codestream, which has no boxes, or a file it cannot read.
    static func metadataBoxes(_ data: Data) -> (exif: Data?, xmp: Data?) {
        guard let decoder = JxlDecoderCreate(nil) else { return (nil, nil) }
        defer { JxlDecoderDestroy(decoder) }
        guard JxlDecoderSubscribeEvents(decoder, Int32(JXL_DEC_BOX.rawValue)) == JXL_DEC_SUCCESS else { return (nil, nil) }
        _ = JxlDecoderSetDecompressBoxes(decoder, 1)
        return data.withUnsafeBytes { bytes in
            guard let base = bytes.bindMemory(to: UInt8.self).baseAddress,
                  JxlDecoderSetInput(decoder, base, bytes.count) == JXL_DEC_SUCCESS else { return (nil, nil) }
            JxlDecoderCloseInput(decoder)
            var boxes = BoxReader()
            loop: while true {
                switch JxlDecoderProcessInput(decoder) {
                case JXL_DEC_BOX:
                    boxes.finish(decoder)
                    guard (try? boxes.start(decoder)) != nil else { break loop }
                case JXL_DEC_BOX_NEED_MORE_OUTPUT:
                    guard (try? boxes.more(decoder)) != nil else { break loop }
                default:
                    break loop
                }
            }
            boxes.finish(decoder)
            return (boxes.exif, boxes.xmp)
        }
    }

    /// The EXIF and XMP boxes as libjxl hands them over, decompressed (`brob` boxes too), each
    /// at most ``maxBox`` bytes.
    struct BoxReader {
        var exif: Data?, xmp: Data?
        /// The box being read, its buffer, and its name.
        var box: [UInt8] = [], boxType = ""

        mutating func start(_ decoder: OpaquePointer) throws {
            var type: JxlBoxType = (0, 0, 0, 0)
            guard JxlDecoderGetBoxType(decoder, &type, 1) == JXL_DEC_SUCCESS else { return }
            let name = String(decoding: [UInt8(bitPattern: type.0), UInt8(bitPattern: type.1), UInt8(bitPattern: type.2), UInt8(bitPattern: type.3)],
                              as: UTF8.self)
            guard name == "Exif" || name == "xml " else { return }
            boxType = name
            box = [UInt8](repeating: 0, count: 64 << 10)
            let set = box.withUnsafeMutableBytes { JxlDecoderSetBoxBuffer(decoder, $0.baseAddress, $0.count) }
            guard set == JXL_DEC_SUCCESS else { throw failure("a box buffer was refused") }
        }

        /// Twice the buffer for a box that did not fit, up to ``maxBox`` (then the box is dropped).
        mutating func more(_ decoder: OpaquePointer) throws {
            let used = box.count - JxlDecoderReleaseBoxBuffer(decoder)
            guard box.count < maxBox else {
                box = []
                boxType = ""
                return
            }
            box += [UInt8](repeating: 0, count: box.count)
            let set = box.withUnsafeMutableBytes { JxlDecoderSetBoxBuffer(decoder, $0.baseAddress! + used, $0.count - used) }
            guard set == JXL_DEC_SUCCESS else { throw failure("a box buffer was refused") }
        }

        mutating func finish(_ decoder: OpaquePointer) {
            guard !boxType.isEmpty else { return }
            let used = box.count - JxlDecoderReleaseBoxBuffer(decoder)
            let content = Data(box.prefix(max(0, used)))
            if boxType == "xml ", xmp == nil { xmp = content }
            if boxType == "Exif", exif == nil { exif = SourceFacts.exifAfterOffset(content) }
            box = []
            boxType = ""
        }
    }

    /// Grey (and alpha) samples as RGB(A): each grey sample three times.
    static func expandGrey(_ samples: [UInt8], alpha: Bool, sampleBytes: Int) -> [UInt8] {
        let inPixel = (alpha ? 2 : 1) * sampleBytes, outPixel = (alpha ? 4 : 3) * sampleBytes
        let count = samples.count / inPixel
        var out = [UInt8](repeating: 0, count: count * outPixel)
        samples.withUnsafeBufferPointer { from in
            out.withUnsafeMutableBufferPointer { to in
                for pixel in 0..<count {
                    let source = pixel * inPixel, target = pixel * outPixel
                    for copy in 0..<3 {
                        for byte in 0..<sampleBytes { to[target + copy * sampleBytes + byte] = from[source + byte] }
                    }
                    if alpha { for byte in 0..<sampleBytes { to[target + 3 * sampleBytes + byte] = from[source + sampleBytes + byte] } }
                }
            }
        }
        return out
    }

    static func failure(_ what: String) -> PipelineError { PipelineError(.decodeFailed, "JXL: " + what) }
}
