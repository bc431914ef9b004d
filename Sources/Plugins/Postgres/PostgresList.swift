import Foundation
import PipelineKit
import Tracing
import Synchronization

/// A PostgreSQL queue table (``PostgresQueue``) read as a list of sources: the list a
/// `pipelinectl work` worker runs over with `--queue postgres://...`.
///
/// Rows are claimed in batches with `FOR UPDATE SKIP LOCKED` and leased; the leases of rows held
/// are extended every third of the lease while they run. A row is deleted once its outputs are
/// stored. A failure that may pass (a timeout, a refused connection, a 5xx, a store that could not
/// be written) queues the row again after a backoff growing with its attempts, until
/// `max_attempts`; any other failure (not an image, too large, not found, ...) keeps the row as
/// `failed` with its error kind and message. An idle worker waits on `LISTEN` for an insert, and
/// looks again every `poll` (rows released for a retry, leases of dead workers run out).
public final class PostgresList: QueueAdministering, Sendable {
    let url: PostgresQueueURL
    /// The two connections, made by `check()` or `open()`, whichever comes first (plugin makers
    /// are synchronous): claims and LISTEN on one; settles, lease extensions and depth on the
    /// other, so they never wait behind an idle worker's LISTEN.
    let connections = Mutex<Task<(reader: PostgresQueue, writer: PostgresQueue), any Error>?>(nil)
    let lease: Int
    let batch: Int
    let maxAttempts: Int
    let poll: Double
    let ignoredPrefixes: [String]
    let untilEmpty: Bool
    /// Who claims: host and process, as `running` rows show it.
    let worker: String

    struct State {
        var held = HeldMessages<PostgresQueue.Claim>()
        var keeper: Task<Void, Never>?
        var stopped = false
        /// Done rows waiting to be deleted, many to a statement.
        var done: [PostgresQueue.Claim] = []
        var flusher: Task<Void, Never>?
        /// When leases that ran out were last looked for.
        var reclaimed: ContinuousClock.Instant?
        /// How many rows the next claim takes.
        var claimSize: ClaimSize
    }

    /// How many rows a claim takes: `least` (the `batch` option), or, when this worker finishes
    /// more, what it finishes in about a tenth of a second (at most 1000). A worker making small
    /// images quickly then spends one statement on a hundred rows instead of ten (the database's
    /// CPU was 5% of a two-core machine's at 1,400 items a second, most of it claims), while a
    /// worker on slow items still holds only `least` rows that another worker could have taken.
    struct ClaimSize: Sendable {
        let least: Int
        static let most = 1000
        /// The rate is measured over windows of at least this many seconds.
        static let window = 0.5
        private var settled = 0
        private var windowStart: ContinuousClock.Instant?
        /// Rows settled a second, over the last window that ended.
        private(set) var rate = 0.0

        init(least: Int) { self.least = max(1, least) }

        mutating func settledOne() { settled += 1 }

        /// The size of a claim made `now`.
        mutating func next(now: ContinuousClock.Instant = .now) -> Int {
            if let start = windowStart {
                let elapsed = (now - start) / .seconds(1)
                if elapsed >= Self.window {
                    rate = Double(settled) / elapsed
                    settled = 0
                    windowStart = now
                }
            } else {
                settled = 0
                windowStart = now
            }
            return min(max(least, Int((rate / 10).rounded(.up))), max(least, Self.most))
        }
    }

    let state: Mutex<State>

    public var name: String { url.redacted }
    public var baseDirectory: String { FileManager.default.currentDirectoryPath }
    public var readsAhead: Bool { false }

    /// The queue at `url` (throws `invalid_source` when it is not a postgres:// URL); connects later.
    public init(url: String, lease: Int = 60, batch: Int = 10, maxAttempts: Int = 5, poll: Double = 5,
                ignoredPrefixes: [String] = [], untilEmpty: Bool = false) throws {
        self.url = try PostgresQueueURL(url)
        self.lease = max(10, lease)
        self.batch = max(1, batch)
        self.maxAttempts = max(1, maxAttempts)
        self.poll = max(0.5, poll)
        self.ignoredPrefixes = ignoredPrefixes.filter { !$0.isEmpty }
        self.untilEmpty = untilEmpty
        worker = "\(ProcessInfo.processInfo.hostName):\(getpid())"
        state = Mutex(State(claimSize: ClaimSize(least: self.batch)))
    }

