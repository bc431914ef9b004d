import PipelineKit

/// The decoder's `fail_on` option, with libvips's meaning: how much damage in a source stops its
/// decode. Less than that, and the image is decoded from what is there (what is missing left grey
/// or black, as the codec fills it), and the item is reported as degraded with the reason.
public enum FailOn: String, CaseIterable, Sendable {
    /// Any sign of damage stops the decode, even one the codec only warns about (the default).
    case warning
    /// Errors and truncation stop it; the codec's warnings (extraneous bytes, a bad Huffman code)
    /// do not.
    case error
    /// Only a file that ends before its image does stops it.
    case truncated
    /// Nothing stops it that the codec can decode past.
    case none

    /// The lowest ``Damage/Level`` that stops a decode, as the C shims take it (4: none does).
    var failLevel: Int32 {
        switch self {
        case .warning: 1
        case .error: 2
        case .truncated: 3
        case .none: 4
        }
    }

    /// Whether damage of `level` stops the decode.
    func stops(_ level: Damage.Level) -> Bool { Int32(level.rawValue) >= failLevel }
}

/// What a decode found wrong with its source, for ``FailOn``.
struct Damage: Sendable, Equatable {
    /// How serious, in libvips's order.
    enum Level: Int, Sendable, Comparable {
        /// The codec warned and went on (corrupt data it skipped).
        case warning = 1
        /// The codec met an error (a bad checksum, a corrupt bitstream).
        case error = 2
        /// The data ends before the image does.
        case truncated = 3

        static func < (a: Level, b: Level) -> Bool { a.rawValue < b.rawValue }
    }

    let level: Level
    let message: String

    /// The level of a codec's message about a failure: truncated when it says the data ended,
    /// an error otherwise.
    static func level(of message: String) -> Level {
        let lower = message.lowercased()
        let ends = ["premature end", "truncat", "insufficient image data", "unexpected end", "not enough image data",
                    "ends before", "end of file", "end-of-file", "read error", "short read", "not enough data", "unexpected eof"]
        return ends.contains(where: lower.contains) ? .truncated : .error
    }
}
