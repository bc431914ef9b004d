import CMagickWand
import Foundation
import MagickKit
import PipelineKit

/// ImageMagick's path: whatever the readers' own reduced decodes leave (formats without one,
/// files they decline, damage they refuse that `fail_on` lets through), read with the explicit
/// coder of the sniffed format, never a guess.
extension ImageMagickDecoder {
    /// The decode of `reader`'s file by ImageMagick's coder (`jpegSize`: the DCT scale to ask of
    /// libjpeg). `refused` is the reduced path's reason, kept as the damage when ImageMagick reads
    /// past it, or thrown when ImageMagick decodes nothing.
    func magickDecode(_ reader: any FormatReader, jpegSize: String?, refused: PipelineError?) throws -> PipelineImage {
        let format = reader.format
        var wand = Wand()
        var damage: Damage?
        if let jpegSize { wand.setOption("jpeg:size", jpegSize) }
        var problem: Damage?
        do {
            // One frame more than allowed is enough to know there are too many; the rest is never decoded.
            let frames = format.mayHoldFrames ? (settings.maxFrames == 1 ? 1 : settings.maxFrames + 1) : nil
            problem = try reader.magickRead(into: wand, maxFrames: frames)
        } catch let error as PipelineError {
            if let salvaged = try reader.salvage(settings) { return image(salvaged.wand, format, salvaged.damage) }
            throw Self.readFailure(error, format: format, refused: refused, size: reader.size)
        }
        if var problem {
            if let salvaged = try reader.salvage(settings) { return image(salvaged.wand, format, salvaged.damage) }
            problem = Damage(level: problem.level, message: format.coder + ": " + problem.message)
            if settings.failOn.stops(problem.level) { throw PipelineError(.decodeFailed, refused?.message ?? problem.message) }
            damage = refused.map { Damage(level: Damage.level(of: $0.message), message: $0.message) } ?? problem
        } else if let refused {
            damage = Damage(level: Damage.level(of: refused.message), message: refused.message)
        }
        wand = try framesKept(wand, size: reader.size)
        for frame in wand.frameCount > 1 ? wand.frames() : [wand] {
            // Orientation means EXIF's (or TIFF's tag). ImageMagick's TGA coder, for one, already
            // stores the rows top down and still reports the file's bottom-left origin.
            if format.hasEXIFOrientation {
                if settings.autoOrient { try frame.autoOrient() }
            } else {
                frame.orientation = 1
            }
            if settings.toSRGB { try frame.convertToSRGB() }
        }
        return image(wand, format, damage)
    }

    /// Why ImageMagick's read failed, as the item's error. Running into ImageMagick's resource
    /// limits means too large, not broken: an image whose header size is over the area or
    /// width/height limits of the machine's policy.xml (read whole, as when no resize reduces it),
    /// or a frame larger than the header said (a GIF's image descriptor, say). Otherwise the
    /// reduced path's reason when it gave one (the more precise).
    static func readFailure(_ error: PipelineError, format: ImageFormat, refused: PipelineError?, size: PixelSize) -> PipelineError {
        let exhausted = ["memory allocation failed", "cache resources exhausted", "width or height exceeds limit", "too much memory"]
        guard refused == nil, exhausted.contains(where: error.message.lowercased().contains) else { return refused ?? error }
        let area = Magick.resourceLimit(AreaResource)
        let width = Magick.resourceLimit(WidthResource), height = Magick.resourceLimit(HeightResource)
        if UInt64(size.width) * UInt64(size.height) > area || UInt64(size.width) > width || UInt64(size.height) > height {
            return PipelineError(.tooLarge, "\(format.coder): \(size.width)x\(size.height) is over ImageMagick's limits in policy.xml "
                + "(area \(Units.formatPixels(Int(min(area, UInt64(Int.max))))), width \(width), height \(height)), which apply when the "
                + "image is read whole: keep a resize in the chain, so that it is reduced while read, or raise the limits")
        }
        return PipelineError(.tooLarge, "\(format.coder): \(error.message) (the image holds more than its header declares)")
    }

    /// The frames `max_frames` keeps: the first only, or the animation coalesced (within the limits).
    func framesKept(_ wand: Wand, size: PixelSize) throws -> Wand {
        if wand.frameCount > settings.maxFrames {
            if settings.maxFrames > 1 {
                throw PipelineError(.tooLarge, "the animation has more than \(settings.maxFrames) frames (max_frames \(settings.maxFrames))")
            }
            try wand.keepFirstFrame()
        }
        guard wand.frameCount > 1 else { return wand }
        if wand.frameCount * size.width * size.height > settings.maxPixels * settings.maxFrames {
            throw PipelineError(.tooLarge, "\(wand.frameCount) frames of \(size.width)x\(size.height) exceed the limits")
        }
        return try wand.coalesced()
    }
}

extension Wand {
    /// An sRGB ICC profile from the system (Ghostscript's, package libgs-common), for converting
    /// profiled images with lcms; without one, colour spaces are converted by formula.
    static let sRGBProfile: Data? = [
        "/usr/share/color/icc/ghostscript/srgb.icc", "/usr/share/color/icc/sRGB.icc", "/usr/share/color/icc/colord/sRGB.icc",
    ].lazy.compactMap { FileManager.default.contents(atPath: $0) }.first

    /// Whether an ICC profile describes sRGB (its description names it, in ASCII or UTF-16).
    static func isSRGB(_ profile: Data) -> Bool {
        let bytes = [UInt8](profile.prefix(4096))
        let ascii = Array("sRGB".utf8), utf16 = [0, 0x73, 0, 0x52, 0, 0x47, 0, 0x42] as [UInt8]
        func contains(_ needle: [UInt8]) -> Bool {
            guard bytes.count >= needle.count else { return false }
            return (0...(bytes.count - needle.count)).contains { Array(bytes[$0..<$0 + needle.count]) == needle }
        }
        return contains(ascii) || contains(utf16)
    }

    /// CMYK and ICC-profiled images to sRGB: through the embedded profile with lcms when there is
    /// one, by formula otherwise; the profile is then dropped (sRGB is what viewers assume).
    func convertToSRGB() throws {
        let space = colorspace
        if let profile = iccProfile {
            if space != GRAYColorspace, !Self.isSRGB(profile), let sRGB = Self.sRGBProfile {
                try convert(toProfile: sRGB)
            }
            removeICCProfile()
        }
        try toSRGB()
    }

    /// The damage the last read met and decoded past (a truncated or corrupt file that ImageMagick
    /// decoded anyway, filling the rest with grey), or `nil`: the worst of an error, a corrupt-image
    /// warning, or a message that says the data is incomplete. Other warnings (an unknown TIFF tag,
    /// a PNG's edited sRGB profile) are not damage.
    func readProblem() -> Damage? {
        let found = [pendingException(), imageException()].compactMap { $0 }
        let incomplete = ["corrupt image", "improper image header", "damaged", "crc error", "unsupported marker"]
        var worst: Damage?
        for (severity, message) in found {
            var level = Damage.level(of: message)
            if level != .truncated {
                if severity.rawValue >= ErrorException.rawValue {
                    level = .error
                } else if severity == CorruptImageWarning || incomplete.contains(where: message.lowercased().contains) {
                    level = .warning
                } else {
                    continue
                }
            }
            if level > (worst?.level ?? .warning) || worst == nil { worst = Damage(level: level, message: message) }
        }
        return worst
    }
}