    /// `postgres`: a PostgreSQL queue table as the list (`pipelinectl work PIPELINE --queue
    /// postgres://...`, or `pipelinectl run PIPELINE postgres://...`, which processes what is
    /// queued and ends).
    public static let plugin = Plugin.list(
        PluginSpec(name: "postgres",
                   summary: "Reads sources from a PostgreSQL queue table (pipelinectl queue init|enqueue|status); each row deleted once its outputs are stored, kept as failed with its error kind when it fails for good.",
                   options: [
                    .duration("visibility", default: "60s", min: "10s", max: "12h", doc: "The lease of a claimed row; extended while it runs, and the row comes back when a worker dies holding it."),
                    .int("batch", default: 10, range: 1...1000, doc: "Rows claimed at once, at least; a worker that finishes more claims what it finishes in about 100 ms (up to 1000)."),
                    .int("max_attempts", default: 5, range: 1...100, doc: "Claims of a row before a failure that may pass, or a worker lost while holding it, fails it for good."),
                    .duration("poll", default: "5s", min: "500ms", max: "5m", doc: "How often an idle worker looks for rows without a notification (retries due, leases run out)."),
                    .bool("until_empty", default: true, doc: "End when nothing can be claimed (pipelinectl work sets false: wait for more)."),
                    .list("ignore", of: .string, default: [], doc: "Source prefixes not processed (the pipeline's own outputs, so a worker writing into the bucket it watches makes no loop)."),
                   ]),
        schemes: ["postgres", "postgresql"]
    ) { options in
        try PostgresList(url: options.string("url") ?? "", lease: Int(options.seconds("visibility") ?? 60),
                         batch: options.int("batch") ?? 10, maxAttempts: options.int("max_attempts") ?? 5,
                         poll: options.seconds("poll") ?? 5, ignoredPrefixes: (options.list("ignore") ?? []).map(\.description),
                         untilEmpty: options.bool("until_empty") ?? true)
    }

    /// The reader and writer connections, made on first use.
    func connected() async throws -> (reader: PostgresQueue, writer: PostgresQueue) {
        let task = connections.withLock { task in
            if let task { return task }
            let made = Task { [url] in
                let parsed = url
                let reader = PostgresQueue(url: parsed, connection: try await PostgresConnection.connect(parsed))
                let writer = PostgresQueue(url: parsed, connection: try await PostgresConnection.connect(parsed))
                return (reader: reader, writer: writer)
            }
            task = made
            return made
        }
        return try await task.value
    }

    var writer: PostgresQueue {
        get async throws { try await connected().writer }
    }

    /// Runs a settling statement on the writer connection (a delete, a release, a lease
    /// extension, a hand-back), once more if the connection was lost: each is written so that
    /// running it twice does what running it once does (a delete, release or fail names the
    /// claim's attempt; an extension or a hand-back only rows this worker still holds), and the
    /// lost connection is already made again. Without it, rows done while the server restarted
    /// would wait for their lease to run out and be done once more.
    func settling(_ body: (PostgresQueue) async throws -> Void) async throws {
        do {
            try await body(writer)
        } catch let error as PipelineError where error.kind == .connect {
            try await body(writer)
        }
    }

    public func check() async throws { try await connected().reader.check() }

    public func open() async throws -> any SourceCursor {
        let reader = try await connected().reader
        try await reader.listen()
        startKeeper()
        return Cursor(list: self, queue: reader)
    }

    public func stopReading() { state.withLock { $0.stopped = true } }

