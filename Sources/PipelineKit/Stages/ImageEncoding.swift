import Foundation

/// The encoder slot: turns the final image into the bytes of an output file.
public protocol ImageEncoding: Sendable {
    /// The file extension of the outputs, without a dot (`jpg`, `png`, `webp`).
    var fileExtension: String { get }

    /// A stable string naming the encoder and its options, for cache keys.
    var identifier: String { get }

    /// Encodes `image`. Runs on the engine's CPU workers.
    func encode(_ image: Image) throws -> Data
}
