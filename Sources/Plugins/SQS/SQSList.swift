import Foundation
import PipelineKit
import Synchronization
import Tracing

/// An SQS queue read as a list of sources that never ends (or, with `untilEmpty`, ends when the
/// queue is empty and nothing is held): the list a `pipelinectl work` worker runs over.
///
/// Delivery is at least once, and nothing is acknowledged before it is done: a message is deleted
/// only when every source it names is settled by the engine, which settles an item after its
/// outputs are stored. While its sources run, a message's visibility is extended, so a slow item
/// is not delivered twice. A failure that may pass (a timeout, a refused connection, a 5xx, a store
/// that could not be written) releases the message for redelivery after a backoff that grows with
/// its receive count; any other failure (not an image, too large, not found, ...) sends it to the
/// dead-letter queue, when one is given, with the error kind as the attribute
/// `pipelinectl-error-kind`, and deletes it. S3's test events and messages with nothing to do are
/// deleted; a malformed message goes to the dead-letter queue as `invalid_source`. Sources under
/// one of `ignoredPrefixes` (the pipeline's own outputs) are not processed: a worker writing into
/// the bucket it watches makes no loop.
public final class SQSList: SourceListing, Sendable {
    let client: SQSClient
    let deadLetter: SQSClient?
    /// Seconds a received message stays invisible; extended every third of it while held.
    let visibility: Int
    let ignoredPrefixes: [String]
    let untilEmpty: Bool

    struct State {
        var held = HeldMessages<SQSMessage>()
        var keeper: Task<Void, Never>?
        var stopped = false
        /// Done messages waiting to be deleted, ten to a call (DeleteMessageBatch).
        var done: [SQSMessage] = []
        var flusher: Task<Void, Never>?
    }

    let state = Mutex(State())

    public var name: String { client.queue.url }
    public var baseDirectory: String { FileManager.default.currentDirectoryPath }
    public var readsAhead: Bool { false }

    init(client: SQSClient, deadLetter: SQSClient?, visibility: Int = 60, ignoredPrefixes: [String] = [], untilEmpty: Bool = false) {
        self.client = client
        self.deadLetter = deadLetter
        self.visibility = max(10, visibility)
        self.ignoredPrefixes = ignoredPrefixes.filter { !$0.isEmpty }
        self.untilEmpty = untilEmpty
    }

    /// The queue at `url` (and the dead-letter queue at `deadLetter`), reached with the AWS
    /// settings in `environment`.
    public static func open(_ url: String, deadLetter: String? = nil, visibility: Int = 60, ignoredPrefixes: [String] = [],
                            untilEmpty: Bool = false, environment: [String: String] = ProcessInfo.processInfo.environment) throws -> SQSList {
        // The URL first: an https URL that is not a queue's is said to be that, not a missing key.
        let queue = try SQSQueue(url, environment: environment)
        let credentials = try SQSClient.credentials(environment: environment)
        let client = SQSClient(queue: queue, credentials: credentials)
        let dead = try deadLetter.map { SQSClient(queue: try SQSQueue($0, environment: environment), credentials: credentials) }
        return SQSList(client: client, deadLetter: dead, visibility: visibility, ignoredPrefixes: ignoredPrefixes, untilEmpty: untilEmpty)
    }

    public func check() async throws {
        _ = try await client.depth()
        if let deadLetter { _ = try await deadLetter.depth() }
    }

    public func open() async throws -> any SourceCursor {
        startKeeper()
        return Cursor(list: self)
    }

    /// A message settled as failed comes back after its backoff.
    public var redelivers: Bool { true }

    public func depth() async -> ListDepth? {
        guard let (visible, inFlight) = try? await client.depth() else { return nil }
        return ListDepth(waiting: visible, inFlight: inFlight)
    }

    /// Messages held now (received, not yet acknowledged or released).
    var heldCount: Int { state.withLock { $0.held.count } }

    public func stopReading() { state.withLock { $0.stopped = true } }

    /// Deletes the done messages waiting, ten to a call; a message whose deletion fails comes
    /// back when its visibility runs out (done once more, its outputs already there).
    func flushDone(all: Bool) async {
        while true {
            let batch = state.withLock { state -> [SQSMessage] in
                guard state.done.count >= 10 || (all && !state.done.isEmpty) else { return [] }
                let batch = Array(state.done.prefix(10))
                state.done.removeFirst(batch.count)
                return batch
            }
            guard !batch.isEmpty else { return }
            // Taken from `done`: deleted even when the flushing task is cancelled (the run's end
            // cancels the flusher), which would otherwise leave the batch neither deleted nor waiting.
            let client = self.client
            _ = try? await QueueSettlement.uncancelled { try await client.delete(batch) }
        }
    }

    /// Hands back every message still held (received, never started): visible again at once.
    public func runEnded() async {
        // Stopped, and waited for: a deletion or an extension they had begun ends first, so that an
        // extension cannot land after the hand-back below and hide a message again.
        let (flusher, keeper) = state.withLock { ($0.flusher, $0.keeper) }
        await QueueSettlement.stop(flusher, keeper)
        await flushDone(all: true)
        let left = state.withLock { $0.held.removeAll() }
        for message in left { try? await client.extendVisibility(message, seconds: 0) }
    }

