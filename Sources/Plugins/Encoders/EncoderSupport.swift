import Foundation
import MagickKit
import PipelineKit

/// What every ImageMagick-backed encoder does: work on a copy, flatten alpha where the format has
/// none, write only the metadata the pipeline keeps (``PipelineImage/metadata``: by default the ICC
/// profile and nothing else), write 8 bits per channel with an explicit coder,
/// write every frame of an animation where the format has them, and step quality down until the
/// output fits `maxBytes`.
struct MagickEncoding: Sendable {
    let format: String
    var quality: Int?
    /// The colour alpha is flattened onto, for formats without alpha; `nil` keeps alpha.
    var flattenOnto: String?
    var coderOptions: [String: String] = [:]
    /// Progressive (interlaced) output; `false` writes baseline even from a progressive source.
    var progressive: Bool = false
    /// Reduce to at most this many colours (palette PNG, GIF).
    var paletteColors: Int?
    var dither: Bool = true
    /// Whether the format stores animations (GIF, WebP): all frames are written.
    var animates: Bool = false
    /// The largest output accepted; `nil` for no limit.
    var maxBytes: Int?
    /// A visual target the quality is searched for (``QualityTarget``); `quality` is then unused.
    var target: QualityTarget?

    /// What replaced the encoders' `strip` option, for pipelines that still set it.
    static let retired = ["strip": "metadata is now chosen for every output by the pipeline's top-level 'metadata:' section "
        + "(default: keep the ICC profile only; strip: false is metadata: { keep: [all] })"]
    static let maxBytesOption = OptionSpec.size("max_bytes", min: "1KB", max: "1GB",
                                                doc: "Largest output: quality is lowered step by step until it fits; fails as too_large when even the lowest does not.")

    func encode(_ image: PipelineImage) throws -> Data { try encoded(image).data }

    /// The output, with what was chosen for it: for a quality target, the quality, its SSIM, the
    /// number of encodes and whether the target was met (``QualityTarget/Found/facts``).
    func encoded(_ image: PipelineImage) throws -> (data: Data, facts: ImageFacts) {
        if let pixels = image.rgb8, let settings = directJPEG(image, pixels) {
            return try fitted(try JPEGWriter.write(pixels, settings), facts: [:], chosen: settings.quality) { quality in
                var lowered = settings
                lowered.quality = quality
                return try JPEGWriter.write(pixels, lowered)
            }
        }
        return try image.withCopy { wand in
            if image.frameCount > 1, !animates { try wand.keepFirstFrame() }
            let metadata = image.metadata ?? ImageMetadata()
            try wand.eachFrame { frame in
                if let flattenOnto { try frame.flatten(onto: flattenOnto) }
                try frame.strip(keepICC: metadata.keepsICC)
                if format == "PNG" { frame.setArtifact("png:exclude-chunk", Self.excludedPNGChunks(metadata)) }
                if let paletteColors { try frame.quantize(colors: paletteColors, dither: dither) }
            }
            try Self.attach(metadata, to: wand)
            wand.setProgressive(progressive)
            if let target {
                let found = try target.search(wand, format: format) { try write(wand, quality: $0) }
                return try fitted(found.data, facts: found.facts, chosen: found.quality, target: true) { try write(wand, quality: $0) }
            }
            return try fitted(try write(wand, quality: quality), facts: [:], chosen: quality) { try write(wand, quality: $0) }
        }
    }

    /// libjpeg's settings for writing `pixels` without ImageMagick (``JPEGWriter``), or `nil` when
    /// ImageMagick must write them: not JPEG, alpha to flatten, metadata to write, a quality target.
    func directJPEG(_ image: PipelineImage, _ pixels: RGB8Pixels) -> JPEGWriter.Settings? {
        let metadata = image.metadata ?? ImageMetadata()
        guard format == "JPEG", !pixels.hasAlpha, target == nil, paletteColors == nil,
              metadata.exif == nil, metadata.xmp == nil, metadata.iptc == nil else { return nil }
        return JPEGWriter.Settings(quality: quality, coderOptions: coderOptions, progressive: progressive)
    }

