import ArgumentParser
import Foundation
import PipelineKit

/// `pipelinectl queue`: the PostgreSQL work queue `pipelinectl work --queue postgres://...` reads.
struct QueueCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "queue",
        abstract: "Set up, fill and inspect a PostgreSQL work queue (for pipelinectl work).",
        discussion: helpText("""
            The queue is one table (default pipelinectl_queue; choose another with ?table=NAME in
            the URL). Each row is a source: queued, running (claimed by a worker, with a lease) or
            failed (with its error kind); a done row is deleted. The URL is libpq's: what it leaves
            out comes from PGHOST, PGUSER, PGPASSWORD, PGSSLMODE, ... and ~/.pgpass. An INSERT by any
            program wakes idle workers (a trigger notifies them), so an application may enqueue with
            plain SQL: INSERT INTO pipelinectl_queue (source) VALUES ('s3://uploads/a.jpg').

            Examples:
              pipelinectl queue init postgres://app@db/images
              pipelinectl queue enqueue postgres://app@db/images urls.txt
              pipelinectl queue enqueue postgres://app@db/images urls.txt \\
                --traceparent "$TRACEPARENT"
              aws s3 ls s3://uploads/ --recursive | awk '{print "s3://uploads/" $4}' \\
                | pipelinectl queue enqueue postgres://app@db/images -
              pipelinectl queue status postgres://app@db/images
              pipelinectl queue retry postgres://app@db/images --kind timeout
            """),
        subcommands: [Init.self, Enqueue.self, Status.self, Retry.self, Purge.self])

    struct Target: ParsableArguments {
        @Argument(help: "The queue: postgres://USER@HOST:PORT/DATABASE, with ?table=NAME for another table than pipelinectl_queue.")
        var url: String

        /// The queue the list plugin of the URL's scheme makes; exit 2 when there is none.
        func queue() throws -> any QueueAdministering {
            let list: any SourceListing
            do { list = try PipelineCtl.registry.makeList(url) } catch {
                printError("error: \((error as? PipelineError)?.message ?? "\(error)")")
                throw Exit.invalid
            }
            guard let queue = list as? any QueueAdministering else {
                printError("error: '\(url)' is not a queue pipelinectl queue manages (postgres://USER@HOST/DATABASE); SQS queues are filled by S3 notifications or aws sqs send-message")
                throw Exit.invalid
            }
            return queue
        }
    }

    /// Runs `body`, printing a failure as `error: ...`: exit 2 for a wrong URL, refused
    /// credentials or a missing table (they will not fix themselves), 3 otherwise.
    static func attempt<T>(_ body: () async throws -> T) async throws -> T {
        do { return try await body() } catch {
            printError("error: \((error as? PipelineError)?.message ?? "\(error)")")
            let kind = (error as? PipelineError)?.kind
            throw kind == .invalidSource || kind == .auth || kind == .notFound ? Exit.invalid : Exit.infrastructure
        }
    }

    struct Init: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "init",
            abstract: "Create the queue table, its indexes and its notification trigger (safe to run again).")
        @OptionGroup var target: Target

        func run() async throws {
            let queue = try target.queue()
            try await QueueCommand.attempt { try await queue.initialize() }
            print("queue ready: \(queue.name)")
        }
    }

    struct Enqueue: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "enqueue",
            abstract: "Add sources, one per line, from files or standard input (COPY: about a million lines a minute).")
        @OptionGroup var target: Target

        @Argument(help: "Files of sources, one per line (# comments and empty lines skipped); - or nothing for standard input.")
        var files: [String] = []

        @Option(help: ArgumentHelp("The W3C trace context the items continue (00-TRACEID-SPANID-FLAGS): a worker's span of each row is its child. Default: the TRACEPARENT variable, when set.", valueName: "traceparent"))
        var traceparent: String?

        /// `--traceparent`, or else `TRACEPARENT`; exits 2 when it is not a W3C traceparent.
        func carriedTrace() throws -> String? {
            let given = traceparent ?? ProcessInfo.processInfo.environment["TRACEPARENT"].flatMap { $0.isEmpty ? nil : $0 }
            guard let given else { return nil }
            guard Traceparent(["traceparent": given]) != nil else {
                printError("error: \(traceparent == nil ? "TRACEPARENT" : "--traceparent") expects a W3C traceparent such as 00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01, got '\(given)'")
                throw Exit.invalid
            }
            return given.lowercased()
        }

        func run() async throws {
            let trace = try carriedTrace()
            let queue = try target.queue()
            var total = 0
            for file in files.isEmpty ? ["-"] : files {
                let text: String
                if file == "-" {
                    text = String(decoding: FileHandle.standardInput.readDataToEndOfFile(), as: UTF8.self)
                } else {
                    guard let data = FileManager.default.contents(atPath: file) else {
                        printError("error: cannot read \(file)")
                        throw Exit.invalid
                    }
                    text = String(decoding: data, as: UTF8.self)
                }
                let lines = text.split(whereSeparator: \.isNewline).map(String.init)
                total += try await QueueCommand.attempt { try await queue.enqueue(lines, traceparent: trace) }
            }
            print("enqueued \(total) source\(total == 1 ? "" : "s") in \(queue.name)")
        }
    }

    struct Status: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "status",
            abstract: "Items queued (and the oldest's age), running (and by how many workers), failed by kind.")
        @OptionGroup var target: Target
        @Flag(help: "Print JSON.") var json = false

        func run() async throws {
            let queue = try target.queue()
            let status = try await QueueCommand.attempt { try await queue.status() }
            if json {
                let encoder = JSONEncoder()
                encoder.outputFormatting = [.prettyPrinted, .sortedKeys, .withoutEscapingSlashes]
                print(String(decoding: try encoder.encode(status), as: UTF8.self))
                return
            }
            print("queue \(queue.name)")
            var queued = "  queued   \(status.queued)"
            if status.queued > 0 { queued += " (oldest \(Units.formatDuration(status.oldestQueuedSeconds.rounded())) ago" + (status.delayed > 0 ? ", \(status.delayed) waiting to be retried)" : ")") }
            print(queued)
            print("  running  \(status.running)" + (status.running > 0 ? " (\(status.workers) worker\(status.workers == 1 ? "" : "s"))" : ""))
            print("  failed   \(status.failed)" + (status.failedByKind.isEmpty ? "" : ": " + status.failedByKind.map { "\($0.kind) \($0.count)" }.joined(separator: ", ")))
        }
    }

    struct Retry: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "retry",
            abstract: "Queue failed items again (all, or those of one error kind), their attempts reset.")
        @OptionGroup var target: Target
        @Option(help: "Only items that failed with this kind (as `queue status` lists them, e.g. timeout).")
        var kind: String?

        func run() async throws {
            let queue = try target.queue()
            let count = try await QueueCommand.attempt { try await queue.retryFailed(kind: kind) }
            print("queued \(count) failed item\(count == 1 ? "" : "s") again")
        }
    }

    struct Purge: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "purge",
            abstract: "Delete failed items (all, or those of one error kind).")
        @OptionGroup var target: Target
        @Option(help: "Only items that failed with this kind (e.g. not_an_image).")
        var kind: String?

        func run() async throws {
            let queue = try target.queue()
            let count = try await QueueCommand.attempt { try await queue.purgeFailed(kind: kind) }
            print("deleted \(count) failed item\(count == 1 ? "" : "s")")
        }
    }
}
