import Foundation

/// What `pipelinectl serve` changes of a pipeline file before it answers requests with it.
extension Pipeline {
    /// This pipeline as the service and app code (``ImagePipelines``) run it: the http loader
    /// refuses private ranges unless the file allows them in so many words (loopback and
    /// link-local are refused by the loader's own defaults): a request must not reach the
    /// service's neighbours. Output names, the facts sidecar and `output.existing` stay as
    /// written: they apply when outputs are stored, and outputs handed back as values have no
    /// store to collide in.
    public func forService(registry: PluginRegistry) throws -> Pipeline {
        var copy = self
        // The loader of web URLs (a URL scheme, where sources are parsed).
        if let http = registry.loader(forScheme: "https") {
            let configured = loader?.plugin.spec.name == http.spec.name ? loader : nil
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

    /// Whether a variant lets the request's `Accept` header choose its format (its encoder takes
    /// `allow_formats`, as `auto` does).
    public var negotiatesFormat: Bool { variants.contains { $0.encoder.plugin.negotiatesFormat } }

    /// What a request's `Accept` lets an `auto` encoder write: AVIF, WebP and JPEG XL when the
    /// client names them (`image/*` does not count: browsers that decode these formats name them), and
    /// always the formats every client decodes: JPEG, PNG, and GIF when the client accepts it
    /// (`image/gif`, a wildcard, or no `Accept` at all). A client never gets a format it did not
    /// ask for.
    public static func negotiatedFormat(accept: String?) -> NegotiatedFormat {
        guard let accept else { return NegotiatedFormat(avif: false, webp: false, gif: true) }
        var accepted: Set<String> = []
        for range in accept.lowercased().split(separator: ",") {
            let parts = range.split(separator: ";").map { $0.trimmingCharacters(in: .whitespaces) }
            let refused = parts.dropFirst().contains { $0.replacingOccurrences(of: " ", with: "").hasPrefix("q=0")
                && Double($0.split(separator: "=").last ?? "1") == 0 }
            if let type = parts.first, !refused { accepted.insert(type) }
        }
        return NegotiatedFormat(avif: accepted.contains("image/avif"), webp: accepted.contains("image/webp"),
                                gif: !accepted.isDisjoint(with: ["image/gif", "image/*", "*/*"]), jxl: accepted.contains("image/jxl"))
    }

    /// Every `auto` encoder kept to what `format` allows (`allow_formats`), preferring AVIF then
    /// WebP where allowed unless the file sets its own `prefer` (which is narrowed the same way).
    /// JPEG XL is written only where the file's `prefer` names `jxl`.
    public func encoding(_ format: NegotiatedFormat?, registry: PluginRegistry) -> Pipeline {
        guard let format else { return self }
        var copy = self
        for index in copy.variants.indices where copy.variants[index].encoder.plugin.negotiatesFormat {
            let auto = copy.variants[index].encoder
            var values = auto.options.values
            values["allow_formats"] = .list(format.allowed.map { .string($0) })
            if auto.optionPositions["prefer"] == nil { values["prefer"] = .list([.string("avif"), .string("webp")]) }
            copy.variants[index].encoder = StageConfig(plugin: auto.plugin, options: PluginOptions(values), position: auto.position,
                                                       optionPositions: auto.optionPositions)
        }
        return copy
    }
}

extension Plugin {
    /// An encoder that writes whichever of several formats a request allows: its spec declares
    /// `allow_formats` (the list of formats it may write), which the service sets per request.
    public var negotiatesFormat: Bool { slot == .encoder && spec.options.contains { $0.name == "allow_formats" } }
}

/// What a request's `Accept` lets an `auto` encoder write (``Pipeline/negotiatedFormat(accept:)``).
public struct NegotiatedFormat: Hashable, Sendable, CustomStringConvertible {
    /// The client names `image/avif`.
    public var avif: Bool
    /// The client names `image/webp`.
    public var webp: Bool
    /// The client accepts GIF (named, a wildcard, or no `Accept`): a GIF source may stay GIF.
    public var gif: Bool

    /// The client names `image/jxl`.
    public var jxl: Bool

    public init(avif: Bool, webp: Bool, gif: Bool) {
        self.init(avif: avif, webp: webp, gif: gif, jxl: false)
    }

    public init(avif: Bool, webp: Bool, gif: Bool, jxl: Bool) {
        self.avif = avif
        self.webp = webp
        self.gif = gif
        self.jxl = jxl
    }

    /// The formats `auto` may write for this client.
    public var allowed: [String] {
        ["jpeg", "png"] + (gif ? ["gif"] : []) + (webp ? ["webp"] : []) + (avif ? ["avif"] : []) + (jxl ? ["jxl"] : [])
    }

    /// A key for the runner made for this kind of request.
    public var description: String { allowed.joined(separator: "+") }
}
