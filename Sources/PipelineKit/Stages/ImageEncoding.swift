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
}

extension ImageEncoding {
    public func fileExtension(for image: PipelineImage) -> String { fileExtension }
}
