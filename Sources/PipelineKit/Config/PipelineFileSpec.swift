import Foundation

/// One key of a pipeline file: its name, the shape of its value, and a line of documentation.
///
/// ``PipelineFileSpec`` lists them once. The parser accepts exactly these keys, and the JSON
/// Schema (`pipelinectl schema`), `pipelinectl explain` and the reference in `docs/plugins.md`
/// are generated from the same list, as plugin options are from their ``OptionSpec``s.
public struct PipelineFileKey: Sendable {
    /// What a key's value is.
    public enum Shape: Sendable {
        /// A single value, parsed and range-checked like a plugin option.
        case value(OptionSpec)
        /// One plugin of a slot: `name` or `{name: {options}}`; `none` where `allowsNone`.
        case stage(Slot, allowsNone: Bool)
        /// A list of plugins of a slot (`processors:`).
        case stages(Slot)
        /// A map of options, each declared by an ``OptionSpec`` (`output:`).
        case section([OptionSpec])
        /// A map from names to maps of ``PipelineFileSpec/variant`` keys (`variants:`).
        case variants
        /// The pipeline's own tests, read by `PipelineTests` (`tests:`).
        case tests
        /// A map from parameter names to ``PipelineFileSpec/param`` maps (`params:`).
        case params
    }

    public let name: String
    public let shape: Shape
    /// One line for the documentation and the schema.
    public let doc: String
    /// For `.value` keys: a check of the parsed value that replaces the range check; a message when it fails.
    public let check: (@Sendable (OptionValue) -> String?)?

    public init(_ name: String, _ shape: Shape, doc: String, check: (@Sendable (OptionValue) -> String?)? = nil) {
        self.name = name
        self.shape = shape
        self.doc = doc
        self.check = check
    }
}

/// The declaration of a pipeline file's keys: the top level, `output:` and each variant.
public enum PipelineFileSpec {
    /// Pipeline file versions this build understands.
    public static let supportedVersions = [1]

    /// Where an S3-compatible store is and the credentials for it, as the built-in `s3` plugins
    /// took them in 0.4.0.
    @available(*, deprecated, message: "The s3 plugins declare their own settings (Plugins' S3Settings.options); a plugin of another store declares its own options.")
    public static let objectStorage: [OptionSpec] = [
        .string("endpoint", doc: "S3 endpoint URL (default: AWS_ENDPOINT_URL_S3, else AWS_ENDPOINT_URL, else AWS's for the region)."),
        .string("region", doc: "S3 region (default: AWS_REGION, else AWS_DEFAULT_REGION, else us-east-1)."),
        .oneOf("addressing", ["auto", "path", "virtual"], default: "auto", doc: "path, virtual or auto addressing."),
        .string("access_key_id", doc: "S3 access key (default: AWS_ACCESS_KEY_ID)."),
        .string("secret_access_key", doc: "S3 secret key (default: AWS_SECRET_ACCESS_KEY)."),
        .string("session_token", doc: "Session token of temporary S3 credentials (default: AWS_SESSION_TOKEN)."),
    ]

    /// The options of `output:` that every destination takes. The destination (chosen by the
    /// scheme of `dir`: a local directory, `s3://`...) adds its own, declared in its plugin's spec.
    public static let output: [OptionSpec] = [
        .string("dir", doc: "Where outputs are written: a directory, or a URL of a destination such as s3://bucket/prefix (default `out/NAME`, NAME being the pipeline's name).")
            .example("out/thumbnails"),
        .string("name", doc: "File name template: {stem} {hash} {hash8} {index} {ext} {variant} {width} "
                + "(default `\(NameTemplate.defaultText)`, with variants `\(NameTemplate.defaultVariantText)`).")
            .example("\"{stem}-{hash8}.{ext}\""),
        .oneOf("existing", ExistingOutputs.allCases.map(\.rawValue), default: ExistingOutputs.replaceIfChanged.rawValue,
               doc: "An output already at its path: replace_if_changed keeps it only when its fingerprint (what made it: "
                + "the pipeline's stages and options, and the source's validator) is the one this run would write, and "
                + "replaces it otherwise; keep never replaces (a kept output that differs is reported stale and the run exits 1); "
                + "replace always writes."),
        .bool("facts_sidecar", default: false,
              doc: "Write each item's facts (from analyze) as JSON beside its outputs, named by facts_name; listed last in the item's outputs.")
            .example("true"),
        .string("facts_name", doc: "File name template of the facts sidecar: {stem} {hash} {hash8} {index} "
                + "(default `\(NameTemplate.defaultFactsText)`).")
            .example("\"facts/{stem}-{hash8}.json\""),
    ]

