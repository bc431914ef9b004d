import CJPEG
import Foundation
import MagickKit
import PipelineKit

/// Shrink-on-load for JPEG without ImageMagick's coder: libjpeg-turbo decodes at 1/2, 1/4 or 1/8
/// (DCT scaling), or at full size when the target is too close for one, into 8-bit RGB rows, and
/// whole blocks are averaged as the rows arrive (``BoxReducer``) down to no less than twice the
/// target. ImageMagick then receives only that
/// small image: its JPEG coder would widen every decoded pixel to 16 bits in a pixel cache as
/// large as the DCT-scaled image, and the resize would box it down there again.
///
/// The EXIF orientation and the ICC profile are read from the markers and applied as the
/// ImageMagick path applies them (the profile converted to sRGB through lcms, now on the small
/// image, or kept with `to_srgb: false`). A greyscale JPEG is read as RGB pixels whose channels
/// are equal (the JPEG and PNG writers write those as grey, as ImageMagick does) when it needs no
/// wand; CMYK and YCCK JPEGs, and greyscale ones with a profile, stay with ImageMagick.
enum JPEGReducer {
    /// How a JPEG is reduced: libjpeg's scale, then the block size of the average after it.
    struct Plan: Equatable {
        let denominator: Int
        let block: Int
        /// The size after both.
        let size: PixelSize
    }

    /// The reduction for a `size` JPEG under `hint`, keeping `headroom` times what the hint needs
    /// (a denominator of 1 when that leaves no DCT scale to use), or `nil` when the hint sets no
    /// size.
    static func plan(_ size: PixelSize, hint: DecodeHint, headroom: Int) -> Plan? {
        guard let shrink = hint.maxShrink(from: size), size.width >= 8, size.height >= 8 else { return nil }
        // Under twice the headroom there is no DCT scale to use, but libjpeg's 8-bit rows at full
        // size still spare ImageMagick's coder and its 16-bit pixel cache (a 1080x1920 photo
        // fitted to 512 took 35 ms there against 12 here).
        let room = shrink / Double(headroom)
        let d = room >= 8 ? 8 : room >= 4 ? 4 : room >= 2 ? 2 : 1
        let scaled = PixelSize(width: (size.width + d - 1) / d, height: (size.height + d - 1) / d)
        let block = BoxReducer.blockSize(for: scaled, shrink: shrink / Double(d), headroom: headroom) ?? 1
        return Plan(denominator: d, block: block,
                    size: PixelSize(width: (scaled.width + block - 1) / block, height: (scaled.height + block - 1) / block))
    }

    /// Memory the reduced decode holds at its peak: libjpeg's coefficient buffer for the whole
    /// image when progressive (2 bytes a coefficient), its row buffers, one scaled row and its
    /// column totals, and the reduced pixels twice (8-bit, then ImageMagick's 16-bit copy).
    static func estimatedMemory(_ size: PixelSize, plan: Plan, progressive: Bool) -> Int {
        let coefficients = progressive ? size.width * size.height * 3 : 0
        let scaledWidth = (size.width + plan.denominator - 1) / plan.denominator
        return coefficients + size.width * 16 * 3 + scaledWidth * 3 * 5 + plan.size.width * plan.size.height * (3 + 8)
    }

    /// The reduced image, with the damage read past (as `fail_on` allows) when there was some, or
    /// `nil` when this JPEG is one for ImageMagick (not YCbCr, RGB or plain greyscale). Throws
    /// `decode_failed` with libjpeg's reason for a file too damaged for `failOn`.
    ///
    /// At 1/8 a progressive JPEG is read from its DC scans alone (``dcScansOnly(_:)``) unless
    /// `skipACScans` is false: the same pixels, without the Huffman decoding of the AC scans that
    /// make up most of the file. Damage inside those scans is then not seen; it could not change
    /// the result.
    ///
    /// A baseline JPEG at 1/8 of at least ``JPEGEighth/minimumPixels`` is decoded by the idle
    /// threads of the pool as well when there are some (``JPEGEighth``; the same pixels).
    /// `sharedEighth` decides that instead when set (for tests).
    static func decode(_ data: Data, plan: Plan, toSRGB: Bool, autoOrient: Bool,
                       failOn: FailOn = .warning, skipACScans: Bool = true,
                       sharedEighth: Bool? = nil) throws -> (pixels: Decoded, damage: Damage?)? {
        if skipACScans, plan.denominator == 8, let dc = dcScansOnly(data) {
            return try decode(dc, plan: plan, toSRGB: toSRGB, autoOrient: autoOrient, failOn: failOn, smoothing: false, sharedEighth: false)
        }
        return try decode(data, plan: plan, toSRGB: toSRGB, autoOrient: autoOrient, failOn: failOn, smoothing: true,
                          sharedEighth: sharedEighth)
    }

