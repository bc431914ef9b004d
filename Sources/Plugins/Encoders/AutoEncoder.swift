import Foundation
import MagickKit
import PipelineKit

/// `auto`: keeps the source's format where it is a web format this build writes (JPEG, PNG, WebP,
/// GIF, AVIF, HEIC, JPEG XL), otherwise JPEG, or PNG when the image has transparency (also when a JPEG
/// source gained transparency, for example from `circle`). The output's extension follows.
///
/// With `prefer` (which `pipelinectl serve` sets from a request's `Accept`), it writes the first
/// of those formats that `allow_formats` lets it, instead of the source's: AVIF at a quality
/// chosen to look like WebP's at `quality` (see ``avifQuality(matching:)``), and only up to
/// `avif_max_pixels`; an animation as an AVIF sequence (``AVIFSequence``) unless
/// `avif_animations` is false, its pixels counted over every frame. JPEG XL is written only when
/// `prefer` names `jxl` (serve's default preference does not), at a quality chosen the same way
/// (``jxlQuality(matching:)``), and never for an animation (its writer keeps the first frame).
///
/// With a quality target (`quality: { target_ssim: ... }`), it picks instead: each of `formats`
/// (JPEG only for opaque images) is searched for the lowest quality that meets the target, and the
/// smallest output wins; when none meets it, the one that came closest. Animations keep the
/// source's format rule, searched when it is WebP.
public struct AutoEncoder: ImageEncoding {
    static let targetFormats = ["jpeg", "webp", "avif", "heic"]

    public static let plugin = Plugin.encoder(
        PluginSpec(
            name: "auto",
            summary: "Keeps the source format where it can (JPEG, PNG, WebP, GIF, AVIF, HEIC, JPEG XL), or with a quality target picks the smallest format that meets it.",
            options: [
                QualityTarget.option(default: 82, doc: "Quality for the lossy formats (JPEG, WebP, AVIF, HEIC)."),
                .list("formats", of: .oneOf(targetFormats), default: [.string("jpeg"), .string("webp")],
                      doc: "With a quality target: the formats it chooses from (AVIF and HEIC encode many times slower).")
                    .example("[jpeg, webp, avif]"),
                .list("allow_formats", of: .oneOf(["jpeg", "png", "webp", "gif", "avif", "heic", "jxl"]),
                      default: [.string("jpeg"), .string("png"), .string("webp"), .string("gif"), .string("avif"), .string("heic"), .string("jxl")],
                      doc: "The formats it may write: a source in another is written as JPEG, or PNG with transparency, and a quality target chooses only among these. `pipelinectl serve` narrows it to what the request's Accept names.")
                    .example("[jpeg, png, gif]"),
                .list("prefer", of: .oneOf(["jxl", "avif", "webp"]), default: [],
                      doc: "Formats written instead of the source's, the first that allow_formats lets it write. `pipelinectl serve` uses [avif, webp] unless the file sets this, narrowed to what the request accepts: [webp] never makes AVIF, [webp, avif] makes AVIF only for clients that take no WebP, and [jxl, avif, webp] sends JPEG XL to clients that name image/jxl.")
                    .example("[webp, avif]"),
                .int("avif_quality", range: 1...100,
                     doc: "AVIF's quality (default: the one measured to look like WebP at `quality` by SSIM: 65 for 80, 70 for 82; bench/avif-quality.py).")
                    .example("60"),
                .int("jxl_quality", range: 1...100,
                     doc: "JPEG XL's quality, on cjxl's scale (default: the one measured to look like WebP at `quality` by SSIM; bench/avif-quality.py --format jxl).")
                    .example("75"),
                .int("avif_max_pixels", default: 0, range: 0...1_000_000_000,
                     doc: "AVIF only for outputs of at most this many pixels, every frame of an animation counted (0: any); larger ones get the next preferred format. AVIF encodes take 3-70 times WebP's time.")
                    .example("1000000"),
                .bool("avif_animations", default: true,
                      doc: "Where AVIF is preferred, write animations as AVIF sequences too (every frame, its time and the loop count; 0.04-0.64 of animated WebP's bytes at equal SSIM for 9 of 10 test animations, at 4-5 times its encode time: bench/animated-avif.py). false keeps animations in WebP or GIF.")
                    .example("false"),
                MagickEncoding.maxBytesOption,
            ], retired: MagickEncoding.retired),
        make: { options in try AutoEncoder(options: options) })

