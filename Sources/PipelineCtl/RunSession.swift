import ArgumentParser
import Foundation
import Logging
import PipelineHummingbird
import PipelineService
import PipelineKit
import Synchronization

/// What a command asks of a run: the pipeline, the list, the engine's options and where reports
/// and metrics go, and how the run behaves as a worker.
struct RunRequest {
    /// The pipeline's name or file.
    var pipeline: String
    /// The list: a file, `-`, an object in a bucket, a queue's URL.
    var list: String
    var options: RunOptions
    var output: RunOutputOptions
    /// Seconds items in flight get to finish after a stop signal.
    var stopGrace: Double
    /// The list plugin by name, and its options (`work` reads a queue so); by the list's scheme when `nil`.
    var listPlugin: String?
    var listOptions: [String: OptionValue] = [:]
    /// The list is told the output location's prefix, whose sources it does not process.
    var ignoreOwnOutputs = false
    /// A stop by signal is the normal end (a worker's) and exits 0.
    var stopExitsZero = false
    /// `/livez`, `/readyz` and `/metrics` are served there while the run goes.
    var listen: ListenAddress?
    /// The report is written in parts of that size or age (``RotatingReport``).
    var rotate: (bytes: Int?, seconds: Double?)?
    /// An item that replaced outputs has its source purged by the pipeline's `purge:` list.
    var purgeReplaced = false

    init(pipeline: String, list: String, options: RunOptions, output: RunOutputOptions, stopGrace: Double) {
        self.pipeline = pipeline
        self.list = list
        self.options = options
        self.output = output
        self.stopGrace = stopGrace
    }
}

/// What `run`, `fetch` and `work` share: validate, open the list, run, print the summary, write
/// the report and metrics. Exits 128+N after a stop by signal N (0 for a worker), 3 when outputs
/// could not be written, 1 when items failed (or an output kept by `existing: keep` is stale), 2
/// when the pipeline or the list cannot be used.
func runPipeline(_ request: RunRequest) async throws {
    var output = request.output
    if let shard = request.options.shard {
        output.report = output.report.map(shard.name)
        output.metrics = output.metrics.map(shard.name)
    }
    bootstrapLogging(output)
    try await Telemetry.around(logger: Logger(label: "pipelinectl.traces")) {
        // A worker's items continue their messages' traces; a run's are each a trace of its own,
        // linked to the run's span.
        guard !request.stopExitsZero else { return try await runPipeline(request, output: output) }
        return try await Telemetry.withRunSpan("run " + URL(fileURLWithPath: request.pipeline).deletingPathExtension().lastPathComponent,
                                               list: request.list) {
            try await runPipeline(request, output: output)
        }
    }
}

/// ``runPipeline(_:)`` once logging and traces are set up.
func runPipeline(_ request: RunRequest, output: RunOutputOptions) async throws {
    guard let pipeline = loadPipeline(request.pipeline) else { throw Exit.invalid }
    let (runner, list, remoteReport) = try await prepare(request, pipeline, output: output)
    defer { remoteReport?.removeLocal() }
    // The list is opened once, here: one that cannot be read is said before anything runs.
    let cursor: any SourceCursor
    do { cursor = try await list.open() } catch {
        printError("error: \((error as? PipelineError)?.message ?? "\(error)")")
        throw Exit.invalid
    }
    let header = runHeader(pipeline, runner: runner, list: list, shard: request.options.shard)
    let rotating = request.rotate.map { rotatingReport($0, output: output, remote: remoteReport) }
    let report = try openReport(output, rotating: rotating, localPath: remoteReport?.localPath, header: header)
    let metrics = output.metrics != nil || request.listen != nil ? RunMetrics(pipeline: pipeline.name) : nil
    let endpoints: WorkEndpoints? = if let address = request.listen {
        try await startEndpoints(list: list, metrics: metrics!, address: address)
    } else {
        nil
    }
    defer { endpoints?.close() }
    let signals = StopSignals(runner: runner, grace: request.stopGrace, onStop: {
        endpoints?.stop()
        list.stopReading()
    })
    defer { signals.cancel() }
    let outcome = try await execute(runner, list: list, cursor: cursor, output: output, report: report, metrics: metrics)
    await list.runEnded()
    await rotating?.handedOff()
    try finish(outcome, pipeline: pipeline, runner: runner, output: output, fetchOnly: request.options.fetchOnly,
               shownReport: rotating != nil ? (remoteReport?.directoryURL ?? rotating?.directory).map { "\($0)/ (in parts)" } : remoteReport?.url)
    if let remoteReport, rotating == nil {
        do { try await remoteReport.upload() } catch {
            printError("error: cannot write the report to \(remoteReport.url): \((error as? PipelineError)?.message ?? "\(error)")")
            throw Exit.infrastructure
        }
    }
    if let signal = signals.received {
        remoteReport?.removeLocal()  // exit() runs no defer
        Foundation.exit(request.stopExitsZero ? 0 : 128 + signal)
    }
    if outcome.failures.anyOnOurSide { throw Exit.infrastructure }
    if outcome.summary.failed > 0 || outcome.summary.outputsStale > 0 { throw Exit.itemsFailed }
}