    /// A progressive JPEG without its AC scans (every other segment kept as it is), or `nil` when
    /// `data` is not a whole progressive JPEG (baseline, cut short, malformed between segments).
    static func dcScansOnly(_ data: Data) -> Data? {
        guard data.count >= 4 else { return nil }
        var out = Data(count: data.count)
        let length = data.withUnsafeBytes { raw in
            out.withUnsafeMutableBytes { pk_jpeg_dc_scans(raw.bindMemory(to: UInt8.self).baseAddress, raw.count,
                                                          $0.bindMemory(to: UInt8.self).baseAddress) }
        }
        guard length > 0 else { return nil }
        out.count = length
        return out
    }

    private static func decode(_ data: Data, plan: Plan, toSRGB: Bool, autoOrient: Bool,
                               failOn: FailOn, smoothing: Bool, sharedEighth: Bool?) throws -> (pixels: Decoded, damage: Damage?)? {
        try data.withUnsafeBytes { raw -> (pixels: Decoded, damage: Damage?)? in
            var ok: Int32 = 0
            guard let reader = pk_jpeg_open(raw.baseAddress, raw.count, failOn.failLevel, &ok) else { return nil }
            defer { pk_jpeg_close(reader) }
            guard ok != 0 else { throw failure(reader) }
            guard let header = try Header(reader, toSRGB: toSRGB, autoOrient: autoOrient) else { return nil }
            if !smoothing { pk_jpeg_no_smoothing(reader) }
            let (pixels, width, height) = try readPixels(reader, header: header, plan: plan, sharedEighth: sharedEighth)
            var level: Int32 = 0
            let message = String(cString: pk_jpeg_damage(reader, &level))
            let damage = Damage.Level(rawValue: Int(level)).map { Damage(level: $0, message: "JPEG: " + message) }
            return (try header.decoded(pixels, width: width, height: height, autoOrient: autoOrient), damage)
        }
    }

    /// What the header says of the file, and whether its pixels stay in 8 bits: `nil` for a JPEG
    /// this path leaves to ImageMagick (CMYK, a grey one that must stay grey).
    struct Header {
        let width: Int32, height: Int32, progressive: Bool
        let profile: Data?
        let exif: Data?
        let orientation: Int
        /// Upright (or to be turned upright) sRGB stays in 8 bits; a profile to convert through
        /// or to keep, and an orientation to keep, need a wand.
        let stays8: Bool

        init?(_ reader: UnsafeMutablePointer<pk_jpeg_reader>, toSRGB: Bool, autoOrient: Bool) throws {
            var width: Int32 = 0, height: Int32 = 0, components: Int32 = 0, space: Int32 = 0, progressive: Int32 = 0, ok: Int32 = 0
            pk_jpeg_header(reader, &width, &height, &components, &space, &progressive)
            let colour = components == 3 && (space == Int32(JCS_YCbCr.rawValue) || space == Int32(JCS_RGB.rawValue))
            let grey = components == 1 && space == Int32(JCS_GRAYSCALE.rawValue)
            guard colour || grey else { return nil }
            var profileLength: UInt32 = 0
            let icc = pk_jpeg_icc(reader, &profileLength, &ok)
            guard ok != 0 else { throw JPEGReducer.failure(reader) }
            if let icc {
                profile = Data(bytes: icc, count: Int(profileLength))
                free(icc)
            } else {
                profile = nil
            }
            exif = JPEGReducer.exif(reader)
            orientation = exif.map { $0.dropFirst(6).withUnsafeBytes { ExifOrientation.read($0) } } ?? 1
            // A greyscale JPEG is read as RGB (libjpeg repeats the grey) in 8 bits only; otherwise
            // ImageMagick keeps it grey.
            stays8 = (profile.map { toSRGB && Wand.isSRGB($0) } ?? true) && (autoOrient || orientation <= 1)
            guard colour || stays8 else { return nil }
            (self.width, self.height, self.progressive) = (width, height, progressive != 0)
        }

