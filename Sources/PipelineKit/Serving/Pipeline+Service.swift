import Foundation

/// What `pipelinectl serve` changes of a pipeline file before it answers requests with it.
extension Pipeline {
    /// This pipeline as the service runs it: each output named by the source's hash (names never
    /// collide, so nothing is remembered per name), always replaced in the response store, no
    /// facts sidecar, and the http loader refusing
    /// private ranges unless the file allows them in so many words (loopback and link-local are
    /// refused by the loader's own defaults): a request must not reach the service's neighbours.
    public func forService(registry: PluginRegistry) throws -> Pipeline {
        var copy = self
        for index in copy.variants.indices {
            copy.variants[index].template = try NameTemplate(hasVariants ? "{hash}-{variant}.{ext}" : "{hash}.{ext}")
        }
        var output = copy.output.options.values
        output["facts_sidecar"] = .bool(false)
        // The store holds answers on their way out: an entry made from an older version of the
        // source must be replaced, never kept (`existing: keep` would send it).
        output["existing"] = .string(ExistingOutputs.replace.rawValue)
        copy.output.options = PluginOptions(output)
        if let http = registry.plugin("http", in: .loader) {
            let configured = loader?.plugin.spec.name == "http" ? loader : nil
            if configured?.optionPositions["allow_private"] == nil {
                var values = configured?.options.values ?? http.defaultOptions.values
                values["allow_private"] = .bool(false)
                copy.loader = StageConfig(plugin: http, options: PluginOptions(values),
                                          position: configured?.position ?? SourcePosition(line: 1, column: 1),
                                          optionPositions: configured?.optionPositions ?? [:])
            } else if loader == nil || configured != nil {
                copy.loader = configured
            }
        }
        return copy
    }

    /// Every output named under the directory `prefix` (the service keeps the outputs of all its
    /// presets and parameter sets in one store).
    public func named(under prefix: String) throws -> Pipeline {
        var copy = self
        for index in copy.variants.indices {
            copy.variants[index].template = try NameTemplate(prefix + "/" + copy.variants[index].template.text)
        }
        return copy
    }

    /// Whether a variant lets the request's `Accept` header choose its format (its encoder is `auto`).
    public var negotiatesFormat: Bool { variants.contains { $0.encoder.plugin.spec.name == "auto" } }

    /// The format the service makes for an `auto` encoder, from the request's `Accept`: AVIF, then
    /// WebP, when the client names it (`image/*` does not count: browsers that decode these formats
    /// name them); otherwise the formats every client decodes: JPEG, PNG for transparency, GIF
    /// too when the client accepts it (`image/gif`, a wildcard, or no `Accept` at all). A client
    /// never gets a format it did not ask for.
    public static func negotiatedFormat(accept: String?) -> NegotiatedFormat {
        guard let accept else { return .commonOrGIF }
        var accepted: Set<String> = []
        for range in accept.lowercased().split(separator: ",") {
            let parts = range.split(separator: ";").map { $0.trimmingCharacters(in: .whitespaces) }
            let refused = parts.dropFirst().contains { $0.replacingOccurrences(of: " ", with: "").hasPrefix("q=0")
                && Double($0.split(separator: "=").last ?? "1") == 0 }
            if let type = parts.first, !refused { accepted.insert(type) }
        }
        if accepted.contains("image/avif") { return .avif }
        if accepted.contains("image/webp") { return .webp }
        return accepted.isDisjoint(with: ["image/gif", "image/*", "*/*"]) ? .common : .commonOrGIF
    }

    /// Every `auto` encoder made to write `format`: AVIF's or WebP's own encoder (its defaults,
    /// with auto's whole-number `quality` and its `max_bytes`), or `auto` kept to the common
    /// formats (`allow_formats`).
    public func encoding(_ format: NegotiatedFormat?, registry: PluginRegistry) -> Pipeline {
        guard let format else { return self }
        var copy = self
        for index in copy.variants.indices where copy.variants[index].encoder.plugin.spec.name == "auto" {
            let auto = copy.variants[index].encoder
            if let allowed = format.allowedByAuto {
                var values = auto.options.values
                values["allow_formats"] = .list(allowed.map { .string($0) })
                copy.variants[index].encoder = StageConfig(plugin: auto.plugin, options: PluginOptions(values), position: auto.position,
                                                           optionPositions: auto.optionPositions)
                continue
            }
            guard let plugin = registry.plugin(format.rawValue, in: .encoder) else { continue }
            var values = plugin.defaultOptions.values
            for name in ["quality", "max_bytes"] where plugin.spec.options.contains(where: { $0.name == name }) {
                if case .int? = auto.options[name] { values[name] = auto.options[name] }
                if name == "max_bytes", let value = auto.options[name] { values[name] = value }
            }
            copy.variants[index].encoder = StageConfig(plugin: plugin, options: PluginOptions(values), position: auto.position)
        }
        return copy
    }
}

/// What an `auto` encoder makes for a request, from its `Accept` (``Pipeline/negotiatedFormat(accept:)``).
public enum NegotiatedFormat: String, Sendable, CaseIterable {
    /// The client names `image/avif`.
    case avif
    /// The client names `image/webp` (and not AVIF).
    case webp
    /// Neither: JPEG, or PNG for transparency (a PNG source stays PNG).
    case common
    /// Neither, and GIF is accepted too: a GIF source stays GIF.
    case commonOrGIF = "common+gif"

    /// The `allow_formats` of `auto` for the common cases; `nil` when another encoder is used.
    var allowedByAuto: [String]? {
        switch self {
        case .avif, .webp: return nil
        case .common: return ["jpeg", "png"]
        case .commonOrGIF: return ["jpeg", "png", "gif"]
        }
    }
}