    /// Options `output:` once took, and what replaces them.
    public static let retiredOutputOptions: [String: String] = [
        "if_absent": "use 'existing': replace_if_changed (the default) keeps an output that is already there only when "
            + "its fingerprint matches, keep never replaces one",
    ]

    /// The options of `on_failure:` (see ``FailurePolicy``).
    public static let onFailure: [OptionSpec] = [
        .list("kinds", of: .string, default: FailurePolicy.defaultKinds.map { .string($0) },
              doc: "The failures it applies to: error kinds, http_status limited to statuses as http_status:404.")
            .example("[not_found, \"http_status:404\", \"http_status:410\"]"),
        .list("alternatives", of: .string, default: [],
              doc: "Sources tried in order instead of the failed one, as templates: {url} {scheme} {host} {path} {query} {name} {stem} {ext} {dir}.")
            .example("[\"https://backup.example.com{path}\", \"{url}.orig\"]"),
        .path("fallback", access: .readableFile,
              doc: "An image (a path) run through the same processors and encoder when every alternative failed; written under the item's names and marked fallback in the report."),
    ]

    /// The options of `metadata:` (see ``MetadataPolicy``).
    public static let metadata: [OptionSpec] = [
        .list("keep", of: .oneOf(MetadataPolicy.Item.allCases.map(\.rawValue)), default: [.string("icc")],
              doc: "What outputs keep of the source's metadata: icc, exif (camera, lens, exposure, dates, copyright, orientation), "
                + "orientation, dates, copyright, xmp, iptc, all (all but GPS), gps (only when named).")
            .example("[icc, copyright, dates]"),
        .list("drop", of: .oneOf(MetadataPolicy.Item.allCases.map(\.rawValue)), default: [],
              doc: "What to remove from what keep names (it wins).")
            .example("[gps]"),
    ]

    /// The options of `serve:` (see ``ServeConfig``).
    public static let serve: [OptionSpec] = [
        .list("sources", of: .string, default: [],
              doc: "Source prefixes a request may name (hosts, buckets, a local directory); empty: any source the loaders accept.")
            .example("[\"https://img.example.com/\", \"s3://uploads/\"]"),
        .string("cache_control", default: ServeConfig.defaultCacheControl, doc: "The Cache-Control header of answers."),
        .list("breakpoints", of: .int, default: [],
              doc: "The widths Client Hints (Sec-CH-Width, Sec-CH-DPR, Sec-CH-Viewport-Width, Save-Data; Width, DPR) choose among: a request that does not set breakpoint_param gets the declared width its hints ask for, snapped up.")
            .example("[320, 640, 960, 1280, 1920]"),
        .string("breakpoint_param", doc: "The `params:` entry a hinted width sets (required with breakpoints).")
            .example("w"),
        .int("default_width", range: 1...65_535, doc: "The width of a request without hints, snapped to a breakpoint (default: what the pipeline as written makes, snapped; else the largest)."),
        .oneOf("hints", Breakpoints.Mode.allCases.map(\.rawValue), default: "vary",
               doc: "vary: the hinted width at the same URL, with Vary on the hints read; redirect: 307 to the declared width's URL, which caches anywhere; off: hints are not read."),
        .list("cache_tags", of: .oneOf(CacheTags.Kind.allCases.map(\.rawValue)), default: CacheTags.Kind.allCases.map { .string($0.rawValue) },
              doc: "What answers are tagged with, for purges at the CDN: the source (a hash of it), the pipeline, the variant.")
            .example("[source, pipeline]"),
        .list("cache_tag_headers", of: .string, default: [.string("Surrogate-Key"), .string("Cache-Tag")],
              doc: "The headers the tags go in: Surrogate-Key (Varnish xkey, Fastly; space-separated), Cache-Tag (Cloudflare; comma-separated); empty: no tags."),
        .string("cache_tag_prefix", default: "pk-", doc: "Put before every tag, to keep services apart on one CDN."),
    ]

