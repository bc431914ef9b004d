import Foundation

/// The pixels behind a ``PipelineImage``, owned by the codec module that made them.
///
/// PipelineKit never looks inside: the engine only passes images from the decoder through the
/// processors to the encoder, and reads their size. ImageMagick's pixels (`MagickKit`) are one
/// kind of storage; a test's fake decoder, or a future codec, brings its own. A storage must never
/// change once its image is made: processors work on a copy.
public protocol PixelStorage: AnyObject, Sendable {
    /// Bytes the pixels hold in memory, for image caches and memory budgets.
    var byteCount: Int { get }
}

/// A decoded image: what the decoder produces, each processor turns into another, and the encoder
/// writes. Immutable once made, and safe to share between tasks.
///
/// Its name is the pipeline's own, so it collides with no codec's `Image`. Width, height, alpha and
/// frames are read once, when the image is made; the pixels stay with their codec
/// (``storage``), which offers the operations on them (for ImageMagick: `image.transformed { wand
/// in ... }` in `MagickKit`).
public struct PipelineImage: Sendable {
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
    /// The pixels, owned by the codec that made them.
    public let storage: any PixelStorage
    /// Set by a decoder that decoded a damaged file anyway (its `fail_on` allowed it): why the
    /// pixels may be incomplete, such as "JPEG: premature end of data". The item is then reported
    /// as degraded, and its images and outputs are never cached.
    public var degraded: String?
    /// The size of the source as its header gives it, set by the decoder (the image itself may be
    /// smaller: reduced on load, then processed).
    public var sourceSize: PixelSize?
    /// What analysing processors found (see ``FactValue``); carried through later processors.
    public var facts: ImageFacts = [:]
    /// The source's metadata (EXIF, XMP, IPTC), set by a decoder asked for it
    /// (``DecodeHint/wantsMetadata``); just before encoding, what the pipeline's `metadata:` keeps.
    public var metadata: ImageMetadata?
    /// Identifies the source bytes this image was made from (``OutputFingerprint/source``): set by
    /// the engine when it decodes, kept by processors, recorded in the fingerprint of every output.
    public var sourceIdentity: String?
    /// The encoded source, when these pixels are all of it, untouched: set by the engine for an
    /// encoder that rebuilds it (``ImageEncoding/wantsSourceBytes``), such as a lossless JPEG to
    /// JPEG XL recompression. Never carried to a processed image (``derived(width:height:hasAlpha:frameCount:storage:)``).
    public var sourceBytes: Data?

    /// A processed image of this one: `storage` as the pixels, with this image's source, damage
    /// and facts.
    public func derived(width: Int, height: Int, hasAlpha: Bool, frameCount: Int, storage: any PixelStorage) -> PipelineImage {
        var image = PipelineImage(width: width, height: height, hasAlpha: hasAlpha, frameCount: frameCount,
                                  sourceFormat: sourceFormat, storage: storage, degraded: degraded)
        image.sourceSize = sourceSize
        image.facts = facts
        image.metadata = metadata
        image.sourceIdentity = sourceIdentity
        return image
    }

    public init(width: Int, height: Int, hasAlpha: Bool, frameCount: Int = 1, sourceFormat: String,
                storage: any PixelStorage, degraded: String? = nil) {
        self.degraded = degraded
        self.width = width
        self.height = height
        self.hasAlpha = hasAlpha
        self.frameCount = max(1, frameCount)
        self.sourceFormat = sourceFormat
        self.storage = storage
    }

    /// Pixel bytes held in memory: the cost used by image caches.
    public var cost: Int { storage.byteCount }

    /// The size in pixels.
    public var size: PixelSize { PixelSize(width: width, height: height) }
}
