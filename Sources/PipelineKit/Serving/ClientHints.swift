import Foundation

/// The widths a served pipeline declares (`serve.breakpoints`), which Client Hints choose among.
///
/// A request that does not set the width parameter itself gets the declared width its hints ask
/// for: `Sec-CH-Width` (or the older `Width`), the layout width in device pixels; else
/// `Sec-CH-Viewport-Width` (or `Viewport-Width`) times `Sec-CH-DPR` (or `DPR`); else the default
/// width times the DPR. The width is snapped up to the next declared one (the largest when it is
/// above them all), so a source has at most one answer per declared width and format, and a
/// signed URL stays valid: a hint picks only among widths the pipeline's author declared.
/// `Save-Data: on` takes the declared width below the one chosen.
public struct Breakpoints: Sendable, Equatable {
    /// How hinted requests are answered.
    public enum Mode: String, Sendable, CaseIterable {
        /// The hinted width is served at the request's URL, with `Vary` on the hints read:
        /// for caches that key on them (Varnish, Fastly; CloudFront and Cloudflare only when
        /// configured to).
        case vary
        /// A request without the width parameter is redirected (`307`, not stored by shared
        /// caches) to the URL of its declared width, which any cache may keep.
        case redirect
        /// Hints are not read.
        case off
    }

    /// The declared widths, ascending, without repeats.
    public let widths: [Int]
    /// The `params:` entry a hint sets.
    public let param: String
    /// The width of a request without hints (one of ``widths``).
    public let defaultWidth: Int
    public let mode: Mode

    public init(widths: [Int], param: String, defaultWidth: Int? = nil, mode: Mode = .vary) {
        let sorted = Array(Set(widths.filter { $0 > 0 })).sorted()
        self.widths = sorted
        self.param = param
        self.defaultWidth = defaultWidth.map { Self.snap($0, to: sorted) } ?? sorted.last ?? 0
        self.mode = mode
    }

    /// Every request header ``choose(_:)`` may read.
    public static let headerNames = ["Sec-CH-Width", "Width", "Sec-CH-Viewport-Width", "Viewport-Width", "Sec-CH-DPR", "DPR", "Save-Data"]

    /// The hint headers a pipeline with breakpoints asks browsers for (`Accept-CH`).
    public static let acceptCH = "Sec-CH-Width, Sec-CH-DPR, Sec-CH-Viewport-Width, Save-Data"

    /// What the hints of a request chose: the declared width, and the hint headers read to
    /// choose it, present or not (a cache must key on each: `Vary`).
    public struct Choice: Sendable, Equatable {
        public let width: Int
        /// Header names, in the order they were read.
        public let read: [String]
        /// Whether a hint decided the width (`false`: the default width, no usable hint).
        public let hinted: Bool
    }

    /// The declared width for a request's hints; `header` gives a request header's value by its
    /// name (any case). Garbage, zero, negative or non-finite hints count as absent.
    public func choose(_ header: (String) -> String?) -> Choice {
        var read: [String] = []
        func number(_ name: String) -> Double? {
            read.append(name)
            guard let text = header(name)?.trimmingCharacters(in: .whitespaces), let value = Double(text), value.isFinite, value > 0 else {
                return nil
            }
            return value
        }
        func first(_ names: [String]) -> Double? {
            for name in names { if let value = number(name) { return value } }
            return nil
        }
        var wanted: Double?
        if let width = first(["Sec-CH-Width", "Width"]) {
            wanted = width
        } else {
            let viewport = first(["Sec-CH-Viewport-Width", "Viewport-Width"])
            let dpr = min(first(["Sec-CH-DPR", "DPR"]) ?? 1, 8)
            if let viewport { wanted = viewport * dpr } else if dpr != 1 { wanted = Double(defaultWidth) * dpr }
        }
        read.append("Save-Data")
        let saveData = header("Save-Data")?.trimmingCharacters(in: .whitespaces).lowercased() == "on"
        var width = wanted.map { Self.snap($0 >= Double(Int.max / 2) ? Int.max / 2 : Int($0.rounded(.up)), to: widths) } ?? defaultWidth
        if saveData, let below = widths.last(where: { $0 < width }) { width = below }
        return Choice(width: width, read: read, hinted: wanted != nil || saveData)
    }

    /// The smallest of `widths` at least `width`; the largest when none is.
    public static func snap(_ width: Int, to widths: [Int]) -> Int {
        widths.first { $0 >= width } ?? widths.last ?? width
    }
}