/// The runner, the list and the remote report of `request`, each checked before anything runs:
/// the outputs' and the report's store, the list. A problem that will not fix itself (refused
/// credentials, a missing bucket or list) exits 2; one that may (an unreachable store) exits 3.
func prepare(_ request: RunRequest, _ pipeline: Pipeline, output: RunOutputOptions) async throws
    -> (PipelineRunner, any SourceListing, RemoteReport?) {
    var listOptions = request.listOptions
    if request.ignoreOwnOutputs {
        let dir = request.options.outputDirectory ?? pipeline.output.dir
        if Source.urlScheme(of: dir) != nil { listOptions["ignore"] = .list([.string(dir.hasSuffix("/") ? dir : dir + "/")]) }
    }
    let (runner, list) = try makeRunner(pipeline, urls: request.list, options: request.options, listPlugin: request.listPlugin,
                                        listOptions: listOptions, eventsJournal: { list in eventsJournal(pipeline, request, output, list: list) },
                                        purgeReplaced: request.purgeReplaced)
    var problem = await runner.preflight()
    if problem == nil {
        do { try await list.check() } catch {
            problem = error as? PipelineError ?? PipelineError(.io, "\(error)")
        }
    }
    // A report for a store is written to a local file first and uploaded when the run ends; its
    // bucket is checked now, with the outputs', not found missing after the work is done.
    let remoteReport = try output.report.flatMap { try RemoteReport(url: $0, pipeline: pipeline) }
    if problem == nil, let remoteReport, let refused = await remoteReport.destination.preflight() {
        problem = PipelineError(refused.kind, "cannot write the report to \(remoteReport.url): \(refused.message)")
    }
    if let problem {
        remoteReport?.removeLocal()
        printError("error: \(problem.message)")
        throw [ErrorKind.auth, .notFound, .invalidOption, .invalidSource].contains(problem.kind) ? Exit.invalid : Exit.infrastructure
    }
    return (runner, list, remoteReport)
}

/// `--report-rotate`: the report in parts, each uploaded beside a remote report's and removed.
func rotatingReport(_ rotate: (bytes: Int?, seconds: Double?), output: RunOutputOptions, remote: RemoteReport?) -> RotatingReport {
    RotatingReport(path: remote?.localPath ?? output.report ?? "report.jsonl", format: output.reportFormat,
                   maxBytes: rotate.bytes, maxSeconds: rotate.seconds, closed: remote.map { remote in
        { @Sendable path, name in
            do { try await remote.upload(localPath: path, as: name) } catch {
                printError("warning: cannot write the report part \(name) to \(remote.directoryURL): \((error as? PipelineError)?.message ?? "\(error)"); kept in \(path)")
                return
            }
            try? FileManager.default.removeItem(atPath: path)
        }
    })
}

/// A worker's `/livez`, `/readyz` and `/metrics`, started; a port that cannot be had exits 2.
func startEndpoints(list: any SourceListing, metrics: RunMetrics, address: ListenAddress) async throws -> WorkEndpoints {
    let endpoints = WorkEndpoints(list: list, metrics: metrics, address: address)
    do { try await endpoints.start() } catch {
        printError("error: \((error as? PipelineError)?.message ?? "\(error)")")
        throw Exit.invalid
    }
    return endpoints
}

