import Foundation
import Logging
import Synchronization

/// The engine's side of "ready" events: every finished item's event goes to each notifier of the
/// pipeline's `notify:` list, at least once.
///
/// - Before the first try, the event is appended to the journal (a JSON-lines file beside the
///   report) and flushed to disk; once a notifier takes it, a line says so. A run killed between
///   the two sends it again when the next run with the same journal starts (``deliverPending()``):
///   with the same id, so receivers can drop the second copy.
/// - Without a journal (`work` on a queue), the queue is the store: an event left pending marks
///   the item `event_pending` for the queue, which keeps the message and delivers the item again.
/// - Each notifier gets `attempts` tries, `backoff` apart and doubling; its own timeout bounds
///   each try. What is still pending at the end of the run gets one more round (``finish()``) and
///   then stays in the journal.
/// - A notifier that failed three events in a row is not tried for a while (a circuit breaker:
///   a cool-down of 8 backoffs, 5 s to 5 minutes, then one event tries it again): a receiver that
///   is down costs the items nothing but a line in the journal (or the queue's redelivery), not
///   `attempts` × `timeout` each.
public final class EventOutbox: Sendable {
    /// One notifier with its retry policy.
    public struct Notifier: Sendable {
        public var name: String
        public var sender: any EventSending
        public var attempts: Int
        /// Seconds before the second try; doubled before each further one.
        public var backoff: Double
        /// The event types it takes (`item.ready`, `item.failed`).
        public var types: Set<String>

        public init(name: String, sender: any EventSending, attempts: Int = 3, backoff: Double = 1,
                    types: Set<String> = ["item.ready", "item.failed"]) {
            self.name = name
            self.sender = sender
            self.attempts = max(1, attempts)
            self.backoff = max(0, backoff)
            self.types = types
        }
    }

    /// Counts for the run's summary.
    public struct Counts: Sendable, Equatable {
        /// Deliveries made (an event to one notifier), this run's and earlier runs' pending ones.
        public var delivered = 0
        /// Events still pending for some notifier when the run ended.
        public var pending = 0
    }

    let notifiers: [Notifier]
    let journal: EventJournal?
    let logger: Logger
    /// Per notifier: events failed in a row, and until when it is not tried.
    private let breakers: Mutex<[(failures: Int, openUntil: ContinuousClock.Instant?)]>
    private let delivered = Atomic(0)
    /// Pending events past ``pendingKept``: counted, not tried again in the last round.
    private let overflow = Atomic(0)
    /// Events of this run (and replayed ones) not taken by a notifier: (id, notifier) -> event.
    private let pending = Mutex<[String: (event: ItemEvent, notifier: Int)]>([:])

    /// `journalPath`: where pending events are kept (`nil`: the caller's queue keeps them).
    /// `compactJournalAfter`: bytes appended before the journal is rewritten with only what is pending.
    public init(notifiers: [Notifier], journalPath: String?, logger: Logger = Logger(label: "pipelinectl.events"),
                compactJournalAfter: Int = 64 << 20) throws {
        self.notifiers = notifiers
        self.logger = logger
        breakers = Mutex(Array(repeating: (0, nil), count: notifiers.count))
        journal = try journalPath.map { try EventJournal(path: $0, compactAfter: compactJournalAfter) }
    }

    /// The outbox of `pipeline`'s `notify:` list (each notifier built now), or `nil` without one.
    public convenience init?(pipeline: Pipeline, journalPath: String?, logger: Logger = Logger(label: "pipelinectl.events")) throws {
        guard !pipeline.notifiers.isEmpty else { return nil }
        let notifiers = try pipeline.notifiers.map { config in
            let on = config.options.string("on") ?? "all"
            return Notifier(name: config.plugin.spec.name, sender: try config.makeNotifier(),
                            attempts: config.options.int("attempts") ?? 3, backoff: config.options.number("backoff") ?? 1,
                            types: on == "all" ? ["item.ready", "item.failed"] : ["item." + on])
        }
        try self.init(notifiers: notifiers, journalPath: journalPath, logger: logger)
    }

    /// Sends what an earlier run left in the journal, before this run's items. Returns how many
    /// events are still pending.
    @discardableResult
    public func deliverPending() async -> Int {
        guard let journal else { return 0 }
        let left = journal.pending()
        await withTaskGroup(of: Void.self) { group in
            for entry in left {
                guard let index = notifiers.firstIndex(where: { $0.name == entry.notifier }) else { continue }
                group.addTask {
                    if await self.send(entry.event, to: index) == nil { journal.delivered(entry.event.id, notifier: entry.notifier) } else {
                        self.remember(entry.event, notifier: index)
                    }
                }
            }
        }
        return pending.withLock { $0.count }
    }

