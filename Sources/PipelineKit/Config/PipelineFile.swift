import Foundation
import Yams

/// Reading pipeline files: finding them by name, parsing and validating them against a registry.
public enum PipelineFile {
    /// The top-level keys a pipeline file may have (declared in ``PipelineFileSpec``).
    public static var topLevelKeys: [String] { PipelineFileSpec.keyNames }

    /// Finds a pipeline: the path as given; else `pipelines/NAME`; else `pipelines/NAME.yaml`.
    public static func locate(_ name: String, in directory: String = FileManager.default.currentDirectoryPath) -> String? {
        let fm = FileManager.default
        var isDir: ObjCBool = false
        for candidate in [name, "pipelines/\(name)", "pipelines/\(name).yaml"] {
            let full = candidate.hasPrefix("/") ? candidate : directory + "/" + candidate
            if fm.fileExists(atPath: full, isDirectory: &isDir), !isDir.boolValue { return candidate }
        }
        return nil
    }

    /// Reads and validates the pipeline at `path`.
    /// - Parameter machineFacts: how the facts of this machine are reported (a directory to write
    ///   that cannot be, a file to read that cannot be, ``MachineCheck``): errors by default, since
    ///   a run here would fail on them; `pipelinectl validate` makes them warnings, as a file is
    ///   often validated on another host than the one it runs on.
    /// - Throws: ``PipelineValidationError`` with every problem found.
    public static func load(path: String, registry: PluginRegistry,
                            environment: [String: String] = ProcessInfo.processInfo.environment,
                            machineFacts: Diagnostic.Severity = .error) throws -> Pipeline {
        guard let data = FileManager.default.contents(atPath: path) else {
            throw PipelineValidationError(
                diagnostics: [Diagnostic(file: path, line: 1, column: 1, message: "cannot read the pipeline file")],
                source: nil)
        }
        guard let text = String(data: data, encoding: .utf8) else {
            throw PipelineValidationError(
                diagnostics: [Diagnostic(file: path, line: 1, column: 1, message: "the pipeline file is not UTF-8 text")],
                source: nil)
        }
        let directory = (path as NSString).deletingLastPathComponent
        var (pipeline, diagnostics) = parse(text: text, file: path, registry: registry, environment: environment,
                                            baseDirectory: directory.isEmpty ? "." : directory)
        if let found = pipeline { diagnostics += MachineCheck.diagnostics(for: found, severity: machineFacts) }
        if var pipeline, !diagnostics.contains(where: { $0.severity == .error }) {
            pipeline.warnings = diagnostics
            return pipeline
        }
        throw PipelineValidationError(diagnostics: diagnostics, source: text)
    }

    /// Parses and validates pipeline `text`. Returns the pipeline when there is no error, and every
    /// diagnostic found (errors and warnings), in file order.
    /// - Parameter baseDirectory: the pipeline file's directory: a relative path to a file the
    ///   pipeline reads (an option of `access: .readableFile`, such as a watermark or a fallback
    ///   image) is taken relative to it, and given to the stage as an absolute path. `nil` (text
    ///   from no file): relative to the working directory.
    public static func parse(text: String, file: String, registry: PluginRegistry,
                             environment: [String: String] = ProcessInfo.processInfo.environment,
                             baseDirectory: String? = nil) -> (Pipeline?, [Diagnostic]) {
        var parser = PipelineParser(file: file, text: text, registry: registry, environment: environment)
        parser.baseDirectory = baseDirectory
        let pipeline = parser.run()
        let sorted = parser.diagnostics.sorted { ($0.line, $0.column) < ($1.line, $1.column) }
        guard var valid = pipeline, !sorted.contains(where: { $0.severity == .error }) else { return (nil, sorted) }
        valid.warnings = sorted
        return (valid, sorted)
    }
}

/// One pass over a pipeline file's YAML tree, collecting every problem it finds.
struct PipelineParser {
    let file: String
    let text: String
    let registry: PluginRegistry
    let environment: [String: String]
    var diagnostics: [Diagnostic] = []
    /// Positions of the options of the stage parsed last.
    var lastOptionPositions: [String: SourcePosition] = [:]
    /// The pipeline file's directory (``PipelineFile/parse(text:file:registry:environment:baseDirectory:)``).
    var baseDirectory: String?

    /// A file the pipeline reads, named relative to the pipeline file, as an absolute path.
    func resolved(_ value: OptionValue, _ option: OptionSpec) -> OptionValue {
        if case .record(let fields) = option.kind, case .map(var entries) = value {
            for field in fields { if let entry = entries[field.name] { entries[field.name] = resolved(entry, field) } }
            return .map(entries)
        }
        guard option.access == .readableFile, let base = baseDirectory, case .string(let path) = value,
              !path.isEmpty, !path.hasPrefix("/"), !path.hasPrefix("~"), Source.urlScheme(of: path) == nil else { return value }
        return .string(URL(fileURLWithPath: base).appendingPathComponent(path).standardizedFileURL.path)
    }

