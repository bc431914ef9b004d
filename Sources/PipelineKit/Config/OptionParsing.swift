import Foundation
import Yams

/// Turns a YAML node into an ``OptionValue`` of the kind an ``OptionSpec`` declares, or a message.
struct OptionProblem: Error {
    let message: String
    init(_ message: String) { self.message = message }
}

enum OptionParsing {
    /// A value written outside YAML (a query parameter) as the node YAML would have made of it:
    /// a plain scalar, or for a list, its comma-separated items.
    static func node(_ text: String, kind: OptionSpec.Kind) -> Node {
        if case .list = kind {
            let items = text.split(separator: ",", omittingEmptySubsequences: true)
                .map { Node.scalar(Node.Scalar(String($0).trimmingCharacters(in: .whitespaces), .implicit, .plain)) }
            return .sequence(Node.Sequence(items))
        }
        return .scalar(Node.Scalar(text, .implicit, .plain))
    }

    /// The value, or the message that explains what was expected.
    static func parse(_ node: Node, kind: OptionSpec.Kind, name: String) -> Result<OptionValue, OptionProblem> {
        switch kind {
        case .list(let element): return parseList(node, element: element, kind: kind, name: name)
        case .map: return parseMap(node, name: name)
        case .record(let fields): return parseRecord(node, fields: fields, name: name)
        case .either(let single, let mapped):
            if case .mapping = node { return parse(node, kind: mapped, name: name) }
            return parse(node, kind: single, name: name)
        default:
            guard case .scalar(let scalar) = node else {
                return .failure(OptionProblem("expected \(expectation(kind)) for '\(name)', got \(describe(node))"))
            }
            return parseScalar(scalar.string, kind: kind, name: name)
        }
    }

    /// A list: each item parsed as `element`; the first problem stops it.
    static func parseList(_ node: Node, element: OptionSpec.Kind, kind: OptionSpec.Kind, name: String) -> Result<OptionValue, OptionProblem> {
        guard case .sequence(let sequence) = node else {
            return .failure(OptionProblem("expected a \(kind.name) for '\(name)', got \(describe(node))"))
        }
        var values: [OptionValue] = []
        for item in sequence {
            switch parse(item, kind: element, name: name) {
            case .success(let value): values.append(value)
            case .failure(let problem): return .failure(problem)
            }
        }
        return .success(.list(values))
    }

    /// A map of strings to strings.
    static func parseMap(_ node: Node, name: String) -> Result<OptionValue, OptionProblem> {
        guard case .mapping(let mapping) = node else {
            return .failure(OptionProblem("expected a map for '\(name)', got \(describe(node))"))
        }
        var values: [String: OptionValue] = [:]
        for (key, value) in mapping {
            guard let k = key.scalar?.string, let v = value.scalar?.string else {
                return .failure(OptionProblem("expected a map of strings for '\(name)'"))
            }
            values[k] = .string(v)
        }
        return .success(.map(values))
    }

    /// A record: its declared fields, each parsed and range-checked by its own spec, with defaults
    /// filled in and required ones asked for.
    static func parseRecord(_ node: Node, fields: [OptionSpec], name: String) -> Result<OptionValue, OptionProblem> {
        guard case .mapping(let mapping) = node else {
            return .failure(OptionProblem("expected a map of \(fields.map(\.name).joined(separator: ", ")) for '\(name)', got \(describe(node))"))
        }
        var values: [String: OptionValue] = [:]
        for (key, value) in mapping {
            guard let fieldName = key.scalar?.string, let field = fields.first(where: { $0.name == fieldName }) else {
                let text = key.scalar?.string ?? describe(key)
                return .failure(OptionProblem("unknown field '\(text)' in '\(name)'" + Suggest.hint(for: text, in: fields.map(\.name))))
            }
            switch parse(value, kind: field.kind, name: "\(name).\(fieldName)") {
            case .success(let parsed):
                if let problem = checkRange(parsed, spec: field) { return .failure(OptionProblem("\(name): " + problem)) }
                values[fieldName] = parsed
            case .failure(let problem):
                return .failure(problem)
            }
        }
        for field in fields where values[field.name] == nil {
            if let value = field.defaultValue {
                values[field.name] = value
            } else if field.required {
                return .failure(OptionProblem("'\(name)' needs '\(field.name)'"))
            }
        }
        return .success(.map(values))
    }