    /// Announces `item` (finished from `source`): kept first, then sent to every notifier.
    /// `nil` for an item that is not announced (skipped, a duplicate delivery).
    public func announce(_ item: ItemResult, pipeline: String, source: Source) async -> EventState? {
        guard let event = ItemEvent.of(item, pipeline: pipeline, source: source) else { return nil }
        let takers = notifiers.indices.filter { notifiers[$0].types.contains(event.type) }
        guard !takers.isEmpty else { return nil }
        if let journal {
            for notifier in takers.map({ notifiers[$0] }) {
                do { try journal.keep(event, notifier: notifier.name) } catch {
                    logger.warning("cannot keep the event in the journal", metadata: ["journal": "\(journal.path)", "error": "\(error)"])
                }
            }
        }
        var problems: [String] = []
        for index in takers {
            if let problem = await send(event, to: index) {
                problems.append(problem)
                remember(event, notifier: index)
            } else {
                journal?.delivered(event.id, notifier: notifiers[index].name)
            }
        }
        return EventState(id: event.id, state: problems.isEmpty ? "delivered" : "pending",
                          error: problems.isEmpty ? nil : problems.joined(separator: "; "))
    }

    /// Notes a pending event for ``finish()``'s last round: at most ``pendingKept`` of them (the
    /// journal or the queue keeps every one; this is only what the run tries once more).
    private func remember(_ event: ItemEvent, notifier index: Int) {
        let kept = pending.withLock { pending -> Bool in
            let key = event.id + "\u{1}" + notifiers[index].name
            guard pending.count < Self.pendingKept || pending[key] != nil else { return false }
            pending[key] = (event, index)
            return true
        }
        if !kept { overflow.add(1, ordering: .relaxed) }
    }

    /// How many pending events a run keeps in memory for its last round.
    static let pendingKept = 10_000

    /// At the end of a run: one more round for every pending event, then the journal keeps only
    /// what is still pending (removed when nothing is). The run's counts.
    public func finish() async -> Counts {
        let left = pending.withLock { pending in
            defer { pending = [:] }
            return Array(pending.values)
        }
        let remaining = await withTaskGroup(of: (event: ItemEvent, notifier: Int)?.self) { group in
            for entry in left {
                group.addTask {
                    guard await self.send(entry.event, to: entry.notifier) != nil else {
                        self.journal?.delivered(entry.event.id, notifier: self.notifiers[entry.notifier].name)
                        return nil
                    }
                    return entry
                }
            }
            var still: [(event: ItemEvent, notifier: Int)] = []
            for await entry in group { if let entry { still.append(entry) } }
            return still
        }
        if let journal {
            do { try journal.compact() } catch {
                logger.warning("cannot rewrite the event journal", metadata: ["journal": "\(journal.path)", "error": "\(error)"])
            }
        }
        if !remaining.isEmpty {
            logger.warning("events pending", metadata: [
                "count": "\(Set(remaining.map(\.event.id)).count)",
                "kept": "\(journal?.path ?? "in the queue: its items are delivered again")",
            ])
        }
        return Counts(delivered: delivered.load(ordering: .relaxed),
                      pending: Set(remaining.map(\.event.id)).count + overflow.load(ordering: .relaxed))
    }

    /// One notifier's tries; `nil` when it took the event, else what it said last.
    func send(_ event: ItemEvent, to index: Int) async -> String? {
        let notifier = notifiers[index]
        let now = ContinuousClock.now
        let cooling = breakers.withLock { breakers -> Int? in
            guard let until = breakers[index].openUntil else { return nil }
            if now < until { return breakers[index].failures }
            // Cooled down: this event tries it; the others wait for what it finds.
            breakers[index].openUntil = now + Self.coolDown(notifier)
            return nil
        }
        if let failures = cooling { return "\(notifier.name): not tried (\(failures) events failed in a row; tried again after a cool-down)" }
        let problem = await tries(event, notifier)
        breakers.withLock { breakers in
            if problem == nil {
                breakers[index] = (0, nil)
            } else {
                breakers[index].failures += 1
                if breakers[index].failures >= 3 { breakers[index].openUntil = ContinuousClock.now + Self.coolDown(notifier) }
            }
        }
        return problem
    }

    /// How long a notifier that keeps failing is left alone: 8 backoffs, 5 s to 5 minutes.
    static func coolDown(_ notifier: Notifier) -> Duration { .seconds(min(300, max(5, notifier.backoff * 8))) }

    /// `notifier`'s `attempts` tries of `event`; `nil` when one took it.
    func tries(_ event: ItemEvent, _ notifier: Notifier) async -> String? {
        var last = ""
        for attempt in 0..<notifier.attempts {
            if attempt > 0 {
                let wait = notifier.backoff * Double(1 << min(attempt - 1, 16))
                do { try await Task.sleep(for: .seconds(wait)) } catch { break }  // cancelled: left pending
            }
            do {
                try await notifier.sender.send(event)
                delivered.add(1, ordering: .relaxed)
                return nil
            } catch {
                last = (error as? PipelineError)?.message ?? "\(error)"
                logger.debug("event not taken", metadata: ["notifier": "\(notifier.name)", "id": "\(event.id)", "attempt": "\(attempt + 1)",
                                                           "error": "\(last)"])
            }
        }
        return "\(notifier.name): \(last)"
    }
}