    /// Deletes the done rows waiting (all, or only when there are 50); a row whose deletion
    /// fails comes back when its lease runs out (done once more, its outputs already there).
    func flushDone(all: Bool) async {
        let batch = state.withLock { state -> [PostgresQueue.Claim] in
            guard state.done.count >= 50 || (all && !state.done.isEmpty) else { return [] }
            defer { state.done = [] }
            return state.done
        }
        guard !batch.isEmpty else { return }
        // Taken from `done`: acknowledged even when the flushing task is cancelled (as SQS's).
        _ = try? await QueueSettlement.uncancelled { [self] in try await settling { try await $0.acknowledge(batch) } }
    }

    /// Hands back every row still held (claimed, never started): claimable again at once.
    public func runEnded() async {
        // Stopped, and waited for: an acknowledgement or a lease extension they had begun ends
        // before the hand-back below (as SQS's).
        let (flusher, keeper) = state.withLock { ($0.flusher, $0.keeper) }
        await QueueSettlement.stop(flusher, keeper)
        await flushDone(all: true)
        let left = state.withLock { $0.held.removeAll() }
        try? await settling { try await $0.handBack(left, worker: worker) }
    }

    /// A row settled as failed (one that may pass) is claimed again after its backoff.
    public var redelivers: Bool { true }

    public func depth() async -> ListDepth? {
        guard let status = try? await writer.status() else { return nil }
        return ListDepth(waiting: status.queued, inFlight: status.running, failed: status.failed, oldestSeconds: status.oldestQueuedSeconds)
    }

    public func initialize() async throws { try await writer.initialize() }
    public func enqueue(_ sources: [String]) async throws -> Int { try await checkedWriter().enqueue(sources) }
    public func enqueue(_ sources: [String], traceparent: String?) async throws -> Int {
        try await checkedWriter().enqueue(sources, traceparent: traceparent)
    }
    public func status() async throws -> QueueStatus { try await checkedWriter().status() }
    public func retryFailed(kind: String?) async throws -> Int { try await checkedWriter().requeueFailed(kind: kind) }
    public func purgeFailed(kind: String?) async throws -> Int { try await checkedWriter().purgeFailed(kind: kind) }

    /// The writer connection, once the table is known to be a queue table (else `not_found`
    /// saying to run `pipelinectl queue init`).
    private func checkedWriter() async throws -> PostgresQueue {
        let writer = try await writer
        try await writer.check()
        return writer
    }

    public func settle(_ source: Source, as result: ItemResult) async {
        let finished = state.withLock { state in
            state.claimSize.settledOne()
            return state.held.settle(source.text, as: result)
        }
        if let finished { await finish(finished) }
    }

    /// Deletes, releases or fails a row whose source is settled.
    func finish(_ held: HeldMessages<PostgresQueue.Claim>.Held) async {
        let claim = held.message
        do {
            if held.failures.isEmpty {
                // Deleted many to a statement: by the next 50, or within 100 ms.
                state.withLock { $0.done.append(claim) }
                await flushDone(all: false)
            } else if let passing = held.failures.first(where: QueueSettlement.mayPass), claim.attempts < maxAttempts {
                try await settling { try await $0.release(claim, after: QueueSettlement.backoff(deliveries: claim.attempts), error: passing) }
            } else {
                try await settling { try await $0.fail(claim, error: held.failures[0]) }
            }
        } catch {
            // The row's lease runs out and it is claimed again: done once more, nothing lost.
        }
    }

    /// Extends the lease of every held row, every third of the lease; and deletes done rows that
    /// wait for a full statement after 100 ms.
    func startKeeper() {
        let flusher = QueueSettlement.repeating(every: 0.1) { [weak self] in
            guard let self else { return false }
            await self.flushDone(all: true)
            return true
        }
        state.withLock { $0.flusher?.cancel(); $0.flusher = flusher }
        let task = QueueSettlement.repeating(every: Double(lease) / 3) { [weak self] in
            guard let self else { return false }
            let claims = self.state.withLock { $0.held.messages }
            _ = try? await QueueSettlement.uncancelled { try await self.settling { try await $0.extend(claims, lease: self.lease, worker: self.worker) } }
            return true
        }
        state.withLock { $0.keeper?.cancel(); $0.keeper = task }
    }

