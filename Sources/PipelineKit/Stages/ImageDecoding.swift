import Foundation

/// What the engine knows about the output before decoding, so a decoder can do less work.
public struct DecodeHint: Sendable, Equatable {
    /// The smallest size the processor chain needs, when a processor sets the size
    /// (for example 256x256 for `resize: {width: 256, height: 256}`). A decoder may decode at a
    /// reduced scale as long as the result is at least this large in both dimensions.
    public var targetSize: PixelSize?

    public init(targetSize: PixelSize? = nil) { self.targetSize = targetSize }
}

/// A width and a height in pixels.
public struct PixelSize: Sendable, Hashable, CustomStringConvertible {
    public var width: Int
    public var height: Int
    public init(width: Int, height: Int) {
        self.width = width
        self.height = height
    }
    public var description: String { "\(width)x\(height)" }
}

/// The decoder slot: turns bytes into a ``PipelineImage``.
///
/// Decoding runs on the engine's CPU workers, never on Swift's cooperative pool, so a decoder may
/// block. Untrusted bytes are the normal case: a decoder checks limits before decoding pixels and
/// throws ``ErrorKind/unsupportedFormat``, ``ErrorKind/tooLarge`` or ``ErrorKind/decodeFailed``.
public protocol ImageDecoding: Sendable {
    func decode(_ data: LoadedData, hint: DecodeHint) throws -> PipelineImage

    /// The memory decoding `data` will need at its peak, in bytes, when the decoder can tell
    /// cheaply (from the header). The engine holds decodes within its decode memory budget with
    /// it, so two huge images are not decoded at once. Default: `nil` (unknown; not budgeted).
    func estimatedMemory(_ data: LoadedData, hint: DecodeHint) -> Int?
}

extension ImageDecoding {
    public func estimatedMemory(_ data: LoadedData, hint: DecodeHint) -> Int? { nil }
}
