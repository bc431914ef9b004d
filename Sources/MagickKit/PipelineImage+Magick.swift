import Foundation

/// ImageMagick's pixels behind a `PipelineImage`: one wand, never changed after the image is made.
public final class MagickPixels: PixelStorage, @unchecked Sendable {
    // Never mutated after init: every use goes through `clone()`, which only reads.
    let wand: Wand

    init(_ wand: Wand) { self.wand = wand }

    /// ImageMagick Q16 keeps 4 channels of 2 bytes a pixel, for every frame.
    public var byteCount: Int { wand.width * wand.height * 8 * max(1, wand.frameCount) }
}

extension PipelineImage {
    /// An image holding `wand`'s pixels. Takes ownership: the caller must not use the wand afterwards.
    public init(taking wand: Wand, sourceFormat: String? = nil) {
        self.init(width: wand.width, height: wand.height, hasAlpha: wand.hasAlpha, frameCount: wand.frameCount,
                  sourceFormat: sourceFormat ?? wand.format, storage: MagickPixels(wand))
    }

    /// The wand behind this image; throws when another codec made it (a plugin that needs
    /// ImageMagick was given pixels it cannot read).
    func magickWand() throws -> Wand {
        guard let pixels = storage as? MagickPixels else {
            throw PipelineError(.processFailed, "this image is held by \(type(of: storage)), not by ImageMagick")
        }
        return pixels.wand
    }

    /// Runs `body` on a private copy of this image's wand and returns the result as a new image.
    ///
    /// For an animation, `body` runs once per frame, each frame in a wand of its own, so every
    /// processor works on animations without knowing about them.
    public func transformed(_ body: (Wand) throws -> Void) throws -> PipelineImage {
        let copy = try magickWand().clone()
        if frameCount > 1 {
            let frames = copy.frames()
            for frame in frames { try body(frame) }
            return derived(taking: try Wand.joining(frames))
        }
        try body(copy)
        return derived(taking: copy)
    }

    /// An image of `wand`'s pixels (taken over) with this image's source, damage and facts.
    public func derived(taking wand: Wand) -> PipelineImage {
        derived(width: wand.width, height: wand.height, hasAlpha: wand.hasAlpha, frameCount: wand.frameCount,
                storage: MagickPixels(wand))
    }

    /// Runs `body` on a private copy of this image's wand and returns what it returns (for encoders).
    public func withCopy<T>(_ body: (Wand) throws -> T) throws -> T {
        try body(try magickWand().clone())
    }
}
