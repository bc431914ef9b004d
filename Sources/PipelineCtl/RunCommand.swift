import ArgumentParser
import Foundation
import Logging
import PipelineKit
import Synchronization

struct Run: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Run a pipeline over a list of URLs and paths.",
        discussion: """
            The list has one URL or path per line; blank lines and lines starting with # are skipped;
            '-' reads standard input. Relative paths are relative to the list file.
            Exit codes: 0 every item succeeded; 1 items failed for reasons of their own (see the
            report; retrying will not help); 2 the pipeline, list or options are wrong (never retry);
            3 outputs or stores could not be written (retry with --resume); 128+N stopped by signal N.

            Examples:
              pipelinectl run thumbnails examples/urls.txt --output out/thumbs --report run.json
              pipelinectl run thumbnails urls.txt --shard auto/16 --report reports/run.json --resume
            """)

    @Argument(help: "The pipeline file, or its name in pipelines/.")
    var pipeline: String

    @Argument(help: "The URL list ('-' for standard input).")
    var urls: String

    @Option(name: [.short, .customLong("output")], help: "Write outputs here instead of the pipeline's output.dir.")
    var outputDirectory: String?

    @Option(help: "CPU workers for decode, process and encode (default: one per core).")
    var workers: Int?

    @Option(help: "Memory decodes in progress may take together, estimated from each header (e.g. 200MiB, 1GB); huge images wait for each other.")
    var decodeMemory: String = "200MiB"

    @Option(help: "Longest time one item's own work may take (e.g. 90s, 5m; waits for a load slot or a worker do not count); 0 for no limit.")
    var itemTimeout: String = "5m"

    @Option(help: "Sources whose result the run remembers, so a line repeated later in the list reuses it (about 200 bytes each); 0: only lines in flight together share.")
    var dedupeWindow: Int = 100_000

    @Flag(help: "Skip items whose outputs an earlier run of the same pipeline already wrote completely (even if it was killed).")
    var resume = false

    @OptionGroup var output: RunOutputOptions

    @OptionGroup var sharding: ShardOptions

    func validate() throws {
        if let workers, workers < 1 { throw ValidationError("--workers must be at least 1") }
        if dedupeWindow < 0 { throw ValidationError("--dedupe-window must be 0 or more") }
        if (Units.parseSize(decodeMemory) ?? 0) < 1 {
            throw ValidationError("--decode-memory expects a size such as 256MiB or 1GB, got '\(decodeMemory)'")
        }
        if Units.parseDuration(itemTimeout) == nil {
            throw ValidationError("--item-timeout expects a duration such as 90s or 5m, got '\(itemTimeout)'")
        }
    }

    func run() async throws {
        var options = RunOptions()
        options.outputDirectory = outputDirectory
        options.resume = resume
        if let workers { options.workers = workers }
        options.decodeMemory = Units.parseSize(decodeMemory) ?? options.decodeMemory
        let limit = Units.parseDuration(itemTimeout) ?? 300
        options.itemTimeout = limit > 0 ? limit : nil
        options.dedupeWindow = dedupeWindow
        options.shard = try sharding.resolvedShard()
        try await runPipeline(pipeline, urls: urls, options: options, output: output,
                              stopGrace: sharding.graceSeconds)
    }
}

/// `--log-format`.
enum LogFormatArgument: String, ExpressibleByArgument, CaseIterable {
    case text, json
    var format: LogFormat { LogFormat(rawValue: rawValue)! }
}

/// `--progress`.
enum ProgressModeArgument: String, ExpressibleByArgument, CaseIterable {
    case auto, plain, none
    var mode: ProgressMode { ProgressMode(rawValue: rawValue)! }
}

/// How `--report` is written.
enum ReportFormat: String, ExpressibleByArgument, CaseIterable {
    case json, jsonl
}

