import CHeif
import Foundation
import Synchronization
import MagickKit
import PipelineKit

/// Shrink-on-load for AVIF and HEIC: libheif decodes the primary image to interleaved 8-bit
/// RGB(A) and whole blocks are averaged into 16 bits, down to no less than twice the target
/// (``BoxReducer``), so ImageMagick receives only the small image. ImageMagick's own HEIC coder
/// would copy every decoded pixel into a 16-bit pixel cache (8 bytes a pixel, freshly faulted in)
/// and the resize would read it all again: on AVIF that took more time than the AV1 decode itself.
///
/// The codecs (dav1d or libaom for AVIF, libde265 for HEIC) have no reduced decode; the saving is
/// everything after them. libheif applies the file's rotation, mirroring and cropping (the HEIF
/// way of orienting; EXIF orientation does not apply to HEIF). An ICC profile is attached for the
/// decoder's sRGB conversion, and alpha is kept: ImageMagick 6's HEIF reader ignores both, so this
/// path also decodes images that need no reduction. Premultiplied alpha and kept image sequences
/// stay with ImageMagick.
enum HEIFReducer {
    /// What the container says about the primary image.
    struct Plan {
        let width: Int, height: Int
        let alpha: Bool
        let profile: Data?
    }

    /// An open file: its bytes (a copy the file owns, so it can outlive the caller's buffer), the
    /// context and its primary image's handle. Opening parses the boxes only. Used by one thread
    /// at a time: opened when the decode is prepared, then decoded (and its metadata read) in the
    /// decode's one job on a worker.
    final class File: @unchecked Sendable {
        /// Files opened so far in this process (for the test that counts one per decoded item).
        static let opened = Atomic<Int>(0)
        let bytes: UnsafeMutableRawBufferPointer
        let context: OpaquePointer
        let handle: OpaquePointer

        init(_ data: Data) throws {
            Self.opened.add(1, ordering: .relaxed)
            if let problem = HEIFReferences.problem(data) { throw PipelineError(.decodeFailed, problem) }
            // libheif is opened on the first HEIC or AVIF file (Sources/CHeif/include/CHeif.h).
            guard pk_heif_load() != 0 else { throw PipelineError(.unsupportedFormat, String(cString: pk_heif_load_error())) }
            bytes = UnsafeMutableRawBufferPointer.allocate(byteCount: max(1, data.count), alignment: 16)
            data.copyBytes(to: bytes)
            guard let context = pk_heif_context_alloc() else {
                bytes.deallocate()
                throw PipelineError(.tooLarge, "HEIF: out of memory")
            }
            // Grid tiles in the calling thread: with libheif's own tile threads, a crafted grid of
            // many tiles made libheif throw from a failed thread start, which ends the process
            // (fuzzing found it). Decodes run side by side on the workers instead.
            pk_heif_context_set_max_decoding_threads(context, 0)
            let read = pk_heif_context_read_from_memory_without_copy(context, bytes.baseAddress, data.count, nil)
            var handle: OpaquePointer?
            let primary = read.code == heif_error_Ok ? pk_heif_context_get_primary_image_handle(context, &handle) : read
            guard primary.code == heif_error_Ok, let handle else {
                // The message belongs to the context: read it before the context goes (fuzzing found
                // this use after free on an empty input).
                let failure = HEIFReducer.failure(primary)
                pk_heif_context_free(context)
                bytes.deallocate()
                throw failure
            }
            self.context = context
            self.handle = handle
        }

        deinit {
            pk_heif_image_handle_release(handle)
            pk_heif_context_free(context)
            bytes.deallocate()
        }

        var size: PixelSize {
            PixelSize(width: Int(pk_heif_image_handle_get_width(handle)), height: Int(pk_heif_image_handle_get_height(handle)))
        }

        var plan: Plan {
            var profile: Data?
            let type = pk_heif_image_handle_get_color_profile_type(handle)
            if type == heif_color_profile_type_prof || type == heif_color_profile_type_rICC {
                let size = pk_heif_image_handle_get_raw_color_profile_size(handle)
                if size > 0 {
                    var bytes = [UInt8](repeating: 0, count: size)
                    if pk_heif_image_handle_get_raw_color_profile(handle, &bytes).code == heif_error_Ok { profile = Data(bytes) }
                }
            }
            return Plan(width: Int(pk_heif_image_handle_get_width(handle)), height: Int(pk_heif_image_handle_get_height(handle)),
                        alpha: pk_heif_image_handle_has_alpha_channel(handle) != 0, profile: profile)
        }