    deinit {
        state.withLock {
            $0.keeper?.cancel()
            $0.flusher?.cancel()
        }
    }

    var isStopped: Bool { state.withLock { $0.stopped } }

    /// Claims rows as the engine asks for sources.
    final class Cursor: SourceCursor, Sendable {
        let list: PostgresList
        let queue: PostgresQueue
        let buffer = Mutex<[Source]>([])
        /// Consecutive failed claims, for the wait before the next (the server restarting).
        let failures = Mutex(0)

        init(list: PostgresList, queue: PostgresQueue) {
            self.list = list
            self.queue = queue
        }

        func next() async throws -> Source? {
            while true {
                if let source = buffer.withLock({ $0.isEmpty ? nil : $0.removeFirst() }) { return source }
                if list.isStopped { return nil }
                let claims: [PostgresQueue.Claim]
                var claimedAt = DefaultTracerClock.now
                do {
                    // Leases that ran out are looked for every poll interval, and whenever nothing is due.
                    let reclaim = list.state.withLock { state in
                        state.reclaimed.map { ContinuousClock.now - $0 >= .seconds(list.poll) } ?? true
                    }
                    if reclaim {
                        try await queue.reclaimExpired(maxAttempts: list.maxAttempts)
                        list.state.withLock { $0.reclaimed = .now }
                    }
                    let limit = list.state.withLock { $0.claimSize.next() }
                    claimedAt = DefaultTracerClock.now
                    claims = try await queue.claim(limit: limit, lease: list.lease, worker: list.worker)
                    failures.withLock { $0 = 0 }
                } catch let error as PipelineError where error.kind == .connect {
                    // The server went away: wait and claim again (its connection is reset and
                    // listens again); give up after about a minute, so that the worker's exit
                    // says so and its supervisor restarts it.
                    let count = failures.withLock { $0 += 1; return $0 }
                    if count > 7 { throw error }
                    FileHandle.standardError.write(Data("warning: \(error.message); trying again\n".utf8))
                    try? await Task.sleep(for: .seconds(Double(min(16, 1 << (count - 1)))))
                    try? await queue.listen()
                    continue
                }
                if list.isStopped {
                    try? await list.settling { try await $0.handBack(claims, worker: list.worker) }
                    return nil
                }
                if claims.isEmpty {
                    if list.state.withLock({ $0.reclaimed.map { ContinuousClock.now - $0 >= .milliseconds(500) } ?? true }) {
                        list.state.withLock { $0.reclaimed = nil }  // look for run-out leases before waiting or ending
                        continue
                    }
                    if list.untilEmpty { return nil }
                    try await waitForWork()
                    continue
                }
                var sources: [Source] = []
                for claim in claims {
                    if list.ignoredPrefixes.contains(where: { claim.source.hasPrefix($0) }) {
                        try? await list.settling { try await $0.acknowledge(claim) }
                        continue
                    }
                    let span = MessageTrace.start(system: "postgresql", destination: queue.url.table, messageID: claim.id,
                                                  carrier: claim.traceparent.map { ["traceparent": $0] } ?? [:], receivedAt: claimedAt)
                    sources += list.state.withLock { $0.held.hold(claim.id, claim, sources: [claim.source], span: span) }
                }
                buffer.withLock { $0 += sources }
            }
        }

        /// Waits for a notification, the poll interval or a stop, whichever comes first.
        func waitForWork() async throws {
            let deadline = ContinuousClock.now + .seconds(list.poll)
            while !list.isStopped, ContinuousClock.now < deadline {
                let left = deadline - ContinuousClock.now
                let seconds = min(0.5, Double(left.components.seconds) + Double(left.components.attoseconds) / 1e18)
                do {
                    if try await queue.waitForWork(timeout: seconds) { return }
                } catch {
                    return  // claimed next, where a lost connection is waited out
                }
            }
        }
    }
}
