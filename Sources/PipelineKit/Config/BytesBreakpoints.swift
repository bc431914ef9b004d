import Foundation

/// Breakpoints by bytes: a variant that makes one output per width, the widths chosen for each
/// image so that successive files differ by about ``bytesStep`` (`breakpoints:` in a variant).
///
/// A flat illustration needs two widths where a detailed photo needs eight: the widths follow
/// what each image costs to send, not a fixed list. Every width is made from the variant's image
/// (one decode, the chain run once); trial encodes find the widths, within ``trialTime``.
///
/// ```yaml
/// variants:
///   web:
///     breakpoints: { min_width: 320, max_width: 1920, bytes_step: 20KB, max_images: 8 }
///     encoder: { webp: { quality: 80 } }
///     name: "{stem}-{width}w.{ext}"
/// ```
public struct BytesBreakpoints: Sendable, Hashable {
    /// The narrowest output (an image narrower than this gives one output at its own width).
    public var minWidth: Int
    /// The widest output (never wider than the image: nothing is enlarged).
    public var maxWidth: Int
    /// The difference in bytes wanted between successive outputs.
    public var bytesStep: Int
    /// At most this many outputs; the step grows to fit between the narrowest and the widest.
    public var maxImages: Int
    /// Time for trial encodes that find each width; past it, each width is estimated once.
    public var trialTime: Double
    /// The `sizes` attribute the srcset manifest's `<img>` snippet carries.
    public var sizes: String

    /// The options of `breakpoints:` in a variant, as the file, the schema and the docs give them.
    public static let options: [OptionSpec] = [
        .int("min_width", default: 320, range: 1...16384, doc: "The narrowest output, in pixels.").example("320"),
        .int("max_width", default: 2048, range: 1...16384,
             doc: "The widest output, in pixels (an image narrower than this is not enlarged).").example("1920"),
        .size("bytes_step", default: "20KB", min: "1KB", max: "100MB",
              doc: "The difference in bytes wanted between successive widths.").example("20KB"),
        .int("max_images", default: 10, range: 1...50,
             doc: "At most this many widths; when more would be needed, the step grows so that they span min to max.")
            .example("8"),
        .duration("trial_time", default: "2s", min: "0s", max: "10m",
                  doc: "Time per image for the trial encodes that find each width; past it, each width is estimated once and kept."),
        .string("sizes", default: "100vw", doc: "The sizes attribute of the <img> snippet in the srcset manifest."),
    ]

    public init(minWidth: Int = 320, maxWidth: Int = 2048, bytesStep: Int = 20_000, maxImages: Int = 10,
                trialTime: Double = 2, sizes: String = "100vw") {
        self.minWidth = minWidth
        self.maxWidth = maxWidth
        self.bytesStep = bytesStep
        self.maxImages = maxImages
        self.trialTime = trialTime
        self.sizes = sizes
    }

    /// From validated options (``options``); throws when `min_width` exceeds `max_width`.
    public init(options: PluginOptions) throws {
        self.init(minWidth: options.int("min_width") ?? 320, maxWidth: options.int("max_width") ?? 2048,
                  bytesStep: options.bytes("bytes_step") ?? 20_000, maxImages: options.int("max_images") ?? 10,
                  trialTime: options.number("trial_time") ?? 2, sizes: options.string("sizes") ?? "100vw")
        guard minWidth <= maxWidth else {
            throw PipelineError(.invalidOption, "min_width (\(minWidth)) is larger than max_width (\(maxWidth))")
        }
    }

    /// What decides the widths, for output fingerprints and cache keys (not `sizes`, which
    /// only the manifest's snippet carries).
    public var identifier: String {
        "bytes(\(minWidth)-\(maxWidth),step=\(bytesStep),max=\(maxImages),trial=\(trialTime))"
    }

    /// One encode at one width.
    public struct Trial<Value> {
        public var width: Int
        public var bytes: Int
        public var value: Value
        public init(width: Int, bytes: Int, value: Value) {
            self.width = width
            self.bytes = bytes
            self.value = value
        }
    }