/// What `run` and `fetch` share: validate, open the list, run, print the summary, write the
/// report and metrics. Exits 128+N after a stop by signal N, 3 when outputs could not be
/// written, 1 when items failed, 2 when the pipeline or the list cannot be used.
func runPipeline(_ name: String, urls: String, options: RunOptions, output: RunOutputOptions, stopGrace: Double) async throws {
    var output = output
    if let shard = options.shard {
        output.report = output.report.map(shard.name)
        output.metrics = output.metrics.map(shard.name)
    }
    bootstrapLogging(output)
    guard let pipeline = loadPipeline(name) else { throw Exit.invalid }
    let (runner, list) = try makeRunner(pipeline, urls: urls, options: options)
    var problem = await runner.preflight()
    if problem == nil, let remote = list.remote {
        do { try await remote.check() } catch {
            problem = error as? PipelineError ?? PipelineError(.io, "\(error)")
        }
    }
    // A report for a store is written to a local file first and uploaded when the run ends; its
    // bucket is checked now, with the outputs', not found missing after the work is done.
    let remoteReport = try output.report.flatMap { try RemoteReport(url: $0, pipeline: pipeline) }
    defer { remoteReport?.removeLocal() }
    if problem == nil, let remoteReport, let refused = await remoteReport.destination.preflight() {
        problem = PipelineError(refused.kind, "cannot write the report to \(remoteReport.url): \(refused.message)")
    }
    if let problem {
        // Refused credentials or a missing bucket or list will not fix themselves; an unreachable store may.
        printError("error: \(problem.message)")
        throw [ErrorKind.auth, .notFound, .invalidOption, .invalidSource].contains(problem.kind) ? Exit.invalid : Exit.infrastructure
    }
    if let remoteReport { output.report = remoteReport.localPath }
    let stream = try openReportStream(output, pipeline: pipeline)
    let signals = StopSignals(runner: runner, grace: stopGrace)
    defer { signals.cancel() }
    let outcome = try await execute(runner, list: list, output: output, stream: stream)
    try finish(outcome, pipeline: pipeline, runner: runner, output: output, fetchOnly: options.fetchOnly,
               shownReport: remoteReport?.url)
    if let remoteReport {
        do { try await remoteReport.upload() } catch {
            printError("error: cannot write the report to \(remoteReport.url): \((error as? PipelineError)?.message ?? "\(error)")")
            throw Exit.infrastructure
        }
    }
    if let signal = signals.received {
        remoteReport?.removeLocal()  // exit() runs no defer
        Foundation.exit(128 + signal)
    }
    if outcome.failures.contains(where: \.failedOnOurSide) { throw Exit.infrastructure }
    if outcome.summary.failed > 0 || outcome.summary.outputsStale > 0 { throw Exit.itemsFailed }
}

func bootstrapLogging(_ output: RunOutputOptions) {
    let logLevel = output.logLevel, logFormat = output.logFormat.format
    LoggingSystem.bootstrap { label in
        switch logFormat {
        case .json:
            return JSONLogHandler(label: label, logLevel: logLevel)
        case .text:
            var handler = StreamLogHandler.standardError(label: label)
            handler.logLevel = logLevel
            return handler
        }
    }
}

/// Checks the run's machine facts (output directory, list) and makes the runner and the URL list
/// (a file, `-` for standard input, or an object in a bucket: `s3://bucket/key`); prints why not.
func makeRunner(_ pipeline: Pipeline, urls: String, options: RunOptions) throws -> (PipelineRunner, SourceList) {
    if let dir = options.outputDirectory, Source.urlScheme(of: dir) == nil,
       let problem = MachineCheck.writableDirectoryProblem(dir) {
        printError("error: --output '\(dir)' \(problem)")
        throw Exit.invalid
    }
    let list: SourceList
    do {
        list = try PipelineCtl.registry.sourceList(urls)
        if list.remote == nil { _ = try list.open() }
    } catch {
        printError("error: \((error as? PipelineError)?.message ?? "\(error)")")
        throw Exit.invalid
    }
    var options = options
    options.logger = Logger(label: "pipelinectl")
    do {
        return (try PipelineRunner(pipeline: pipeline, registry: PipelineCtl.registry, options: options), list)
    } catch {
        printError("error: \(pipeline.file): \((error as? PipelineError)?.message ?? "\(error)")")
        throw Exit.invalid
    }
}