    init(file: String, text: String, registry: PluginRegistry, environment: [String: String]) {
        self.file = file
        self.text = text
        self.registry = registry
        self.environment = environment
    }

    /// Values whose interpolation failed (already reported).
    var uninterpolated: Set<SourcePosition> = []
    /// Where `serve.breakpoints` is, and whether `serve.default_width` was given: checked once
    /// `params:` is read.
    var breakpointsAt = SourcePosition(line: 1, column: 1)
    var breakpointsDefaultGiven = false

    mutating func error(_ node: Node?, _ message: String) {
        let mark = node?.mark
        if let mark, uninterpolated.contains(SourcePosition(line: mark.line, column: mark.column)) { return }
        diagnostics.append(Diagnostic(file: file, line: mark?.line ?? 1, column: mark?.column ?? 1, message: message))
    }

    mutating func error(at position: SourcePosition, _ message: String) {
        diagnostics.append(Diagnostic(file: file, line: position.line, column: position.column, message: message))
    }

    mutating func run() -> Pipeline? {
        guard let (root, top) = composed() else { return nil }
        let fields = topLevelFields(top)
        let values = topLevelValues(fields)
        let name = values.string("name") ?? URL(fileURLWithPath: file).deletingPathExtension().lastPathComponent
        let stages = stages(fields, root: root)
        let hasVariants = fields["variants"] != nil
        let output = outputConfig(fields["output"]?.value, pipelineName: name, hasVariants: hasVariants)
        var variants: [Variant] = []
        if let (_, node) = fields["variants"], let output {
            variants = parseVariants(node, shared: stages.processors, encoder: stages.encoder, encoderMissing: fields["encoder"] == nil,
                                     output: output)
        } else if let encoder = stages.encoder, let output {
            variants = [Variant(name: nil, processors: stages.processors, sharedCount: stages.processors.count, encoder: encoder,
                                template: output.name, position: nil)]
            if output.name.placeholdersUsed.contains("width") {
                error(at: output.namePosition ?? SourcePosition(line: 1, column: 1),
                      "output.name: {width} names the widths of breakpoints by bytes, which a variant declares (variants.NAME.breakpoints)")
            }
        }
        let onFailure = fields["on_failure"].flatMap { failurePolicy($0.value) }
        let metadata = fields["metadata"].flatMap { metadataPolicy($0.value, decoder: stages.decoder) }

        guard let decoder = stages.decoder, let output, !variants.isEmpty else { return nil }
        var pipeline = Pipeline(file: file, version: values.int("version") ?? 1, name: name, description: values.string("description") ?? "",
                                loader: stages.loader, dataCache: stages.dataCache, decoder: decoder, processors: stages.processors,
                                imageCache: stages.imageCache, variants: variants, output: output, hasVariants: hasVariants)
        pipeline.onFailure = onFailure
        pipeline.sources = (values.list("sources") ?? []).map(\.description)
        pipeline.topEncoder = stages.encoder
        if let field = fields["serve"] { pipeline.serve = serveConfig(field.value) }
        if let field = fields["params"] { pipeline.params = paramSpecs(field.value, pipeline: pipeline) }
        checkBreakpoints(&pipeline)
        pipeline.purgers = stageList(fields["purge"]?.value, slot: .purger, path: "purge") ?? []
        pipeline.notifiers = stageList(fields["notify"]?.value, slot: .notifier, path: "notify") ?? []
        pipeline.metadata = metadata
        return pipeline
    }

    /// The file's YAML, `${VAR}`s resolved, as the map at its top; `nil` (and a diagnostic) when
    /// it is not YAML, is empty, or is not a map.
    mutating func composed() -> (root: Node, top: Node.Mapping)? {
        let composed: Node
        do {
            guard let node = try Yams.compose(yaml: text) else {
                error(nil, "the pipeline file is empty; expected a map with at least 'encoder'")
                return nil
            }
            composed = node
        } catch let yamlError as YamlError {
            reportYAML(yamlError)
            return nil
        } catch {
            self.error(nil, "invalid YAML: \(error)")
            return nil
        }
        var interpolator = Interpolator(environment: environment)
        let root = interpolator.resolve(composed)
        uninterpolated = interpolator.failed
        for (mark, message) in interpolator.problems {
            diagnostics.append(Diagnostic(file: file, line: mark?.line ?? 1, column: mark?.column ?? 1, message: message))
        }
        guard case .mapping(let top) = root else {
            error(root, "expected a map of pipeline settings at the top level, got \(OptionParsing.describe(root))")
            return nil
        }
        return (root, top)
    }

    /// The top-level keys the spec declares, by name; an unknown one is a diagnostic with the
    /// nearest known name.
    mutating func topLevelFields(_ top: Node.Mapping) -> [String: (key: Node, value: Node)] {
        var fields: [String: (key: Node, value: Node)] = [:]
        for (key, value) in top {
            guard let name = key.scalar?.string else {
                error(key, "expected a plain key")
                continue
            }
            guard PipelineFileSpec.key(name) != nil else {
                error(key, "unknown top-level key '\(name)'" + Suggest.hint(for: name, in: PipelineFileSpec.keyNames))
                continue
            }
            fields[name] = (key, value)
        }
        return fields
    }

