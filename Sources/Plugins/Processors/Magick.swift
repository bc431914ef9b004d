import Foundation
import MagickKit
import PipelineKit

/// `magick`: one ImageMagick operation from a vetted list, with typed arguments.
///
/// The escape hatch (like Core Image filter names in Nuke): effects we do not wrap one by one.
/// Only the operations below exist; each takes only its own arguments, checked like any option.
/// None of them reads files, runs delegates or interprets text.
public struct MagickOperation: ImageProcessing {
    /// An argument of an operation: its default and range.
    struct Argument: Sendable {
        let name: String
        let defaultValue: Double
        let range: ClosedRange<Double>
    }

    /// The vetted operations: name, arguments, and the call.
    struct Operation: Sendable {
        let name: String
        let summary: String
        let arguments: [Argument]
        let apply: @Sendable (Wand, [String: Double]) throws -> Void
    }

    static let radius = Argument(name: "radius", defaultValue: 0, range: 0...100)
    static func sigma(_ value: Double) -> Argument { Argument(name: "sigma", defaultValue: value, range: 0.01...100) }

    static let operations: [Operation] = [
        Operation(name: "charcoal", summary: "charcoal drawing", arguments: [radius, sigma(1)]) { w, a in
            try w.charcoal(radius: a["radius"]!, sigma: a["sigma"]!) },
        Operation(name: "oil_paint", summary: "oil painting", arguments: [Argument(name: "radius", defaultValue: 3, range: 0...20)]) { w, a in
            try w.oilPaint(radius: a["radius"]!) },
        Operation(name: "posterize", summary: "reduce each channel to a few levels",
                  arguments: [Argument(name: "levels", defaultValue: 4, range: 2...256), Argument(name: "dither", defaultValue: 0, range: 0...1)]) { w, a in
            try w.posterize(levels: Int(a["levels"]!), dither: a["dither"]! >= 0.5) },
        Operation(name: "vignette", summary: "darken the edges into an oval",
                  arguments: [radius, sigma(10), Argument(name: "x", defaultValue: 0, range: 0...10000), Argument(name: "y", defaultValue: 0, range: 0...10000)]) { w, a in
            try w.vignette(radius: a["radius"]!, sigma: a["sigma"]!, x: Int(a["x"]!), y: Int(a["y"]!)) },
        Operation(name: "swirl", summary: "swirl around the centre", arguments: [Argument(name: "degrees", defaultValue: 90, range: -3600...3600)]) { w, a in
            try w.swirl(degrees: a["degrees"]!) },
        Operation(name: "emboss", summary: "relief effect", arguments: [radius, sigma(1)]) { w, a in
            try w.emboss(radius: a["radius"]!, sigma: a["sigma"]!) },
        Operation(name: "implode", summary: "pull towards (positive) or push from (negative) the centre",
                  arguments: [Argument(name: "amount", defaultValue: 0.5, range: -10...10)]) { w, a in
            try w.implode(amount: a["amount"]!) },
        Operation(name: "solarize", summary: "invert the tones above a threshold (percent)",
                  arguments: [Argument(name: "threshold", defaultValue: 50, range: 0...100)]) { w, a in
            try w.solarize(threshold: a["threshold"]! / 100) },
        Operation(name: "sketch", summary: "pencil sketch",
                  arguments: [radius, sigma(10), Argument(name: "angle", defaultValue: 45, range: -360...360)]) { w, a in
            try w.sketch(radius: a["radius"]!, sigma: a["sigma"]!, angle: a["angle"]!) },
        Operation(name: "edge", summary: "edge detection", arguments: [Argument(name: "radius", defaultValue: 1, range: 0...20)]) { w, a in
            try w.edge(radius: a["radius"]!) },
        Operation(name: "wave", summary: "sine wave distortion",
                  arguments: [Argument(name: "amplitude", defaultValue: 10, range: 0...1000), Argument(name: "wavelength", defaultValue: 100, range: 1...10000)]) { w, a in
            try w.wave(amplitude: a["amplitude"]!, wavelength: a["wavelength"]!) },
        Operation(name: "gamma", summary: "gamma correction", arguments: [Argument(name: "gamma", defaultValue: 1.0, range: 0.05...10)]) { w, a in
            try w.gamma(a["gamma"]!) },
        Operation(name: "normalize", summary: "stretch the tones to the full range", arguments: []) { w, _ in
            try w.normalize() },
        Operation(name: "equalize", summary: "histogram equalisation", arguments: []) { w, _ in
            try w.equalize() },
        Operation(name: "auto_level", summary: "stretch each channel to the full range", arguments: []) { w, _ in
            try w.autoLevel() },
        Operation(name: "auto_gamma", summary: "choose a gamma that centres the mean", arguments: []) { w, _ in
            try w.autoGamma() },
        Operation(name: "despeckle", summary: "reduce speckle noise", arguments: []) { w, _ in
            try w.despeckle() },
        Operation(name: "enhance", summary: "reduce noise with a digital filter", arguments: []) { w, _ in
            try w.enhance() },
    ]

