import Foundation

/// Machine-readable descriptions generated from the registry: a JSON Schema of pipeline files
/// (for editors, through yaml-language-server) and a JSON list of plugins.
public enum PipelineSchema {
    /// A JSON Schema (draft-07) of pipeline files for the plugins in `registry`.
    public static func jsonSchema(_ registry: PluginRegistry) -> [String: Any] {
        func slotSchema(_ slot: Slot, nullable: Bool) -> [String: Any] {
            let plugins = registry.plugins(in: slot)
            var names = plugins.map(\.spec.name)
            if nullable { names.append("none") }
            var choices: [[String: Any]] = [["type": "string", "enum": names]]
            for plugin in plugins {
                choices.append([
                    "type": "object", "additionalProperties": false, "minProperties": 1, "maxProperties": 1,
                    "properties": [plugin.spec.name: optionsSchema(plugin.spec)],
                ])
            }
            return ["oneOf": choices]
        }
        func keySchema(_ key: PipelineFileKey) -> [String: Any] {
            var schema: [String: Any]
            switch key.shape {
            case .value(let option):
                schema = kindSchema(option.kind, range: option.range)
                if key.name == "version" { schema["enum"] = PipelineFileSpec.supportedVersions }
            case .stage(let slot, let allowsNone): schema = slotSchema(slot, nullable: allowsNone)
            case .stages(let slot): schema = ["type": "array", "items": slotSchema(slot, nullable: false)]
            case .section(let options) where key.name == "output":
                // Which destination options apply depends on `dir`; every destination's are allowed here.
                var all = options
                for plugin in registry.plugins(in: .destination) {
                    for option in plugin.spec.options where !all.contains(where: { $0.name == option.name }) {
                        all.append(option.documented("For \(plugin.spec.name) outputs (\(plugin.schemes.map { $0.isEmpty ? "a path" : "\($0)://" }.joined(separator: ", "))): "))
                    }
                }
                schema = sectionSchema(all)
            case .section(let options): schema = sectionSchema(options)
            case .variants:
                schema = [
                    "type": "object",
                    "additionalProperties": [
                        "type": ["object", "null"], "additionalProperties": false,
                        "properties": Dictionary(uniqueKeysWithValues: PipelineFileSpec.variant.map { ($0.name, keySchema($0)) }),
                    ],
                ]
            case .tests: schema = ["type": "array", "items": ["type": "object"]]
            case .params: schema = ["type": "object", "additionalProperties": sectionSchema(PipelineFileSpec.param)]
            }
            schema["description"] = key.doc
            return schema
        }
        let top = Dictionary(uniqueKeysWithValues: PipelineFileSpec.keys.map { ($0.name, keySchema($0)) })
        return [
            "$schema": "http://json-schema.org/draft-07/schema#",
            "title": "pipelinectl pipeline file",
            "type": "object",
            "additionalProperties": false,
            "properties": top,
        ]
    }

    static func optionsSchema(_ spec: PluginSpec) -> [String: Any] {
        sectionSchema(spec.options)
    }

    /// A map of options, each described by its spec.
    static func sectionSchema(_ options: [OptionSpec]) -> [String: Any] {
        var properties: [String: Any] = [:]
        for option in options {
            var schema = kindSchema(option.kind, range: option.range)
            schema["description"] = option.doc
            if let text = option.defaultText { schema["default"] = defaultJSON(option) ?? text }
            properties[option.name] = schema
        }
        var out: [String: Any] = ["type": ["object", "null"], "additionalProperties": false, "properties": properties]
        let required = options.filter(\.required).map(\.name)
        if !required.isEmpty { out["required"] = required }
        return out
    }

    static func kindSchema(_ kind: OptionSpec.Kind, range: ClosedRange<Double>?) -> [String: Any] {
        switch kind {
        case .int:
            var s: [String: Any] = ["type": "integer"]
            if let range { s["minimum"] = Int(range.lowerBound); s["maximum"] = Int(min(range.upperBound, 9e15)) }
            return s
        case .number:
            var s: [String: Any] = ["type": "number"]
            if let range { s["minimum"] = range.lowerBound; s["maximum"] = range.upperBound }
            return s
        case .bool: return ["type": "boolean"]
        case .string, .color, .path: return ["type": "string"]
        case .oneOf(let values): return ["type": "string", "enum": values]
        case .size:
            return ["oneOf": [["type": "integer", "minimum": 0],
                              ["type": "string", "pattern": "^[0-9.]+ *([KMGT]i?B|B)?$"]]]
        case .duration:
            return ["oneOf": [["type": "number", "minimum": 0],
                              ["type": "string", "pattern": "^[0-9.]+ *(ms|s|m|h|d)?$"]]]
        case .pixels:
            return ["oneOf": [["type": "integer", "minimum": 1],
                              ["type": "string", "pattern": "^([0-9.]+ *(MP|KP|P|mp|kp|p)?|[0-9]+x[0-9]+)$"]]]
        case .list(let element): return ["type": "array", "items": kindSchema(element, range: nil)]
        case .map: return ["type": "object", "additionalProperties": ["type": "string"]]
        case .record(let fields):
            var properties: [String: Any] = [:]
            for field in fields {
                var schema = kindSchema(field.kind, range: field.range)
                schema["description"] = field.doc
                if let value = defaultJSON(field) { schema["default"] = value }
                properties[field.name] = schema
            }
            var out: [String: Any] = ["type": "object", "properties": properties, "additionalProperties": false]
            let required = fields.filter(\.required).map(\.name)
            if !required.isEmpty { out["required"] = required }
            return out
        case .either(let single, let mapped):
            return ["oneOf": [kindSchema(single, range: range), kindSchema(mapped, range: nil)]]
        }
    }

    static func defaultJSON(_ option: OptionSpec) -> Any? {
        guard let value = option.defaultValue else { return nil }
        switch (option.kind, value) {
        case (.size, _), (.duration, _), (.pixels, _): return option.defaultText
        default: return json(value)
        }
    }

    static func json(_ value: OptionValue) -> Any {
        switch value {
        case .int(let v): return v
        case .number(let v): return v
        case .bool(let v): return v
        case .string(let v): return v
        case .list(let v): return v.map(json)
        case .map(let v): return v.mapValues(json)
        }
    }

    /// Every plugin with its slot, summary and options, for scripts (`plugins --json`).
    public static func pluginList(_ registry: PluginRegistry) -> [[String: Any]] {
        Slot.allCases.flatMap { slot in
            registry.plugins(in: slot).map { plugin -> [String: Any] in
                var entry: [String: Any] = ["name": plugin.spec.name, "slot": slot.rawValue, "summary": plugin.spec.summary]
                if slot == .loader { entry["schemes"] = plugin.schemes }
                entry["options"] = plugin.spec.options.map { option -> [String: Any] in
                    var o: [String: Any] = ["name": option.name, "type": option.kind.name, "doc": option.doc,
                                            "required": option.required]
                    if case .oneOf(let values) = option.kind { o["values"] = values }
                    if let text = option.defaultText { o["default"] = text }
                    if let range = option.range {
                        o["min"] = option.format(option.boundaryValue(range.lowerBound))
                        if range.upperBound < 9e17 { o["max"] = option.format(option.boundaryValue(range.upperBound)) }
                    }
                    return o
                }
                return entry
            }
        }
    }

    /// `object` as pretty JSON with sorted keys.
    public static func render(_ object: Any) throws -> String {
        let data = try JSONSerialization.data(withJSONObject: object, options: [.prettyPrinted, .sortedKeys, .withoutEscapingSlashes])
        return String(decoding: data, as: UTF8.self)
    }
}
