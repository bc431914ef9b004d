import Foundation

/// Parsing of the units pipeline files use: sizes (`50MB`, `1GiB`) and durations (`30s`, `7d`).
public enum Units {
    private static let sizeUnits: [(String, Double)] = [
        ("kib", 1024), ("mib", 1024 * 1024), ("gib", 1024 * 1024 * 1024), ("tib", 1024 * 1024 * 1024 * 1024),
        ("kb", 1e3), ("mb", 1e6), ("gb", 1e9), ("tb", 1e12), ("b", 1),
    ]
    private static let durationUnits: [(String, Double)] = [
        ("ms", 0.001), ("s", 1), ("m", 60), ("h", 3600), ("d", 86400),
    ]

    /// Bytes from `50MB`, `1.5GiB`, `512KB`, `100B` or a bare number of bytes; `nil` when malformed.
    public static func parseSize(_ text: String) -> Int? {
        guard let value = parse(text, units: sizeUnits, bare: 1) else { return nil }
        guard value >= 0, value < 9e18 else { return nil }
        return Int(value.rounded())
    }

    /// Seconds from `250ms`, `30s`, `5m`, `2h`, `7d` or a bare number of seconds; `nil` when malformed.
    public static func parseDuration(_ text: String) -> Double? {
        guard let value = parse(text, units: durationUnits, bare: 1), value >= 0 else { return nil }
        return value
    }

    private static func parse(_ text: String, units: [(String, Double)], bare: Double) -> Double? {
        let trimmed = text.trimmingCharacters(in: .whitespaces).lowercased()
        guard !trimmed.isEmpty else { return nil }
        for (suffix, factor) in units where trimmed.hasSuffix(suffix) {
            let number = trimmed.dropLast(suffix.count).trimmingCharacters(in: .whitespaces)
            guard let value = Double(number), value.isFinite else { return nil }
            return value * factor
        }
        guard let value = Double(trimmed), value.isFinite else { return nil }
        return value * bare
    }

    /// A pixel count from `50MP`, `500KP`, `8000x6000` or a bare number; `nil` when malformed.
    public static func parsePixels(_ text: String) -> Int? {
        let trimmed = text.trimmingCharacters(in: .whitespaces).lowercased()
        let parts = trimmed.split(separator: "x")
        if parts.count == 2, let w = Int(parts[0]), let h = Int(parts[1]), w > 0, h > 0 { return w * h }
        for (suffix, factor) in [("mp", 1e6), ("kp", 1e3), ("p", 1.0)] where trimmed.hasSuffix(suffix) {
            guard let value = Double(trimmed.dropLast(suffix.count).trimmingCharacters(in: .whitespaces)),
                  value >= 0, value < 1e15 else { return nil }
            return Int((value * factor).rounded())
        }
        return Int(trimmed).flatMap { $0 >= 0 ? $0 : nil }
    }

    /// Pixels -> `50MP` when a whole number of megapixels, else the bare count.
    public static func formatPixels(_ pixels: Int) -> String {
        pixels > 0 && pixels % 1_000_000 == 0 ? "\(pixels / 1_000_000)MP" : String(pixels)
    }

    /// `52428800` -> `50MiB`-style text with the largest binary unit that divides exactly, else decimal.
    public static func formatSize(_ bytes: Int) -> String {
        for (suffix, factor) in [("GB", 1e9), ("MB", 1e6), ("KB", 1e3), ("GiB", 1073741824.0), ("MiB", 1048576.0), ("KiB", 1024.0)]
        where bytes > 0 && Double(bytes).truncatingRemainder(dividingBy: factor) == 0 {
            return "\(Int(Double(bytes) / factor))\(suffix)"
        }
        return "\(bytes)B"
    }

    /// Seconds -> the shortest exact text among `ms`, `s`, `m`, `h`, `d`.
    public static func formatDuration(_ seconds: Double) -> String {
        for (suffix, factor) in [("d", 86400.0), ("h", 3600.0), ("m", 60.0), ("s", 1.0)]
        where seconds >= factor && seconds.truncatingRemainder(dividingBy: factor) == 0 {
            return "\(Int(seconds / factor))\(suffix)"
        }
        let ms = seconds * 1000
        return ms == ms.rounded() ? "\(Int(ms))ms" : "\(seconds)s"
    }
}
