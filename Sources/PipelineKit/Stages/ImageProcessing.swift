import Foundation

/// The processor slot: turns an image into another image.
///
/// Processors run in order, on the engine's CPU workers. The ``identifier`` is part of cache
/// keys: it must change exactly when the output would, so derive it from every option that
/// affects the pixels (as Nuke's `ImageProcessing.identifier`).
public protocol ImageProcessing: Sendable {
    /// A stable string naming this processor and its effective options, e.g. `resize(256x256,fit)`.
    var identifier: String { get }

    /// Returns the processed image. `image` is immutable; use `PipelineImage.transformed(_:)` (MagickKit).
    func process(_ image: PipelineImage) throws -> PipelineImage

    /// The smallest decoded size this processor needs when it is the first in the chain to set the
    /// size, or `nil` when it does not set the size. The engine passes it to the decoder.
    var decodeHint: PixelSize? { get }

    /// Whether the image only has to fit inside ``decodeHint`` (it is scaled by the smaller of the
    /// two ratios, so one side may end below the hint): lets the decoder reduce further. `false`
    /// (the default) when both sides must reach the hint.
    var decodeHintFits: Bool { get }

    /// Whether this processor leaves every pixel as it is and only reads the image (as `analyze`
    /// does): the decode hint then comes from the processor after it, so that it does not stop
    /// shrink-on-load. `false` (the default) for any processor that changes the image.
    var onlyReads: Bool { get }

    /// Whether this processor only turns or mirrors the image by quarter turns, without
    /// resampling (as `auto_orient` does): the decode hint then comes from the processor after
    /// it, its box made square (a quarter turn swaps the sides), so that it does not stop
    /// shrink-on-load. `false` (the default) otherwise.
    var onlyReorients: Bool { get }

    /// Whether this processor reads the source's own facts (``DecodeHint/wantsSourceFacts``).
    var wantsSourceFacts: Bool { get }

    /// Whether this processor reads the source's metadata (EXIF, XMP, IPTC: ``PipelineImage/metadata``),
    /// as a crop to the regions people marked in XMP does: the decoder then reads it
    /// (``DecodeHint/wantsMetadata``) whatever the pipeline's `metadata:` keeps, and the outputs
    /// still keep only that. `false` (the default) otherwise.
    var wantsSourceMetadata: Bool { get }

    /// Bytes this processor needs at most besides the images it is given and makes (a face
    /// detector's scanned copy and its features): the engine adds the largest of a run's to the
    /// memory it reserves for each decode, so such work is admitted with the decode it follows.
    /// 0 (the default) for a processor that needs only its images.
    var workingMemory: Int { get }
}

extension ImageProcessing {
    public var decodeHint: PixelSize? { nil }
    public var decodeHintFits: Bool { false }
    public var onlyReads: Bool { false }
    public var onlyReorients: Bool { false }
    public var wantsSourceFacts: Bool { false }
    public var wantsSourceMetadata: Bool { false }
    public var workingMemory: Int { 0 }
}
