import Foundation

/// A pipeline written back as YAML the way it will run: every option with its effective value
/// (defaults filled in, environment variables substituted, sizes and durations normalised), and
/// the identifiers that go into cache keys as comments. The text is itself a valid pipeline file.
public enum PipelineExplain {
    public static func yaml(_ pipeline: Pipeline) -> String {
        var lines = ["# \(pipeline.file), as it will run: defaults filled in, variables substituted.",
                     "version: \(pipeline.version)",
                     "name: \(quote(pipeline.name))"]
        if !pipeline.description.isEmpty { lines.append("description: \(quote(pipeline.description))") }
        lines.append("")
        if let loader = pipeline.loader {
            lines += stage("loader", loader)
        } else {
            lines.append("# loader: not configured; every loader runs with its defaults")
        }
        lines += pipeline.dataCache.map { stage("data_cache", $0) } ?? ["data_cache: none"]
        lines += stage("decoder", pipeline.decoder)
        if !pipeline.hasVariants {
            lines += processors("processors", pipeline.processors, indent: "")
            lines += pipeline.imageCache.map { stage("image_cache", $0) } ?? ["image_cache: none"]
            lines += stage("encoder", pipeline.variants[0].encoder)
        } else {
            lines += processors("processors", pipeline.processors, indent: "")
            lines += pipeline.imageCache.map { stage("image_cache", $0) } ?? ["image_cache: none"]
            lines.append("variants:")
            for variant in pipeline.variants {
                lines.append("  \(variant.name ?? "default"):")
                lines += processors("processors", Array(variant.processors.dropFirst(variant.sharedCount)), indent: "    ")
                lines += stage("encoder", variant.encoder, indent: "    ")
                lines.append("    name: \(quote(variant.template.text))")
            }
        }
        lines.append("output:")
        lines.append("  dir: \(quote(pipeline.output.dir))")
        lines.append("  name: \(quote(pipeline.output.name.text))")
        return lines.joined(separator: "\n") + "\n"
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