    /// The keys of one entry of `params:` (see ``ParamSpec``).
    public static let param: [OptionSpec] = [
        .string("sets", required: true,
                doc: "The option it sets: processors[N].PLUGIN.OPTION, encoder.PLUGIN.OPTION, decoder.PLUGIN.OPTION, variants.NAME.processors[N].PLUGIN.OPTION or variants.NAME.encoder.PLUGIN.OPTION.")
            .example("processors[0].resize.width"),
        .number("min", doc: "The smallest value accepted (within the option's own range)."),
        .number("max", doc: "The largest value accepted (within the option's own range)."),
        .list("values", of: .string, default: [], doc: "The values accepted, for an option of named values (a subset of its own)."),
        .string("doc", doc: "What the parameter does, for people."),
    ]

    /// The keys of one entry of `variants:`.
    public static let variant: [PipelineFileKey] = [
        PipelineFileKey("processors", .stages(.processor),
                        doc: "Processors run after the pipeline's shared `processors`, for this variant only."),
        PipelineFileKey("encoder", .stage(.encoder, allowsNone: false),
                        doc: "This variant's encoder (default: the top-level `encoder`)."),
        PipelineFileKey("name", .value(.string("name", doc: "")),
                        doc: "This variant's file name template (default: `output.name`, with `-{width}w` before the extension when the variant has `breakpoints`)."),
        PipelineFileKey("breakpoints", .section(BytesBreakpoints.options),
                        doc: "Breakpoints by bytes: one output per width, the widths chosen for each image so that successive files differ by about bytes_step; a srcset manifest is written beside the facts sidecar."),
    ]

