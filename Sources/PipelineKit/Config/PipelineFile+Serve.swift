import Foundation
import Yams

/// `serve:` and `params:`, what `pipelinectl serve` reads of a pipeline file.
extension PipelineParser {
    /// `serve:`, its options declared by ``PipelineFileSpec/serve``.
    mutating func serveConfig(_ node: Node) -> ServeConfig {
        let at = node.mark.map { SourcePosition(line: $0.line, column: $0.column) } ?? SourcePosition(line: 1, column: 1)
        var config = ServeConfig()
        guard let options = parseOptions(node, options: PipelineFileSpec.serve, exclusive: [], label: "'serve'", at: at, path: "serve") else {
            return config
        }
        config.sources = (options.list("sources") ?? []).map(\.description)
        let sourcesAt = lastOptionPositions["sources"] ?? at
        for prefix in config.sources where SourceBoundary.root(prefix) == nil {
            diagnostics.append(Diagnostic(.error, file: file, line: sourcesAt.line, column: sourcesAt.column,
                message: "serve.sources: '\(prefix)' is not an absolute directory (/srv/images/), a URL prefix (https://img.example.com/public/, s3://bucket/, http://127.0.0.1: for any port) or a scheme (data:)"))
        }
        config.cacheControl = options.string("cache_control") ?? ServeConfig.defaultCacheControl
        if let kinds = options.list("cache_tags") { config.cacheTags.kinds = kinds.compactMap { CacheTags.Kind(rawValue: $0.description) } }
        if let headers = options.list("cache_tag_headers") { config.cacheTags.headers = headers.map(\.description) }
        config.cacheTags.prefix = options.string("cache_tag_prefix") ?? "pk-"
        if let bad = config.cacheTags.headers.first(where: { $0.isEmpty || !$0.allSatisfy({ $0.isASCII && ($0.isLetter || $0.isNumber || $0 == "-") }) }) {
            let place = lastOptionPositions["cache_tag_headers"] ?? at
            error(at: place, "serve.cache_tag_headers: '\(bad)' is not a header name (letters, digits and '-')")
        }
        if !config.cacheTags.prefix.allSatisfy({ $0.isASCII && ($0.isLetter || $0.isNumber || "_-.".contains($0)) }) {
            error(at: lastOptionPositions["cache_tag_prefix"] ?? at, "serve.cache_tag_prefix: use letters, digits, '_', '-' and '.' only (a tag holds no spaces or commas)")
        }
        let widths = (options.list("breakpoints") ?? []).compactMap { value -> Int? in if case .int(let n) = value { return n } else { return nil } }
        let mode = Breakpoints.Mode(rawValue: options.string("hints") ?? "vary") ?? .vary
        breakpointsAt = lastOptionPositions["breakpoints"] ?? at
        if let bad = widths.first(where: { $0 < 1 || $0 > 65_535 }) {
            error(at: breakpointsAt, "serve.breakpoints: \(bad) is not a width (1 to 65535)")
        } else if !widths.isEmpty {
            guard let param = options.string("breakpoint_param") else {
                error(at: breakpointsAt, "serve.breakpoints needs serve.breakpoint_param: the params: entry a hinted width sets")
                return config
            }
            config.breakpoints = Breakpoints(widths: widths, param: param, defaultWidth: options.int("default_width"), mode: mode)
            breakpointsDefaultGiven = options.int("default_width") != nil
        } else if options.string("breakpoint_param") != nil || options.int("default_width") != nil {
            error(at: at, "serve.breakpoint_param and serve.default_width need serve.breakpoints: the widths hints choose among")
        }
        return config
    }

    /// `serve.breakpoints` checked against `params:`: the parameter exists, and every width is a
    /// value it takes. Without `default_width`, the default is what the pipeline as written
    /// makes (the option's value, snapped), else the largest width.
    mutating func checkBreakpoints(_ pipeline: inout Pipeline) {
        guard let breakpoints = pipeline.serve.breakpoints else { return }
        guard let param = pipeline.params[breakpoints.param] else {
            error(at: breakpointsAt, "serve.breakpoint_param: no parameter '\(breakpoints.param)' in params:"
                + Suggest.hint(for: breakpoints.param, in: pipeline.params.keys.sorted()))
            pipeline.serve.breakpoints = nil
            return
        }
        for width in breakpoints.widths {
            do { _ = try param.value(String(width)) } catch let failure as PipelineError {
                error(at: breakpointsAt, "serve.breakpoints: \(width) is not a value of \(failure.message)")
            } catch {}
        }
        guard !breakpointsDefaultGiven, let stage = try? ParamSpec.stage(param.target, in: pipeline, path: param.path),
              case .int(let written)? = stage.options.values[param.option.name] else { return }
        pipeline.serve.breakpoints = Breakpoints(widths: breakpoints.widths, param: breakpoints.param, defaultWidth: written, mode: breakpoints.mode)
    }