/// What identifies this run in its report.
func runHeader(_ pipeline: Pipeline, runner: PipelineRunner, list: any SourceListing, shard: Shard?) -> RunHeader {
    var header = RunHeader(pipeline: pipeline.name, fingerprint: runner.fingerprint)
    header.shard = shard?.description
    header.version = PipelineCtl.version
    header.revision = PipelineCtl.revision
    header.list = list.name
    header.listBase = list.baseDirectory
    header.workingDirectory = FileManager.default.currentDirectoryPath
    if !runner.isFetchOnly {
        header.output = runner.outputLocation
        header.outputURL = runner.outputBrowserURL
    }
    return header
}

func bootstrapLogging(_ output: RunOutputOptions) {
    let logLevel = output.logLevel, logFormat = output.logFormat.format
    LoggingSystem.bootstrap({ label, provider in
        switch logFormat {
        case .json:
            return JSONLogHandler(label: label, logLevel: logLevel, metadataProvider: provider)
        case .text:
            var handler = StreamLogHandler.standardError(label: label, metadataProvider: provider)
            handler.logLevel = logLevel
            return handler
        }
    }, metadataProvider: Telemetry.logMetadata)
}

/// Checks the run's machine facts (output directory) and makes the runner and the source list of
/// the list plugin `urls` names (a file, `-` for standard input, an object in a bucket:
/// `s3://bucket/key`); prints why not.
/// `eventsJournal`: with `notify:`, where the run keeps pending events for the list it reads
/// (`nil` inside: the list's queue keeps them); without it, items are not announced.
func makeRunner(_ pipeline: Pipeline, urls: String, options: RunOptions, listPlugin: String? = nil,
                listOptions: [String: OptionValue] = [:],
                eventsJournal: ((any SourceListing) -> String?)? = nil, purgeReplaced: Bool = false) throws -> (PipelineRunner, any SourceListing) {
    if let dir = options.outputDirectory, Source.urlScheme(of: dir) == nil,
       let problem = MachineCheck.writableDirectoryProblem(dir) {
        printError("error: --output '\(dir)' \(problem)")
        throw Exit.invalid
    }
    let list: any SourceListing
    do { list = try PipelineCtl.registry.makeList(urls, plugin: listPlugin, options: listOptions) } catch {
        printError("error: \((error as? PipelineError)?.message ?? "\(error)")")
        throw Exit.invalid
    }
    var options = options
    options.logger = Logger(label: "pipelinectl")
    do {
        if let eventsJournal, !options.fetchOnly {
            options.events = try EventOutbox(pipeline: pipeline, journalPath: eventsJournal(list), logger: options.logger)
        }
        if purgeReplaced, !options.fetchOnly {
            guard !pipeline.purgers.isEmpty else {
                printError("error: --purge-replaced needs a purge: list in \(pipeline.file) (the CDNs to purge)")
                throw Exit.invalid
            }
            options.purgeReplaced = try replacedPurger(pipeline, logger: options.logger)
        }
        return (try PipelineRunner(pipeline: pipeline, registry: PipelineCtl.registry, options: options), list)
    } catch {
        printError("error: \(pipeline.file): \((error as? PipelineError)?.message ?? "\(error)")")
        throw Exit.invalid
    }
}

/// `work --purge-replaced`: each purger of the pipeline's `purge:` list (built once) asked to
/// drop the answers of a source whose outputs an upload replaced, each tried three times (1 s,
/// then 2 s apart). What it says goes in the item's report line (`purge`); a purger that still
/// fails is logged: the outputs are stored, and `pipelinectl cache purge` can be run for it.
func replacedPurger(_ pipeline: Pipeline, logger: Logger) throws -> @Sendable (Source, ItemResult) async -> String {
    let purgers = try pipeline.purgers.map { ($0.plugin.spec.name, try $0.makePurger()) }
    let keys = (try? SigningKeys.load(file: nil, environment: ProcessInfo.processInfo.environment)) ?? nil
    return { source, _ in
        let request = pipeline.purgeRequest(sources: [source.text], keys: keys)
        var said: [String] = []
        for (name, purger) in purgers {
            var last = ""
            for attempt in 0..<3 {
                if attempt > 0 { try? await Task.sleep(for: .seconds(Double(1 << (attempt - 1)))) }
                do {
                    last = try await purger.purge(request)
                    break
                } catch {
                    last = "failed: " + ((error as? PipelineError)?.message ?? "\(error)")
                }
            }
            if last.hasPrefix("failed: ") {
                logger.warning("purge failed", metadata: ["source": "\(source.text)", "purger": "\(name)", "error": "\(last)"])
            }
            said.append(last.hasPrefix("failed: ") ? "\(name) \(last)" : last)
        }
        return said.joined(separator: "; ")
    }
}

