import Foundation
import MagickKit
import PipelineKit

/// `auto`: keeps the source's format where it is a web format this build writes (JPEG, PNG, WebP,
/// GIF, AVIF, HEIC), otherwise JPEG, or PNG when the image has transparency (also when a JPEG
/// source gained transparency, for example from `circle`). The output's extension follows.
///
/// With `prefer` (which `pipelinectl serve` sets from a request's `Accept`), it writes the first
/// of those formats that `allow_formats` lets it, instead of the source's: AVIF at a quality
/// chosen to look like WebP's at `quality` (see ``avifQuality(matching:)``), and only up to
/// `avif_max_pixels`; an animation is never written as AVIF here.
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
            summary: "Keeps the source format where it can (JPEG, PNG, WebP, GIF, AVIF, HEIC), or with a quality target picks the smallest format that meets it.",
            options: [
                QualityTarget.option(default: 82, doc: "Quality for the lossy formats (JPEG, WebP, AVIF, HEIC)."),
                .list("formats", of: .oneOf(targetFormats), default: [.string("jpeg"), .string("webp")],
                      doc: "With a quality target: the formats it chooses from (AVIF and HEIC encode many times slower).")
                    .example("[jpeg, webp, avif]"),
                .list("allow_formats", of: .oneOf(["jpeg", "png", "webp", "gif", "avif", "heic"]),
                      default: [.string("jpeg"), .string("png"), .string("webp"), .string("gif"), .string("avif"), .string("heic")],
                      doc: "The formats it may write: a source in another is written as JPEG, or PNG with transparency, and a quality target chooses only among these. `pipelinectl serve` narrows it to what the request's Accept names.")
                    .example("[jpeg, png, gif]"),
                .list("prefer", of: .oneOf(["avif", "webp"]), default: [],
                      doc: "Formats written instead of the source's, the first that allow_formats lets it write. `pipelinectl serve` uses [avif, webp] unless the file sets this, narrowed to what the request accepts: [webp] never makes AVIF, [webp, avif] makes AVIF only for clients that take no WebP.")
                    .example("[webp, avif]"),
                .int("avif_quality", range: 1...100,
                     doc: "AVIF's quality (default: the one measured to look like WebP at `quality` by SSIM: 65 for 80, 70 for 82; bench/avif-quality.py).")
                    .example("60"),
                .int("avif_max_pixels", default: 0, range: 0...1_000_000_000,
                     doc: "AVIF only for outputs of at most this many pixels (0: any); larger ones get the next preferred format. AVIF encodes take 3-70 times WebP's time.")
                    .example("1000000"),
                MagickEncoding.maxBytesOption,
            ], retired: MagickEncoding.retired),
        make: { options in try AutoEncoder(options: options) })

    /// WebP's quality and the AVIF quality whose mean SSIM (scikit-image, RGB, at a 512 px box)
    /// was at least WebP's on the 72 bench corpus photos (bench/avif-quality.py; the report on the
    /// formats corpus is in bench/NOTEBOOK.md#avif-quality). Between two points, linear.
    static let avifForWebP: [(webp: Int, avif: Int)] = [(1, 1), (60, 50), (70, 55), (80, 65), (82, 70), (90, 90), (100, 100)]

    /// The AVIF quality that looks like WebP's (and JPEG's) `quality`.
    static func avifQuality(matching quality: Int) -> Int {
        let points = avifForWebP
        guard let upper = points.firstIndex(where: { $0.webp >= quality }) else { return quality }
        guard upper > 0 else { return points[0].avif }
        let (a, b) = (points[upper - 1], points[upper])
        let t = Double(quality - a.webp) / Double(b.webp - a.webp)
        return Int((Double(a.avif) + t * Double(b.avif - a.avif)).rounded())
    }

    static let kept = ["JPEG", "PNG", "WEBP", "GIF", "AVIF", "HEIC"]
    let quality: Int?, maxBytes: Int?, target: QualityTarget?
    /// The ImageMagick formats a target chooses from, in the order given.
    let candidates: [String]
    /// The ImageMagick formats it may write (JPEG and PNG always, as the fallbacks).
    let allowed: Set<String>
    /// Formats written instead of the source's, in order (ImageMagick's names).
    let prefer: [String]
    /// AVIF's quality (mapped from `quality` unless set).
    let avifQuality: Int?
    let avifMaxPixels: Int
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
        prefer = (options.list("prefer") ?? []).map { $0.description.uppercased() }.filter { allowed.contains($0) && Magick.canWrite($0) }
        avifQuality = options.int("avif_quality") ?? quality.map(Self.avifQuality(matching:))
        avifMaxPixels = options.int("avif_max_pixels") ?? 0
        identifier = "auto(\(options.canonical))"
    }

    /// The format `image` is written in without a target.
    func format(for image: PipelineImage) -> String {
        for format in prefer {
            if format == "AVIF", image.frameCount > 1 || (avifMaxPixels > 0 && image.width * image.height > avifMaxPixels) { continue }
            return format
        }
        let source = image.sourceFormat
        if Self.kept.contains(source), allowed.contains(source), !(source == "JPEG" && image.hasAlpha), Magick.canWrite(source) { return source }
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

    static func score(_ facts: ImageFacts) -> Double {
        if case .number(let score) = facts["ssim"] { return score }
        return 0
    }

    public func encode(_ image: PipelineImage) throws -> Data { try encoded(image).data }

    public func encoded(_ image: PipelineImage) throws -> EncodedImage {
        let choices = choices(for: image)
        guard !choices.isEmpty else {
            let format = format(for: image)
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
