import Foundation

/// The declaration of one plugin option: its name, type, default, constraints and a line of doc.
///
/// The spec is the single description of an option: validation, `pipelinectl plugins`, and the
/// documentation all read it. Build specs with the static constructors:
/// ```swift
/// .int("quality", default: 82, range: 1...100, doc: "JPEG quality.")
/// .size("max_bytes", default: "50MB", doc: "Largest body accepted.")
/// .oneOf("mode", ["fit", "fill", "stretch"], default: "fit", doc: "How the image meets the box.")
/// ```
public struct OptionSpec: Sendable, Equatable {
    /// The type of an option's value, as written in a pipeline file.
    public indirect enum Kind: Sendable, Equatable {
        case int
        case number
        case bool
        case string
        /// One of a fixed set of words.
        case oneOf([String])
        /// Bytes, written `50MB`, `1GiB`, `512KB` or a bare number.
        case size
        /// Seconds, written `250ms`, `30s`, `5m`, `2h`, `7d` or a bare number.
        case duration
        /// A pixel count, written `50MP`, `8000x6000` or a bare number.
        case pixels
        /// A colour ImageMagick understands: `white`, `#ff8800`, `rgba(0,0,0,0.5)`.
        case color
        /// A file system path.
        case path
        /// A list of values of one kind.
        case list(Kind)
        /// A map from strings to strings.
        case map
        /// A map of named fields, each declared by its own spec (kind, default, range, required).
        case record([OptionSpec])
        /// A value of the first kind when written as a single value, of the second when written as
        /// a map: `quality: 80` or `quality: { target_ssim: 0.98 }`.
        case either(Kind, Kind)

        var pluralName: String {
            switch self {
            case .oneOf: return "enum values"
            case .list, .map, .record, .either: return "\(name)s"
            default: return name + "s"
            }
        }

        /// How the kind is named in messages and documentation.
        public var name: String {
            switch self {
            case .int: return "integer"
            case .number: return "number"
            case .bool: return "boolean"
            case .string: return "string"
            case .oneOf: return "enum"
            case .size: return "size"
            case .duration: return "duration"
            case .pixels: return "pixels"
            case .color: return "color"
            case .path: return "path"
            case .list(let element): return "list of \(element.pluralName)"
            case .map: return "map"
            case .record(let fields): return "map of " + fields.map(\.name).joined(separator: ", ")
            case .either(let first, let second): return "\(first.name) or \(second.name)"
            }
        }
    }

    public let name: String
    public let kind: Kind
    /// The value used when the pipeline does not set one; `nil` for none.
    public let defaultValue: OptionValue?
    /// Whether the pipeline must set it.
    public let required: Bool
    /// Inclusive bounds for numbers, sizes and durations (in bytes and seconds).
    public let range: ClosedRange<Double>?
    /// One line of documentation.
    public private(set) var doc: String
    /// For paths: what validation checks on this machine before a run.
    public let access: PathAccess
    /// An example value as a pipeline file would write it, for documentation.
    public var example: String?

    /// What a path option must be on the machine that runs the pipeline.
    public enum PathAccess: Sendable, Equatable {
        /// Nothing is checked.
        case any
        /// An existing, readable file.
        case readableFile
        /// A directory that exists and is writable, or can be created.
        case writableDirectory
    }

    public init(name: String, kind: Kind, defaultValue: OptionValue? = nil, required: Bool = false,
                range: ClosedRange<Double>? = nil, doc: String, access: PathAccess = .any) {
        self.name = name
        self.kind = kind
        self.defaultValue = defaultValue
        self.required = required
        self.range = range
        self.doc = doc
        self.access = access
    }

    public static func int(_ name: String, default value: Int? = nil, range: ClosedRange<Int>? = nil,
                           required: Bool = false, doc: String) -> OptionSpec {
        OptionSpec(name: name, kind: .int, defaultValue: value.map { .int($0) }, required: required,
                   range: range.map { Double($0.lowerBound)...Double($0.upperBound) }, doc: doc)
    }

    public static func number(_ name: String, default value: Double? = nil, range: ClosedRange<Double>? = nil,
                              required: Bool = false, doc: String) -> OptionSpec {
        OptionSpec(name: name, kind: .number, defaultValue: value.map { .number($0) }, required: required,
                   range: range, doc: doc)
    }

    public static func bool(_ name: String, default value: Bool, doc: String) -> OptionSpec {
        OptionSpec(name: name, kind: .bool, defaultValue: .bool(value), doc: doc)
    }

    public static func string(_ name: String, default value: String? = nil, required: Bool = false,
                              doc: String) -> OptionSpec {
        OptionSpec(name: name, kind: .string, defaultValue: value.map { .string($0) }, required: required, doc: doc)
    }

    public static func oneOf(_ name: String, _ values: [String], default value: String? = nil, required: Bool = false,
                             doc: String) -> OptionSpec {
        OptionSpec(name: name, kind: .oneOf(values), defaultValue: value.map { .string($0) }, required: required, doc: doc)
    }