    /// The stages the file names at its top level (`nil` where absent or wrong, with a diagnostic).
    struct TopStages {
        var loader, dataCache, imageCache, decoder, encoder: StageConfig?
        var processors: [StageConfig] = []
    }

    mutating func stages(_ fields: [String: (key: Node, value: Node)], root: Node) -> TopStages {
        var stages = TopStages()
        stages.loader = optionalStage(fields["loader"], slot: .loader, path: "loader")
        stages.dataCache = optionalStage(fields["data_cache"], slot: .dataCache, path: "data_cache")
        stages.imageCache = optionalStage(fields["image_cache"], slot: .imageCache, path: "image_cache")
        if let field = fields["decoder"] {
            stages.decoder = stage(field.value, slot: .decoder, path: "decoder")
        } else if let plugin = registry.firstRegistered(in: .decoder) {
            stages.decoder = StageConfig(plugin: plugin, options: plugin.defaultOptions, position: SourcePosition(line: 1, column: 1))
        } else {
            error(root, "missing 'decoder'")
        }
        stages.processors = processorList(fields["processors"]?.value, path: "processors") ?? []
        if let field = fields["encoder"] {
            stages.encoder = stage(field.value, slot: .encoder, path: "encoder")
        } else if fields["variants"] == nil {
            error(root, "missing 'encoder'; expected one of: "
                + registry.plugins(in: .encoder).map(\.spec.name).joined(separator: ", "))
        }
        return stages
    }

    /// The top-level keys declared as single values (`version`, `name`, ...), parsed and checked.
    private mutating func topLevelValues(_ fields: [String: (key: Node, value: Node)]) -> PluginOptions {
        var values: [String: OptionValue] = [:]
        for key in PipelineFileSpec.keys {
            guard case .value(let option) = key.shape, let (_, node) = fields[key.name] else { continue }
            switch OptionParsing.parse(node, kind: option.kind, name: key.name) {
            case .success(let parsed):
                if let problem = key.check.flatMap({ $0(parsed) }) ?? OptionParsing.checkRange(parsed, spec: option) {
                    error(node, problem)
                } else {
                    values[key.name] = resolved(parsed, option)
                }
            case .failure(let problem):
                error(node, problem.message)
            }
        }
        return PluginOptions(values)
    }

    /// A `processors:` list; `nil` when it is malformed (reported).
    private mutating func processorList(_ node: Node?, path: String) -> [StageConfig]? {
        stageList(node, slot: .processor, path: path)
    }

    /// A list of stages of one slot (`processors:`, `purge:`); `nil` when it is malformed (reported).
    private mutating func stageList(_ node: Node?, slot: Slot, path: String) -> [StageConfig]? {
        guard let node else { return [] }
        switch node {
        case .sequence(let list):
            return list.enumerated().compactMap { stage($0.element, slot: slot, path: "\(path).\($0.offset)") }
        case .scalar(let s) where s.isNull:
            return []
        default:
            error(node, "expected a list of \(slot.rawValue)s for '\(path)', got \(OptionParsing.describe(node))")
            return nil
        }
    }

    /// `variants: {NAME: {processors: [...], encoder: ..., name: TEMPLATE}}`.
    private mutating func parseVariants(_ node: Node, shared: [StageConfig], encoder: StageConfig?, encoderMissing: Bool,
                                        output: OutputConfig) -> [Variant] {
        guard case .mapping(let mapping) = node, mapping.count > 0 else {
            error(node, "expected a map from variant names to their processors and encoder, got \(OptionParsing.describe(node))")
            return []
        }
        var variants: [Variant] = []
        var templates: [String: String] = [:]
        for (key, value) in mapping {
            guard let name = key.scalar?.string, !name.isEmpty,
                  name.allSatisfy({ $0.isLetter || $0.isNumber || $0 == "_" || $0 == "-" }) else {
                error(key, "a variant name may use letters, digits, '_' and '-' only")
                continue
            }
            let at = key.mark.map { SourcePosition(line: $0.line, column: $0.column) }
            guard let fields = variantFields(value, name: name, encoder: encoder, template: output.name) else { continue }
            let (own, variantEncoder, namesEncoder, template, templateNode, byBytes) =
                (fields.own, fields.encoder, fields.namesEncoder, fields.template, fields.templateNode, fields.byBytes)
            guard let finalEncoder = variantEncoder else {
                // One mistake, one error: an encoder that was named but is invalid was reported already.
                if encoderMissing, !namesEncoder { error(key, "variants.\(name): no 'encoder', and there is no top-level 'encoder'") }
                continue
            }
            if mapping.count > 1, !template.parts.contains(.placeholder("variant")) {
                let rendered = template.text
                if let other = templates[rendered] {
                    let target = templateNode ?? key
                    error(target, "variants.\(name): variants '\(other)' and '\(name)' would write to the same names ('\(rendered)'); add {variant} to output.name or give each variant its own 'name'")
                }
                templates[rendered] = name
            }
            var variant = Variant(name: name, processors: shared + own, sharedCount: shared.count,
                                  encoder: finalEncoder, template: template, position: at)
            if let (breakpoints, node) = byBytes {
                setBytesBreakpoints(breakpoints, on: &variant, at: node, ownName: templateNode)
            } else if template.placeholdersUsed.contains("width") {
                let message = "variants.\(name): {width} names the widths of breakpoints by bytes; this variant has no 'breakpoints'"
                if let templateNode { error(templateNode, message) } else if let place = output.namePosition { error(at: place, message) } else { error(key, message) }
            }
            variants.append(variant)
        }
        return variants
    }

