import Foundation
@testable import PipelineKit
import Synchronization
import Testing
import TestSupport

/// The engine's delivery of "ready" events, with fake notifiers: kept before the first try,
/// retried, replayed after a kill, counted.
struct EventOutboxTests {
    /// A notifier that refuses its first `failures` tries, then takes every event; records ids.
    final class FakeSender: EventSending {
        let failures: Int
        let seen = Mutex<[String]>([])
        let check: @Sendable (ItemEvent) -> Void
        init(failures: Int = 0, check: @escaping @Sendable (ItemEvent) -> Void = { _ in }) {
            self.failures = failures
            self.check = check
        }
        func send(_ event: ItemEvent) async throws {
            check(event)
            let tries = seen.withLock { $0.append(event.id); return $0.count }
            if tries <= failures { throw PipelineError(.httpStatus, "fake: HTTP 500") }
        }
        var ids: [String] { seen.withLock { $0 } }
    }

    func item(_ name: String, bytes: Int = 100, status: ItemStatus = .ok) -> (ItemResult, Source) {
        var item = ItemResult(source: "/in/\(name)", index: 1, status: status)
        item.outputs = ["/out/\(name)"]
        item.variants = [VariantOutput(name: nil, path: "/out/\(name)", width: 10, height: 10, bytes: bytes, format: "jpg")]
        return (item, Source(text: "/in/\(name)", index: 1))
    }

    @Test func idsFollowWhatWasMade() throws {
        let (a, source) = item("a.jpg")
        let first = try #require(ItemEvent.of(a, pipeline: "p", source: source))
        #expect(first.id == ItemEvent.of(a, pipeline: "p", source: source, at: Date(timeIntervalSince1970: 0))?.id, "made again: the same id")
        #expect(first.id.hasPrefix("evt_") && first.id.count == 36)
        let (other, _) = item("a.jpg", bytes: 101)
        #expect(ItemEvent.of(other, pipeline: "p", source: source)?.id != first.id, "other bytes: another event")
        var versioned = source
        versioned.version = "etag-2"
        #expect(ItemEvent.of(a, pipeline: "p", source: versioned)?.id != first.id, "a re-upload: another event")
        var duplicate = a
        duplicate.duplicate = true
        #expect(ItemEvent.of(duplicate, pipeline: "p", source: source) == nil)
        #expect(ItemEvent.of(self.item("b.jpg", status: .skipped).0, pipeline: "p", source: source) == nil)
        let body = try #require(try JSONSerialization.jsonObject(with: first.body) as? [String: Any])
        #expect(body["type"] as? String == "item.ready" && body["timestamp"] is String)
        #expect(((body["data"] as? [String: Any])?["item"] as? [String: Any])?["source"] as? String == "/in/a.jpg")
    }

    @Test func keptOnDiskBeforeTheFirstTryAndRetried() async throws {
        let dir = try Fixtures.temporaryDirectory("outbox")
        let journal = dir.appendingPathComponent("report.json.events").path
        let sender = FakeSender(failures: 2) { event in
            // What a kill at this moment would leave: the event, in the journal.
            let text = (try? String(contentsOfFile: journal, encoding: .utf8)) ?? ""
            #expect(text.contains("\"keep\"") && text.contains(event.id))
        }
        let outbox = try EventOutbox(notifiers: [.init(name: "fake", sender: sender, attempts: 3, backoff: 0)], journalPath: journal)
        let (a, source) = item("a.jpg")
        let state = try #require(await outbox.announce(a, pipeline: "p", source: source))
        #expect(state.state == "delivered" && sender.ids == Array(repeating: state.id, count: 3))
        #expect(await outbox.finish() == EventOutbox.Counts(delivered: 1, pending: 0))
        #expect(!FileManager.default.fileExists(atPath: journal), "nothing pending: no journal")
    }

