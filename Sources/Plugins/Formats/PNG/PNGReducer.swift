import CPNG
import CPNGImageData
import Foundation
import MagickKit
import PipelineKit
import Synchronization

/// Shrink-on-load for PNG: decodes a large PNG row by row (libpng) and averages blocks of
/// `factor` x `factor` pixels as the rows arrive (``BoxReducer``), so the full-size image never
/// exists in memory.
///
/// libjpeg can decode at 1/2, 1/4 or 1/8; PNG has no such mode, and ImageMagick would decode the
/// whole image into 16-bit channels (8 bytes a pixel) before the resize box-averaged it down
/// anyway. This does that box average while decoding, into 16 bits, and hands ImageMagick only the
/// reduced image: the result is what `resize`'s pre-shrink (average to three times the target,
/// then the filter) makes from a full decode. Colour is averaged premultiplied by alpha, so
/// transparent pixels do not bleed their hidden colour into the edges.
///
/// Only plain cases take this path; the rest go through ImageMagick as before: interlaced PNGs,
/// and PNGs with a profile other than sRGB (converted there). Greyscale ones are read as RGB with
/// equal channels, and written grey again by the encoders.
enum PNGReducer {
    /// Memory the reduced decode of a `size` PNG needs at its peak: one 8-bit RGBA row, the
    /// per-column totals (4 bytes a channel), the reduced 16-bit pixels and a copy of them (a wand's,
    /// or the resize's reading), and the inflated copy. Not the parts reader's (``PNGParts``): it
    /// reads only with a thread idle, one file at a time in the process (see
    /// ``PNGParts/maxRatio``).
    static func estimatedMemory(_ size: PixelSize, factor: Int) -> Int {
        let outW = (size.width + factor - 1) / factor, outH = (size.height + factor - 1) / factor
        let copy = min(size.width * size.height * 8 + size.height, inflatedCopyLimit)  // at most 16 bits x 4 channels
        return size.width * 4 + size.width * 4 * 4 + outW * outH * (8 + 8) + copy
    }

    /// PNGs whose image data takes at most this many bytes inflated are inflated by libdeflate
    /// and read by libpng from a copy (``inflatedCopy(_:sharedParts:)``), which holds the
    /// inflated bytes during the decode.
    static let inflatedCopyLimit = 24 << 20
    /// Files up to this size are read whole for the copy (a file whose image data fits the limit
    /// inflated is smaller than that, give or take its other chunks).
    static let inflatedCopyFileLimit = inflatedCopyLimit + (1 << 20)
    /// Decodes made from an inflated copy (for tests).
    static let inflatedCopies = Atomic<Int>(0)

    /// A copy of the PNG in `input` with its image data inflated by libdeflate and stored again
    /// uncompressed, for libpng to read at the speed of a copy (Sources/CPNGImageData): zlib's
    /// inflate was most of a PNG's decode (palette.png, 3840x2160: 28 ms of libpng's 43;
    /// libdeflate 11). `nil` for a file the copy declines (damaged image data included: libpng
    /// reads the file itself and reports it) and for one the parts reader will take
    /// (``PNGParts``: idle threads inflate it side by side, faster still).
    static func inflatedCopy(_ input: EncodedInput, sharedParts: Bool?) -> Data? {
        guard sharedParts != true, input.byteCount <= inflatedCopyFileLimit else { return nil }
        if sharedParts == nil {  // 8-bit RGB or RGBA: what the parts reader takes (IHDR, before reading a file whole)
            let head = switch input {
            case .memory(let data): Data(data.prefix(26))
            case .file(let file): (try? file.read(at: 0, count: 26)) ?? Data()
            }
            if head.count == 26 {
                let width = head[16..<20].reduce(0) { $0 << 8 | Int($1) }, height = head[20..<24].reduce(0) { $0 << 8 | Int($1) }
                let inflated = PNGParts.inflatedBytes(width: width, height: height, channels: head[25] == 6 ? 4 : 3)
                if head[24] == 8, [2, 6].contains(head[25]),
                   PNGParts.worthSharing(pixels: width * height, inflatedBytes: inflated, fileBytes: input.byteCount) { return nil }
            }
        }
        let data = input.data
        var length = 0
        let copy = data.withUnsafeBytes { bytes in
            pk_png_inflated_copy(bytes.bindMemory(to: UInt8.self).baseAddress, bytes.count, inflatedCopyLimit, &length)
        }
        guard let copy else { return nil }
        return Data(bytesNoCopy: copy, count: length, deallocator: .free)
    }

