import Foundation

/// A pipeline written back as YAML the way it will run: every option with its effective value
/// (defaults filled in, environment variables substituted, sizes and durations normalised), and
/// the identifiers that go into cache keys as comments. The text is itself a valid pipeline file.
public enum PipelineExplain {
    public static func yaml(_ pipeline: Pipeline) -> String {
        var lines = ["# \(pipeline.file), as it will run: defaults filled in, variables substituted."]
        for key in PipelineFileSpec.keys {
            switch key.shape {
            case .value(let option):
                guard let value = topLevelValue(pipeline, key.name) else { continue }
                lines.append("\(key.name): \(render(value, option))")
            case .stage(let slot, let allowsNone):
                if key.name == "encoder", pipeline.hasVariants { continue }
                if let config = stageConfig(pipeline, slot) {
                    lines += stage(key.name, config)
                } else if allowsNone {
                    lines.append("\(key.name): none")
                } else {
                    lines.append("# \(key.name): not configured; every \(slot.rawValue) runs with its defaults")
                }
            case .stages(let slot):
                let list = slot == .purger ? pipeline.purgers : slot == .notifier ? pipeline.notifiers : pipeline.processors
                if slot != .processor, list.isEmpty { continue }
                lines += processors(key.name, list, indent: "")
            case .section(let options):
                // `output:` always (its defaults are the run's); another section when the file has it.
                guard let values = key.name == "output" ? pipeline.output.options : sectionOptions(pipeline, key.name) else { continue }
                lines.append("\(key.name):")
                for option in options {
                    guard let value = values[option.name] else { continue }
                    lines.append("  \(option.name): \(render(value, option))")
                }
            case .variants:
                guard pipeline.hasVariants else { continue }
                lines.append("\(key.name):")
                for variant in pipeline.variants {
                    lines.append("  \(variant.name ?? "default"):")
                    lines += processors("processors", Array(variant.processors.dropFirst(variant.sharedCount)), indent: "    ")
                    lines += stage("encoder", variant.encoder, indent: "    ")
                    lines.append("    name: \(quote(variant.template.text))")
                }
            case .tests:
                continue
            case .params:
                guard !pipeline.params.isEmpty else { continue }
                lines.append("\(key.name):")
                for param in pipeline.params.values.sorted(by: { $0.name < $1.name }) {
                    lines.append("  \(param.name):")
                    lines.append("    sets: \(quote(param.path))")
                    if let range = param.option.range {
                        lines.append("    min: \(render(param.option.boundaryValue(range.lowerBound), param.option))")
                        lines.append("    max: \(render(param.option.boundaryValue(range.upperBound), param.option))")
                    }
                    if case .oneOf(let values) = param.option.kind { lines.append("    values: [\(values.joined(separator: ", "))]") }
                    if param.doc != param.option.doc { lines.append("    doc: \(quote(param.doc))") }
                }
            }
        }
        return lines.joined(separator: "\n") + "\n"
    }

    /// A section other than `output:` as the pipeline holds it, when the file has it.
    static func sectionOptions(_ pipeline: Pipeline, _ name: String) -> PluginOptions? {
        switch name {
        case "on_failure": return pipeline.onFailure
        case "metadata": return pipeline.metadata
        case "serve":
            let serve = pipeline.serve
            guard !serve.sources.isEmpty || serve.cacheControl != ServeConfig.defaultCacheControl || serve.breakpoints != nil
                    || serve.cacheTags != CacheTags() else { return nil }
            var values: [String: OptionValue] = ["sources": .list(serve.sources.map { .string($0) }), "cache_control": .string(serve.cacheControl),
                                                 "cache_tags": .list(serve.cacheTags.kinds.map { .string($0.rawValue) }),
                                                 "cache_tag_headers": .list(serve.cacheTags.headers.map { .string($0) }),
                                                 "cache_tag_prefix": .string(serve.cacheTags.prefix)]
            if let breakpoints = serve.breakpoints {
                values["breakpoints"] = .list(breakpoints.widths.map { .int($0) })
                values["breakpoint_param"] = .string(breakpoints.param)
                values["default_width"] = .int(breakpoints.defaultWidth)
                values["hints"] = .string(breakpoints.mode.rawValue)
            }
            return PluginOptions(values)
        default: return nil
        }
    }

    /// The top-level single values as the pipeline holds them (an empty description is left out).
    static func topLevelValue(_ pipeline: Pipeline, _ name: String) -> OptionValue? {
        switch name {
        case "version": return .int(pipeline.version)
        case "name": return .string(pipeline.name)
        case "description": return pipeline.description.isEmpty ? nil : .string(pipeline.description)
        case "sources": return pipeline.sources.isEmpty ? nil : .list(pipeline.sources.map { .string($0) })
        default: return nil
        }
    }

    /// The pipeline's stage in a single-stage slot.
    static func stageConfig(_ pipeline: Pipeline, _ slot: Slot) -> StageConfig? {
        switch slot {
        case .loader: return pipeline.loader
        case .dataCache: return pipeline.dataCache
        case .decoder: return pipeline.decoder
        case .imageCache: return pipeline.imageCache
        case .encoder: return pipeline.encoder
        case .processor, .destination, .list, .report, .purger, .notifier: return nil
        }
    }

    static func stage(_ key: String, _ config: StageConfig, indent: String = "") -> [String] {
        var lines = ["\(indent)\(key):", "\(indent)  \(config.plugin.spec.name):"]
        lines += options(config, indent: indent + "    ")
        if lines.count == 2 { return ["\(indent)\(key): \(config.plugin.spec.name)"] }
        return lines
    }

    static func processors(_ key: String, _ list: [StageConfig], indent: String) -> [String] {
        guard !list.isEmpty else { return ["\(indent)\(key): []"] }
        var lines = ["\(indent)\(key):"]
        for config in list {
            let identifier = (try? config.makeProcessor().identifier).map { "  # cache key part: \($0)" } ?? ""
            lines.append("\(indent)  - \(config.plugin.spec.name):\(identifier)")
            lines += options(config, indent: indent + "      ")
        }
        return lines
    }

    static func options(_ config: StageConfig, indent: String) -> [String] {
        config.plugin.spec.options.compactMap { option -> String? in
            guard let value = config.options[option.name] else { return nil }
            return "\(indent)\(option.name): \(render(value, option))"
        }
    }

    static func render(_ value: OptionValue, _ option: OptionSpec) -> String {
        switch (option.kind, value) {
        case (.size, _), (.duration, _), (.pixels, _): return option.format(value)
        case (.record(let fields), .map(let entries)), (.either(_, .record(let fields)), .map(let entries)):
            return "{ " + fields.compactMap { field in entries[field.name].map { "\(field.name): \(render($0, field))" } }
                .joined(separator: ", ") + " }"
        case (_, .string(let text)): return quote(text)
        case (_, .list(let items)): return "[" + items.map { render($0, option) }.joined(separator: ", ") + "]"
        case (_, .map(let entries)):
            return "{" + entries.keys.sorted().map { "\(quote($0)): \(quote(entries[$0]!.description))" }.joined(separator: ", ") + "}"
        default: return value.description
        }
    }

    /// A double-quoted YAML string (JSON escaping is valid YAML).
    static func quote(_ text: String) -> String {
        let data = try? JSONSerialization.data(withJSONObject: [text], options: [.withoutEscapingSlashes])
        let array = data.map { String(decoding: $0, as: UTF8.self) } ?? "[\"\"]"
        return String(array.dropFirst().dropLast())
    }
}
