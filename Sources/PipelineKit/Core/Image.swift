import Foundation

/// A decoded image. Immutable once produced, and safe to share between tasks.
///
/// A processor never changes an `Image`; it calls ``transformed(_:)``, which hands it a private
/// copy of the pixels (shared copy-on-write by ImageMagick) and wraps the result in a new `Image`.
/// Width, height and alpha are read once, when the image is made.
public struct Image: Sendable {
    private let storage: Storage

    /// Pixel width.
    public let width: Int
    /// Pixel height.
    public let height: Int
    /// Whether the image has an alpha channel.
    public let hasAlpha: Bool
    /// Frames: 1 for a still image, more for an animation kept by the decoder (`max_frames`).
    public let frameCount: Int
    /// The format it was decoded from (`JPEG`, `PNG`, ...), for encoders that keep the source format.
    public let sourceFormat: String

    /// Pixel bytes held in memory (ImageMagick Q16 keeps 4 channels of 2 bytes): the cost used by
    /// image caches.
    public var cost: Int { width * height * 8 * frameCount }

    /// Takes ownership of `wand`. The wand must not be used by the caller afterwards.
    public init(taking wand: Wand, sourceFormat: String? = nil) {
        self.storage = Storage(wand)
        self.width = wand.width
        self.height = wand.height
        self.hasAlpha = wand.hasAlpha
        self.frameCount = max(1, wand.frameCount)
        self.sourceFormat = sourceFormat ?? wand.format
    }

    /// Runs `body` on a private copy of this image's wand and returns the result as a new image.
    ///
    /// For an animation, `body` runs once per frame, each frame in a wand of its own, so every
    /// processor works on animations without knowing about them.
    public func transformed(_ body: (Wand) throws -> Void) throws -> Image {
        let copy = storage.wand.clone()
        if frameCount > 1 {
            let frames = copy.frames()
            for frame in frames { try body(frame) }
            return Image(taking: try Wand.joining(frames), sourceFormat: sourceFormat)
        }
        try body(copy)
        return Image(taking: copy, sourceFormat: sourceFormat)
    }

    /// Runs `body` on a private copy of this image's wand and returns what it returns (for encoders).
    public func withCopy<T>(_ body: (Wand) throws -> T) rethrows -> T {
        try body(storage.wand.clone())
    }

    private final class Storage: @unchecked Sendable {
        // Never mutated after init: every use goes through `clone()`, which only reads.
        let wand: Wand
        init(_ wand: Wand) { self.wand = wand }
    }
}