    /// What the header says about a PNG the fast path takes.
    struct Plan {
        let width: Int, height: Int
        let alpha: Bool
        /// An ICC profile to keep on the result (when the decoder keeps profiles).
        let profile: Data?
    }

    /// Reads the header chunks (no image data) into `reader`: the plan, or `nil` when this PNG
    /// is not one for the fast path. An sRGB profile is dropped as ImageMagick's path drops it;
    /// any other profile sends the PNG to ImageMagick, which converts through it, unless the
    /// decoder keeps profiles (`to_srgb: false`), in which case it is kept as it is.
    static func plan(_ reader: UnsafeMutablePointer<pk_png_reader>, toSRGB: Bool) -> Plan? {
        var width: UInt32 = 0, height: UInt32 = 0, profileLength: UInt32 = 0
        var colorType: Int32 = 0, interlaced: Int32 = 0, transparency: Int32 = 0
        var profileBytes: UnsafePointer<UInt8>?
        pk_png_header(reader, &width, &height, &colorType, &interlaced, &transparency, &profileBytes, &profileLength)
        // Grey is read as RGB with equal channels (libpng's gray_to_rgb), as libjpeg reads grey
        // JPEGs: the encoders write an all-grey image grey again, as ImageMagick did. A 7000x7000
        // grey PNG then takes rows, not 392 MB of 16-bit pixels in ImageMagick.
        guard interlaced == 0 else { return nil }
        var profile: Data?
        if let profileBytes, profileLength > 0 {
            let data = Data(bytes: profileBytes, count: Int(profileLength))
            if toSRGB {
                guard Wand.isSRGB(data) else { return nil }
            } else {
                profile = data
            }
        }
        let alpha = colorType & PNG_COLOR_MASK_ALPHA != 0 || transparency != 0
        return Plan(width: Int(width), height: Int(height), alpha: alpha, profile: profile)
    }

    /// A PNG opened from `data` with its header chunks read, handed to `body`; `nil` when out of
    /// memory. Throws `decode_failed` with libpng's reason when the header chunks are corrupt.
    static func withReader<T>(_ input: EncodedInput, failOn: FailOn = .warning,
                              _ body: (UnsafeMutablePointer<pk_png_reader>) throws -> T?) throws -> T? {
        try input.withSource { bytes, descriptor, size -> T? in
            var ok: Int32 = 0
            guard let reader = pk_png_open(bytes, descriptor, size, failOn.failLevel, &ok) else { return nil }
            defer { pk_png_close(reader) }
            guard ok != 0 else { throw failure(reader) }
            return try body(reader)
        }
    }

    /// Whether ``decode(_:factor:toSRGB:)`` would take `data` (reads its header chunks only).
    static func takes(_ input: EncodedInput, toSRGB: Bool) -> Bool {
        ((try? withReader(input) { plan($0, toSRGB: toSRGB) }) ?? nil) != nil
    }

    /// The reduced image, with the damage read past (as `failOn` allows) when there was some, or
    /// `nil` when this PNG is not one for the fast path (see ``plan``). Throws `decode_failed`
    /// with libpng's reason for a file too damaged for `failOn`. When the image data stops early
    /// and `failOn` allows it, the rows not read are left black and transparent.
    ///
    /// The averages are kept in 16 bits (``RGB16Pixels``; see ``BoxReducer/Accumulator``); a kept
    /// profile needs a wand.
    ///
    /// A large 8-bit RGB(A) PNG is inflated in parts by the pool's idle threads (``PNGParts``)
    /// when `sharedParts` is `nil` and there are some, always when it is `true`, never when
    /// `false`: the same pixels either way; damaged files are read by libpng.
    ///
    /// Other PNGs up to ``inflatedCopyLimit`` are read from an ``inflatedCopy(_:sharedParts:)``
    /// (never when `sharedParts` is `true`, nor when `inflating` is `false`): the same pixels and
    /// damage as libpng's read of the file itself.
    static func decode(_ input: EncodedInput, factor: Int, toSRGB: Bool, failOn: FailOn = .warning,
                       sharedParts: Bool? = nil, inflating: Bool = true) throws -> (pixels: Decoded, damage: Damage?)? {
        if inflating, let copy = inflatedCopy(input, sharedParts: sharedParts),
           let decoded = try decodeRows(.memory(copy), factor: factor, toSRGB: toSRGB, failOn: failOn, sharedParts: false) {
            inflatedCopies.add(1, ordering: .relaxed)
            return decoded
        }
        return try decodeRows(input, factor: factor, toSRGB: toSRGB, failOn: failOn, sharedParts: sharedParts)
    }