    /// What one entry of `variants:` sets (each field at what the variant inherits when not).
    private struct VariantFields {
        var own: [StageConfig] = []
        var encoder: StageConfig?
        var namesEncoder = false
        var template: NameTemplate
        var templateNode: Node?
        var byBytes: (BytesBreakpoints, Node)?
    }

    /// The keys of one variant, each parsed and reported; `nil` when the entry is not a map.
    private mutating func variantFields(_ value: Node, name: String, encoder: StageConfig?, template: NameTemplate) -> VariantFields? {
        var made = VariantFields(encoder: encoder, template: template)
        guard case .mapping(let fields) = value else {
            if value.scalar?.isNull ?? false { return made }
            error(value, "expected a map with 'processors', 'encoder' and 'name' for variant '\(name)'")
            return nil
        }
        for (fieldKey, fieldValue) in fields {
            switch fieldKey.scalar?.string ?? "" {
            case "breakpoints": made.byBytes = bytesBreakpoints(fieldValue, variant: name).map { ($0, fieldKey) }
            case "processors": made.own = processorList(fieldValue, path: "variants.\(name).processors") ?? []
            case "encoder":
                made.namesEncoder = true
                made.encoder = stage(fieldValue, slot: .encoder, path: "variants.\(name).encoder")
            case "name":
                made.templateNode = fieldValue
                do { made.template = try NameTemplate(fieldValue.scalar?.string ?? "") } catch let failure as PipelineError {
                    error(fieldValue, "variants.\(name).name: " + failure.message)
                } catch {}
            default:
                let word = fieldKey.scalar?.string ?? ""
                error(fieldKey, "unknown key '\(word)' in variant '\(name)'" + Suggest.hint(for: word, in: PipelineFileSpec.variant.map(\.name)))
            }
        }
        return made
    }

    /// `breakpoints:` of a variant: breakpoints by bytes, options checked like a plugin's.
    private mutating func bytesBreakpoints(_ node: Node, variant: String) -> BytesBreakpoints? {
        let path = "variants.\(variant).breakpoints"
        let at = SourcePosition(line: node.mark?.line ?? 1, column: node.mark?.column ?? 1)
        guard case .mapping = node else {
            error(node, "\(path): expected a map with min_width, max_width, bytes_step and max_images, got \(OptionParsing.describe(node))"
                + " (the widths `serve` snaps hints to are serve.breakpoints)")
            return nil
        }
        guard let options = parseOptions(node, options: BytesBreakpoints.options, exclusive: [], label: path, at: at, path: path) else {
            return nil
        }
        do { return try BytesBreakpoints(options: options) } catch let failure as PipelineError {
            error(at: lastOptionPositions["min_width"] ?? at, "\(path): " + failure.message)
        } catch {}
        return nil
    }

    /// Makes `variant` one of breakpoints by bytes: its chain ends by scaling to `max_width` (so
    /// the decode can shrink on load), each width is scaled from there by the registry's `resize`,
    /// and its names carry `{width}` (added before the extension when the name is inherited).
    private mutating func setBytesBreakpoints(_ breakpoints: BytesBreakpoints, on variant: inout Variant, at node: Node, ownName: Node?) {
        let name = variant.name ?? ""
        guard let resize = registry.plugin("resize", in: .processor) else {
            error(node, "variants.\(name).breakpoints: breakpoints by bytes scale with the 'resize' processor, which this registry does not have")
            return
        }
        if !variant.template.placeholdersUsed.contains("width") {
            if let ownName {
                error(ownName, "variants.\(name).name: breakpoints by bytes make one output per width; put {width} in the name "
                    + "(for example '{stem}-{hash8}-{width}w.{ext}')")
                return
            }
            let text = variant.template.text
            let withWidth = text.hasSuffix(".{ext}") ? String(text.dropLast(6)) + "-{width}w.{ext}" : text + "-{width}w"
            guard let template = try? NameTemplate(withWidth) else { return }
            variant.template = template
        }
        let position = SourcePosition(line: node.mark?.line ?? 1, column: node.mark?.column ?? 1)
        let scaler = StageConfig.scaling(resize, position: position)
        variant.processors.append(scaler.atWidth(breakpoints.maxWidth))
        variant.byBytes = breakpoints
        variant.scaler = scaler
    }