    /// WebP's quality and the AVIF quality whose mean SSIM (scikit-image, RGB, at a 512 px box)
    /// was at least WebP's on the 72 bench corpus photos (bench/avif-quality.py; the report on the
    /// formats corpus is in bench/NOTEBOOK.md#avif-quality). Between two points, linear.
    static let avifForWebP: [(webp: Int, avif: Int)] = [(1, 1), (60, 50), (70, 55), (80, 65), (82, 70), (90, 90), (100, 100)]

    /// The AVIF quality that looks like WebP's (and JPEG's) `quality`.
    static func avifQuality(matching quality: Int) -> Int {
        interpolated(quality, avifForWebP.map { ($0.webp, $0.avif) })
    }

    /// WebP's quality and the JPEG XL quality (cjxl's scale) whose mean SSIM was at least WebP's on
    /// the same photos (`bench/avif-quality.py --format jxl`; notebook `#jxl-quality`).
    static let jxlForWebP: [(webp: Int, jxl: Int)] = [(1, 1), (60, 62), (70, 66), (75, 68), (80, 78), (82, 78), (85, 84), (90, 90), (100, 100)]

    /// The JPEG XL quality that looks like WebP's (and JPEG's) `quality`.
    static func jxlQuality(matching quality: Int) -> Int {
        interpolated(quality, jxlForWebP.map { ($0.webp, $0.jxl) })
    }

    /// `quality` mapped through `points` (WebP's quality, the other's), linear between two.
    static func interpolated(_ quality: Int, _ points: [(Int, Int)]) -> Int {
        guard let upper = points.firstIndex(where: { $0.0 >= quality }) else { return quality }
        guard upper > 0 else { return points[0].1 }
        let (a, b) = (points[upper - 1], points[upper])
        let t = Double(quality - a.0) / Double(b.0 - a.0)
        return Int((Double(a.1) + t * Double(b.1 - a.1)).rounded())
    }

    /// Whether this build writes `format` (ImageMagick's name): JPEG XL through our own writer.
    static func writes(_ format: String) -> Bool { format == "JXL" || Magick.canWrite(format) }

    static let kept = ["JPEG", "PNG", "WEBP", "GIF", "AVIF", "HEIC", "JXL"]
    let quality: Int?, maxBytes: Int?, target: QualityTarget?
    /// The ImageMagick formats a target chooses from, in the order given.
    let candidates: [String]
    /// The ImageMagick formats it may write (JPEG and PNG always, as the fallbacks).
    let allowed: Set<String>
    /// Formats written instead of the source's, in order (ImageMagick's names).
    let prefer: [String]
    /// AVIF's quality (mapped from `quality` unless set).
    let avifQuality: Int?
    /// JPEG XL's quality (mapped from `quality` unless set).
    let jxlQuality: Int
    let avifMaxPixels: Int
    /// Whether an animation may be written as an AVIF sequence.
    let avifAnimations: Bool
    public var fileExtension: String { "auto" }
    public let identifier: String

    init(options: PluginOptions) throws {
        quality = options.int("quality")
        maxBytes = options.int("max_bytes")
        target = try QualityTarget.from(options)
        let allowed = Set((options.list("allow_formats") ?? []).map { $0.description.uppercased() } + ["JPEG", "PNG"])
        self.allowed = allowed
        let writable = (options.list("formats") ?? []).map { $0.description.uppercased() }.filter { format in
            format == "JPEG" || Magick.canWrite(format)
        }
        if target != nil, writable.isEmpty {
            throw PipelineError(.invalidOption, "auto: none of 'formats' can be written by this ImageMagick build")
        }
        // Narrowed by allow_formats; JPEG when that leaves none (PNG for transparency, by the source rule).
        let narrowed = writable.filter { allowed.contains($0) }
        candidates = narrowed.isEmpty && !writable.isEmpty ? ["JPEG"] : narrowed
        prefer = (options.list("prefer") ?? []).map { $0.description.uppercased() }.filter { allowed.contains($0) && Self.writes($0) }
        avifQuality = options.int("avif_quality") ?? quality.map(Self.avifQuality(matching:))
        jxlQuality = options.int("jxl_quality") ?? Self.jxlQuality(matching: quality ?? 82)
        avifMaxPixels = options.int("avif_max_pixels") ?? 0
        avifAnimations = options.bool("avif_animations") ?? true
        identifier = "auto(\(options.canonical))"
    }

    /// The format `image` is written in without a target.
    func format(for image: PipelineImage) -> String {
        for format in prefer {
            if format == "AVIF", image.frameCount > 1 && !avifAnimations
                || (avifMaxPixels > 0 && image.width * image.height * max(1, image.frameCount) > avifMaxPixels) { continue }
            if format == "JXL", image.frameCount > 1 { continue }
            return format
        }
        let source = image.sourceFormat
        if Self.kept.contains(source), allowed.contains(source), !(source == "JPEG" && image.hasAlpha), Self.writes(source) { return source }
        return image.hasAlpha ? "PNG" : "JPEG"
    }

