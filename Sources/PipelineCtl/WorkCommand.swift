import ArgumentParser
import Foundation
import PipelineKit

/// `pipelinectl work`: a worker that runs a pipeline on every message of a queue until stopped.
struct Work: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "work",
        abstract: "Run a pipeline on every new upload, from a queue (SQS or PostgreSQL), until stopped.",
        discussion: helpText("""
            SQS: messages are S3 event notifications (an upload to a bucket, sent to SQS directly or
            through SNS) or plain source lines. A message is deleted only once the outputs of every
            source it names are stored; while its items run, it stays invisible to other workers.
            A failure that may pass (a timeout, a 5xx, a store that could not be written) makes the
            message come back later, after a backoff; any other (not an image, too large, not found)
            sends it to the dead_letter queue, with the error kind as the attribute pipelinectl-error-kind,
            and deletes it. Sources under the pipeline's own s3:// output directory are not
            processed, so a worker may write into the bucket it watches. Credentials, region and
            endpoint come from the AWS environment, as for S3.

            PostgreSQL (--queue postgres://...): a table set up and filled by `pipelinectl queue`;
            rows are claimed in batches (FOR UPDATE SKIP LOCKED) with a lease, deleted once done,
            queued again with a backoff after a failure that may pass (up to max_attempts), kept
            as failed with their error kind otherwise. Idle workers wake on LISTEN/NOTIFY.

            With --listen, /livez, /readyz (503 while stopping) and /metrics (items, failures by
            kind, queue depth and the oldest item's age) are served on that address.

            SIGTERM or Ctrl-C: no new message is received (after the long poll in progress, up to
            20 s), items in flight finish within --stop-grace, unstarted messages are handed back.
            After a kill, unacknowledged messages come back when their visibility runs out.

            Exit codes: 0 after a stop by signal (a worker's normal end); with --until-empty, as
            run's: 1 when items failed, 3 when outputs could not be written.

            Examples:
              pipelinectl work thumbnails \\
                --queue https://sqs.eu-west-1.amazonaws.com/123456789012/uploads
              pipelinectl work thumbnails --queue sqs://123456789012/uploads \\
                --queue-option dead_letter=sqs://123456789012/uploads-failed \\
                --report work.jsonl
              pipelinectl work thumbnails --queue sqs://000000000000/uploads --until-empty
              pipelinectl work thumbnails --queue postgres://app@db/images --listen :9090
              pipelinectl work thumbnails --queue sqs://123456789012/uploads \\
                --report s3://logs/work.jsonl --report-format jsonl \\
                --report-rotate 1h
            """))

    @Argument(help: "The pipeline file, or its name in pipelines/.")
    var pipeline: String

    @Option(help: "The queue: SQS as https://sqs.REGION.amazonaws.com/ACCOUNT/NAME or sqs://ACCOUNT/NAME (endpoint from AWS_ENDPOINT_URL_SQS, AWS_ENDPOINT_URL or the region); PostgreSQL as postgres://USER@HOST/DATABASE[?table=NAME].")
    var queue: String

    @Option(help: ArgumentHelp("An option of the queue's plugin, NAME=VALUE, as `pipelinectl plugins describe` lists it for the queue's kind: visibility=90s, dead_letter=URL (SQS), max_attempts=5, batch=20, poll=2s (PostgreSQL). Repeat for several.", valueName: "name=value"))
    var queueOption: [String] = []

    @Option(help: ArgumentHelp("Deprecated: --queue-option dead_letter=URL.", visibility: .hidden))
    var deadLetter: String?

    @Option(help: ArgumentHelp("Deprecated: --queue-option visibility=DURATION.", visibility: .hidden))
    var visibility: String?

    @Option(help: ArgumentHelp("Deprecated: --queue-option max_attempts=N.", visibility: .hidden))
    var maxAttempts: Int?

    @Option(help: "Serve /livez, /readyz and /metrics on this address (e.g. :9090 or 127.0.0.1:9090).")
    var listen: String?

    @Option(help: "Write the --report in parts of this size (100MB) or age (1h), each a whole report named STEM-TIME-RUN-NNNN.EXT beside --report; parts of an s3:// report are uploaded as each closes.")
    var reportRotate: String?

    @Flag(help: "Process what is queued, then exit when the queue is empty (for a job that drains a queue).")
    var untilEmpty = false

    @Flag(help: "When an upload replaces outputs made from earlier content, ask the pipeline's purge: list to drop the source's answers at the CDN (signed URLs need PIPELINECTL_KEYS).")
    var purgeReplaced = false

    @Option(name: [.short, .customLong("output")], help: "Write outputs here instead of the pipeline's output.dir.")
    var outputDirectory: String?

    @OptionGroup var engine: EngineOptions

    @Option(help: "After SIGTERM or Ctrl-C, how long items in flight may take to finish before they are cancelled.")
    var stopGrace: String = "25s"

    @OptionGroup var output: RunOutputOptions

    func validate() throws {
        if Units.parseDuration(stopGrace) == nil {
            throw ValidationError("--stop-grace expects a duration such as 25s, got '\(stopGrace)'")
        }
        _ = try queueOptions()
        if let reportRotate {
            guard RotatingReport.parse(reportRotate) != nil else {
                throw ValidationError("--report-rotate expects a size (100MB) or a duration (1h), got '\(reportRotate)'")
            }
            guard output.report != nil else { throw ValidationError("--report-rotate needs --report") }
            guard output.reportFormat == "jsonl" else {
                throw ValidationError("--report-rotate needs --report-format jsonl (a json report is one document, written whole at the end)")
            }
        }
        if let listen, (try? ListenAddress(listen)) == nil {
            throw ValidationError("--listen expects HOST:PORT or :PORT, got '\(listen)'")
        }
    }

    func run() async throws {
        if let report = output.report, Source.urlScheme(of: report) != nil, reportRotate == nil, !untilEmpty {
            printError("warning: --report \(report) is uploaded only when the worker stops; add --report-rotate 1h (or a size) to upload it in parts")
        }
        var options = RunOptions()
        options.outputDirectory = outputDirectory
        engine.apply(to: &options)
        // A later message naming a source without a version (a plain line) may be new content.
        options.dedupeUnversioned = false
        for (old, new) in renamedFlags { printError("warning: \(old) is deprecated; use --queue-option \(new)") }
        var listOptions = try queueOptions().values
        listOptions["until_empty"] = .bool(untilEmpty)
        var request = RunRequest(pipeline: pipeline, list: queue, options: options, output: output,
                                 stopGrace: Units.parseDuration(stopGrace) ?? 25)
        request.listOptions = listOptions
        request.ignoreOwnOutputs = true
        request.stopExitsZero = true
        request.listen = try listen.map { try ListenAddress($0) }
        request.rotate = reportRotate.flatMap(RotatingReport.parse)
        request.purgeReplaced = purgeReplaced
        try await runPipeline(request)
    }

    /// The deprecated flags given, each with its `--queue-option` spelling.
    var renamedFlags: [(old: String, new: String)] {
        [deadLetter.map { ("--dead-letter", "dead_letter=\($0)") }, visibility.map { ("--visibility", "visibility=\($0)") },
         maxAttempts.map { ("--max-attempts", "max_attempts=\($0)") }].compactMap { $0 }
    }

    /// The queue's plugin (the list plugin of the URL's scheme, which must be a queue: one that
    /// waits for new items) and the options given for it, each checked by the plugin's spec.
    func queueOptions() throws -> (plugin: Plugin, values: [String: OptionValue]) {
        guard let plugin = PipelineCtl.registry.listPlugin(for: queue) else {
            throw ValidationError("--queue '\(queue)': no queue plugin reads \(Source.urlScheme(of: queue) ?? "local") URLs")
        }
        guard plugin.spec.options.contains(where: { $0.name == "until_empty" }) else {
            throw ValidationError("--queue '\(queue)': '\(plugin.spec.name)' lists are not queues; give a queue's URL")
        }
        var values: [String: OptionValue] = [:]
        for assignment in renamedFlags.map(\.new) + queueOption {
            do {
                let (name, value) = try plugin.spec.option(assignment: assignment)
                values[name] = value
            } catch let error as PipelineError {
                throw ValidationError("--queue-option: \(error.message) (pipelinectl plugins describe \(plugin.spec.name))")
            }
        }
        return (plugin, values)
    }
}