    /// A cache or loader slot: absent, `none`, or a stage.
    private mutating func optionalStage(_ field: (key: Node, value: Node)?, slot: Slot, path: String) -> StageConfig? {
        guard let field else { return nil }
        if let scalar = field.value.scalar, scalar.string == "none" || scalar.isNull { return nil }
        return stage(field.value, slot: slot, path: path)
    }

    /// `name` or `{name: {options}}` resolved against the registry. `path` is where it sits in the
    /// file (`loader`, `processors.2`, `variants.small.encoder`); messages name their full key path.
    private mutating func stage(_ node: Node, slot: Slot, path: String) -> StageConfig? {
        let nameNode: Node
        var optionsNode: Node?
        switch node {
        case .scalar:
            nameNode = node
        case .mapping(let mapping):
            guard mapping.count == 1, let pair = mapping.first else {
                error(node, "\(path): expected one plugin name as the only key of \(slot.article), got \(mapping.count) keys")
                return nil
            }
            nameNode = pair.key
            optionsNode = pair.value
        default:
            error(node, "\(path): expected \(slot.article) name, or a map from its name to its options, got \(OptionParsing.describe(node))")
            return nil
        }
        guard let name = nameNode.scalar?.string else {
            error(nameNode, "\(path): expected \(slot.article) name")
            return nil
        }
        let position = SourcePosition(line: nameNode.mark?.line ?? 1, column: nameNode.mark?.column ?? 1)
        guard let plugin = registry.plugin(name, in: slot) else {
            let valid = registry.plugins(in: slot).map(\.spec.name)
            let slotLabel = slot.rawValue.replacingOccurrences(of: "_", with: " ")
            if let other = registry.slots(of: name).first {
                error(nameNode, "\(path): '\(name)' is \(other.article); the \(slotLabel) slot takes one of: "
                    + valid.joined(separator: ", "))
            } else {
                error(nameNode, "\(path): unknown \(slotLabel) '\(name)'" + Suggest.hint(for: name, in: valid))
            }
            return nil
        }
        guard let options = parseOptions(optionsNode, plugin: plugin, at: position, path: "\(path).\(name)") else { return nil }
        var config = StageConfig(plugin: plugin, options: options, position: position, optionPositions: lastOptionPositions)
        config.keyPath = "\(path).\(name)"
        if let advice = plugin.spec.advice?(options, Set(lastOptionPositions.keys)) {
            diagnostics.append(Diagnostic(.warning, file: file, line: position.line, column: position.column,
                                          message: "\(path).\(name): \(advice)"))
        }
        do {
            try config.validate()
        } catch let failure as PipelineError {
            error(at: position, "\(path).\(name): \(failure.message)")
            return nil
        } catch {
            self.error(at: position, "\(path).\(name): \(error)")
            return nil
        }
        return config
    }

    private mutating func parseOptions(_ node: Node?, plugin: Plugin, at position: SourcePosition, path: String) -> PluginOptions? {
        let label = "\(plugin.slot.rawValue.replacingOccurrences(of: "_", with: " ")) '\(plugin.spec.name)'"
        return parseOptions(node, options: plugin.spec.options, exclusive: plugin.spec.exclusive, label: label, at: position,
                            retired: plugin.spec.retired, path: path)
    }

    /// A map of options declared by `specs` (a plugin's, or a section of the file such as `output`):
    /// every value parsed and range-checked, defaults filled in; `nil` when anything was wrong (reported).
    /// `path` is the map's key path in the file (`loader.http`, `output`): every message names the
    /// option by its full path (`loader.http.timeout`).
    mutating func parseOptions(_ node: Node?, options specs: [OptionSpec], exclusive: [[String]], label: String,
                                       at position: SourcePosition, retired: [String: String] = [:],
                                       elsewhere: [String: String] = [:], path: String) -> PluginOptions? {
        var values: [String: OptionValue] = [:]
        lastOptionPositions = [:]
        var ok = true
        if let node {
            switch node {
            case .mapping(let mapping):
                for (key, value) in mapping {
                    ok = parseOption(key, value, specs: specs, retired: retired, elsewhere: elsewhere, path: path, into: &values) && ok
                }
                ok = checkExclusive(mapping, exclusive, path: path) && ok
            case .scalar(let s) where s.isNull:
                break
            default:
                error(node, "\(path): expected a map of options, got \(OptionParsing.describe(node))")
                return nil
            }
        }
        for option in specs where values[option.name] == nil {
            if let value = option.defaultValue {
                values[option.name] = value
            } else if option.required {
                error(at: position, "missing required option '\(path).\(option.name)'")
                ok = false
            }
        }
        return ok ? PluginOptions(values) : nil
    }

