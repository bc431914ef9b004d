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
            Exits 0 when every item succeeded, 1 when any failed, 2 when nothing ran.

            Example:
              pipelinectl run thumbnails examples/urls.txt --output out/thumbs --report run.json
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

    @Option(help: "Longest time one item may take (e.g. 90s, 5m); 0 for no limit.")
    var itemTimeout: String = "5m"

    @Flag(help: "Skip items whose outputs an earlier run of the same pipeline already wrote completely (even if it was killed).")
    var resume = false

    @OptionGroup var output: RunOutputOptions

    func validate() throws {
        if let workers, workers < 1 { throw ValidationError("--workers must be at least 1") }
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
        try await runPipeline(pipeline, urls: urls, options: options, output: output)
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

/// What `run` and `fetch` share: validate, open the list, run, print the summary, write the report.
func runPipeline(_ name: String, urls: String, options: RunOptions, output: RunOutputOptions) async throws {
    let report = output.report, reportFormat = output.reportFormat, metricsPath = output.metrics
    let logLevel = output.logLevel, logFormat = output.logFormat.format
    let progress = output.quiet ? ProgressMode.none : output.progress.mode
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
    guard let pipeline = loadPipeline(name) else { throw Exit.invalid }
    if let dir = options.outputDirectory, let problem = MachineCheck.writableDirectoryProblem(dir) {
        printError("error: --output '\(dir)' \(problem)")
        throw Exit.invalid
    }
    let list = SourceList(path: urls)
    do { _ = try list.open() } catch {
        printError("error: \((error as? PipelineError)?.message ?? "\(error)")")
        throw Exit.invalid
    }
    var options = options
    options.logger = Logger(label: "pipelinectl")
    let runner: PipelineRunner
    do {
        runner = try PipelineRunner(pipeline: pipeline, registry: PipelineCtl.registry, options: options)
    } catch {
        printError("error: \(pipeline.file): \((error as? PipelineError)?.message ?? "\(error)")")
        throw Exit.invalid
    }
    var stream: ReportStream?
    if let report, reportFormat == .jsonl {
        do { stream = try ReportStream(path: report, pipeline: pipeline.name) } catch {
            printError("error: cannot write the report to \(report): \(error)")
            throw Exit.invalid
        }
    }
    // Every item only when a whole-document JSON report needs them; otherwise figures and failures.
    let keepItems = report != nil && stream == nil
    let collected = Mutex<(items: [ItemResult], failures: [ItemResult], statistics: RunStatistics.Builder)>(([], [], RunStatistics.Builder()))
    let signals = StopSignals(runner: runner)
    defer { signals.cancel() }
    let display = ProgressDisplay(mode: progress, list: urls)
    let metrics = metricsPath.map { _ in RunMetrics(pipeline: pipeline.name) }
    let summary: RunSummary
    defer { display?.finish() }
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
        display?.finish()
    } catch {
        printError("error: \((error as? PipelineError)?.message ?? "\(error)")")
        throw Exit.invalid
    }
    let (items, failures, statistics) = collected.withLock {
        ($0.items.sorted { $0.index < $1.index }, $0.failures.sorted { $0.index < $1.index }, $0.statistics.statistics)
    }
    print(SummaryText.render(pipeline: pipeline.name, summary: summary, statistics: statistics, failures: failures,
                             outputDirectory: options.fetchOnly ? nil : runner.outputDirectory))
    if let report, stream == nil {
        do {
            let data = try RunReport(pipeline: pipeline.name, summary: summary, items: items).json()
            try AtomicFile.write(data, to: report)
        } catch {
            printError("error: cannot write the report to \(report): \(error)")
            throw Exit.invalid
        }
    }
    if let report { print("report in \(report)") }
    defer { if let signal = signals.received { Foundation.exit(128 + signal) } }
    if let metricsPath, let metrics {
        do { try metrics.write(to: metricsPath, summary: summary) } catch {
            printError("error: cannot write metrics to \(metricsPath): \(error)")
            throw Exit.invalid
        }
        print("metrics in \(metricsPath)")
    }
    if summary.failed > 0 { throw Exit.itemsFailed }
}

extension Logger.Level: @retroactive ExpressibleByArgument {}
