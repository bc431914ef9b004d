import Foundation

/// The list slot: where a run's sources come from, one item at a time: a file of URLs and paths,
/// standard input, an object in a bucket, or a queue.
///
/// A list is a plugin (``Plugin/list(_:schemes:check:make:)``) chosen by the scheme of what
/// `pipelinectl run PIPELINE LIST` names (none for a path or `-`, `s3` for `s3://bucket/key`).
/// It is opened once, before the run starts, so that a list that cannot be read is said then.
/// A list that hands out work to be acknowledged (a queue) does so in ``settle(_:as:)``, which
/// the engine calls when an item is finished: after its outputs are stored.
public protocol SourceListing: Sendable {
    /// The list as messages and reports name it: a path, `-`, a URL.
    var name: String { get }
    /// The directory relative paths in the list resolve against.
    var baseDirectory: String { get }
    /// Whether sources may be read ahead in batches (a file); `false` for sources that come when
    /// they come (standard input, a queue), each started as soon as it arrives.
    var readsAhead: Bool { get }
    /// Checks that the list can be read (it exists, the store accepts the credentials); throws a
    /// ``PipelineError`` naming the list when not. Default: nothing to check before opening.
    func check() async throws
    /// Opens the list to read it once, from the start; throws naming the list when it cannot.
    func open() async throws -> any SourceCursor
    /// Called when the item made from `source` is finished, with its result: its outputs are
    /// stored, or it failed. A queue acknowledges or releases the item here. Default: nothing.
    func settle(_ source: Source, as result: ItemResult) async
    /// Asks a list that waits for sources (a queue) to end soon: its cursor returns `nil` once
    /// what it is waiting for now has come (a stop by signal). Default: nothing.
    func stopReading()
    /// Called once when the run is over, every started item settled: a queue hands back what it
    /// received but never started. Default: nothing.
    func runEnded() async
    /// How much waits in the list now, as far as it can tell (a queue's depth); `nil` for a list
    /// that cannot tell (a file). Asked when metrics are scraped. Default: `nil`.
    func depth() async -> ListDepth?
    /// Whether an item settled as failed comes back later (a queue keeps its message): then the
    /// queue is where "ready" events wait, not a journal on disk. Default: `false`.
    var redelivers: Bool { get }
}

/// What waits in a queue, for a worker's metrics: each figure `nil` when the queue does not tell.
public struct ListDepth: Sendable, Equatable {
    /// Items waiting to be received (SQS: ApproximateNumberOfMessages).
    public var waiting: Int?
    /// Items received by some worker and not yet acknowledged (SQS: ...NotVisible).
    public var inFlight: Int?
    /// Items failed for good, kept in the queue (PostgreSQL).
    public var failed: Int?
    /// Age of the oldest waiting item, in seconds.
    public var oldestSeconds: Double?

    public init(waiting: Int? = nil, inFlight: Int? = nil, failed: Int? = nil, oldestSeconds: Double? = nil) {
        self.waiting = waiting
        self.inFlight = inFlight
        self.failed = failed
        self.oldestSeconds = oldestSeconds
    }
}

extension SourceListing {
    public func check() async throws {}
    public func settle(_ source: Source, as result: ItemResult) async {}
    public var redelivers: Bool { false }
    public func stopReading() {}
    public func runEnded() async {}
    public func depth() async -> ListDepth? { nil }
}

/// An open list: its sources in order, each once; `nil` at the end. Read by one task at a time.
public protocol SourceCursor: AnyObject, Sendable {
    func next() async throws -> Source?
}

/// An open list as an `AsyncSequence`, for ``PipelineRunner/run(_:settle:onItem:)``.
public struct SourceCursorSequence: AsyncSequence, Sendable {
    public typealias Element = Source
    public let cursor: any SourceCursor
    /// Whether reading ahead in batches pays (``SourceListing/readsAhead``).
    public let readsAhead: Bool

    public init(_ cursor: any SourceCursor, readsAhead: Bool) {
        self.cursor = cursor
        self.readsAhead = readsAhead
    }

    public func makeAsyncIterator() -> Iterator { Iterator(cursor: cursor) }

    public struct Iterator: AsyncIteratorProtocol {
        let cursor: any SourceCursor
        public mutating func next() async throws -> Source? { try await cursor.next() }
    }
}

/// A list that is a queue `pipelinectl queue` can set up and fill (`pipelinectl queue init|enqueue|
/// status|retry|purge URL`): the list plugin of the URL's scheme makes it, as for `work`.
public protocol QueueAdministering: SourceListing {
    /// Creates what the queue needs (a table, its indexes), if missing; safe to run again.
    func initialize() async throws
    /// Adds sources (one item each); how many were added.
    func enqueue(_ sources: [String]) async throws -> Int
    /// Adds sources whose items continue the trace of `traceparent` (a W3C `traceparent`, such as
    /// a tracer injects for the caller's span): a worker's receive span of each is its child.
    /// By default the trace is not kept (a queue with nowhere to keep it).
    func enqueue(_ sources: [String], traceparent: String?) async throws -> Int
    /// The queue's figures now.
    func status() async throws -> QueueStatus
    /// Queues items failed for good again (those of `kind`, or all); how many.
    func retryFailed(kind: String?) async throws -> Int
    /// Deletes items failed for good (those of `kind`, or all); how many.
    func purgeFailed(kind: String?) async throws -> Int
}

extension QueueAdministering {
    public func enqueue(_ sources: [String], traceparent: String?) async throws -> Int { try await enqueue(sources) }
}

/// A queue's figures: what `pipelinectl queue status` prints and a worker's /metrics exposes.
public struct QueueStatus: Sendable, Equatable, Codable {
    public init(queued: Int, delayed: Int, running: Int, workers: Int, failed: Int, oldestQueuedSeconds: Double, failedByKind: [KindCount] = []) {
        self.queued = queued
        self.delayed = delayed
        self.running = running
        self.workers = workers
        self.failed = failed
        self.oldestQueuedSeconds = oldestQueuedSeconds
        self.failedByKind = failedByKind
    }

    /// Items waiting (including those waiting for a retry).
    public var queued: Int
    /// Of those, items released after a failure that may pass, waiting for their retry time.
    public var delayed: Int
    /// Items claimed by a worker now.
    public var running: Int
    /// Workers holding items now.
    public var workers: Int
    /// Items that failed for good.
    public var failed: Int
    /// Age of the oldest waiting item, in seconds (0 when none waits).
    public var oldestQueuedSeconds: Double
    public var failedByKind: [KindCount] = []

    public struct KindCount: Sendable, Equatable, Codable {
        public var kind: String
        public var count: Int

        public init(kind: String, count: Int) {
            self.kind = kind
            self.count = count
        }
    }

    enum CodingKeys: String, CodingKey {
        case queued, delayed, running, workers, failed
        case oldestQueuedSeconds = "oldest_queued_seconds"
        case failedByKind = "failed_by_kind"
    }
}