    /// One `key: value` of an options map, parsed by its spec and range-checked into `values`;
    /// whether it was good (a removed, unknown or bad option is reported).
    private mutating func parseOption(_ key: Node, _ value: Node, specs: [OptionSpec], retired: [String: String],
                                      elsewhere: [String: String], path: String, into values: inout [String: OptionValue]) -> Bool {
        func full(_ option: String) -> String { "\(path).\(option)" }
        guard let optionName = key.scalar?.string else {
            error(key, "expected an option name")
            return false
        }
        if let replacement = retired[optionName] {
            error(key, "option '\(full(optionName))' was removed: \(replacement)")
            return false
        }
        guard let option = specs.first(where: { $0.name == optionName }) else {
            let names = specs.map(\.name)
            let hint = elsewhere[optionName].map { "; \($0)" } ?? (names.isEmpty ? "; it takes no options"
                : Suggest.hint(for: optionName, in: names))
            error(key, "unknown option '\(full(optionName))'\(hint)")
            return false
        }
        if let mark = value.mark { lastOptionPositions[optionName] = SourcePosition(line: mark.line, column: mark.column) }
        switch OptionParsing.parse(value, kind: option.kind, name: full(optionName)) {
        case .success(let parsed):
            if let problem = OptionParsing.checkRange(parsed, spec: option, name: full(optionName)) {
                error(value, problem)
                return false
            }
            values[optionName] = resolved(parsed, option)
            return true
        case .failure(let problem):
            error(value, problem.message)
            return false
        }
    }

    /// Options of one `exclusive` group set together: each group is reported once.
    private mutating func checkExclusive(_ mapping: Node.Mapping, _ exclusive: [[String]], path: String) -> Bool {
        var ok = true
        for group in exclusive {
            let set = mapping.filter { group.contains($0.key.scalar?.string ?? "") }
            if set.count > 1 {
                let names = set.map { "'\(path).\($0.key.scalar?.string ?? "")'" }
                error(set[set.index(after: set.startIndex)].key, "\(names.joined(separator: " and ")) exclude each other; set only one")
                ok = false
            }
        }
        return ok
    }

    /// `on_failure:`, its options declared by ``PipelineFileSpec/onFailure`` and checked as
    /// ``FailurePolicy`` reads them (the fallback file is read when the run starts).
    private mutating func failurePolicy(_ node: Node) -> PluginOptions? {
        let at = node.mark.map { SourcePosition(line: $0.line, column: $0.column) } ?? SourcePosition(line: 1, column: 1)
        guard let options = parseOptions(node, options: PipelineFileSpec.onFailure, exclusive: [], label: "'on_failure'", at: at, path: "on_failure") else {
            return nil
        }
        let positions = lastOptionPositions
        let problems = FailurePolicy.problems(options)
        for (option, message) in problems { error(at: option.flatMap { positions[$0] } ?? at, message) }
        return problems.isEmpty ? options : nil
    }

    /// `metadata:`, its options declared by ``PipelineFileSpec/metadata``. Warns when the decoder
    /// leaves pixels as stored (`auto_orient: false`) and the orientation is not kept: outputs of
    /// rotated sources would then be shown sideways.
    private mutating func metadataPolicy(_ node: Node, decoder: StageConfig?) -> PluginOptions? {
        let at = node.mark.map { SourcePosition(line: $0.line, column: $0.column) } ?? SourcePosition(line: 1, column: 1)
        guard let options = parseOptions(node, options: PipelineFileSpec.metadata, exclusive: [], label: "'metadata'", at: at, path: "metadata"),
              let policy = try? MetadataPolicy(options: options) else { return nil }
        if decoder?.options.bool("auto_orient") == false, !policy.kept.contains(.orientation) {
            diagnostics.append(Diagnostic(.warning, file: file, line: at.line, column: at.column,
                                          message: "metadata.keep: the decoder's auto_orient is false and metadata does not keep orientation: "
                                            + "outputs of rotated sources will be shown as stored; add orientation to keep"))
        }
        return options
    }

