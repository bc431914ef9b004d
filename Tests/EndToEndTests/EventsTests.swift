import FlyingFox
import Foundation
import Synchronization
import Testing
import TestImages

/// "Ready" events from the real binary to a webhook receiver on loopback: one signed event per
/// item (Standard Webhooks, checked with Python's hmac as a receiver would), through two 500s;
/// a receiver that hangs leaves the event pending beside the report, and the next run sends it;
/// a run or a worker killed with SIGKILL sends its events again, with the same ids.
@Suite(.serialized) struct EventsTests {
    /// `whsec_` and the base64 of "a receiver's secret".
    static let secret = "whsec_YSByZWNlaXZlcidzIHNlY3JldA=="

    /// One request the receiver got.
    struct Received: Sendable {
        let id: String
        let timestamp: String
        let signature: String
        let body: Data
    }

    /// A webhook receiver: answers each request with what `answer` says for its number (from 1);
    /// `nil` hangs until ``release()``.
    final class Receiver: Sendable {
        final class State: Sendable {
            let received = Mutex<[Received]>([])
            let released = Mutex(false)
        }
        let server: TestServer
        let state = State()

        init(answer: @escaping @Sendable (Int) -> HTTPStatusCode?) async throws {
            server = try await TestServer.start()
            let state = self.state
            server.route("/hook") { request in
                let body = try await request.bodyData
                let seen = Received(id: request.headers[HTTPHeader("webhook-id")] ?? "", timestamp: request.headers[HTTPHeader("webhook-timestamp")] ?? "",
                                    signature: request.headers[HTTPHeader("webhook-signature")] ?? "", body: body)
                let number = state.received.withLock { $0.append(seen); return $0.count }
                guard let status = answer(number) else {
                    while !state.released.withLock({ $0 }) { try await Task.sleep(for: .milliseconds(50)) }
                    return HTTPResponse(statusCode: .serviceUnavailable)
                }
                return HTTPResponse(statusCode: status)
            }
        }

        var url: String { server.url("/hook") }
        var all: [Received] { state.received.withLock { $0 } }
        func release() { state.released.withLock { $0 = true } }

        /// Waits (on requests, looked at every 50 ms, for up to two minutes) until `enough`.
        func wait(until enough: ([Received]) -> Bool) async throws {
            for _ in 0..<2400 where !enough(all) { try await Task.sleep(for: .milliseconds(50)) }
        }
    }

    func pipeline(_ dir: URL, receiver: String, timeout: String = "5m", attempts: Int = 3) throws -> String {
        let path = dir.appendingPathComponent("events.yaml")
        try """
            version: 1
            name: events
            processors: [ { resize: { width: 120 } } ]
            encoder: jpeg
            output: { dir: \(dir.path)/out, name: "{stem}.{ext}" }
            notify:
              - webhook: { url: "\(receiver)", secret: "\(Self.secret)", timeout: \(timeout), attempts: \(attempts), backoff: 100ms }
            """.write(to: path, atomically: true, encoding: .utf8)
        return path.path
    }

    func images(_ dir: URL, _ names: [String]) throws -> URL {
        for name in names { try Fixtures.image("plasma:", width: 300, height: 200).write(to: dir.appendingPathComponent(name)) }
        let list = dir.appendingPathComponent("list.txt")
        try names.map { dir.appendingPathComponent($0).path }.joined(separator: "\n").write(to: list, atomically: true, encoding: .utf8)
        return list
    }

    /// The signatures Python's hmac computes for `received`, as a receiver checks them.
    func pythonSignatures(_ received: [Received]) async throws -> [String] {
        let lines = received.map { "\($0.id) \($0.timestamp) \($0.body.base64EncodedString())" }.joined(separator: "\n")
        let check = try await Command.run("/usr/bin/python3", ["-c", """
            import base64, hashlib, hmac, sys
            key = base64.b64decode(sys.argv[1][len('whsec_'):])
            for line in sys.stdin.read().splitlines():
                i, t, b = line.split(' ')
                mac = hmac.new(key, (i + '.' + t + '.').encode() + base64.b64decode(b), hashlib.sha256).digest()
                print('v1,' + base64.b64encode(mac).decode())
            """, Self.secret], stdin: Data(lines.utf8))
        return check.stdout.split(separator: "\n").map(String.init)
    }