    private static func decodeRows(_ input: EncodedInput, factor: Int, toSRGB: Bool, failOn: FailOn,
                                   sharedParts: Bool?) throws -> (pixels: Decoded, damage: Damage?)? {
        try withReader(input, failOn: failOn) { reader -> (pixels: Decoded, damage: Damage?)? in
            guard let plan = plan(reader, toSRGB: toSRGB) else { return nil }
            let rowBytes = pk_png_start(reader)
            guard rowBytes == plan.width * (plan.alpha ? 4 : 3) else {
                throw rowBytes == 0 ? failure(reader) : PipelineError(.decodeFailed, "PNG: unexpected row layout")
            }
            let width = plan.width, height = plan.height
            let box = BoxReducer(width: width, height: height, factor: factor, alpha: plan.alpha)
            var damage: Damage?
            var rowsRead = 0
            let shared = sharedParts ?? PNGParts.worthSharing(pixels: width * height, inflatedBytes: PNGParts.inflatedBytes(
                width: width, height: height, channels: plan.alpha ? 4 : 3), fileBytes: input.byteCount)
            // Chosen here (not asked for): one such read at a time in the process.
            let slot = sharedParts == nil && shared ? PNGParts.takeReadingSlot() : shared
            defer { if slot && sharedParts == nil { PNGParts.leaveReadingSlot() } }
            if slot, let pixels = PNGParts.reduce(input, box: box, as: UInt16.self) {
                PNGParts.count.add(1, ordering: .relaxed)
                // The parts decline any damage in the image data; a CRC mismatch libpng read past
                // in the chunks before it is the read's damage, as on libpng's own path.
                return try result(pixels, plan: plan, box: box, damage: try checksumDamage(reader, failOn: failOn))
            }
            var accumulator = BoxReducer.Accumulator<UInt16>(box)
            var row = [UInt8](repeating: 0, count: rowBytes)
            for _ in 0..<height {
                if damage != nil {  // the data stopped: the rest is left empty (adds nothing)
                    accumulator.addEmptyRow()
                    continue
                }
                do {
                    try readRow(reader, &row)
                    rowsRead += 1
                    row.withUnsafeBufferPointer { accumulator.add($0) }
                } catch let error as PipelineError {
                    damage = try rowDamage(reader, error, failOn: failOn, rowsRead: rowsRead, rows: height)
                    accumulator.addEmptyRow()
                }
            }
            let pixels = accumulator.pixels
            if damage == nil, let checksum = try checksumDamage(reader, failOn: failOn) { damage = checksum }
            return try result(pixels, plan: plan, box: box, damage: damage)
        }
    }

    /// The reduced pixels as the decode's result: the 16-bit averages (see
    /// ``BoxReducer/Accumulator``), or a wand of them carrying the profile to keep.
    private static func result(_ pixels: [UInt16], plan: Plan, box: BoxReducer, damage: Damage?) throws -> (pixels: Decoded, damage: Damage?) {
        guard let profile = plan.profile else {
            return (.pixels16(RGB16Pixels(width: box.outWidth, height: box.outHeight, hasAlpha: plan.alpha, samples: pixels)), damage)
        }
        let wand = try Wand.fromPixels(pixels, width: box.outWidth, height: box.outHeight, hasAlpha: plan.alpha)
        try wand.setICCProfile(profile)
        return (.wand(wand), damage)
    }