    /// `output:`, its options declared by ``PipelineFileSpec/output`` and by the destination plugin
    /// that `dir`'s scheme names (a local directory, `s3://`...).
    private mutating func outputConfig(_ node: Node?, pipelineName: String, hasVariants: Bool) -> OutputConfig? {
        let at = node?.mark.map { SourcePosition(line: $0.line, column: $0.column) } ?? SourcePosition(line: 1, column: 1)
        var dirNode: Node?
        if case .mapping(let mapping)? = node { dirNode = mapping.first { $0.key.scalar?.string == "dir" }?.value }
        let written = dirNode?.scalar?.string
        let destination: Plugin
        do { destination = try registry.destinationPlugin(for: written ?? "out") } catch let failure as PipelineError {
            error(dirNode ?? node, "output.dir: " + failure.message)
            return nil
        } catch { return nil }
        let label = Source.urlScheme(of: written ?? "") == nil ? "'output'" : "'output' (destination '\(destination.spec.name)')"
        guard let options = parseOptions(node, options: PipelineFileSpec.output + destination.spec.options,
                                         exclusive: destination.spec.exclusive, label: label, at: at,
                                         retired: PipelineFileSpec.retiredOutputOptions,
                                         elsewhere: otherDestinationOptions(than: destination), path: "output") else {
            return nil
        }
        let positions = lastOptionPositions
        do { try destination.check?(options) } catch let failure as PipelineError {
            error(at: at, "output (destination '\(destination.spec.name)'): " + failure.message)
            return nil
        } catch {}
        var dir = options.string("dir") ?? "out/" + NameTemplate.safe(pipelineName)
        if dir.isEmpty {
            error(at: positions["dir"] ?? at, "'output.dir' may not be empty")
            dir = "out/" + NameTemplate.safe(pipelineName)
        }
        let templateText = options.string("name") ?? (hasVariants ? NameTemplate.defaultVariantText : NameTemplate.defaultText)
        if let factsText = options.string("facts_name") {
            do {
                let facts = try NameTemplate(factsText)
                if let bad = facts.placeholdersUsed.first(where: { $0 == "ext" || $0 == "variant" || $0 == "width" }) {
                    error(at: positions["facts_name"] ?? at, "output.facts_name: {\(bad)} has no value for the facts sidecar (one per item, always .json)")
                }
            } catch let failure as PipelineError {
                error(at: positions["facts_name"] ?? at, "output.facts_name: " + failure.message)
            } catch {}
        }
        do {
            let template = try NameTemplate(templateText)
            if template.mayCollide, let at = positions["name"] {
                diagnostics.append(Diagnostic(.warning, file: file, line: at.line, column: at.column,
                    message: "output.name: '\(templateText)' can give two sources the same name (the second fails as output_collision); add {hash}, {hash8} or {index}"))
            }
            var effective = options.values
            effective["dir"] = .string(dir)
            effective["name"] = .string(templateText)
            return OutputConfig(dir: dir, name: template, options: PluginOptions(effective),
                                dirPosition: positions["dir"], namePosition: positions["name"])
        } catch let failure as PipelineError {
            error(at: positions["name"] ?? at, "output.name: " + failure.message)
            return nil
        } catch {
            return nil
        }
    }

    /// Options of the other destinations, by name: the plugin they belong to, to say where an
    /// option set for another kind of `dir` belongs.
    private func otherDestinationOptions(than destination: Plugin) -> [String: String] {
        var owners: [String: String] = [:]
        for plugin in registry.plugins(in: .destination) where plugin.spec.name != destination.spec.name {
            for option in plugin.spec.options where !destination.spec.options.contains(where: { $0.name == option.name }) {
                let schemes = plugin.schemes.map { $0.isEmpty ? "a local directory" : "\($0)://" }.joined(separator: " or ")
                owners[option.name] = "'\(option.name)' is an option of the \(plugin.spec.name) destination, for a dir of \(schemes)"
            }
        }
        return owners
    }

    private mutating func reportYAML(_ yamlError: YamlError) {
        switch yamlError {
        case .scanner(let context, let problem, let mark, _),
             .parser(let context, let problem, let mark, _),
             .composer(let context, let problem, let mark, _):
            var message = "invalid YAML: \(problem)"
            if let context, !context.text.isEmpty { message += " (\(context.text))" }
            if problem.contains("cannot start any token"), character(at: mark) == "\t" {
                message += "; YAML does not allow tabs for indentation"
            }
            if let context, context.text.contains("flow"), let value = bracedValue(on: mark.line) {
                message += "; inside { } or [ ], braces end the map, so a value such as '\(value)' must be quoted: \"\(value)\""
            } else if !(context?.text.contains("flow") ?? false), let hint = indentationHint(line: mark.line) {
                message += "; " + hint
            }
            diagnostics.append(Diagnostic(file: file, line: mark.line, column: mark.column, message: message))
        case .reader(let problem, _, _, _):
            diagnostics.append(Diagnostic(file: file, line: 1, column: 1, message: "invalid YAML: \(problem)"))
        case .duplicatedKeysInMapping(let duplicates, let context):
            for key in duplicates {
                let mark = secondOccurrence(of: key, after: context.mark)
                diagnostics.append(Diagnostic(file: file, line: mark.line, column: mark.column,
                                              message: "duplicate key '\(key)'"))
            }
        default:
            diagnostics.append(Diagnostic(file: file, line: 1, column: 1, message: "invalid YAML: \(yamlError)"))
        }
    }

