import Foundation

/// What the engine knows about the output before decoding, so a decoder can do less work.
public struct DecodeHint: Sendable, Equatable {
    /// The smallest size the processor chain needs, when a processor sets the size
    /// (for example 256x256 for `resize: {width: 256, height: 256}`). A decoder may decode at a
    /// reduced scale as long as the result is at least this large in both dimensions.
    public var targetSize: PixelSize?
    /// Whether the image only has to fit inside ``targetSize`` (as `resize` in fit mode: scaled by
    /// the smaller of the two ratios, so one side may end below the box); `false` when both sides
    /// must reach it (fill, crop).
    public var fit: Bool
    /// Whether a processor wants the source's own facts (orientation, colour space, ICC profile,
    /// EXIF) in ``PipelineImage/facts``, as `analyze` does: a decoder adds what it can read.
    public var wantsSourceFacts: Bool
    /// Whether the pipeline's `metadata:` keeps more than the ICC profile: a decoder then reads the
    /// source's EXIF, XMP and IPTC into ``PipelineImage/metadata``.
    public var wantsMetadata: Bool
    /// Whether an encoder rebuilds the source from its bytes (``ImageEncoding/wantsSourceBytes``):
    /// the engine then keeps them with a decoded image that is the whole source
    /// (``PipelineImage/sourceBytes``). Decoders need not look at it.
    public var wantsSourceBytes = false

    public init(targetSize: PixelSize? = nil, fit: Bool = false, wantsSourceFacts: Bool = false, wantsMetadata: Bool = false) {
        self.targetSize = targetSize
        self.fit = fit
        self.wantsSourceFacts = wantsSourceFacts
        self.wantsMetadata = wantsMetadata
    }

    /// How many times smaller than `source` the image may be decoded and still reach the target
    /// on every side that matters, or `nil` without a target. A decoder that reduces while it
    /// decodes keeps some of this back as headroom for the resize filter.
    public func maxShrink(from source: PixelSize) -> Double? {
        guard let target = targetSize else { return nil }
        let x = Double(source.width) / Double(max(1, target.width)), y = Double(source.height) / Double(max(1, target.height))
        return fit ? max(x, y) : min(x, y)
    }
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
///
/// The engine calls ``prepare(_:hint:)`` once per item, before it waits for decode memory, then
/// runs what it returns on a worker: a decoder reads the file's format and header once, and the
/// memory it asks for and the way it decodes come from that one reading. A decoder that has
/// nothing to read ahead implements only ``decode(_:hint:)``.
public protocol ImageDecoding: Sendable {
    func decode(_ data: LoadedData, hint: DecodeHint) throws -> PipelineImage

    /// The memory decoding `data` will need at its peak, in bytes, when the decoder can tell
    /// cheaply (from the header). The engine holds decodes within its decode memory budget with
    /// it, so two huge images are not decoded at once. Default: `nil` (unknown; not budgeted).
    func estimatedMemory(_ data: LoadedData, hint: DecodeHint) -> Int?

    /// Reads what the decode of `data` needs to know (its format, its header), checks it (a
    /// format not accepted, a size over the limits throw here), and returns the decode to run and
    /// the memory it needs. Default: ``estimatedMemory(_:hint:)`` and ``decode(_:hint:)``.
    func prepare(_ data: LoadedData, hint: DecodeHint) throws -> PreparedDecode

    /// Whether this decoder takes a body left in a local file (``LoadedData/file``, with only the
    /// first bytes in `data`) and reads what it needs from the file itself. Default: `false`: the
    /// engine reads such a file whole before calling ``prepare(_:hint:)``.
    var readsLocalFiles: Bool { get }

    /// Whether this decoder takes a body read by range (``LoadedData/ranged``, with only the first
    /// bytes in `data`) and reads the parts it needs itself, blocking its thread while they are
    /// fetched (``prepare(_:hint:)`` is then called on an I/O thread). Default: `false`: the
    /// engine fetches such a body whole first.
    var readsRanges: Bool { get }
}

extension ImageDecoding {
    public func estimatedMemory(_ data: LoadedData, hint: DecodeHint) -> Int? { nil }

    public var readsLocalFiles: Bool { false }

    public var readsRanges: Bool { false }

    public func prepare(_ data: LoadedData, hint: DecodeHint) throws -> PreparedDecode {
        PreparedDecode(estimatedMemory: estimatedMemory(data, hint: hint)) { try decode(data, hint: hint) }
    }
}

/// A decode ready to run: what it will need, and the work, which the engine runs on a CPU worker.
public struct PreparedDecode: Sendable {
    /// Peak memory, in bytes, when known.
    public let estimatedMemory: Int?
    /// Decodes; called once, on a worker.
    public let decode: @Sendable () throws -> PipelineImage
    /// The facts the header gives without decoding a pixel (`format`, `width`, `height` as
    /// `analyze` reports them, and what else the format's header says: orientation, colour
    /// space, ICC, EXIF), for `/info?facts=header`; `nil` when the decoder cannot tell.
    public let header: (@Sendable () -> ImageFacts)?

    public init(estimatedMemory: Int?, decode: @escaping @Sendable () throws -> PipelineImage) {
        self.estimatedMemory = estimatedMemory
        self.decode = decode
        header = nil
    }

    /// A decode whose header facts are known (``header``).
    public init(estimatedMemory: Int?, header: @escaping @Sendable () -> ImageFacts, decode: @escaping @Sendable () throws -> PipelineImage) {
        self.estimatedMemory = estimatedMemory
        self.decode = decode
        self.header = header
    }
}