/// Where a run keeps the "ready" events not delivered yet: `REPORT.events` beside a local report,
/// else `events-PIPELINE.jsonl` in the state directory (`--state-dir`, or `OUTPUT/.pipelinectl`
/// for a local output, or `./.pipelinectl`). `nil` for a queue: it delivers the item again.
func eventsJournal(_ pipeline: Pipeline, _ request: RunRequest, _ output: RunOutputOptions, list: any SourceListing) -> String? {
    if list.redelivers { return nil }
    if let report = output.report, Source.urlScheme(of: report) == nil, request.rotate == nil { return report + ".events" }
    let dir = request.options.outputDirectory ?? pipeline.output.dir
    let state = request.options.stateDirectory ?? (Source.urlScheme(of: dir) == nil ? (dir as NSString).appendingPathComponent(".pipelinectl") : ".pipelinectl")
    return (state as NSString).appendingPathComponent("events-\(pipeline.name).jsonl")
}

/// `--report s3://bucket/key`: the report is written to a local temporary file, then put whole
/// (replacing an earlier run's report) through the output destination of the URL's scheme, with
/// the pipeline's `output:` options for the store's endpoint and credentials.
struct RemoteReport {
    let url: String
    let localPath: String
    let destination: any OutputDestination
    let name: String

    init?(url: String, pipeline: Pipeline) throws {
        guard Source.urlScheme(of: url) != nil else { return nil }
        let slash = url.range(of: "/", options: .backwards)!
        name = String(url[slash.upperBound...])
        guard !name.isEmpty, !url[..<slash.lowerBound].hasSuffix(":/") else {
            printError("error: --report '\(url)' names no object (write s3://bucket/reports/run.json)")
            throw Exit.invalid
        }
        var options = pipeline.output.options.values
        options["cache_control"] = nil
        options["metadata"] = nil
        do { destination = try PipelineCtl.registry.makeDestination(String(url[..<slash.lowerBound]), options: PluginOptions(options)) } catch {
            printError("error: --report \(url): \((error as? PipelineError)?.message ?? "\(error)")")
            throw Exit.invalid
        }
        self.url = url
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("pipelinectl-report-\(getpid())")
        try? FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
        localPath = dir.appendingPathComponent(name).path
    }

    func upload() async throws { try await upload(localPath: localPath, as: name) }

    /// Puts the file at `path` as the object `name` beside the report's (a part of a rotated report).
    func upload(localPath path: String, as name: String) async throws {
        let data = try Data(contentsOf: URL(fileURLWithPath: path))
        try await destination.write(OutputFile(relative: name, data: data, fingerprint: OutputFingerprint(
            recipe: OutputFingerprint.recipe("report"), source: "d" + Hashing.sha256Hex(data).prefix(32))))
    }

    /// The report's bucket and prefix (`s3://bucket/reports`).
    var directoryURL: String { String(url.dropLast(name.count + 1)) }

    func removeLocal() {
        try? FileManager.default.removeItem(atPath: URL(fileURLWithPath: localPath).deletingLastPathComponent().path)
    }
}

/// The report writer of `--report-format` (or `rotating`, in parts), begun with the run's header;
/// `nil` without `--report`.
func openReport(_ output: RunOutputOptions, rotating: RotatingReport? = nil, localPath: String?,
                header: RunHeader) throws -> (any ReportWriting)? {
    if let rotating {
        do { try rotating.begin(header) } catch {
            printError("error: cannot write the report to \(output.report ?? "?"): \((error as? PipelineError)?.message ?? "\(error)")")
            throw Exit.invalid
        }
        return rotating
    }
    guard let path = localPath ?? output.report else { return nil }
    do {
        let writer = try PipelineCtl.registry.makeReport(output.reportFormat, path: path)
        try writer.begin(header)
        return writer
    } catch {
        printError("error: cannot write the report to \(output.report ?? path): \((error as? PipelineError)?.message ?? "\(error)")")
        throw Exit.invalid
    }
}