    static func fileExtension(_ format: String) -> String { format == "JPEG" ? "jpg" : format.lowercased() }

    public func fileExtension(for image: PipelineImage) -> String { Self.fileExtension(format(for: image)) }

    /// How `format` is written, at `quality` or searched for `target`.
    func encoding(_ format: String, target: QualityTarget?) -> MagickEncoding {
        let lossy = ["JPEG", "WEBP", "AVIF", "HEIC"].contains(format)
        let fixed = format == "AVIF" ? avifQuality ?? quality : quality
        var encoding = MagickEncoding(format: format, quality: lossy ? fixed ?? target?.max : nil, maxBytes: maxBytes,
                                      target: lossy ? target : nil)
        switch format {
        case "JPEG": encoding.flattenOnto = "white"; encoding.coderOptions = ["jpeg:sampling-factor": "2x2,1x1,1x1"]
        case "GIF": encoding.paletteColors = 256; encoding.animates = true
        case "WEBP": encoding.animates = true
        default: break
        }
        return encoding
    }

    /// The formats a target chooses from for `image`: no JPEG for transparency, only WebP for an
    /// animation; empty when the source's format rule applies.
    func choices(for image: PipelineImage) -> [String] {
        guard target != nil else { return [] }
        if image.frameCount > 1 { return candidates.contains("WEBP") ? ["WEBP"] : [] }
        guard !candidates.isEmpty else { return [] }
        return candidates.filter { !(image.hasAlpha && $0 == "JPEG") }
    }

    /// `image` as JPEG XL at `jxlQuality`, lowered step by step to fit `max_bytes` as the other
    /// lossy formats are.
    func jxl(_ image: PipelineImage) throws -> EncodedImage {
        let write = { (quality: Int) in try JXLEncoder(distance: JXLEncoder.distance(quality: Double(quality))).encode(image) }
        let (data, facts) = try MagickEncoding(format: "JXL", quality: jxlQuality, maxBytes: maxBytes)
            .fitted(try write(jxlQuality), facts: [:], chosen: jxlQuality, write: write)
        return EncodedImage(data: data, fileExtension: "jxl", facts: facts)
    }

    static func score(_ facts: ImageFacts) -> Double {
        if case .number(let score) = facts["ssim"] { return score }
        return 0
    }

    public func encode(_ image: PipelineImage) throws -> Data { try encoded(image).data }

    public func encoded(_ image: PipelineImage) throws -> EncodedImage {
        let choices = choices(for: image)
        guard !choices.isEmpty else {
            let format = format(for: image)
            if format == "JXL" { return try jxl(image) }
            if format == "AVIF", image.frameCount > 1 {
                let quality = avifQuality ?? quality ?? target?.max ?? 50
                return EncodedImage(data: try HEIFEncoder.sequence(image, quality: quality, maxBytes: maxBytes), fileExtension: "avif",
                                    facts: ["frames": .int(image.frameCount)])
            }
            // PNG as the png encoder writes it by default.
            if format == "PNG", maxBytes == nil,
               let png = try PNGWriter.write(image, level: PNGWriter.defaultLevel, filter: PNGWriter.defaultFilter) {
                return EncodedImage(data: png, fileExtension: "png", facts: [:])
            }
            let (data, facts) = try encoding(format, target: format == "WEBP" && image.frameCount > 1 ? nil : target).encoded(image)
            return EncodedImage(data: data, fileExtension: Self.fileExtension(format), facts: facts)
        }
        var best: (format: String, data: Data, facts: ImageFacts)?
        var tried: [String: FactValue] = [:]
        for format in choices {
            let (data, facts) = try encoding(format, target: target).encoded(image)
            tried[Self.fileExtension(format)] = .int(data.count)
            let met = facts["target_met"] != .bool(false)
            if let current = best {
                let currentMet = current.facts["target_met"] != .bool(false)
                let better = met != currentMet ? met
                    : met ? data.count < current.data.count
                    : Self.score(facts) > Self.score(current.facts)
                if !better { continue }
            }
            best = (format, data, facts)
        }
        var facts = best!.facts
        facts["format"] = .string(Self.fileExtension(best!.format))
        facts["bytes_by_format"] = .object(tried)
        return EncodedImage(data: best!.data, fileExtension: Self.fileExtension(best!.format), facts: facts)
    }
}
