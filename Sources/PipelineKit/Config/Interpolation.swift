import Foundation
import Yams

/// `${VAR}`, `${VAR:-default}` and `$${` (a literal `${`) in pipeline values. `${VAR}` needs VAR
/// set and not empty; `${VAR:-default}` takes the default when VAR is unset or empty (`${VAR:-}`
/// allows an empty value).
///
/// Runs once over the YAML tree before validation and rewrites scalar values, keeping their
/// positions, so values that come from the environment are validated like literal ones. Keys are
/// never interpolated.
struct Interpolator {
    let environment: [String: String]
    var problems: [(SourcePosition?, String)] = []
    /// Start positions of scalars that could not be interpolated: later checks of those values
    /// would only repeat the problem, so the parser skips them.
    var failed: Set<SourcePosition> = []

    mutating func resolve(_ node: Node) -> Node {
        switch node {
        case .scalar(let scalar):
            return .scalar(resolve(scalar))
        case .mapping(let mapping):
            let pairs = mapping.map { ($0.key, resolve($0.value)) }
            return .mapping(Node.Mapping(pairs, mapping.tag, mapping.style, mapping.mark))
        case .sequence(let sequence):
            return .sequence(Node.Sequence(sequence.map { resolve($0) }, sequence.tag, sequence.style, sequence.mark))
        case .alias:
            return node
        }
    }

    private mutating func resolve(_ scalar: Node.Scalar) -> Node.Scalar {
        let text = scalar.string
        guard text.contains("$") else { return scalar }
        var out = ""
        var i = text.startIndex
        while i < text.endIndex {
            if text[i...].hasPrefix("$${") {
                out += "${"
                i = text.index(i, offsetBy: 3)
            } else if text[i...].hasPrefix("${") {
                guard let close = text[i...].firstIndex(of: "}") else {
                    problems.append((mark(scalar, at: i), "unclosed '${' in '\(text)'"))
                    return failing(scalar)
                }
                let inner = String(text[text.index(i, offsetBy: 2)..<close])
                let (name, fallback): (String, String?) = {
                    if let range = inner.range(of: ":-") {
                        return (String(inner[..<range.lowerBound]), String(inner[range.upperBound...]))
                    }
                    return (inner, nil)
                }()
                guard let first = name.first, first.isLetter || first == "_",
                      name.allSatisfy({ $0.isLetter || $0.isNumber || $0 == "_" }) else {
                    problems.append((mark(scalar, at: i), "invalid variable name '\(name)' in '${\(inner)}'"))
                    return failing(scalar)
                }
                if let value = environment[name], !value.isEmpty {
                    out += value
                } else if let fallback {
                    out += fallback
                } else if environment[name] != nil {
                    // Set but empty: `dir: ${BUCKET}/web` would silently become `/web`.
                    problems.append((mark(scalar, at: i),
                                     "environment variable '\(name)' is empty; set it, or write ${\(name):-} where an empty value is meant"))
                    return failing(scalar)
                } else {
                    problems.append((mark(scalar, at: i),
                                     "environment variable '\(name)' is not set; set it or write ${\(name):-default}"))
                    return failing(scalar)
                }
                i = text.index(after: close)
            } else {
                out.append(text[i])
                i = text.index(after: i)
            }
        }
        return Node.Scalar(out, scalar.tag, scalar.style, scalar.mark)
    }

    private mutating func failing(_ scalar: Node.Scalar) -> Node.Scalar {
        if let mark = scalar.mark { failed.insert(SourcePosition(line: mark.line, column: mark.column)) }
        return scalar
    }

    /// The position of `index` inside a single-line scalar (after its opening quote).
    private func mark(_ scalar: Node.Scalar, at index: String.Index) -> SourcePosition? {
        guard let mark = scalar.mark else { return nil }
        let start = SourcePosition(line: mark.line, column: mark.column)
        let quoted = scalar.style == .singleQuoted || scalar.style == .doubleQuoted ? 1 : 0
        let offset = scalar.string.unicodeScalars.distance(from: scalar.string.startIndex, to: index)
        guard scalar.style != .literal, scalar.style != .folded, !scalar.string[..<index].contains("\n") else { return start }
        return SourcePosition(line: mark.line, column: mark.column + quoted + offset)
    }
}