        /// The reduced pixels as what the decoder hands on: 8-bit pixels, or a wand with the
        /// profile and orientation to convert or keep.
        func decoded(_ pixels: [UInt8], width: Int, height: Int, autoOrient: Bool) throws -> Decoded {
            if stays8 {
                let upright = RGB8Pixels(width: width, height: height, hasAlpha: false, bytes: pixels)
                return .pixels(autoOrient ? upright.oriented(orientation) : upright)
            }
            let wand = try Wand.fromPixels(pixels, width: width, height: height, hasAlpha: false)
            if exif != nil { wand.orientation = orientation }
            if let profile {
                // As the ImageMagick path: sRGB is dropped, another profile converted through lcms
                // (by the caller's convertToSRGB) or kept with to_srgb: false.
                try wand.setICCProfile(profile)
            }
            if autoOrient { try wand.autoOrient() }
            return .wand(wand)
        }
    }

    /// The pixels at the plan's scale (libjpeg's 1/1 to 1/8), block-averaged when the plan asks,
    /// and their size. A large baseline file at 1/8 with threads idle is decoded in parts side by
    /// side, into the same pixels libjpeg gives.
    private static func readPixels(_ reader: UnsafeMutablePointer<pk_jpeg_reader>, header: Header, plan: Plan,
                                   sharedEighth: Bool?) throws -> ([UInt8], Int, Int) {
        var outW: Int32 = 0, outH: Int32 = 0
        let useShared = plan.denominator == 8 && !header.progressive &&
            (sharedEighth ?? JPEGEighth.worthSharing(PixelSize(width: Int(header.width), height: Int(header.height))))
        let shared = useShared ? JPEGEighth.decode(reader) : nil
        if let shared {
            JPEGEighth.count.add(1, ordering: .relaxed)
            (outW, outH) = (Int32(shared.width), Int32(shared.height))
        } else {
            guard pk_jpeg_start(reader, Int32(plan.denominator), &outW, &outH) != 0 else { throw failure(reader) }
        }
        let rowBytes = Int(outW) * 3
        func read(_ row: UnsafeMutablePointer<UInt8>) throws {
            let got = pk_jpeg_read_rows(reader, row, rowBytes, 1)
            guard got == 1 else { throw got < 0 ? failure(reader) : PipelineError(.decodeFailed, "JPEG: the file ends before the image does") }
        }
        let result: ([UInt8], Int, Int)
        if plan.block > 1 {
            let box = BoxReducer(width: Int(outW), height: Int(outH), factor: plan.block, alpha: false)
            // The parts' pixels are all in memory: their blocks are averaged by the same threads.
            let pixels = try shared.map { box.reduceInParts($0.pixels) }
                ?? box.reduce { row in try row.withUnsafeMutableBufferPointer { try read($0.baseAddress!) } }
            result = (pixels, box.outWidth, box.outHeight)
        } else if let shared {
            result = (shared.pixels, shared.width, shared.height)
        } else {
            // Nothing to average: libjpeg writes its rows where they stay.
            var rows = [UInt8](repeating: 0, count: rowBytes * Int(outH))
            try rows.withUnsafeMutableBufferPointer { rows in
                for y in 0..<Int(outH) { try read(rows.baseAddress! + y * rowBytes) }
            }
            result = (rows, Int(outW), Int(outH))
        }
        if shared == nil { guard pk_jpeg_finish(reader) != 0 else { throw failure(reader) } }
        return result
    }

    /// The EXIF block (APP1, "Exif\0\0" included), for the orientation. The rest of the file's
    /// metadata is read for the pipeline's `metadata:` policy on its own (`SourceFacts.metadata`).
    static func exif(_ reader: UnsafeMutablePointer<pk_jpeg_reader>) -> Data? {
        let exifHeader = Data("Exif\0\0".utf8)
        var index: Int32 = 0, marker: Int32 = 0, length: UInt32 = 0
        while let bytes = pk_jpeg_marker(reader, index, &marker, &length) {
            index += 1
            let data = Data(bytes: bytes, count: Int(length))
            if marker == Int32(JPEG_APP0 + 1), data.starts(with: exifHeader) { return data }
        }
        return nil
    }

    /// libjpeg's reason for the reader's last failure.
    static func failure(_ reader: UnsafeMutablePointer<pk_jpeg_reader>) -> PipelineError {
        PipelineError(.decodeFailed, "JPEG: " + String(cString: pk_jpeg_message(reader)))
    }
}