    /// `params:`: a map from parameter names to ``PipelineFileSpec/param`` maps, each checked
    /// against the stage option it sets.
    mutating func paramSpecs(_ node: Node, pipeline: Pipeline) -> [String: ParamSpec] {
        guard case .mapping(let mapping) = node else {
            error(node, "expected a map from parameter names to what each sets, got \(OptionParsing.describe(node))")
            return [:]
        }
        var specs: [String: ParamSpec] = [:]
        for (key, value) in mapping {
            guard let name = key.scalar?.string, !name.isEmpty,
                  name.allSatisfy({ $0.isLetter || $0.isNumber || $0 == "_" || $0 == "-" }) else {
                error(key, "a parameter name may use letters, digits, '_' and '-' only")
                continue
            }
            guard !ParamSpec.reserved.contains(name) else {
                error(key, "'\(name)' is a query parameter the service uses itself; name the parameter otherwise")
                continue
            }
            let at = SourcePosition(line: key.mark?.line ?? 1, column: key.mark?.column ?? 1)
            guard let options = parseOptions(value, options: PipelineFileSpec.param, exclusive: [],
                                             label: "parameter '\(name)'", at: at, path: "params.\(name)") else { continue }
            let positions = lastOptionPositions
            do {
                specs[name] = try ParamSpec(name: name, options: options, pipeline: pipeline)
            } catch let failure as PipelineError {
                error(at: positions["sets"] ?? at, "params.\(name): " + failure.message)
            } catch {}
        }
        return specs
    }
}

extension ParamSpec {
    /// Query parameters the service reads itself: `expires`, and `v`, a version the signature
    /// covers and nothing else reads (a new `v` is a new URL for every cache on the way).
    static let reserved: Set<String> = ["expires", "v"]

    /// A parameter from its `params:` entry, its target found in `pipeline` and its values
    /// narrowed; throws saying what does not match the file.
    init(name: String, options: PluginOptions, pipeline: Pipeline) throws {
        let path = options.string("sets") ?? ""
        let (target, stagePath, plugin, optionName) = try Self.parse(path)
        let config = try Self.stage(target, in: pipeline, path: stagePath)
        guard config.plugin.spec.name == plugin else {
            throw PipelineError(.invalidOption, "\(stagePath) is '\(config.plugin.spec.name)', not '\(plugin)'")
        }
        guard var option = config.plugin.spec.options.first(where: { $0.name == optionName }) else {
            let names = config.plugin.spec.options.map(\.name)
            throw PipelineError(.invalidOption, "'\(plugin)' has no option '\(optionName)'" + Suggest.hint(for: optionName, in: names))
        }
        option = try Self.narrowed(option, min: options.number("min"), max: options.number("max"),
                                   values: (options.list("values") ?? []).map(\.description))
        self.name = name
        self.path = path
        self.target = target
        self.plugin = plugin
        self.option = option
        self.doc = options.string("doc") ?? option.doc
    }

    /// `processors[0].resize.width` -> the target, `processors[0]`, `resize`, `width`.
    /// `processors.0.resize.width` is the same: inside `{ }` YAML refuses a bare `[`.
    static func parse(_ path: String) throws -> (Target, String, String, String) {
        var parts = path.split(separator: ".").map(String.init)
        for index in parts.indices.dropLast() where parts[index] == "processors" && Int(parts[index + 1]) != nil {
            parts[index] = "processors[\(parts[index + 1])]"
            parts[index + 1] = ""
        }
        parts.removeAll { $0.isEmpty }
        func index(_ part: String, _ prefix: String) -> Int? {
            guard part.hasPrefix(prefix + "["), part.hasSuffix("]") else { return nil }
            return Int(part.dropFirst(prefix.count + 1).dropLast())
        }
        let expected = "expected processors[N].PLUGIN.OPTION (or processors.N.PLUGIN.OPTION), encoder.PLUGIN.OPTION, decoder.PLUGIN.OPTION, "
            + "variants.NAME.processors[N].PLUGIN.OPTION or variants.NAME.encoder.PLUGIN.OPTION, got '\(path)'"
        switch parts.count {
        case 3:
            if let n = index(parts[0], "processors") { return (.processor(index: n), parts[0], parts[1], parts[2]) }
            if parts[0] == "encoder" { return (.encoder, "encoder", parts[1], parts[2]) }
            if parts[0] == "decoder" { return (.decoder, "decoder", parts[1], parts[2]) }
        case 5 where parts[0] == "variants":
            let stagePath = "variants.\(parts[1]).\(parts[2])"
            if let n = index(parts[2], "processors") { return (.variantProcessor(variant: parts[1], index: n), stagePath, parts[3], parts[4]) }
            if parts[2] == "encoder" { return (.variantEncoder(variant: parts[1]), stagePath, parts[3], parts[4]) }
        default: break
        }
        throw PipelineError(.invalidOption, expected)
    }