/// `--report s3://bucket/key`: the report is written to a local temporary file, then put whole
/// (replacing an earlier run's report) through the output destination registered for the scheme,
/// with the pipeline's `output:` options for the store's endpoint and credentials.
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
        options["existing"] = .string(ExistingOutputs.replace.rawValue)
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

    func upload() async throws {
        let data = try Data(contentsOf: URL(fileURLWithPath: localPath))
        try await destination.write(OutputFile(relative: name, data: data, fingerprint: OutputFingerprint(
            recipe: OutputFingerprint.recipe("report"), source: "d" + Hashing.sha256Hex(data).prefix(32))))
    }

    func removeLocal() {
        try? FileManager.default.removeItem(atPath: URL(fileURLWithPath: localPath).deletingLastPathComponent().path)
    }
}

func openReportStream(_ output: RunOutputOptions, pipeline: Pipeline) throws -> ReportStream? {
    guard let report = output.report, output.reportFormat == .jsonl else { return nil }
    do { return try ReportStream(path: report, pipeline: pipeline.name) } catch {
        printError("error: cannot write the report to \(report): \(error)")
        throw Exit.invalid
    }
}

/// What a run leaves for the summary, the report and the metrics.
struct RunOutcome {
    let summary: RunSummary
    /// Every item, in list order, when a whole-document report needs them.
    let items: [ItemResult]
    let failures: [ItemResult]
    let statistics: RunStatistics
    let metrics: RunMetrics?
}

/// Runs the list, showing progress and streaming the report as items finish.
func execute(_ runner: PipelineRunner, list: SourceList, output: RunOutputOptions, stream: ReportStream?) async throws -> RunOutcome {
    // Every item only when a whole-document JSON report needs them; otherwise figures and failures.
    let keepItems = output.report != nil && stream == nil
    let collected = Mutex<(items: [ItemResult], failures: [ItemResult], statistics: RunStatistics.Builder)>(([], [], RunStatistics.Builder()))
    let display = ProgressDisplay(mode: output.quiet ? .none : output.progress.mode, list: list.remote == nil ? list.path : "-")
    defer { display?.finish() }
    let metrics = output.metrics.map { _ in RunMetrics(pipeline: runner.pipeline.name) }
    let summary: RunSummary
    do {
        summary = try await runner.run(list) { [stream] item in
            collected.withLock {
                if keepItems { $0.items.append(item) }
                if item.status == .failed { $0.failures.append(item) }
                $0.statistics.add(item)
            }
            display?.record(item)
            metrics?.record(item)
            do { try stream?.item(item) } catch { printError("warning: writing the report: \(error)") }
        }
        try stream?.finish(summary)
    } catch {
        // The list was readable when the run began: reading it broke off, or the report could not be written.
        printError("error: \((error as? PipelineError)?.message ?? "\(error)")")
        throw Exit.infrastructure
    }
    return collected.withLock {
        RunOutcome(summary: summary, items: $0.items.sorted { $0.index < $1.index },
                   failures: $0.failures.sorted { $0.index < $1.index }, statistics: $0.statistics.statistics, metrics: metrics)
    }
}

/// The summary (with `--quiet`: only when something failed, on standard error), the JSON report
/// and the metrics file.
func finish(_ outcome: RunOutcome, pipeline: Pipeline, runner: PipelineRunner, output: RunOutputOptions, fetchOnly: Bool,
            shownReport: String? = nil) throws {
    let text = SummaryText.render(pipeline: pipeline.name, summary: outcome.summary, statistics: outcome.statistics,
                                  failures: outcome.failures, outputDirectory: fetchOnly ? nil : runner.outputDirectory)
    if !output.quiet { print(text) } else if outcome.summary.failed > 0 { printError(text) }
    if let report = output.report, output.reportFormat == .json {
        do {
            let data = try RunReport(pipeline: pipeline.name, summary: outcome.summary, items: outcome.items).json()
            try AtomicFile.write(data, to: report)
        } catch {
            printError("error: cannot write the report to \(report): \(error)")
            throw Exit.invalid
        }
    }
    if let report = shownReport ?? output.report, !output.quiet { print("report in \(report)") }
    if let path = output.metrics, let metrics = outcome.metrics {
        do { try metrics.write(to: path, summary: outcome.summary) } catch {
            printError("error: cannot write metrics to \(path): \(error)")
            throw Exit.invalid
        }
        if !output.quiet { print("metrics in \(path)") }
    }
}

extension Logger.Level: @retroactive ExpressibleByArgument {}