    func report(_ path: URL) throws -> [String: Any] {
        try #require(try JSONSerialization.jsonObject(with: Data(contentsOf: path)) as? [String: Any])
    }

    @Test func oneSignedEventPerItemThroughTwoFailures() async throws {
        let receiver = try await Receiver { $0 <= 2 ? .internalServerError : .ok }
        let dir = try Fixtures.temporaryDirectory("events")
        defer { try? FileManager.default.removeItem(at: dir) }
        let list = try images(dir, ["a.jpg", "b.jpg", "c.jpg"])
        try (String(contentsOf: list, encoding: .utf8) + "\n\(dir.path)/missing.jpg\n").write(to: list, atomically: true, encoding: .utf8)
        let reportPath = dir.appendingPathComponent("report.json")
        // A long timeout: the receiver is in this process, which other suites keep busy; what is
        // counted is the answers it gives, not how fast it gives them.
        let run = try await Command.run(CLITests.binary, ["run", try pipeline(dir, receiver: receiver.url, timeout: "5m"), list.path, "--report", reportPath.path,
                                                          "--progress", "none"])
        #expect(run.status == 1, "one source is missing: \(run.stderr)")
        let all = receiver.all
        #expect(all.count == 6, "4 events and the two tries that got a 500: \(all.map(\.id))")
        #expect(Set(all.map(\.id)).count == 4)
        for refused in all.prefix(2) {
            #expect(all.dropFirst(2).contains { $0.id == refused.id }, "an event refused with a 500 comes again with its id")
        }
        // Every signature is what a Standard Webhooks receiver computes.
        #expect(try await pythonSignatures(all) == all.map(\.signature))
        for seen in all { #expect(abs((Double(seen.timestamp) ?? 0) - Date().timeIntervalSince1970) < 600) }
        // The bodies: the type, the item with its outputs; failed items too, as item.failed.
        let bodies = try all.map { try #require(try JSONSerialization.jsonObject(with: $0.body) as? [String: Any]) }
        let types = Dictionary(grouping: Dictionary(zip(all.map(\.id), bodies), uniquingKeysWith: { a, _ in a }).values, by: { $0["type"] as? String ?? "" }).mapValues(\.count)
        #expect(types == ["item.ready": 3, "item.failed": 1])
        for body in bodies {
            let data = try #require(body["data"] as? [String: Any]), item = try #require(data["item"] as? [String: Any])
            #expect(data["pipeline"] as? String == "events")
            if body["type"] as? String == "item.ready" { #expect((item["outputs"] as? [String])?.first?.hasSuffix(".jpg") == true) }
        }
        let made = try report(reportPath)
        let summary = try #require(made["summary"] as? [String: Any])
        #expect(summary["events_delivered"] as? Int == 4 && summary["events_pending"] as? Int == 0)
        let states = (made["items"] as? [[String: Any]] ?? []).compactMap { ($0["event"] as? [String: Any])?["state"] as? String }
        #expect(states == Array(repeating: "delivered", count: 4))
        #expect(!FileManager.default.fileExists(atPath: reportPath.path + ".events"), "nothing pending, no journal")
        await receiver.server.stop()
    }

    /// A receiver that hangs: each try ends at the timeout, the items are done, the events pending
    /// beside the report; the next run (here with --resume, nothing to make) sends them first.
    @Test func aHangingReceiverLeavesEventsPendingForTheNextRun() async throws {
        let hanging = try await Receiver { _ in nil }
        let dir = try Fixtures.temporaryDirectory("events-hang")
        defer { try? FileManager.default.removeItem(at: dir) }
        let list = try images(dir, ["a.jpg", "b.jpg"])
        let reportPath = dir.appendingPathComponent("report.json")
        let started = ContinuousClock.now
        let first = try await Command.run(CLITests.binary, ["run", try pipeline(dir, receiver: hanging.url, timeout: "1s", attempts: 2),
                                                            list.path, "--report", reportPath.path, "--progress", "none"])
        let took = ContinuousClock.now - started
        #expect(first.status == 0, "the items are done: \(first.stderr)")
        // Two tries of one second each, per item, and one more round at the end: never the 10 s default.
        #expect(took < .seconds(60), "the timeout was not honoured: \(took)")
        let made = try report(reportPath)
        let items = made["items"] as? [[String: Any]] ?? []
        #expect(items.map { $0["status"] as? String } == ["ok", "ok"])
        let events = items.compactMap { $0["event"] as? [String: Any] }
        #expect(events.map { $0["state"] as? String } == ["pending", "pending"])
        #expect(events.allSatisfy { ($0["error"] as? String)?.contains("webhook") == true })
        #expect((made["summary"] as? [String: Any])?["events_pending"] as? Int == 2)
        #expect(first.stderr.contains("events pending"), "one warning says so: \(first.stderr)")
        let journal = reportPath.path + ".events"
        #expect(FileManager.default.fileExists(atPath: journal))
        hanging.release()
        await hanging.server.stop()

        let receiver = try await Receiver { _ in .ok }
        let second = try await Command.run(CLITests.binary, ["run", try pipeline(dir, receiver: receiver.url), list.path, "--report", reportPath.path,
                                                             "--resume", "--progress", "none"])
        #expect(second.status == 0, "\(second.stderr)")
        #expect(Set(receiver.all.map(\.id)) == Set(events.compactMap { $0["id"] as? String }), "the pending events, with their ids")
        #expect(!FileManager.default.fileExists(atPath: journal))
        await receiver.server.stop()
    }

    /// SIGKILL while the receiver holds the first event: the journal kept it before it was sent;
    /// the next run sends it again with the same id, and every item's event arrives.
    @Test func aKilledRunSendsItsEventsAgain() async throws {
        let hanging = try await Receiver { _ in nil }
        let dir = try Fixtures.temporaryDirectory("events-kill")
        defer { try? FileManager.default.removeItem(at: dir) }
        let list = try images(dir, ["a.jpg", "b.jpg", "c.jpg"])
        let reportPath = dir.appendingPathComponent("report.json")
        let first = try Command.start(CLITests.binary, ["run", try pipeline(dir, receiver: hanging.url, timeout: "5m"), list.path,
                                                        "--report", reportPath.path, "--progress", "none"])
        try await hanging.wait { $0.count >= 1 }
        let before = Set(hanging.all.map(\.id))
        #expect(!before.isEmpty, "the run sent nothing")
        kill(first.process.processIdentifier, SIGKILL)
        _ = try await first.wait()
        hanging.release()
        await hanging.server.stop()

        let receiver = try await Receiver { _ in .ok }
        let second = try await Command.run(CLITests.binary, ["run", try pipeline(dir, receiver: receiver.url), list.path, "--report", reportPath.path,
                                                             "--progress", "none"])
        #expect(second.status == 0, "\(second.stderr)")
        let after = Set(receiver.all.map(\.id))
        #expect(before.isSubset(of: after), "an event sent before the kill comes again with its id: \(before) \(after)")
        let made = try report(reportPath)
        let ids = Set((made["items"] as? [[String: Any]] ?? []).compactMap { ($0["event"] as? [String: Any])?["id"] as? String })
        #expect(ids.count == 3 && ids.isSubset(of: after))
        #expect(!FileManager.default.fileExists(atPath: reportPath.path + ".events"))
        await receiver.server.stop()
    }
}