    /// The configured stage `target` names in `pipeline`.
    static func stage(_ target: Target, in pipeline: Pipeline, path: String) throws -> StageConfig {
        func missing(_ what: String) -> PipelineError { PipelineError(.invalidOption, "\(path): \(what)") }
        switch target {
        case .decoder: return pipeline.decoder
        case .processor(let n):
            guard n >= 0, n < pipeline.processors.count else { throw missing("the pipeline has \(pipeline.processors.count) processors") }
            return pipeline.processors[n]
        case .encoder:
            guard let top = pipeline.topEncoder else { throw missing("the pipeline has no top-level encoder") }
            return top
        case .variantProcessor(let name, let n):
            let variant = try variantNamed(name, in: pipeline, path: path)
            let own = Array(variant.processors.dropFirst(variant.sharedCount))
            guard n >= 0, n < own.count else { throw missing("variant '\(name)' has \(own.count) processors of its own") }
            return own[n]
        case .variantEncoder(let name):
            return try variantNamed(name, in: pipeline, path: path).encoder
        }
    }

    static func variantNamed(_ name: String, in pipeline: Pipeline, path: String) throws -> Variant {
        guard let variant = pipeline.variants.first(where: { $0.name == name }) else {
            throw PipelineError(.invalidOption, "\(path): no variant '\(name)'" + Suggest.hint(for: name, in: pipeline.variants.compactMap(\.name)))
        }
        return variant
    }

    /// `option` with its range narrowed to `min`...`max` and its named values to `values`. An
    /// option written as a value or a map (`quality`, `frame`) takes its single value from a
    /// request: a query parameter is one value.
    static func narrowed(_ option: OptionSpec, min: Double?, max: Double?, values: [String]) throws -> OptionSpec {
        var option = option
        if case .either(let single, _) = option.kind {
            option = OptionSpec(name: option.name, kind: single, defaultValue: option.defaultValue, range: option.range, doc: option.doc)
        }
        var range = option.range
        if min != nil || max != nil {
            guard range != nil || [OptionSpec.Kind.int, .number, .size, .duration, .pixels].contains(where: { $0.name == option.kind.name }) else {
                throw PipelineError(.invalidOption, "min and max are for numbers; '\(option.name)' is \(option.kind.name)")
            }
            // Sizes, durations and pixel counts are never negative.
            let floor: Double = [OptionSpec.Kind.size, .duration, .pixels].contains(where: { $0.name == option.kind.name }) ? 0 : -.infinity
            let low = min ?? range?.lowerBound ?? floor, high = max ?? range?.upperBound ?? .infinity
            if let own = range, low < own.lowerBound || high > own.upperBound {
                throw PipelineError(.invalidOption, "min and max must lie within '\(option.name)''s own range "
                    + "\(option.format(option.boundaryValue(own.lowerBound)))...\(option.format(option.boundaryValue(own.upperBound)))")
            }
            guard low <= high else { throw PipelineError(.invalidOption, "min is above max") }
            range = low...high
        }
        var kind = option.kind
        if !values.isEmpty {
            guard case .oneOf(let own) = option.kind else {
                throw PipelineError(.invalidOption, "values are for options of named values; '\(option.name)' is \(option.kind.name)")
            }
            if let stranger = values.first(where: { !own.contains($0) }) {
                throw PipelineError(.invalidOption, "'\(stranger)' is not a value of '\(option.name)'" + Suggest.hint(for: stranger, in: own))
            }
            kind = .oneOf(values)
        }
        return OptionSpec(name: option.name, kind: kind, defaultValue: option.defaultValue, range: range, doc: option.doc)
    }
}
