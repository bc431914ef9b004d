import Foundation

/// A flat JSON object written directly: problem bodies, access-log lines, JSON log lines. The
/// service writes them on every request, and through JSONSerialization they cost a 429 more than
/// the rest of its answer. Keys come out sorted, as JSONSerialization's `.sortedKeys` writes them;
/// slashes are not escaped.
package struct JSONLine {
    private var fields: [(key: String, json: String)] = []

    package init() {}

    package mutating func add(_ key: String, _ value: String) { fields.append((key, Self.quoted(value))) }
    package mutating func add(_ key: String, _ value: Int) { fields.append((key, String(value))) }
    package mutating func add(_ key: String, _ value: Double) { fields.append((key, value.isFinite ? "\(value)" : "null")) }

    /// The object, e.g. `{"a":1,"b":"x"}`.
    package var text: String {
        "{" + fields.sorted { $0.key < $1.key }.map { Self.quoted($0.key) + ":" + $0.json }.joined(separator: ",") + "}"
    }

    package var data: Data { Data(text.utf8) }

    /// `text` as a JSON string: quotes, backslashes and control characters escaped.
    package static func quoted(_ text: String) -> String {
        var out = "\""
        out.reserveCapacity(text.utf8.count + 2)
        for scalar in text.unicodeScalars {
            switch scalar {
            case "\"": out += "\\\""
            case "\\": out += "\\\\"
            case "\n": out += "\\n"
            case "\r": out += "\\r"
            case "\t": out += "\\t"
            case _ where scalar.value < 0x20:
                out += "\\u00" + (scalar.value < 0x10 ? "0" : "") + String(scalar.value, radix: 16)
            default: out.unicodeScalars.append(scalar)
            }
        }
        return out + "\""
    }
}
