import Foundation

/// A validated option value, normalised: sizes are bytes (`.int`), durations are seconds (`.number`),
/// enumerations, colours and paths are strings.
public enum OptionValue: Sendable, Hashable, CustomStringConvertible {
    case int(Int)
    case number(Double)
    case bool(Bool)
    case string(String)
    case list([OptionValue])
    case map([String: OptionValue])

    public var description: String {
        switch self {
        case .int(let v): return String(v)
        case .number(let v): return v == v.rounded() && abs(v) < 1e15 ? String(Int(v)) : String(v)
        case .bool(let v): return String(v)
        case .string(let v): return v
        case .list(let v): return "[" + v.map(\.description).joined(separator: ", ") + "]"
        case .map(let v):
            return "{" + v.keys.sorted().map { "\($0): \(v[$0]!.description)" }.joined(separator: ", ") + "}"
        }
    }
}

/// The options a plugin receives: every option of its spec, validated, with defaults filled in.
///
/// Accessors return `nil` only for an option without a default that the pipeline did not set.
public struct PluginOptions: Sendable, Hashable {
    /// Values by option name.
    public let values: [String: OptionValue]

    public init(_ values: [String: OptionValue] = [:]) { self.values = values }

    public subscript(name: String) -> OptionValue? { values[name] }

    public func int(_ name: String) -> Int? {
        switch values[name] {
        case .int(let v): return v
        case .number(let v): return Int(v)
        default: return nil
        }
    }
    public func number(_ name: String) -> Double? {
        switch values[name] {
        case .int(let v): return Double(v)
        case .number(let v): return v
        default: return nil
        }
    }
    public func bool(_ name: String) -> Bool? {
        if case .bool(let v) = values[name] { return v }
        return nil
    }
    public func string(_ name: String) -> String? {
        if case .string(let v) = values[name] { return v }
        return nil
    }
    /// A size option in bytes.
    public func bytes(_ name: String) -> Int? { int(name) }
    /// A duration option in seconds.
    public func seconds(_ name: String) -> Double? { number(name) }
    public func list(_ name: String) -> [OptionValue]? {
        if case .list(let v) = values[name] { return v }
        return nil
    }
    public func map(_ name: String) -> [String: OptionValue]? {
        if case .map(let v) = values[name] { return v }
        return nil
    }

    /// A stable rendering of every value, sorted by name, for identifiers and cache keys.
    public var canonical: String {
        values.keys.sorted().map { "\($0)=\(values[$0]!.description)" }.joined(separator: ",")
    }
}
