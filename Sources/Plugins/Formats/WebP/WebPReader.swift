import Foundation
import MagickKit
import PipelineKit

/// WebP: the container read once by libwebp's demuxer (``WebPReducer/plan(_:keepsFrames:)``);
/// still images and a lone first frame are decoded by libwebp straight to a reduced size, the
/// rest by ImageMagick. A WebP cut short is decoded as far as it goes when `fail_on` allows.
struct WebPReader: FormatReader {
    var format: ImageFormat { .webp }
    let data: Data
    let size: PixelSize
    /// The container's plan (`nil`: one for ImageMagick), or why its headers are broken.
    let container: Result<WebPReducer.Plan?, PipelineError>

    init(_ data: Data, keepsFrames: Bool) throws {
        self.data = data
        do { container = .success(try WebPReducer.plan(data, keepsFrames: keepsFrames)) } catch let error as PipelineError {
            container = .failure(error)
        }
        let planned = (try? container.get()).flatMap { $0.map { PixelSize(width: $0.width, height: $0.height) } }
        size = try planned ?? ImageMagickDecoder.headerSize(data, format: .webp)
    }

    func plan(_ hint: DecodeHint, _ settings: DecodeSettings) -> ReadPlan {
        guard settings.shrinkOnLoad else { return ReadPlan(estimatedMemory: magickMemory()) }
        let container = self.container, data = self.data
        guard case .success(let found?) = container, let scaled = WebPReducer.scaledSize(found, hint: hint, headroom: settings.headroom) else {
            // Broken headers: the reduced path says why (its reason is the precise one).
            if case .failure(let error) = container {
                return ReadPlan(reduced: { throw error }, estimatedMemory: magickMemory())
            }
            return ReadPlan(estimatedMemory: magickMemory())
        }
        return ReadPlan(reduced: {
            // Without a profile to convert or keep, the pixels stay 8-bit.
            if found.profile.map({ settings.toSRGB && Wand.isSRGB($0) }) ?? true {
                let (pixels, damage) = try WebPReducer.decodePixels(data, plan: found, size: scaled, failOn: settings.failOn)
                return (.pixels(pixels), damage)
            }
            let decoded = try WebPReducer.decode(data, plan: found, size: scaled, failOn: settings.failOn)
            if settings.toSRGB { try decoded.wand.convertToSRGB() }
            return (.wand(decoded.wand), decoded.damage)
        }, estimatedMemory: WebPReducer.estimatedMemory(found, scaled: scaled) + data.count)
    }

    func salvage(_ settings: DecodeSettings) throws -> (wand: Wand, damage: Damage?)? {
        guard !settings.failOn.stops(.truncated), let found = try? WebPReducer.plan(data, keepsFrames: false),
              let decoded = try? WebPReducer.decode(data, plan: found, size: PixelSize(width: found.width, height: found.height),
                                                    failOn: settings.failOn) else { return nil }
        if settings.toSRGB { try decoded.wand.convertToSRGB() }
        return decoded
    }

    /// From the container's chunks (`ICCP`, `EXIF`, `XMP `): ImageMagick 6 decodes the whole
    /// picture to ping a WebP (25 ms a file on the bench corpus, 119 ms at worst).
    func headerFacts(facts: Bool, metadata: Bool, upright: (Int) -> Bool) -> HeaderFacts {
        HeaderFacts(facts: facts ? WebPFormat.facts(data) : [:], metadata: metadata ? WebPFormat.metadata(data, upright: upright) : nil)
    }
}
