import Foundation

/// A fact about an image, as JSON holds it: what an analysing processor (`analyze`) records about
/// an item, reported per item (`facts` in the JSON and JSONL reports) and kept with its stored
/// outputs.
public enum FactValue: Sendable, Equatable, Codable {
    case string(String)
    case int(Int)
    case number(Double)
    case bool(Bool)
    case list([FactValue])
    case object([String: FactValue])

    public init(from decoder: any Decoder) throws {
        let c = try decoder.singleValueContainer()
        if let v = try? c.decode(Bool.self) { self = .bool(v) }
        else if let v = try? c.decode(Int.self) { self = .int(v) }
        else if let v = try? c.decode(Double.self) { self = .number(v) }
        else if let v = try? c.decode(String.self) { self = .string(v) }
        else if let v = try? c.decode([FactValue].self) { self = .list(v) }
        else { self = .object(try c.decode([String: FactValue].self)) }
    }

    public func encode(to encoder: any Encoder) throws {
        var c = encoder.singleValueContainer()
        switch self {
        case .string(let v): try c.encode(v)
        case .int(let v): try c.encode(v)
        case .number(let v): try c.encode(v)
        case .bool(let v): try c.encode(v)
        case .list(let v): try c.encode(v)
        case .object(let v): try c.encode(v)
        }
    }

    /// The string, when this is one.
    public var string: String? { if case .string(let v) = self { v } else { nil } }
}

/// Facts by name (`blurhash`, `dominant_color`, `source`...).
public typealias ImageFacts = [String: FactValue]

extension Dictionary where Key == String, Value == FactValue {
    /// The facts as compact JSON with sorted keys (empty text for no facts).
    var jsonText: String {
        guard !isEmpty, let data = try? JSONEncoder.sorted.encode(self) else { return "" }
        return String(decoding: data, as: UTF8.self)
    }

    /// Facts read back from ``jsonText``.
    init(jsonText: String) {
        self = (try? JSONDecoder().decode(ImageFacts.self, from: Data(jsonText.utf8))) ?? [:]
    }
}

extension JSONEncoder {
    static var sorted: JSONEncoder {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        return encoder
    }
}