    /// The widths chosen for one image, narrowest first, and what choosing them cost.
    public struct Choice<Value> {
        /// The outputs, by width, narrowest first; the widest is always last.
        public var chosen: [Trial<Value>] = []
        /// The step used: ``BytesBreakpoints/bytesStep``, or larger when `max_images` capped the set.
        public var step: Int = 0
        /// Whether `max_images` made the step larger.
        public var capped = false
        /// Encodes made and not kept (trials that missed their target).
        public var discarded = 0
        /// Whether ``BytesBreakpoints/trialTime`` ran out before every width was refined.
        public var budgetSpent = false
    }

    /// Chooses the widths for an image `imageWidth` pixels wide. `encode` makes the output at a
    /// width and says its size; `elapsed` is the seconds spent so far (for ``trialTime``).
    ///
    /// The narrowest and the widest are encoded first. When they differ by less than a step, the
    /// widest alone is enough. Otherwise each next width aims at the previous output's bytes plus
    /// the step: estimated by interpolating the sizes known so far (a power law between the two
    /// encodes that bracket the target), encoded, and estimated again from the new point until it
    /// lands within 15% of the step (or the budget runs out). The last gap, up to the widest, may
    /// be anything from half a step to one and a half.
    public func choose<Value>(imageWidth: Int, elapsed: () -> Double,
                              encode: (Int) throws -> Trial<Value>) rethrows -> Choice<Value> {
        var choice = Choice<Value>()
        choice.step = bytesStep
        let high = max(1, min(maxWidth, imageWidth))
        let low = min(minWidth, high)
        let top = try encode(high)
        guard low < high, maxImages > 1 else {
            choice.chosen = [top]
            return choice
        }
        let bottom = try encode(low)
        let span = top.bytes - bottom.bytes
        guard span >= bytesStep else {
            // Sending the narrowest saves less than a step: one output is the honest answer.
            choice.chosen = [top]
            choice.discarded = 1
            return choice
        }
        if span / bytesStep + 1 > maxImages {
            choice.step = Int((Double(span) / Double(maxImages - 1)).rounded(.up))
            choice.capped = true
        }
        let step = Double(choice.step)
        var known: [(width: Int, bytes: Int)] = [(low, bottom.bytes), (high, top.bytes)]
        var chosen = [bottom]
        while chosen.count < maxImages - 1 {
            let previous = chosen.last!
            let target = Double(previous.bytes) + step
            if target > Double(top.bytes) - step / 2 { break }
            var best: Trial<Value>?
            var tried: Set<Int> = []
            while true {
                let width = Self.estimate(target, known: known, above: previous.width, below: high)
                if width <= previous.width || width >= high || tried.contains(width) { break }
                tried.insert(width)
                let trial = try encode(width)
                known.append((width, trial.bytes))
                known.sort { $0.width < $1.width }
                if let kept = best {
                    if abs(Double(trial.bytes) - target) < abs(Double(kept.bytes) - target) { best = trial }
                    choice.discarded += 1
                } else {
                    best = trial
                }
                if abs(Double(best!.bytes) - target) <= 0.15 * step { break }
                if elapsed() >= trialTime {
                    choice.budgetSpent = true
                    break
                }
                if tried.count >= 6 { break }
            }
            guard let best, best.bytes > previous.bytes else { break }
            chosen.append(best)
        }
        choice.chosen = chosen + [top]
        return choice
    }

    /// The width whose output should weigh `target` bytes: a power law through the two known
    /// encodes on either side of it (sizes grow about as the area), kept between `above` and `below`.
    static func estimate(_ target: Double, known: [(width: Int, bytes: Int)], above: Int, below: Int) -> Int {
        // The narrowest known point at or over the target, and the widest under it before that.
        let overIndex = known.firstIndex { Double($0.bytes) >= target } ?? known.count - 1
        let over = known[overIndex]
        let under = known[..<overIndex].last { Double($0.bytes) < target } ?? known[0]
        let width: Double
        if over.width > under.width, over.bytes > under.bytes, under.bytes > 0 {
            let exponent = (log(Double(over.bytes)) - log(Double(under.bytes))) / (log(Double(over.width)) - log(Double(under.width)))
            width = Double(under.width) * pow(target / Double(under.bytes), 1 / exponent)
        } else {
            width = Double(under.width) * (target / Double(max(1, under.bytes))).squareRoot()
        }
        guard width.isFinite else { return above }
        return min(below, max(above + 1, Int(width.rounded())))
    }
}
