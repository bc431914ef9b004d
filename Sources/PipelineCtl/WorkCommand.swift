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
            sends it to --dead-letter, with the error kind as the attribute pipelinectl-error-kind,
            and deletes it. Sources under the pipeline's own s3:// output directory are not
            processed, so a worker may write into the bucket it watches. Credentials, region and
            endpoint come from the AWS environment, as for S3.

            PostgreSQL (--queue postgres://...): a table set up and filled by `pipelinectl queue`;
            rows are claimed in batches (FOR UPDATE SKIP LOCKED) with a lease, deleted once done,
            queued again with a backoff after a failure that may pass (up to --max-attempts), kept
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
                --dead-letter sqs://123456789012/uploads-failed --report work.jsonl
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

    @Option(help: "SQS: a queue for messages that failed for good (URL or sqs://ACCOUNT/NAME); without it they are deleted and only reported.")
    var deadLetter: String?

    @Option(help: "How long a received message (SQS) or a claimed row's lease (PostgreSQL) lasts, e.g. 60s; extended while its items run.")
    var visibility: String = "60s"

    @Option(help: "PostgreSQL: claims of a row before a failure that may pass, or a worker lost holding it, fails it for good.")
    var maxAttempts: Int = 5

    @Option(help: "Serve /livez, /readyz and /metrics on this address (e.g. :9090 or 127.0.0.1:9090).")
    var listen: String?

    @Option(help: "Write the --report in parts of this size (100MB) or age (1h), each a whole report named STEM-TIME-RUN-NNNN.EXT beside --report; parts of an s3:// report are uploaded as each closes.")
    var reportRotate: String?

    @Flag(help: "Process what is queued, then exit when the queue is empty (for a job that drains a queue).")
    var untilEmpty = false

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
        guard let seconds = Units.parseDuration(visibility), seconds >= 10, seconds <= 43_200 else {
            throw ValidationError("--visibility expects a duration from 10s to 12h, got '\(visibility)'")
        }
        guard (1...100).contains(maxAttempts) else { throw ValidationError("--max-attempts must be from 1 to 100") }
        if isPostgres, deadLetter != nil {
            throw ValidationError("--dead-letter is for SQS; a PostgreSQL queue keeps failed items in its table (pipelinectl queue status)")
        }
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
        var listOptions: [String: OptionValue] = [
            "visibility": .number(Units.parseDuration(visibility) ?? 60),
            "until_empty": .bool(untilEmpty),
        ]
        if let deadLetter { listOptions["dead_letter"] = .string(deadLetter) }
        if isPostgres { listOptions["max_attempts"] = .number(Double(maxAttempts)) }
        var request = RunRequest(pipeline: pipeline, list: queue, options: options, output: output,
                                 stopGrace: Units.parseDuration(stopGrace) ?? 25)
        request.listPlugin = isPostgres ? "postgres" : "sqs"
        request.listOptions = listOptions
        request.ignoreOwnOutputs = true
        request.stopExitsZero = true
        request.listen = try listen.map { try ListenAddress($0) }
        request.rotate = reportRotate.flatMap(RotatingReport.parse)
        try await runPipeline(request)
    }

    var isPostgres: Bool { queue.hasPrefix("postgres://") || queue.hasPrefix("postgresql://") }
}