    /// Any PNG, whole, from libpng: for a damaged file that ImageMagick's coder gives up on (it
    /// keeps nothing of a PNG that ends early, and gives no reason), decoded past its damage as
    /// `failOn` allows, or failing with libpng's reason. Rows never read stay black and
    /// transparent; an interlaced image keeps what its earlier passes gave. An ICC profile is
    /// attached for the caller to convert or keep.
    static func decodeWhole(_ data: Data, failOn: FailOn) throws -> (wand: Wand, damage: Damage?)? {
        try withReader(.memory(data), failOn: failOn) { reader -> (wand: Wand, damage: Damage?)? in
            var width: UInt32 = 0, height: UInt32 = 0, profileLength: UInt32 = 0
            var colorType: Int32 = 0, interlaced: Int32 = 0, transparency: Int32 = 0
            var profileBytes: UnsafePointer<UInt8>?
            pk_png_header(reader, &width, &height, &colorType, &interlaced, &transparency, &profileBytes, &profileLength)
            let profile = profileBytes.map { Data(bytes: $0, count: Int(profileLength)) }
            let alpha = colorType & PNG_COLOR_MASK_ALPHA != 0 || transparency != 0
            var passes: Int32 = 1
            let rowBytes = pk_png_start_any(reader, &passes)
            guard rowBytes == Int(width) * (alpha ? 4 : 3) else {
                throw rowBytes == 0 ? failure(reader) : PipelineError(.decodeFailed, "PNG: unexpected row layout")
            }
            var pixels = [UInt8](repeating: 0, count: rowBytes * Int(height))
            var damage: Damage?
            var rowsRead = 0
            reading: for _ in 0..<passes {
                for y in 0..<Int(height) {
                    let ok = pixels.withUnsafeMutableBufferPointer { pk_png_read_row(reader, $0.baseAddress! + y * rowBytes) }
                    if ok == 0 {
                        damage = try rowDamage(reader, failure(reader), failOn: failOn, rowsRead: rowsRead, rows: Int(height) * Int(passes))
                        break reading
                    }
                    rowsRead += 1
                }
            }
            if damage == nil, let checksum = try checksumDamage(reader, failOn: failOn) { damage = checksum }
            let wand = try Wand.fromPixels(pixels, width: Int(width), height: Int(height), hasAlpha: alpha)
            if let profile, profileLength > 0 { try wand.setICCProfile(profile) }
            return (wand, damage)
        }
    }

    /// A row that could not be read (`error`, after `rowsRead` of `rows`) as the read's damage, or
    /// `error` itself when `failOn` stops at it or nothing was read.
    static func rowDamage(_ reader: UnsafeMutablePointer<pk_png_reader>, _ error: PipelineError, failOn: FailOn,
                          rowsRead: Int, rows: Int) throws -> Damage {
        let level: Damage.Level = reader.pointee.truncated != 0 ? .truncated : Damage.level(of: error.message)
        guard !failOn.stops(level), rowsRead > 0 else { throw error }
        return Damage(level: level, message: error.message + " (\(rowsRead) of \(rows) rows decoded)")
    }

    /// The CRC mismatch the read went past (see the shim), or `nil`; throws `decode_failed` when
    /// `failOn` stops at it.
    static func checksumDamage(_ reader: UnsafeMutablePointer<pk_png_reader>, failOn: FailOn) throws -> Damage? {
        guard let level = Damage.Level(rawValue: Int(reader.pointee.damage_level)) else { return nil }
        let message = "PNG: " + withUnsafeBytes(of: &reader.pointee.damage) { String(decoding: $0.prefix { $0 != 0 }, as: UTF8.self) }
        if failOn.stops(level) { throw PipelineError(.decodeFailed, message) }
        return Damage(level: level, message: message)
    }

    /// libpng's reason for the reader's last failure.
    static func failure(_ reader: UnsafeMutablePointer<pk_png_reader>) -> PipelineError {
        let message = withUnsafeBytes(of: &reader.pointee.message) { String(decoding: $0.prefix { $0 != 0 }, as: UTF8.self) }
        return PipelineError(.decodeFailed, "PNG: " + message)
    }

    /// Reads the next row (libpng checks the image data's length and CRC as it goes).
    static func readRow(_ reader: UnsafeMutablePointer<pk_png_reader>, _ row: inout [UInt8]) throws {
        let ok = row.withUnsafeMutableBufferPointer { pk_png_read_row(reader, $0.baseAddress) }
        if ok == 0 { throw failure(reader) }
    }
}
