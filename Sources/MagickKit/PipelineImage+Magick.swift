import Foundation

/// ImageMagick's pixels behind a `PipelineImage`: one wand, never changed after the image is made.
public final class MagickPixels: PixelStorage, @unchecked Sendable {
    // Never mutated after init: every use goes through `clone()`, which only reads.
    let wand: Wand

    init(_ wand: Wand) { self.wand = wand }

    /// ImageMagick Q16 keeps 4 channels of 2 bytes a pixel, for every frame.
    public var byteCount: Int { wand.width * wand.height * 8 * max(1, wand.frameCount) }
}

/// 8-bit pixels kept out of ImageMagick: what a decoder that reduces in 8 bits made, for the
/// steps that work on 8-bit rows themselves (the Lanczos resize, the JPEG and PNG writers), so an
/// image is not widened to ImageMagick's 16-bit pixel cache and back on its way through them.
///
/// Only upright sRGB pixels without a profile are held this way (the rest need what a wand
/// carries): every other step gets a wand made from them (``PipelineImage/transformed(_:)``), the
/// same wand the decoder used to make at once, and works as before.
public final class RGB8Pixels: PixelStorage, @unchecked Sendable {
    public let width: Int
    public let height: Int
    /// RGBA (alpha not premultiplied) when true, else RGB.
    public let hasAlpha: Bool
    /// Rows back to back, 3 or 4 bytes a pixel. Never changed after init.
    public let bytes: [UInt8]

    /// Pixels of `width` x `height`, 3 bytes each or 4 with alpha (`bytes` must hold exactly that).
    public init(width: Int, height: Int, hasAlpha: Bool, bytes: [UInt8]) {
        precondition(width > 0 && height > 0 && bytes.count == width * height * (hasAlpha ? 4 : 3))
        self.width = width
        self.height = height
        self.hasAlpha = hasAlpha
        self.bytes = bytes
    }

    public var channels: Int { hasAlpha ? 4 : 3 }
    public var byteCount: Int { bytes.count }

    /// A new wand holding these pixels (throws `too_large` beyond policy.xml's limits), marked
    /// upright (top-left) as 8-bit pixels always are: ImageMagick writes that orientation into an
    /// EXIF block it keeps, as after its own decode and auto-orient.
    public func wand() throws -> Wand {
        let wand = try Wand.fromPixels(bytes, width: width, height: height, hasAlpha: hasAlpha)
        wand.orientation = 1
        return wand
    }
}

/// 16-bit pixels kept out of ImageMagick: the block averages of a decoder that reduces while it
/// reads, with the fractions an average has (8 bits would round them into bands on a smooth
/// gradient), for the Lanczos resize to read directly and round to 8 bits once. As
/// ``RGB8Pixels``: upright sRGB pixels without a profile only; every other step gets a wand made
/// from them.
public final class RGB16Pixels: PixelStorage, @unchecked Sendable {
    public let width: Int
    public let height: Int
    /// RGBA (alpha not premultiplied) when true, else RGB.
    public let hasAlpha: Bool
    /// Rows back to back, 3 or 4 samples (0...65535) a pixel. Never changed after init.
    public let samples: [UInt16]

    /// Pixels of `width` x `height`, 3 samples each or 4 with alpha (`samples` must hold exactly that).
    public init(width: Int, height: Int, hasAlpha: Bool, samples: [UInt16]) {
        precondition(width > 0 && height > 0 && samples.count == width * height * (hasAlpha ? 4 : 3))
        self.width = width
        self.height = height
        self.hasAlpha = hasAlpha
        self.samples = samples
    }

    public var channels: Int { hasAlpha ? 4 : 3 }
    public var byteCount: Int { samples.count * 2 }

    /// A new wand holding these pixels (throws `too_large` beyond policy.xml's limits), marked
    /// upright (see ``RGB8Pixels/wand()``).
    public func wand() throws -> Wand {
        let wand = try Wand.fromPixels(samples, width: width, height: height, hasAlpha: hasAlpha)
        wand.orientation = 1
        return wand
    }
}

extension PipelineImage {
    /// An image of 16-bit `pixels`, decoded from `sourceFormat`.
    public init(pixels: RGB16Pixels, sourceFormat: String) {
        self.init(width: pixels.width, height: pixels.height, hasAlpha: pixels.hasAlpha, sourceFormat: sourceFormat, storage: pixels)
    }

    /// The 16-bit pixels behind this image when it is held that way (``RGB16Pixels``), else `nil`.
    public var rgb16: RGB16Pixels? { storage as? RGB16Pixels }
}

extension PipelineImage {
    /// An image of 8-bit `pixels`, decoded from `sourceFormat`.
    public init(pixels: RGB8Pixels, sourceFormat: String) {
        self.init(width: pixels.width, height: pixels.height, hasAlpha: pixels.hasAlpha, sourceFormat: sourceFormat, storage: pixels)
    }

    /// The 8-bit pixels behind this image when it is held that way (``RGB8Pixels``), else `nil`.
    public var rgb8: RGB8Pixels? { storage as? RGB8Pixels }

    /// An image of 8-bit `pixels` with this image's source, damage and facts.
    public func derived(pixels: RGB8Pixels) -> PipelineImage {
        derived(width: pixels.width, height: pixels.height, hasAlpha: pixels.hasAlpha, frameCount: 1, storage: pixels)
    }
}

extension PipelineImage {
    /// An image holding `wand`'s pixels. Takes ownership: the caller must not use the wand afterwards.
    public init(taking wand: Wand, sourceFormat: String? = nil) {
        self.init(width: wand.width, height: wand.height, hasAlpha: wand.hasAlpha, frameCount: wand.frameCount,
                  sourceFormat: sourceFormat ?? wand.format, storage: MagickPixels(wand))
    }

    /// A wand of this image's pixels that the caller owns: a copy of ImageMagick's, or one made
    /// from 8- or 16-bit pixels. Throws when another codec made it (a plugin that needs ImageMagick was
    /// given pixels it cannot read).
    func wandCopy() throws -> Wand {
        if let pixels = storage as? MagickPixels { return pixels.wand.clone() }
        if let pixels = storage as? RGB8Pixels { return try pixels.wand() }
        if let pixels = storage as? RGB16Pixels { return try pixels.wand() }
        throw PipelineError(.processFailed, "this image is held by \(type(of: storage)), not by ImageMagick")
    }

    /// Runs `body` on a private copy of this image's wand and returns the result as a new image.
    ///
    /// For an animation, `body` runs once per frame, each frame in a wand of its own, so every
    /// processor works on animations without knowing about them.
    public func transformed(_ body: (Wand) throws -> Void) throws -> PipelineImage {
        let copy = try wandCopy()
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
        try body(try wandCopy())
    }
}