/// What a run leaves for the summary, the report and the metrics: figures, never the items.
struct RunOutcome {
    let summary: RunSummary
    let failures: FailureDigest
    let statistics: RunStatistics
    let metrics: RunMetrics?
}

/// Runs the list, showing progress and writing the report as items finish. Memory does not grow
/// with the list: each item is written and counted, then dropped.
func execute(_ runner: PipelineRunner, list: any SourceListing, cursor: any SourceCursor, output: RunOutputOptions,
             report: (any ReportWriting)?, metrics: RunMetrics? = nil) async throws -> RunOutcome {
    let collected = Mutex<(failures: FailureDigest, statistics: RunStatistics.Builder)>((FailureDigest(), RunStatistics.Builder()))
    let display = ProgressDisplay(mode: output.quiet ? .none : output.progress.mode, list: list.readsAhead ? list.name : "-")
    defer { display?.finish() }
    let metrics = metrics ?? output.metrics.map { _ in RunMetrics(pipeline: runner.pipeline.name) }
    let reportFailed = Mutex(false)
    let summary: RunSummary
    do {
        summary = try await runner.run(SourceCursorSequence(cursor, readsAhead: list.readsAhead),
                                       settle: { source, result in await list.settle(source, as: queued(result, by: list)) }) { item in
            collected.withLock {
                $0.failures.add(item)
                $0.statistics.add(item)
            }
            display?.record(item)
            metrics?.record(item)
            do { try report?.item(item) } catch {
                let first = reportFailed.withLock { failed -> Bool in
                    let first = !failed
                    failed = true
                    return first
                }
                if first { printError("warning: writing the report: \(error)") }
            }
        }
    } catch {
        // The list was readable when the run began: reading it broke off.
        printError("error: \((error as? PipelineError)?.message ?? "\(error)")")
        throw Exit.infrastructure
    }
    let (failures, statistics) = collected.withLock { ($0.failures, $0.statistics.statistics) }
    do { try report?.finish(summary: summary, statistics: statistics) } catch {
        printError("error: cannot write the report to \(output.report ?? "?"): \((error as? PipelineError)?.message ?? "\(error)")")
        throw Exit.infrastructure
    }
    return RunOutcome(summary: summary, failures: failures, statistics: statistics, metrics: metrics)
}

/// What a queue is told of `result`: an item whose event is still pending is, for the queue, not
/// done (`event_pending`), so it keeps the message and delivers the item again, which sends the
/// event again with the same id. The report keeps the item as it is.
func queued(_ result: ItemResult, by list: any SourceListing) -> ItemResult {
    guard list.redelivers, result.status != .failed, let event = result.event, event.state == "pending" else { return result }
    var held = result
    held.status = .failed
    held.error = ItemError(stage: .output, kind: .eventPending, message: "the event \(event.id) is not delivered: \(event.error ?? "")")
    return held
}

/// The summary (with `--quiet`: only when something failed, on standard error) and the metrics file.
func finish(_ outcome: RunOutcome, pipeline: Pipeline, runner: PipelineRunner, output: RunOutputOptions, fetchOnly: Bool,
            shownReport: String? = nil) throws {
    let text = SummaryText.render(pipeline: pipeline.name, summary: outcome.summary, statistics: outcome.statistics,
                                  failures: outcome.failures, outputDirectory: fetchOnly ? nil : runner.outputDirectory)
    if !output.quiet { print(text) } else if outcome.summary.failed > 0 || outcome.summary.outputsStale > 0 { printError(text) }
    if let report = shownReport ?? output.report, !output.quiet { print("report in \(report)") }
    if let path = output.metrics, let metrics = outcome.metrics {
        do { try metrics.write(to: path, summary: outcome.summary) } catch {
            printError("error: cannot write metrics to \(path): \(error)")
            throw Exit.invalid
        }
        if !output.quiet { print("metrics in \(path)") }
    }
}
