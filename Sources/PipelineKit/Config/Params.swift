import Foundation

/// One parameter a request to `pipelinectl serve` may set (`params: { w: { sets: ..., min, max } }`):
/// which stage option it sets, and the values it takes, checked by that option's own spec (type
/// and range), narrowed by `min`, `max` and `values`. Everything else stays as the file says.
public struct ParamSpec: Sendable {
    /// Where a parameter's value goes.
    public enum Target: Sendable, Equatable {
        /// The top-level `processors[index]`, shared by every variant.
        case processor(index: Int)
        /// The top-level `encoder`.
        case encoder
        /// The `decoder`.
        case decoder
        /// A variant's own `processors[index]` (after the shared ones).
        case variantProcessor(variant: String, index: Int)
        /// A variant's own `encoder`.
        case variantEncoder(variant: String)
    }

    public let name: String
    /// What `sets` names, as written (`processors[0].resize.width`).
    public let path: String
    public let target: Target
    /// The plugin at the target (checked when the file is validated).
    public let plugin: String
    /// The option's spec, its range narrowed by `min` and `max` (and its values by `values`).
    public let option: OptionSpec
    /// One line for people (`doc:`), or the option's own.
    public let doc: String

    /// The value of a query parameter, parsed as the option parses YAML and checked against the
    /// narrowed spec; a message naming the parameter when it is wrong.
    public func value(_ text: String) throws -> OptionValue {
        let node = OptionParsing.node(text, kind: option.kind)
        switch OptionParsing.parse(node, kind: option.kind, name: name) {
        case .success(let parsed):
            if let problem = OptionParsing.checkRange(parsed, spec: option) {
                throw PipelineError(.invalidOption, "parameter '\(name)': \(problem)")
            }
            return parsed
        case .failure(let problem):
            throw PipelineError(.invalidOption, "parameter '\(name)': \(problem.message)")
        }
    }
}

/// How `pipelinectl serve` serves a pipeline (`serve:`).
public struct ServeConfig: Sendable {
    /// Source prefixes a request may name (`https://img.example.com/`, `s3://uploads/`,
    /// `/srv/images/`); empty: any source a loader serves, within the loaders' own guards.
    public var sources: [String] = []
    /// The `Cache-Control` of answers (default: a year, immutable, for signed URLs).
    public var cacheControl = ServeConfig.defaultCacheControl
    /// The widths Client Hints choose among (`breakpoints`, `breakpoint_param`, `default_width`,
    /// `hints`); `nil`: hints are not read.
    public var breakpoints: Breakpoints?
    /// The cache tags answers carry (`cache_tags`, `cache_tag_headers`, `cache_tag_prefix`).
    public var cacheTags = CacheTags()

    public static let defaultCacheControl = "public, max-age=31536000, immutable"

    public init() {}

}

extension Pipeline {
    /// Where `pipelinectl serve` (and `sign`, which checks what it would serve) takes sources
    /// from: `serve.sources`, or the top-level `sources` when that is unset. Make a
    /// ``SourceBoundary`` of it once and keep it: local roots are resolved when it is made.
    public var servedSources: [String] { serve.sources.isEmpty ? sources : serve.sources }
}

extension Pipeline {
    /// This pipeline as a request with `values` (parameter name -> query text) makes it: each
    /// parameter's stage option set, those stages built anew; every other stage, the loaders and
    /// the caches shared with this one. Throws naming an unknown parameter or a wrong value.
    public func applying(_ values: [String: String]) throws -> Pipeline {
        guard !values.isEmpty else { return self }
        var copy = self
        for (name, text) in values.sorted(by: { $0.key < $1.key }) {
            guard let param = params[name] else {
                let known = params.keys.sorted()
                throw PipelineError(.invalidOption, "unknown parameter '\(name)'" + (known.isEmpty
                    ? "; this pipeline takes none" : "; it takes: " + known.joined(separator: ", ") + Suggest.hint(for: name, in: known)))
            }
            try copy.set(param, try param.value(text))
        }
        return copy
    }

    /// Only the variant `name` (or the one unnamed variant), for a request that asks for one output.
    public func restricted(toVariant name: String?) throws -> Pipeline {
        let names = variants.compactMap(\.name)
        guard let name else {
            guard variants.count == 1 else {
                throw PipelineError(.invalidOption, "this pipeline has variants; name one: " + names.joined(separator: ", "))
            }
            return self
        }
        guard let variant = variants.first(where: { $0.name == name }) else {
            throw PipelineError(.notFound, names.isEmpty ? "this pipeline has no variants" :
                "no variant '\(name)'; this pipeline has: " + names.joined(separator: ", ") + Suggest.hint(for: name, in: names))
        }
        var copy = self
        copy.variants = [variant]
        return copy
    }

    /// Sets `param`'s option to `value` wherever its target stage is used.
    mutating func set(_ param: ParamSpec, _ value: OptionValue) throws {
        func changed(_ config: StageConfig) throws -> StageConfig {
            var values = config.options.values
            values[param.option.name] = value
            let made = StageConfig(plugin: config.plugin, options: PluginOptions(values), position: config.position,
                                   optionPositions: config.optionPositions)
            do { try made.validate() } catch let failure as PipelineError {
                throw PipelineError(.invalidOption, "parameter '\(param.name)': \(failure.message)")
            }
            return made
        }
        switch param.target {
        case .decoder:
            decoder = try changed(decoder)
        case .processor(let index):
            let made = try changed(processors[index])
            processors[index] = made
            for v in variants.indices where variants[v].sharedCount > index { variants[v].processors[index] = made }
        case .encoder:
            guard let top = topEncoder else { return }
            let made = try changed(top)
            for v in variants.indices where variants[v].encoder.built === top.built { variants[v].encoder = made }
            topEncoder = made
        case .variantProcessor(let name, let index):
            for v in variants.indices where variants[v].name == name {
                let at = variants[v].sharedCount + index
                variants[v].processors[at] = try changed(variants[v].processors[at])
            }
        case .variantEncoder(let name):
            for v in variants.indices where variants[v].name == name { variants[v].encoder = try changed(variants[v].encoder) }
        }
    }
}