        var premultiplied: Bool { pk_heif_image_handle_is_premultiplied_alpha(handle) != 0 }

        /// The first metadata block of `type` (`Exif`, or `mime` with `contentType`), or `nil`.
        func metadataBlock(type: String, contentType: String? = nil) -> Data? {
            let count = Int(pk_heif_image_handle_get_number_of_metadata_blocks(handle, type))
            guard count > 0, count < 64 else { return nil }
            var ids = [heif_item_id](repeating: 0, count: count)
            _ = pk_heif_image_handle_get_list_of_metadata_block_IDs(handle, type, &ids, Int32(count))
            for id in ids {
                if let contentType, String(cString: pk_heif_image_handle_get_metadata_content_type(handle, id)) != contentType { continue }
                let size = pk_heif_image_handle_get_metadata_size(handle, id)
                guard size > 0, size < 16 << 20 else { continue }
                var bytes = [UInt8](repeating: 0, count: size)
                if pk_heif_image_handle_get_metadata(handle, id, &bytes).code == heif_error_Ok { return Data(bytes) }
            }
            return nil
        }
    }

    /// Memory at the peak: the codec's planes (up to 16 bits a sample, 4:4:4 at worst), the 8-bit
    /// interleaved image, one row of column totals, and the reduced pixels twice (16-bit, then the wand).
    static func estimatedMemory(_ size: PixelSize, factor: Int = 1) -> Int {
        let pixels = size.width * size.height
        let out = ((size.width + factor - 1) / factor) * ((size.height + factor - 1) / factor)
        return pixels * 6 + pixels * 4 + size.width * 16 + out * 16
    }

    /// The image averaged in blocks of `factor` (1: every pixel), or `nil` when this file is one for
    /// ImageMagick. Throws `decode_failed` with libheif's reason for a corrupt or truncated file,
    /// and `too_large` when the coded image is larger than its header ('ispe') said and beyond
    /// `limits` (libheif decodes the coded size whatever 'ispe' claims: the limits were checked
    /// against the claim).
    static func decode(_ file: File, factor: Int, limits: (width: Int, height: Int, pixels: Int)) throws -> Wand? {
        let plan = file.plan
        guard !file.premultiplied else { return nil }
        var image: OpaquePointer?
        let decoded = pk_heif_decode_image(file.handle, &image, heif_colorspace_RGB,
                                        plan.alpha ? heif_chroma_interleaved_RGBA : heif_chroma_interleaved_RGB, nil)
        guard decoded.code == heif_error_Ok, let image else { throw failure(decoded) }
        defer { pk_heif_image_release(image) }
        let width = Int(pk_heif_image_get_width(image, heif_channel_interleaved))
        let height = Int(pk_heif_image_get_height(image, heif_channel_interleaved))
        var stride: Int32 = 0
        let channels = plan.alpha ? 4 : 3
        guard width > 0, height > 0, let plane = pk_heif_image_get_plane_readonly(image, heif_channel_interleaved, &stride),
              Int(stride) >= width * channels,
              pk_heif_image_get_bits_per_pixel_range(image, heif_channel_interleaved) == 8 else {
            throw PipelineError(.decodeFailed, "HEIF: unexpected decoded layout")
        }
        if width > limits.width || height > limits.height || width * height > limits.pixels {
            throw PipelineError(.tooLarge, "HEIF: the image decodes to \(width)x\(height), beyond the limits; its header said \(plan.width)x\(plan.height)")
        }
        let box = BoxReducer(width: width, height: height, factor: factor, alpha: plan.alpha)
        var y = 0
        let pixels = try box.reduce(as: UInt16.self) { row in
            row.withUnsafeMutableBytes { $0.copyMemory(from: UnsafeRawBufferPointer(start: plane + y * Int(stride), count: width * channels)) }
            y += 1
        }
        let wand = try Wand.fromPixels(pixels, width: box.outWidth, height: box.outHeight, hasAlpha: plan.alpha)
        if let profile = plan.profile { try wand.setICCProfile(profile) }
        return wand
    }

    /// libheif's reason as the decode's error.
    static func failure(_ error: heif_error) -> PipelineError {
        let message = error.message.map { String(cString: $0).trimmingCharacters(in: .whitespacesAndNewlines) } ?? "error \(error.code.rawValue)"
        if error.code == heif_error_Memory_allocation_error { return PipelineError(.tooLarge, "HEIF: " + message) }
        return PipelineError(.decodeFailed, "HEIF: " + message)
    }
}