    /// A pixel count; `default` and bounds are written like the pipeline file (`"50MP"`).
    public static func pixels(_ name: String, default value: String? = nil, max: String? = nil, doc: String) -> OptionSpec {
        let high = max.flatMap(Units.parsePixels).map(Double.init) ?? 9e18
        return OptionSpec(name: name, kind: .pixels, defaultValue: value.flatMap(Units.parsePixels).map { .int($0) },
                          range: 1...high, doc: doc)
    }

    /// The same spec with an example value for the documentation.
    public func example(_ text: String) -> OptionSpec {
        var copy = self
        copy.example = text
        return copy
    }

    /// The same option with `prefix` before its documentation.
    public func documented(_ prefix: String) -> OptionSpec {
        var copy = self
        copy.doc = prefix + doc
        return copy
    }

    /// A size in bytes; `default` and `range` are written like the pipeline file (`"50MB"`).
    public static func size(_ name: String, default value: String? = nil, min: String? = nil, max: String? = nil,
                            required: Bool = false, doc: String) -> OptionSpec {
        let low = min.flatMap(Units.parseSize).map(Double.init) ?? 0
        let high = max.flatMap(Units.parseSize).map(Double.init) ?? 9e18
        return OptionSpec(name: name, kind: .size, defaultValue: value.flatMap(Units.parseSize).map { .int($0) },
                          required: required, range: low...high, doc: doc)
    }

    /// A duration in seconds; `default` and bounds are written like the pipeline file (`"30s"`).
    public static func duration(_ name: String, default value: String? = nil, min: String? = nil, max: String? = nil,
                                required: Bool = false, doc: String) -> OptionSpec {
        let low = min.flatMap(Units.parseDuration) ?? 0
        let high = max.flatMap(Units.parseDuration) ?? 1e12
        return OptionSpec(name: name, kind: .duration, defaultValue: value.flatMap(Units.parseDuration).map { .number($0) },
                          required: required, range: low...high, doc: doc)
    }

    public static func color(_ name: String, default value: String? = nil, doc: String) -> OptionSpec {
        OptionSpec(name: name, kind: .color, defaultValue: value.map { .string($0) }, doc: doc)
    }

    public static func path(_ name: String, default value: String? = nil, required: Bool = false,
                            access: PathAccess = .any, doc: String) -> OptionSpec {
        OptionSpec(name: name, kind: .path, defaultValue: value.map { .string($0) }, required: required, doc: doc,
                   access: access)
    }

    public static func list(_ name: String, of element: Kind, default value: [OptionValue]? = nil,
                            doc: String) -> OptionSpec {
        OptionSpec(name: name, kind: .list(element), defaultValue: value.map { .list($0) }, doc: doc)
    }

    public static func map(_ name: String, doc: String) -> OptionSpec {
        OptionSpec(name: name, kind: .map, defaultValue: .map([:]), doc: doc)
    }

    /// The default as a pipeline file would write it (`50MB`, `30s`, `fit`), or `nil`.
    public var defaultText: String? {
        guard let defaultValue else { return nil }
        return format(defaultValue)
    }

    /// A bound of ``range`` as a value of this option's kind (for messages and documentation).
    public func boundaryValue(_ bound: Double) -> OptionValue {
        switch kind {
        case .int, .size, .pixels, .either(.int, _): return .int(Int(bound))
        default: return .number(bound)
        }
    }

    /// `value` as a pipeline file would write it.
    public func format(_ value: OptionValue) -> String {
        switch (kind, value) {
        case (.size, .int(let bytes)): return Units.formatSize(bytes)
        case (.duration, .number(let seconds)): return Units.formatDuration(seconds)
        case (.pixels, .int(let pixels)): return Units.formatPixels(pixels)
        default: return value.description
        }
    }
}

/// What a plugin is: its name, a one-line summary, and its options.
public struct PluginSpec: Sendable {
    /// The name used in pipeline files (`http`, `resize`, `jpeg`).
    public let name: String
    /// One line for `pipelinectl plugins`.
    public let summary: String
    public let options: [OptionSpec]
    /// Groups of options of which a pipeline may set at most one.
    public let exclusive: [[String]]
    /// Options this plugin no longer takes, each with what replaced it: a pipeline setting one
    /// fails validation with that message rather than a bare "unknown option".
    public let retired: [String: String]
    /// Advice on a valid but likely surprising setting, shown by validation as a warning: given the
    /// options (defaults filled in) and the names the file set itself, a sentence, or `nil`.
    public let advice: (@Sendable (_ options: PluginOptions, _ written: Set<String>) -> String?)?

    public init(name: String, summary: String, options: [OptionSpec] = [], exclusive: [[String]] = [],
                retired: [String: String] = [:],
                advice: (@Sendable (_ options: PluginOptions, _ written: Set<String>) -> String?)? = nil) {
        self.name = name
        self.summary = summary
        self.options = options
        self.exclusive = exclusive
        self.retired = retired
        self.advice = advice
    }

    public func option(_ name: String) -> OptionSpec? { options.first { $0.name == name } }
}