    /// The first unquoted `${...}` (or other value with braces) on `line`, for the flow-mapping hint.
    /// What the lines around a block-structure error say about indentation, the usual cause of
    /// libyaml's bare "did not find expected key" and "mapping values are not allowed here": a line
    /// indented more than a key that already has a value, or less than its neighbours but not as
    /// far as any key above it.
    private func indentationHint(line: Int) -> String? {
        let lines = text.split(separator: "\n", omittingEmptySubsequences: false).map(String.init)
        func indent(_ text: String) -> Int { text.prefix { $0 == " " }.count }
        func isContent(_ text: String) -> Bool {
            let trimmed = text.trimmingCharacters(in: .whitespaces)
            return !trimmed.isEmpty && !trimmed.hasPrefix("#")
        }
        func key(_ text: String) -> String? {
            let trimmed = text.trimmingCharacters(in: .whitespaces)
            let body = trimmed.hasPrefix("- ") ? String(trimmed.dropFirst(2)) : trimmed
            guard let colon = body.firstIndex(of: ":") else { return nil }
            return String(body[..<colon])
        }
        // libyaml points at the offending line or at the one after it: try both, nearest first.
        for candidate in [line, line - 1] where candidate >= 2 && candidate <= lines.count {
            let current = lines[candidate - 1]
            guard isContent(current) else { continue }
            let contentAbove = lines[..<(candidate - 1)].filter(isContent)
            guard let previous = contentAbove.last else { continue }
            let mine = indent(current), theirs = indent(previous)
            let above = candidate - 1 - lines[..<(candidate - 1)].reversed().prefix { !isContent($0) }.count
            if mine > theirs, current.trimmingCharacters(in: .whitespaces).hasPrefix("- "),
               let item = lines[..<(candidate - 1)].lastIndex(where: { $0.trimmingCharacters(in: .whitespaces).hasPrefix("- ") }) {
                return "line \(candidate) is a list item indented more than the item on line \(item + 1); "
                    + "line its '-' up with that one (\(indent(lines[item])) spaces)"
            }
            if mine > theirs, let previousKey = key(previous) {
                let value = previous.firstIndex(of: ":").map { previous[previous.index(after: $0)...].trimmingCharacters(in: .whitespaces) } ?? ""
                if !value.isEmpty, !value.hasPrefix("#"), !value.hasPrefix("|"), !value.hasPrefix(">") {
                    return "line \(candidate) is indented more than line \(above), "
                        + "whose key '\(previousKey)' already has a value; to make it a key of the same map, line it up with '\(previousKey)'"
                }
            }
            if mine < theirs {
                let levels = Set(contentAbove.map(indent)).filter { $0 < theirs }
                if !levels.contains(mine) {
                    let nearest = levels.filter { $0 < mine }.max() ?? 0
                    let parent = contentAbove.last { indent($0) == nearest }.flatMap(key)
                    return "line \(candidate) is indented less than the key above it (\(mine) \(mine == 1 ? "space" : "spaces"); line \(above) has \(theirs)) "
                        + "but not as far as any key it could belong to; indent it \(theirs) spaces to stay in the same map"
                        + (parent.map { ", or \(nearest) to be a key beside '\($0)'" } ?? "")
                }
            }
        }
        return nil
    }

    private func bracedValue(on line: Int) -> String? {
        let lines = text.split(separator: "\n", omittingEmptySubsequences: false)
        guard line >= 1, line <= lines.count else { return nil }
        let text = lines[line - 1]
        guard let start = text.range(of: "${") else { return nil }
        var depth = 0
        var end = start.lowerBound
        for index in text[start.lowerBound...].indices {
            if text[index] == "{" { depth += 1 }
            if text[index] == "}" { depth -= 1 }
            end = index
            if depth == 0, text[index] == "}" { break }
        }
        let value = String(text[start.lowerBound...end])
        let before = text[..<start.lowerBound].last { $0 != " " }
        return before == "\"" || before == "'" ? nil : value
    }

    private func character(at mark: Mark) -> Character? {
        let lines = text.split(separator: "\n", omittingEmptySubsequences: false)
        guard mark.line >= 1, mark.line <= lines.count else { return nil }
        let scalars = Array(lines[mark.line - 1].unicodeScalars)
        guard mark.column >= 1, mark.column <= scalars.count else { return nil }
        return Character(scalars[mark.column - 1])
    }

    /// Yams points at the first of two equal keys; the one to remove is the next at the same column.
    private func secondOccurrence(of key: String, after first: Mark) -> (line: Int, column: Int) {
        let lines = text.split(separator: "\n", omittingEmptySubsequences: false)
        var lineNumber = first.line
        while lineNumber < lines.count {
            let line = String(lines[lineNumber])
            let scalars = Array(line.unicodeScalars)
            let start = first.column - 1
            if start < scalars.count {
                let rest = String(String.UnicodeScalarView(scalars[start...]))
                let prefix = String(String.UnicodeScalarView(scalars[..<start]))
                if prefix.allSatisfy({ $0 == " " || $0 == "-" }),
                   rest.hasPrefix(key + ":") || rest.hasPrefix("\"\(key)\":") || rest.hasPrefix("'\(key)':") {
                    return (lineNumber + 1, first.column)
                }
            }
            lineNumber += 1
        }
        return (first.line, first.column)
    }
}

extension Node.Scalar {
    /// A YAML null: empty, `~` or `null` written plain.
    var isNull: Bool {
        style == .plain && (string.isEmpty || string == "~" || string == "null" || string == "Null" || string == "NULL")
    }
}
