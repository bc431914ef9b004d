import Foundation
import Synchronization
@testable import PipelineKit
@testable import Plugins
import Testing
import TestImages

/// The PostgreSQL queue against a real PostgreSQL 15 started on loopback: COPY keeps every source
/// as given, claims never overlap, a lease that runs out brings the row back (and fails it as
/// abandoned after its attempts), settles delete, release or fail rows, an insert wakes an idle
/// worker, and every wrong URL, password, table or server gets a message naming it.
@Suite(.serialized) struct PostgresQueueTests {
    func withServer(_ body: (PostgresServer) async throws -> Void) async throws {
        let server = try await PostgresServer.start()
        do { try await body(server) } catch {
            await server.stop()
            throw error
        }
        await server.stop()
    }

    func result(_ source: Source, _ status: ItemStatus, _ error: ItemError? = nil) -> ItemResult {
        var result = ItemResult(source: source.text, index: source.index, status: status)
        result.error = error
        return result
    }

    @Test func sourcesGoInByCopyAsGivenAndClaimsNeverOverlap() async throws {
        try await withServer { server in
            let list = try PostgresList(url: server.url(), lease: 60, batch: 3, untilEmpty: true)
            try await list.initialize()
            try await list.initialize()  // safe to run again
            let odd = ["s3://b/a key with spaces.jpg", "/tmp/tab\there.png", "C:\\back\\slash.jpg", "https://h/ü-ñ.jpg?x=1&y=2"]
            #expect(try await list.enqueue(odd + ["", "# a comment", "  s3://b/trimmed.jpg  "]) == 5)
            #expect(try await server.sql("SELECT source FROM pipelinectl_queue ORDER BY id").split(separator: "\n").map(String.init)
                == odd + ["s3://b/trimmed.jpg"])
            let status = try await list.status()
            #expect(status.queued == 5 && status.running == 0 && status.failed == 0)

            // Two workers: disjoint claims, everything claimed once.
            let other = try PostgresList(url: server.url(), lease: 60, batch: 3, untilEmpty: true)
            let a = try await list.open(), b = try await other.open()
            var seen: [String] = []
            while let source = try await a.next() { seen.append(source.text); if let more = try await b.next() { seen.append(more.text) } }
            while let source = try await b.next() { seen.append(source.text) }
            #expect(seen.sorted() == (odd + ["s3://b/trimmed.jpg"]).sorted())
            #expect(try await list.status().running == 5)
            #expect(try await server.sql("SELECT count(DISTINCT worker) FROM pipelinectl_queue WHERE state = 'running'") == "1",
                    "both lists run in this process: one host:pid")
            // One row's lease ran out and another worker (another host:pid) claimed it since: it is theirs.
            _ = try await server.sql("UPDATE pipelinectl_queue SET worker = 'elsewhere:1', attempts = 2 WHERE source = 's3://b/trimmed.jpg'")
            await list.runEnded()
            await other.runEnded()
            // Handed back unstarted: queued again, their attempts not counted.
            #expect(try await server.sql("SELECT state, attempts, count(*) FROM pipelinectl_queue GROUP BY 1, 2 ORDER BY 1") == "queued|0|4\nrunning|2|1")
        }
    }

    @Test func settlesDeleteReleaseOrFailAndAbandonedLeasesComeBack() async throws {
        try await withServer { server in
            let list = try PostgresList(url: server.url("?table=jobs.thumbs"), lease: 60, batch: 10, maxAttempts: 2, untilEmpty: true)
            try await list.initialize()
            #expect(try await list.enqueue(["/in/ok.jpg", "/in/later.jpg", "/in/poison.jpg", "/in/lost.jpg"]) == 4)
            let cursor = try await list.open()
            var sources: [String: Source] = [:]
            while let source = try await cursor.next() { sources[source.text] = source }
            #expect(sources.count == 4)
            await list.settle(sources["/in/ok.jpg"]!, as: result(sources["/in/ok.jpg"]!, .ok))
            await list.settle(sources["/in/later.jpg"]!, as: result(sources["/in/later.jpg"]!, .failed,
                                                                     ItemError(stage: .load, kind: .timeout, message: "timed out")))
            await list.settle(sources["/in/poison.jpg"]!, as: result(sources["/in/poison.jpg"]!, .failed,
                                                                      ItemError(stage: .decode, kind: .notAnImage, message: "HTML")))
            await list.flushDone(all: true)  // done rows are deleted many to a statement, within 100 ms
            let rows = try await server.sql("""
                SELECT source, state, attempts, coalesce(error_kind, ''), visible_at > now() FROM jobs.thumbs ORDER BY id
                """)
            #expect(rows == """
                /in/later.jpg|queued|1|timeout|t
                /in/poison.jpg|failed|1|not_an_image|f
                /in/lost.jpg|running|1||f
                """, "ok deleted; a timeout waits for its retry; not an image failed for good")

            // The worker holding /in/lost.jpg dies: its lease runs out (moved into the past here),
            // and the next claim takes it again; after max_attempts it fails as abandoned.
            for attempt in 2...3 {
                _ = try await server.sql("UPDATE jobs.thumbs SET lease_until = now() - interval '1 second' WHERE source = '/in/lost.jpg'")
                let again = try PostgresList(url: server.url("?table=jobs.thumbs"), lease: 60, maxAttempts: 2, untilEmpty: true)
                let next = try await again.open().next()
                if attempt == 2 {
                    #expect(next?.text == "/in/lost.jpg")
                    #expect(try await server.sql("SELECT attempts FROM jobs.thumbs WHERE source = '/in/lost.jpg'") == "2")
                } else {
                    #expect(next == nil, "claimed more than max_attempts times")
                    #expect(try await server.sql("SELECT state, error_kind FROM jobs.thumbs WHERE source = '/in/lost.jpg'") == "failed|abandoned")
                }
            }
            let status = try await list.status()
            #expect(status.failed == 2 && status.queued == 1 && status.delayed == 1)
            #expect(status.failedByKind.map(\.kind).sorted() == ["abandoned", "not_an_image"])
            #expect(try await list.retryFailed(kind: "not_an_image") == 1)
            #expect(try await list.purgeFailed(kind: nil) == 1)
            #expect(try await server.sql("SELECT source, state, attempts FROM jobs.thumbs ORDER BY id") == "/in/later.jpg|queued|1\n/in/poison.jpg|queued|0")
        }
    }

    /// An idle worker waits on LISTEN: an INSERT by any program wakes it well before its poll
    /// interval (5 minutes here).
    @Test func anInsertWakesAnIdleWorker() async throws {
        try await withServer { server in
            let list = try PostgresList(url: server.url(), poll: 300, untilEmpty: false)
            try await list.initialize()
            let cursor = try await list.open()
            let waiting = Task { try await cursor.next() }
            _ = try await server.sql("INSERT INTO pipelinectl_queue (source) VALUES ('s3://b/new.jpg')")
            let source = try await waiting.value
            #expect(source?.text == "s3://b/new.jpg")
            // A stop ends the wait of an idle cursor too.
            let idle = Task { try await cursor.next() }
            list.stopReading()
            #expect(try await idle.value == nil)
            await list.runEnded()
        }
    }

    /// Claims and deletes are prepared statements of the connection's session. A session the
    /// server ended (a restart, a failover, pg_terminate_backend) takes them with it: the cursor
    /// reconnects, prepares them again and goes on, instead of failing every claim after.
    @Test func aSessionEndedByTheServerIsPreparedAgain() async throws {
        try await withServer { server in
            let list = try PostgresList(url: server.url(), batch: 2, untilEmpty: true)
            try await list.initialize()
            #expect(try await list.enqueue((1...6).map { "/in/\($0).jpg" }) == 6)
            let cursor = try await list.open()
            var seen: [Source] = []
            for _ in 1...2 { if let source = try await cursor.next() { seen.append(source) } }
            for source in seen { await list.settle(source, as: result(source, .ok)) }
            await list.flushDone(all: true)
            let ended = try await server.sql("""
                SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
                WHERE datname = 'postgres' AND pid <> pg_backend_pid() AND backend_type = 'client backend'
                """)
            #expect(ended == "2", "the list's two connections")
            while let source = try await cursor.next() {
                seen.append(source)
                await list.settle(source, as: result(source, .ok))
            }
            await list.flushDone(all: true)
            #expect(seen.map(\.text).sorted() == (1...6).map { "/in/\($0).jpg" }.sorted())
            #expect(try await server.sql("SELECT count(*) FROM pipelinectl_queue") == "0", "every row deleted once done")
        }
    }

    /// A worker that finishes many rows a second claims what it finishes in about 100 ms, not
    /// `batch` rows; one on slow items claims `batch`.
    @Test func aFastWorkerClaimsMoreRowsAtOnce() async throws {
        var size = PostgresList.ClaimSize(least: 10)
        let start = ContinuousClock.now
        #expect(size.next(now: start) == 10, "nothing measured yet")
        for _ in 0..<700 { size.settledOne() }
        #expect(size.next(now: start + .milliseconds(200)) == 10, "a window shorter than half a second is not measured yet")
        #expect(size.next(now: start + .milliseconds(500)) == 140, "1,400 rows a second: 140")
        for _ in 0..<3 { size.settledOne() }
        #expect(size.next(now: start + .seconds(2.5)) == 10, "1.5 rows a second: batch")
        for _ in 0..<100_000 { size.settledOne() }
        #expect(size.next(now: start + .seconds(3)) == 1000, "at most 1000")
        var single = PostgresList.ClaimSize(least: 1)
        _ = single.next(now: start)
        single.settledOne()
        #expect(single.next(now: start + .seconds(1)) == 1, "one a second, batch 1: one row at a time")

        try await withServer { server in
            let list = try PostgresList(url: server.url(), batch: 150, untilEmpty: true)
            try await list.initialize()
            #expect(try await list.enqueue((1...400).map { "/in/\($0).jpg" }) == 400)
            let cursor = try await list.open()
            _ = try await cursor.next()
            #expect(try await server.sql("SELECT count(*) FROM pipelinectl_queue WHERE state = 'running'") == "150",
                    "a claim takes up to 150 rows in one statement")
            await list.runEnded()
        }
    }

    @Test func wrongURLsPasswordsTablesAndServersAreNamed() async throws {
        #expect(throws: PipelineError.self) { try PostgresList(url: "postgres://h/db?table=drop;table") }
        do {
            _ = try PostgresList(url: "postgres://h/db?table=a.b.c")
        } catch let error as PipelineError {
            #expect(error.kind == .invalidSource && error.message.contains("a.b.c"), "\(error.message)")
        }
        try await withServer { server in
            let wrong = server.url().replacingOccurrences(of: PostgresServer.password, with: "not-it")
            do {
                try await PostgresList(url: wrong).check()
                Issue.record("a wrong password was accepted")
            } catch let error as PipelineError {
                #expect(error.kind == .auth, "\(error.message)")
                #expect(error.message.contains("127.0.0.1:\(server.port)") && !error.message.contains("not-it"), "\(error.message)")
            }
            do {
                try await PostgresList(url: server.url("?table=missing")).check()
                Issue.record("a missing table was accepted")
            } catch let error as PipelineError {
                #expect(error.kind == .notFound && error.message.contains("pipelinectl queue init"), "\(error.message)")
                #expect(!error.message.contains(PostgresServer.password), "\(error.message)")
            }
        }
        let closed = try MotoServer.freePort()
        do {
            try await PostgresList(url: "postgres://postgres:pw@127.0.0.1:\(closed)/postgres").check()
            Issue.record("a closed port was accepted")
        } catch let error as PipelineError {
            #expect(error.kind == .connect && error.message.contains("127.0.0.1:\(closed)"), "\(error.message)")
        }
    }
}