    /// `sqs`: a queue as the list (`pipelinectl work PIPELINE --queue URL`, or `pipelinectl run
    /// PIPELINE sqs://ACCOUNT/NAME`, which processes what is queued and ends).
    public static let plugin = Plugin.list(
        PluginSpec(name: "sqs",
                   summary: "Reads sources from an SQS queue: S3 event notifications or plain source lines; each message deleted once its outputs are stored.",
                   options: [
                    .string("dead_letter", doc: "A queue (URL or sqs://ACCOUNT/NAME) for messages that failed for good, with the error kind as an attribute."),
                    .duration("visibility", default: "60s", min: "10s", max: "12h", doc: "How long a received message stays invisible; extended while its items run."),
                    .bool("until_empty", default: true, doc: "End when the queue is empty and nothing is held (pipelinectl work sets false: wait for more)."),
                    .list("ignore", of: .string, default: [], doc: "Source prefixes not processed (the pipeline's own outputs, so a worker writing into the bucket it watches makes no loop)."),
                   ]),
        // A queue is named by its URL (https://sqs.REGION.amazonaws.com/ACCOUNT/NAME, or an
        // endpoint's own) or sqs://ACCOUNT/NAME.
        schemes: ["sqs", "https", "http"]
    ) { options in
        try open(options.string("url") ?? "", deadLetter: options.string("dead_letter").flatMap { $0.isEmpty ? nil : $0 },
                 visibility: Int(options.seconds("visibility") ?? 60), ignoredPrefixes: (options.list("ignore") ?? []).map(\.description),
                 untilEmpty: options.bool("until_empty") ?? true)
    }

    public func settle(_ source: Source, as result: ItemResult) async {
        if let finished = state.withLock({ $0.held.settle(source.text, as: result) }) { await finish(finished) }
    }

    /// Acknowledges, releases or dead-letters a message whose sources are all settled.
    func finish(_ held: HeldMessages<SQSMessage>.Held) async {
        do {
            if held.failures.isEmpty {
                // Deleted ten to a call: by the next full batch, or within 100 ms.
                state.withLock { $0.done.append(held.message) }
                await flushDone(all: false)
            } else if held.failures.contains(where: QueueSettlement.mayPass) {
                try await client.extendVisibility(held.message, seconds: QueueSettlement.backoff(deliveries: held.message.receiveCount))
            } else {
                try await deadLetterAndDelete(held.message, kind: held.failures[0].kind.rawValue)
            }
        } catch {
            // The message comes back when its visibility runs out: done once more, nothing lost.
        }
    }

    func deadLetterAndDelete(_ message: SQSMessage, kind: String) async throws {
        if let deadLetter { try await deadLetter.send(message.body, attributes: ["pipelinectl-error-kind": kind]) }
        try await client.delete(message)
    }

    /// Extends the visibility of every held message, every third of the visibility timeout; and
    /// deletes done messages that wait for a full batch after 100 ms.
    func startKeeper() {
        let flusher = QueueSettlement.repeating(every: 0.1) { [weak self] in
            guard let self else { return false }
            await self.flushDone(all: true)
            return true
        }
        state.withLock { $0.flusher?.cancel(); $0.flusher = flusher }
        let task = QueueSettlement.repeating(every: Double(visibility) / 3) { [weak self] in
            guard let self else { return false }
            let messages = self.state.withLock { $0.held.messages }
            let (client, visibility) = (self.client, self.visibility)
            for message in messages where !Task.isCancelled {
                try? await QueueSettlement.uncancelled { try await client.extendVisibility(message, seconds: visibility) }
            }
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

    /// Reads messages as the engine asks for sources; each message's sources handed out in turn.
    final class Cursor: SourceCursor, Sendable {
        let list: SQSList
        let buffer = Mutex<[Source]>([])

        init(list: SQSList) { self.list = list }

        func next() async throws -> Source? {
            while true {
                if let source = buffer.withLock({ $0.isEmpty ? nil : $0.removeFirst() }) { return source }
                if list.state.withLock({ $0.stopped }) { return nil }
                let receivedAt = DefaultTracerClock.now
                let messages = try await list.client.receive(limit: 10, wait: list.untilEmpty ? 1 : 20, visibility: list.visibility)
                if list.state.withLock({ $0.stopped }) {
                    // Received while stopping: handed back, visible again at once.
                    for message in messages { try? await list.client.extendVisibility(message, seconds: 0) }
                    return nil
                }
                if messages.isEmpty, list.untilEmpty { return nil }
                var sources: [Source] = []
                for message in messages { sources += await take(message, receivedAt: receivedAt) }
                buffer.withLock { $0 += sources }
            }
        }

        /// The sources of `message` to process (registering it as held), in the trace of its
        /// span; deletes or dead-letters a message with none.
        func take(_ message: SQSMessage, receivedAt: DefaultTracerClock.Instant) async -> [Source] {
            let parsed: QueueMessage
            do { parsed = try QueueMessage.parse(message.body) } catch {
                try? await list.deadLetterAndDelete(message, kind: ErrorKind.invalidSource.rawValue)
                return []
            }
            guard case .sources(let all, let versions, let facts) = parsed else {
                try? await list.client.delete(message)
                return []
            }
            let named = all.enumerated().map { ($0.element, $0.offset < versions.count ? versions[$0.offset] : nil) }
            let wanted = named.filter { source in !list.ignoredPrefixes.contains { source.0.hasPrefix($0) } }
            guard !wanted.isEmpty else {
                try? await list.client.delete(message)
                return []
            }
            let span = MessageTrace.start(system: "aws_sqs", destination: list.client.queue.name, messageID: message.id,
                                          carrier: message.attributes, receivedAt: receivedAt, facts: facts.count == 1 ? facts[0] : [:])
            let sources = list.state.withLock { state in
                // A message received again while still held (its visibility ran out) replaces the
                // old handle: only the newest one can delete it.
                if state.held.contains(message.id) {
                    state.held.replace(message.id, with: message)
                    return [Source]()
                }
                return state.held.hold(message.id, message, sources: wanted.map(\.0), versions: wanted.map(\.1), span: span)
            }
            if sources.isEmpty {
                span.attributes["pipelinectl.already_held"] = true
                span.end()
            }
            return sources
        }
    }
}