    /// The top-level keys, in the order `explain` writes them.
    public static let keys: [PipelineFileKey] = [
        PipelineFileKey("version", .value(.int("version", default: 1, range: 1...1, doc: "")),
                        doc: "Pipeline file version: 1.") { value in
            guard case .int(let version) = value, !supportedVersions.contains(version) else { return nil }
            return "unsupported version \(version); this pipelinectl reads version "
                + supportedVersions.map(String.init).joined(separator: ", ")
        },
        PipelineFileKey("name", .value(.string("name", doc: "")),
                        doc: "The pipeline's name, used in reports and the default output directory (default: the file's name)."),
        PipelineFileKey("description", .value(.string("description", doc: "")), doc: "Free text for people."),
        PipelineFileKey("sources", .value(.list("sources", of: .string, default: [], doc: "")),
                        doc: "Where sources may come from, in `run`, `work` and `serve` (unless `serve.sources` is set): absolute directories, URL prefixes (`https://img.example.com/public/`, `s3://uploads/`) or schemes (`data:`), decided on what the loader opens; empty: anywhere the loaders allow.") { value in
            guard case .list(let items) = value else { return nil }
            let bad = items.map(\.description).filter { SourceBoundary.root($0) == nil }
            return bad.isEmpty ? nil : "sources: '\(bad[0])' is not an absolute directory (/srv/images/), a URL prefix (https://img.example.com/public/, s3://bucket/) or a scheme (data:)"
        },
        PipelineFileKey("loader", .stage(.loader, allowsNone: false),
                        doc: "Options for the loader of the sources' scheme (default: every loader with its defaults)."),
        PipelineFileKey("data_cache", .stage(.dataCache, allowsNone: true),
                        doc: "Where downloaded bytes are kept between runs (default: none)."),
        PipelineFileKey("decoder", .stage(.decoder, allowsNone: false),
                        doc: "Turns bytes into pixels (default: `imagemagick` with its defaults)."),
        PipelineFileKey("processors", .stages(.processor), doc: "Processors run in order on every source."),
        PipelineFileKey("image_cache", .stage(.imageCache, allowsNone: true),
                        doc: "Where processed pixels are kept between runs (default: none)."),
        PipelineFileKey("encoder", .stage(.encoder, allowsNone: false),
                        doc: "Turns pixels into the output file; required unless every variant has its own."),
        PipelineFileKey("output", .section(output),
                        doc: "Where and under which names outputs are written; also takes the options of the destination `dir` names."),
        PipelineFileKey("metadata", .section(metadata),
                        doc: "Which of the source's metadata (ICC, EXIF, GPS, XMP, IPTC) the outputs keep; default: the ICC profile only."),
        PipelineFileKey("on_failure", .section(onFailure),
                        doc: "What to do for an item whose source fails: alternative sources, then a fallback image."),
        PipelineFileKey("variants", .variants,
                        doc: "Several outputs per source, each with its own processors, encoder and name."),
        PipelineFileKey("tests", .tests,
                        doc: "Checks run by `pipelinectl test`: an input, and what the output must be."),
        PipelineFileKey("params", .params,
                        doc: "What a request to `pipelinectl serve` may set, each a stage option checked by its own spec."),
        PipelineFileKey("serve", .section(serve),
                        doc: "How `pipelinectl serve` serves this pipeline: the sources it accepts, the Cache-Control of answers, the widths Client Hints choose among, the cache tags."),
        PipelineFileKey("purge", .stages(.purger),
                        doc: "The CDNs and caches in front of `serve` that `pipelinectl cache purge` also purges (Varnish, CloudFront, Cloudflare, Fastly)."),
        PipelineFileKey("notify", .stages(.notifier),
                        doc: "Where `run` and `work` announce each finished item (a webhook, SQS, SNS): \"ready\" events with its outputs, facts and srcset manifest, delivered at least once."),
    ]

    /// The top-level key called `name`.
    public static func key(_ name: String) -> PipelineFileKey? { keys.first { $0.name == name } }

    /// The top-level key names.
    public static var keyNames: [String] { keys.map(\.name) }

    /// The keys as a Markdown section for the reference.
    public static func markdown() -> String {
        var out = "\n## Pipeline file\n\nTop-level keys:\n\n| key | value | description |\n|---|---|---|\n"
        for key in keys { out += "| `\(key.name)` | \(shapeText(key.shape)) | \(key.doc) |\n" }
        out += "\nEach entry of `variants` takes:\n\n| key | value | description |\n|---|---|---|\n"
        for key in variant { out += "| `\(key.name)` | \(shapeText(key.shape)) | \(key.doc) |\n" }
        out += "\n`output` takes these, and the options of the destination its `dir` names (see destination below):\n\n| option | type | default | description |\n|---|---|---|---|\n"
        for option in output {
            let example = option.example.map { " Example: `\($0)`." } ?? ""
            out += "| `\(option.name)` | \(PluginReference.typeText(option.kind)) | \(option.defaultText.map { "`\($0)`" } ?? "") | \(option.doc)\(example) |\n"
        }
        return out
    }

    static func shapeText(_ shape: PipelineFileKey.Shape) -> String {
        switch shape {
        case .value(let option): return option.kind.name
        case .stage(let slot, let allowsNone): return slot.article + (allowsNone ? " or `none`" : "")
        case .stages(let slot): return "list of \(slot.article.split(separator: " ").dropFirst().joined(separator: " "))s"
        case .section: return "map of options"
        case .variants: return "map of variants"
        case .tests: return "list of tests"
        case .params: return "map of parameters"
        }
    }
}