    /// A scalar of a scalar kind (a number, a size, a colour, one of a list...).
    static func parseScalar(_ text: String, kind: OptionSpec.Kind, name: String) -> Result<OptionValue, OptionProblem> {
        func expected(_ what: String) -> Result<OptionValue, OptionProblem> {
            .failure(OptionProblem("expected \(what) for '\(name)', got '\(text)'"))
        }
        switch kind {
        case .int:
            return Int(text).map { .success(.int($0)) } ?? expected("an integer")
        case .number:
            if let value = Double(text), value.isFinite { return .success(.number(value)) }
            return expected("a number")
        case .bool:
            switch text.lowercased() {
            case "true", "yes", "on": return .success(.bool(true))
            case "false", "no", "off": return .success(.bool(false))
            default: return expected("true or false")
            }
        case .string, .path:
            return .success(.string(text))
        case .color:
            if let problem = ColorSyntax.problem(text) { return .failure(OptionProblem("'\(name)': '\(text)' is \(problem)")) }
            return .success(.string(text))
        case .oneOf(let allowed):
            if allowed.contains(text) { return .success(.string(text)) }
            return .failure(OptionProblem("unknown value '\(text)' for '\(name)'" + Suggest.hint(for: text, in: allowed)))
        case .size:
            return Units.parseSize(text).map { .success(.int($0)) } ?? expected("a size such as 50MB")
        case .duration:
            return Units.parseDuration(text).map { .success(.number($0)) } ?? expected("a duration such as 30s")
        case .pixels:
            return Units.parsePixels(text).map { .success(.int($0)) } ?? expected("a pixel count such as 50MP or 8000x6000")
        case .list, .map, .record, .either:
            return .failure(OptionProblem("expected \(expectation(kind)) for '\(name)', got '\(text)'"))
        }
    }

    /// Checks `value` against the spec's range; a message when it is outside.
    /// `name`: how the message names the option (its full key path); the spec's name by default.
    static func checkRange(_ value: OptionValue, spec: OptionSpec, name: String? = nil) -> String? {
        let name = name ?? spec.name
        guard let range = spec.range else { return nil }
        let number: Double
        switch value {
        case .int(let v): number = Double(v)
        case .number(let v): number = v
        default: return nil
        }
        guard !range.contains(number) else { return nil }
        let got = number.isFinite ? spec.format(value) : value.description
        // A bound may be open (a parameter's min or max alone, on an option without a range).
        let low = range.lowerBound.isFinite ? spec.format(spec.boundaryValue(range.lowerBound)) : nil
        let high = range.upperBound.isFinite && range.upperBound < 9e17 ? spec.format(spec.boundaryValue(range.upperBound)) : nil
        switch (low, high) {
        case (let low?, let high?): return "'\(name)' must be between \(low) and \(high), got \(got)"
        case (let low?, nil): return "'\(name)' must be at least \(low), got \(got)"
        case (nil, let high?): return "'\(name)' must be at most \(high), got \(got)"
        case (nil, nil): return "'\(name)' must be a finite number, got \(got)"
        }
    }

    static func expectation(_ kind: OptionSpec.Kind) -> String {
        switch kind {
        case .int: return "an integer"
        case .number: return "a number"
        case .bool: return "true or false"
        case .size: return "a size such as 50MB"
        case .duration: return "a duration such as 30s"
        case .pixels: return "a pixel count such as 50MP"
        case .oneOf(let values): return "one of " + values.joined(separator: ", ")
        case .color: return "a color"
        case .path: return "a path"
        default: return "a \(kind.name)"
        }
    }

    static func describe(_ node: Node) -> String {
        switch node {
        case .mapping: return "a map"
        case .sequence: return "a list"
        case .scalar(let s): return "'\(s.string)'"
        case .alias: return "an alias"
        }
    }
}

extension PluginSpec {
    /// One option written `NAME=VALUE` on a command line (`pipelinectl work --queue-option
    /// visibility=90s`), parsed and range-checked by this spec, as the same option in a pipeline
    /// file would be; throws naming the option, and the nearest name for an unknown one.
    public func option(assignment: String) throws -> (name: String, value: OptionValue) {
        guard let equals = assignment.firstIndex(of: "="), equals != assignment.startIndex else {
            throw PipelineError(.invalidOption, "'\(assignment)': expected NAME=VALUE, one of: " + options.map(\.name).joined(separator: ", "))
        }
        let name = String(assignment[..<equals]), text = String(assignment[assignment.index(after: equals)...])
        guard let spec = options.first(where: { $0.name == name }) else {
            throw PipelineError(.invalidOption, "unknown option '\(name)' for '\(self.name)'"
                + Suggest.hint(for: name, in: options.map(\.name)))
        }
        switch OptionParsing.parse(OptionParsing.node(text, kind: spec.kind), kind: spec.kind, name: name) {
        case .success(let value):
            if let problem = OptionParsing.checkRange(value, spec: spec) { throw PipelineError(.invalidOption, problem) }
            return (name, value)
        case .failure(let problem):
            throw PipelineError(.invalidOption, problem.message)
        }
    }
}
