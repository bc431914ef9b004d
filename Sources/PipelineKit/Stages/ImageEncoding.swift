import Foundation

/// The encoder slot: turns the final image into the bytes of an output file.
public protocol ImageEncoding: Sendable {
    /// The file extension of the outputs, without a dot (`jpg`, `png`, `webp`).
    var fileExtension: String { get }

    /// A stable string naming the encoder and its options, for cache keys.
    var identifier: String { get }

    /// The extension of the output made from `image`. Default: ``fileExtension``. An encoder whose
    /// format depends on the image (`auto`) returns the real one here and a placeholder from
    /// ``fileExtension``, which names the output until the image is known (for output claims and
    /// resume records).
    func fileExtension(for image: PipelineImage) -> String
    /// Encodes `image`. Runs on the engine's CPU workers.
    func encode(_ image: PipelineImage) throws -> Data

    /// Encodes `image` and says what the encoder chose, for an encoder whose choices depend on the
    /// image (the quality a visual target needs, the format `auto` picks). The engine calls this
    /// one. Default: ``encode(_:)`` with ``fileExtension(for:)`` and nothing to report.
    func encoded(_ image: PipelineImage) throws -> EncodedImage

    /// Whether this encoder may rebuild the source from its own bytes: the engine then sets
    /// ``PipelineImage/sourceBytes`` on a decoded image whose pixels are the whole source, and no
    /// processor's image carries them. Default: false.
    var wantsSourceBytes: Bool { get }
}

extension ImageEncoding {
    public var wantsSourceBytes: Bool { false }

    public func fileExtension(for image: PipelineImage) -> String { fileExtension }

    public func encoded(_ image: PipelineImage) throws -> EncodedImage {
        EncodedImage(data: try encode(image), fileExtension: fileExtension(for: image))
    }
}

/// An encoder's output, with what it chose.
public struct EncodedImage: Sendable {
    /// The file's bytes.
    public var data: Data
    /// The output's extension (``ImageEncoding/fileExtension(for:)`` for most encoders).
    public var fileExtension: String
    /// What the encoder chose, reported per output in the item's facts under `encoding`
    /// (`format`, `quality`, `ssim`, `encodes` for a quality target). Empty: nothing to report.
    public var facts: ImageFacts

    public init(data: Data, fileExtension: String, facts: ImageFacts = [:]) {
        self.data = data
        self.fileExtension = fileExtension
        self.facts = facts
    }
}