    /// A run killed with events pending (no `finish`): the next outbox on the journal sends them
    /// first, with their ids; a line cut short by the kill is ignored.
    @Test func aJournalLeftByAKillIsSentByTheNextRun() async throws {
        let dir = try Fixtures.temporaryDirectory("outbox-kill")
        let journal = dir.appendingPathComponent("events.jsonl").path
        let refusing = FakeSender(failures: 1000)
        let killed = try EventOutbox(notifiers: [.init(name: "fake", sender: refusing, attempts: 2, backoff: 0)], journalPath: journal)
        var ids: [String] = []
        for name in ["a.jpg", "b.jpg"] {
            let (made, source) = item(name)
            let state = try #require(await killed.announce(made, pipeline: "p", source: source))
            #expect(state.state == "pending" && state.error?.contains("fake: HTTP 500") == true)
            ids.append(state.id)
        }
        let handle = try FileHandle(forWritingTo: URL(fileURLWithPath: journal))
        try handle.seekToEnd()
        try handle.write(contentsOf: Data("{\"op\":\"keep\",\"id\":\"evt_cut".utf8))
        try handle.close()

        let taking = FakeSender()
        let next = try EventOutbox(notifiers: [.init(name: "fake", sender: taking, attempts: 1, backoff: 0)], journalPath: journal)
        #expect(await next.deliverPending() == 0)
        #expect(Set(taking.ids) == Set(ids))
        #expect(await next.finish() == EventOutbox.Counts(delivered: 2, pending: 0))
        #expect(!FileManager.default.fileExists(atPath: journal))
    }

    /// Without a journal (a queue keeps the item), a pending event is only reported; `finish`
    /// tries once more and counts what is left.
    @Test func withoutAJournalPendingIsReported() async throws {
        let sender = FakeSender(failures: 3)
        let outbox = try EventOutbox(notifiers: [.init(name: "fake", sender: sender, attempts: 2, backoff: 0)], journalPath: nil)
        let (a, source) = item("a.jpg")
        #expect(await outbox.announce(a, pipeline: "p", source: source)?.state == "pending")
        // Third try fails in finish's round (two tries: the fourth takes it).
        #expect(await outbox.finish() == EventOutbox.Counts(delivered: 1, pending: 0))
        #expect(sender.ids.count == 4)
    }

    @Test func aNotifierTakesOnlyTheTypesItAsksFor() async throws {
        let sender = FakeSender()
        let outbox = try EventOutbox(notifiers: [.init(name: "fake", sender: sender, types: ["item.ready"])], journalPath: nil)
        let (failed, source) = item("a.jpg", status: .failed)
        #expect(await outbox.announce(failed, pipeline: "p", source: source) == nil)
        #expect(sender.ids.isEmpty)
    }

    /// A receiver that is down: after three events failed in a row, the rest are not tried (each
    /// would cost `attempts` tries inside its item); they are pending, saying why.
    @Test func aNotifierThatKeepsFailingIsLeftAloneForAWhile() async throws {
        let sender = FakeSender(failures: 1_000_000)
        let outbox = try EventOutbox(notifiers: [.init(name: "fake", sender: sender, attempts: 2, backoff: 0)], journalPath: nil)
        var states: [EventState] = []
        for n in 0..<20 {
            let (made, source) = item("\(n).jpg")
            states.append(try #require(await outbox.announce(made, pipeline: "p", source: source)))
        }
        #expect(sender.ids.count == 6, "three events, two tries each, then none")
        #expect(states.allSatisfy { $0.state == "pending" })
        #expect(states.dropFirst(3).allSatisfy { $0.error?.contains("not tried") == true })
    }

    /// A long run's journal stays the size of what is pending: past its threshold it is
    /// rewritten with the pending events only, which a next run still finds.
    @Test func aLongRunsJournalIsRewrittenWithWhatIsPending() async throws {
        let dir = try Fixtures.temporaryDirectory("outbox-compact")
        let journal = dir.appendingPathComponent("events.jsonl").path
        // The first event is refused (pending); the 299 after it are taken.
        let sender = FakeSender(failures: 1)
        let outbox = try EventOutbox(notifiers: [.init(name: "fake", sender: sender, attempts: 1, backoff: 0)], journalPath: journal,
                                     compactJournalAfter: 20_000)
        var first: String?
        for n in 0..<300 {
            let (made, source) = item("\(n).jpg")
            let state = await outbox.announce(made, pipeline: "p", source: source)
            if n == 0 { first = state?.id }
        }
        let size = (try FileManager.default.attributesOfItem(atPath: journal)[.size] as? Int) ?? 0
        #expect(size < 40_000, "300 events sent, the journal holds \(size) bytes")
        // What a kill now would leave: the refused event, which the next run sends.
        let next = FakeSender()
        let later = try EventOutbox(notifiers: [.init(name: "fake", sender: next, attempts: 1, backoff: 0)], journalPath: journal)
        await later.deliverPending()
        #expect(next.ids == [try #require(first)])
    }
}