    /// `data`, or when it is over `maxBytes`, what `write` makes at lower qualities (imgproxy-style:
    /// lowered step by step until it fits). Throws `too_large` when nothing fits. `auto` uses it
    /// for JPEG XL too, whose writer is not ImageMagick's.
    func fitted(_ data: Data, facts: ImageFacts, chosen: Int?, target: Bool = false,
                        write: (Int) throws -> Data) throws -> (data: Data, facts: ImageFacts) {
        guard let maxBytes, data.count > maxBytes else { return (data, facts) }
        guard var current = chosen else {
            throw PipelineError(.tooLarge, "the \(format) output is \(Units.formatSize(data.count)), over max_bytes "
                + "\(Units.formatSize(maxBytes)), and \(format) has no quality to lower")
        }
        var data = data
        while current > 10 {
            current = max(10, current - max(5, current / 10))
            data = try write(current)
            if data.count <= maxBytes {
                // Below what the target chose: its score no longer describes the output.
                return (data, target ? ["quality": .int(current), "lowered_for_max_bytes": .bool(true)] : facts)
            }
        }
        throw PipelineError(.tooLarge, "the \(format) output is \(Units.formatSize(data.count)) even at quality 10, "
            + "over max_bytes \(Units.formatSize(maxBytes))")
    }

    /// Attaches what `metadata` keeps to the first frame, as ImageMagick's writers take it: EXIF
    /// behind JPEG's `Exif\0\0`, XMP and IPTC as they are. Which formats store which is
    /// ImageMagick's: JPEG all three, PNG EXIF, XMP and IPTC, WebP EXIF, TIFF XMP and IPTC; AVIF,
    /// HEIC and GIF none.
    static func attach(_ metadata: ImageMetadata, to wand: Wand) throws {
        if let exif = metadata.exif {
            // ImageMagick rewrites EXIF's resolution from the image's when it writes: give it EXIF's.
            if let resolution = ExifRewriter.resolution(exif) {
                wand.setResolution(x: resolution.x, y: resolution.y, unit: resolution.unit)
            }
            try wand.setProfile("exif", Data("Exif\0\0".utf8) + exif)
        }
        if let xmp = metadata.xmp { try wand.setProfile("xmp", xmp) }
        if let iptc = metadata.iptc { try wand.setProfile("iptc", iptc) }
    }

    /// PNG chunks ImageMagick must not write: the colour and text chunks stripping leaves out
    /// (as `strip` in ImageMagick does), and each metadata chunk the pipeline does not keep. It
    /// replaces the list `strip()` leaves on the image, which would also drop the ICC profile and
    /// EXIF a pipeline keeps.
    static func excludedPNGChunks(_ metadata: ImageMetadata) -> String {
        var chunks = ["bKGD", "caNv", "cHRM", "gAMA", "pHYs", "sRGB", "tEXt", "iTXt", "tIME", "date"]
        if !metadata.keepsICC { chunks += ["iCCP", "zCCP"] }
        if metadata.exif == nil { chunks.append("eXIf") }
        // ImageMagick writes the ICC profile only when a text chunk is allowed, and XMP and IPTC as
        // compressed text: zTXt stays for those (no property is left to be written as text).
        if !metadata.keepsICC, metadata.xmp == nil, metadata.iptc == nil { chunks.append("zTXt") }
        return chunks.joined(separator: ",")
    }

    private func write(_ wand: Wand, quality: Int?) throws -> Data {
        let options = format == "JPEG" ? coderOptions.merging(Self.jpegDCT) { own, _ in own } : coderOptions
        guard format == "WEBP", animates, wand.frameCount > 1 else {
            return try wand.encode(format: format, quality: quality, depth: 8, options: options, allFrames: animates)
        }
        // ImageMagick 6.9.11 hands libwebp each frame's end as its start time, so every frame
        // would show for the next one's time: each frame is given the one before's, and the last
        // frame's time (libwebp guesses it) is set in the file.
        let durations = wand.frameDurations
        wand.setFrameDurations([durations.last!] + durations.dropLast())
        defer { wand.setFrameDurations(durations) }
        let data = try wand.encode(format: format, quality: quality, depth: 8, options: options, allFrames: true)
        return WebPFormat.settingLastFrameDuration(data, total: durations.reduce(0, +))
    }

    /// libjpeg's accurate integer DCT for every JPEG, as ``JPEGWriter`` writes them. ImageMagick 6
    /// picks the fast one up to quality 90; the accurate one is libjpeg's own default (cjpeg,
    /// Pillow, libvips) and costs no measurable time at thumbnail sizes (500 encodes of a 512x288
    /// picture by cjpeg: 1.48 s against 1.52 s). At quality 80 it gave 512 px answers of the bench
    /// corpora 0.005-0.035 dB more PSNR, enough to put `shrink_on_load: fast` above Pillow's draft
    /// decode on every photo (bench/NOTEBOOK.md#islow).
    static let jpegDCT = ["jpeg:dct-method": "islow"]

    /// Throws at validation time when this ImageMagick cannot write `format`.
    static func requireWriter(_ format: String, delegate: String? = nil) throws {
        guard Magick.canWrite(format) else {
            throw PipelineError(.unsupportedFormat, "this ImageMagick build cannot write \(format)"
                + (delegate.map { " (it needs the \($0) delegate)" } ?? ""))
        }
    }
}