/// The pending events of a run, as JSON lines: `keep` before the first try (flushed to disk),
/// `delivered` once a notifier took it. Read back by the next run with the same journal. Past
/// ``compactAfter`` bytes appended, it is rewritten with only what is pending, so a run of
/// millions of items keeps a journal the size of what waits, not of what was sent.
final class EventJournal: Sendable {
    struct Line: Codable {
        var op: String
        var id: String
        var notifier: String
        var type: String?
        /// The event's body, as sent (JSON text).
        var body: String?
    }

    let path: String
    /// Bytes appended since the file was last rewritten, and the size that triggers a rewrite.
    private let appended = Mutex(0)
    let compactAfter: Int
    private let handle: Mutex<FileHandle?>
    /// What the file held when opened, and what was kept and delivered since: (id, notifier) -> event.
    private let open: Mutex<[String: (event: ItemEvent, notifier: String)]>

    init(path: String, compactAfter: Int = 64 << 20) throws {
        self.path = path
        self.compactAfter = compactAfter
        var entries: [String: (event: ItemEvent, notifier: String)] = [:]
        if let text = try? String(contentsOfFile: path, encoding: .utf8) {
            // Only whole lines: a kill can leave the last without its newline.
            for line in text.split(separator: "\n", omittingEmptySubsequences: false).dropLast() {
                guard let entry = try? JSONDecoder().decode(Line.self, from: Data(line.utf8)) else { continue }
                let key = entry.id + "\u{1}" + entry.notifier
                if entry.op == "keep", let body = entry.body {
                    entries[key] = (ItemEvent(type: entry.type ?? "item.ready", id: entry.id, body: Data(body.utf8)), entry.notifier)
                } else if entry.op == "delivered" {
                    entries[key] = nil
                }
            }
        }
        open = Mutex(entries)
        handle = Mutex(nil)
    }

    /// What was pending when the journal was opened.
    func pending() -> [(event: ItemEvent, notifier: String)] { open.withLock { Array($0.values) } }

    /// Keeps `event` for `notifier`, on disk before this returns.
    func keep(_ event: ItemEvent, notifier: String) throws {
        open.withLock { $0[event.id + "\u{1}" + notifier] = (event, notifier) }
        try append(Line(op: "keep", id: event.id, notifier: notifier, type: event.type, body: String(decoding: event.body, as: UTF8.self)),
                   sync: true)
    }

    /// Notes that `notifier` took the event (not flushed: a kill before it sends the event again).
    func delivered(_ id: String, notifier: String) {
        open.withLock { $0[id + "\u{1}" + notifier] = nil }
        try? append(Line(op: "delivered", id: id, notifier: notifier), sync: false)
    }

    /// Rewrites the journal with only what is pending; removes it when nothing is.
    func compact() throws {
        try handle.withLock { handle in try rewrite(&handle, removingWhenEmpty: true) }
    }

    /// The rewrite, under the handle's lock: the pending events, each as a `keep` line.
    private func rewrite(_ handle: inout FileHandle?, removingWhenEmpty: Bool) throws {
            try handle?.close()
            handle = nil
            appended.withLock { $0 = 0 }
            let left = open.withLock { Array($0.values) }
            if left.isEmpty, removingWhenEmpty {
                if FileManager.default.fileExists(atPath: path) { try FileManager.default.removeItem(atPath: path) }
                return
            }
            var text = Data()
            for entry in left {
                text += try JSONEncoder.sorted.encode(Line(op: "keep", id: entry.event.id, notifier: entry.notifier, type: entry.event.type,
                                                           body: String(decoding: entry.event.body, as: UTF8.self)))
                text += Data("\n".utf8)
            }
            try text.write(to: URL(fileURLWithPath: path), options: .atomic)
    }

    private func append(_ line: Line, sync: Bool) throws {
        var data = try JSONEncoder.sorted.encode(line)
        data.append(0x0A)
        try handle.withLock { handle in
            if handle == nil {
                try FileManager.default.createDirectory(atPath: (path as NSString).deletingLastPathComponent, withIntermediateDirectories: true)
                if !FileManager.default.fileExists(atPath: path) { _ = FileManager.default.createFile(atPath: path, contents: nil) }
                let opened = try FileHandle(forWritingTo: URL(fileURLWithPath: path))
                try opened.seekToEnd()
                handle = opened
            }
            try handle!.write(contentsOf: data)
            if sync { try handle!.synchronize() }
            let total = appended.withLock { $0 += data.count; return $0 }
            // The rewrite is atomic (a new file renamed over the old): a kill during it leaves one or the other.
            if total > compactAfter { try rewrite(&handle, removingWhenEmpty: false) }
        }
    }
}