    /// Every argument name any operation takes, with the widest type: each becomes a typed option.
    static let argumentOptions: [OptionSpec] = {
        var seen: [String: (ClosedRange<Double>, [String])] = [:]
        for operation in operations {
            for argument in operation.arguments {
                let (range, users) = seen[argument.name] ?? (argument.range, [])
                seen[argument.name] = (min(range.lowerBound, argument.range.lowerBound)...max(range.upperBound, argument.range.upperBound),
                                       users + [operation.name])
            }
        }
        return seen.keys.sorted().map { name in
            let (range, users) = seen[name]!
            return .number(name, range: range, doc: "Argument of " + users.joined(separator: ", ") + ".")
        }
    }()

    public static let plugin = Plugin.processor(
        PluginSpec(
            name: "magick",
            summary: "One ImageMagick effect from a vetted list (charcoal, oil_paint, posterize, vignette, swirl, ...), with typed arguments.",
            options: [
                .oneOf("operation", operations.map(\.name), required: true,
                       doc: "The effect: " + operations.map { "\($0.name) (\($0.summary)" + ($0.arguments.isEmpty ? "" : "; " + $0.arguments.map { "\($0.name) \(format($0.defaultValue))" }.joined(separator: ", ")) + ")" }.joined(separator: "; ") + "."),
            ] + argumentOptions),
        make: { options in try MagickOperation(options: options) })

    static func format(_ value: Double) -> String {
        value == value.rounded() ? String(Int(value)) : String(value)
    }

    let operation: Operation
    let arguments: [String: Double]
    public let identifier: String

    init(options: PluginOptions) throws {
        let name = options.string("operation")!
        operation = Self.operations.first { $0.name == name }!
        var arguments: [String: Double] = [:]
        for argument in operation.arguments {
            let value = options.number(argument.name) ?? argument.defaultValue
            guard argument.range.contains(value) else {
                throw PipelineError(.invalidOption, "'\(argument.name)' of \(name) must be in \(Self.format(argument.range.lowerBound))...\(Self.format(argument.range.upperBound)); got \(Self.format(value))")
            }
            arguments[argument.name] = value
        }
        let accepted = Set(operation.arguments.map(\.name))
        for other in Self.argumentOptions.map(\.name) where options.number(other) != nil && !accepted.contains(other) {
            let takes = accepted.isEmpty ? "takes no arguments" : "takes " + operation.arguments.map(\.name).joined(separator: ", ")
            throw PipelineError(.invalidOption, "'\(other)' is not an argument of \(name); \(name) \(takes)")
        }
        self.arguments = arguments
        identifier = "magick(\(name)" + operation.arguments.map { ",\($0.name)=\(arguments[$0.name]!)" }.joined() + ")"
    }

    public func process(_ image: PipelineImage) throws -> PipelineImage {
        try image.transformed { try operation.apply($0, arguments) }
    }
}
