import Foundation
import Testing
import TestImages

/// `pipelinectl queue` and `pipelinectl work --queue postgres://...`, the real binary, against a
/// real PostgreSQL 15 on loopback: a queue with a poison file and 100 duplicates drains to one set
/// of outputs with the poison kept as failed with its kind; a waiting worker serves /livez,
/// /readyz and /metrics (with the queue's depth), is woken by an INSERT and stops on SIGTERM with
/// exit 0; a worker killed with SIGKILL mid-batch loses nothing.
@Suite(.serialized) struct WorkPostgresTests {
    func pipeline(in dir: URL, slow: Bool = false) throws -> String {
        let path = dir.appendingPathComponent("uploads.yaml")
        try """
            version: 1
            name: uploads
            processors:\(slow ? "\n  - blur: { sigma: 5 }" : "")
              - resize: { width: 120 }
            encoder: jpeg
            output: { dir: "\(dir.appendingPathComponent("out").path)", name: "{stem}.{ext}" }
            """.write(to: path, atomically: true, encoding: .utf8)
        return path.path
    }

    func outputs(_ dir: URL) -> [String] {
        ((try? FileManager.default.contentsOfDirectory(atPath: dir.appendingPathComponent("out").path)) ?? [])
            .filter { !$0.hasPrefix(".") }.sorted()
    }

    func ctl(_ arguments: [String], stdin: Data? = nil, in dir: URL) async throws -> Command.Result {
        try await Command.run(CLITests.binary, arguments, stdin: stdin, directory: dir)
    }

    @Test func aQueueWithPoisonAndDuplicatesDrainsToOneSetOfOutputs() async throws {
        let server = try await PostgresServer.start()
        let dir = try Fixtures.temporaryDirectory("work-pg")
        defer { try? FileManager.default.removeItem(at: dir) }
        do {
            let url = server.url()
            // Before init: the table is missing, and the message says what to run.
            let early = try await ctl(["queue", "status", url], in: dir)
            #expect(early.status == 2 && early.stderr.contains("pipelinectl queue init"), "\(early.stderr)")
            #expect(!early.stderr.contains(PostgresServer.password), "the password leaked: \(early.stderr)")
            let initialised = try await ctl(["queue", "init", url], in: dir)
            #expect(initialised.status == 0, "\(initialised.stderr)")
            var sources: [String] = []
            for name in ["a", "b", "c"] {
                let path = dir.appendingPathComponent("\(name).jpg")
                try Fixtures.image("plasma:", width: 400, height: 300).write(to: path)
                sources.append(path.path)
            }
            let poison = dir.appendingPathComponent("page.jpg")
            try Data("<html>not an image</html>".utf8).write(to: poison)
            let list = sources + [poison.path] + Array(repeating: sources[0], count: 100)
            let enqueued = try await ctl(["queue", "enqueue", url, "-"], stdin: Data(list.joined(separator: "\n").utf8), in: dir)
            #expect(enqueued.status == 0 && enqueued.stdout.contains("enqueued 104 sources"), "\(enqueued.stdout)\(enqueued.stderr)")
            let status = try await ctl(["queue", "status", url, "--json"], in: dir)
            #expect(status.stdout.contains("\"queued\" : 104"), "\(status.stdout)")

            let report = dir.appendingPathComponent("work.jsonl")
            let run = try await ctl(["work", try pipeline(in: dir), "--queue", url, "--until-empty", "--report", report.path,
                                     "--report-format", "jsonl", "--progress", "none"], in: dir)
            #expect(run.status == 1, "one item failed: \(run.stdout)\(run.stderr)")
            #expect(outputs(dir) == ["a.jpg", "b.jpg", "c.jpg"])
            let lines = try String(contentsOf: report, encoding: .utf8).split(separator: "\n")
            #expect(lines.filter { $0.contains("\"type\":\"item\"") }.count == 104, "every row reported once")
            // a.jpg named by 101 rows: one item and 100 duplicate deliveries (the same file, the same
            // size and time), in the summary and the report.
            #expect(lines.filter { $0.contains("\"duplicate\":true") }.count == 100)
            #expect(run.stdout.contains("uploads: 4 items: 3 ok, 1 failed") && run.stdout.contains("duplicates: 100 lines or messages"),
                    "\(run.stdout)")
            let summary = lines.last { $0.contains("\"type\":\"summary\"") }.flatMap {
                try? JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any]
            }
            #expect(summary?["total"] as? Int == 4 && summary?["duplicate_deliveries"] as? Int == 100 && summary?["outputs_written"] as? Int == 3,
                    "\(String(describing: summary))")
            let after = try await ctl(["queue", "status", url], in: dir)
            #expect(after.stdout.contains("queued   0") && after.stdout.contains("running  0"), "\(after.stdout)")
            #expect(after.stdout.contains("failed   1: not_an_image 1"), "\(after.stdout)")
            #expect(try await server.sql("SELECT source, error_kind FROM pipelinectl_queue") == "\(poison.path)|not_an_image")

            // A wrong password: refused, named, exit 2; a server that is down: exit 3.
            let wrong = try await ctl(["queue", "status", url.replacingOccurrences(of: PostgresServer.password, with: "nope")], in: dir)
            #expect(wrong.status == 2 && wrong.stderr.contains("password authentication failed"), "\(wrong.stderr)")
            let down = try await ctl(["work", try pipeline(in: dir), "--queue", "postgres://postgres@127.0.0.1:\(try MotoServer.freePort())/x",
                                      "--until-empty", "--progress", "none"], in: dir)
            #expect(down.status == 3 && down.stderr.contains("cannot connect"), "\(down.stderr)")
        } catch {
            await server.stop()
            throw error
        }
        await server.stop()
    }

    /// A pipeline's `sources:` hold for queue messages: a message naming a file outside, or a
    /// link inside that leads out, is kept as failed with `source_not_allowed` (never retried,
    /// nothing read), and the message inside is made.
    @Test func messagesOutsideThePipelinesSourcesFailAlone() async throws {
        let server = try await PostgresServer.start()
        let dir = try Fixtures.temporaryDirectory("work-pg-sources")
        defer { try? FileManager.default.removeItem(at: dir) }
        do {
            let url = server.url()
            #expect(try await ctl(["queue", "init", url], in: dir).status == 0)
            let allowed = dir.appendingPathComponent("allowed"), outside = dir.appendingPathComponent("outside")
            try FileManager.default.createDirectory(at: allowed, withIntermediateDirectories: true)
            try FileManager.default.createDirectory(at: outside, withIntermediateDirectories: true)
            try Fixtures.image("plasma:", width: 200, height: 150).write(to: allowed.appendingPathComponent("in.jpg"))
            try Fixtures.image("plasma:", width: 200, height: 150).write(to: outside.appendingPathComponent("secret.jpg"))
            try FileManager.default.createSymbolicLink(atPath: allowed.appendingPathComponent("link.jpg").path,
                                                       withDestinationPath: outside.appendingPathComponent("secret.jpg").path)
            let pipeline = dir.appendingPathComponent("bounded.yaml")
            try """
                version: 1
                name: bounded
                sources: ["\(allowed.path)/"]
                processors:
                  - resize: { width: 64 }
                encoder: jpeg
                output: { dir: "\(dir.appendingPathComponent("out").path)", name: "{stem}.{ext}" }
                """.write(to: pipeline, atomically: true, encoding: .utf8)
            let messages = [allowed.appendingPathComponent("in.jpg").path, outside.appendingPathComponent("secret.jpg").path,
                            allowed.appendingPathComponent("link.jpg").path, allowed.path + "/../outside/secret.jpg"]
            let enqueued = try await ctl(["queue", "enqueue", url, "-"], stdin: Data(messages.joined(separator: "\n").utf8), in: dir)
            #expect(enqueued.status == 0, "\(enqueued.stderr)")
            let run = try await ctl(["work", pipeline.path, "--queue", url, "--until-empty", "--progress", "none"], in: dir)
            #expect(run.status == 1, "three items failed: \(run.stdout)\(run.stderr)")
            #expect(outputs(dir) == ["in.jpg"])
            let after = try await ctl(["queue", "status", url], in: dir)
            #expect(after.stdout.contains("queued   0") && after.stdout.contains("failed   3: source_not_allowed 3"), "\(after.stdout)")
        } catch {
            await server.stop()
            throw error
        }
        await server.stop()
    }

    @Test func aWaitingWorkerServesHealthAndMetricsWakesOnInsertAndStopsOnSigterm() async throws {
        let server = try await PostgresServer.start()
        let dir = try Fixtures.temporaryDirectory("work-pg-live")
        defer { try? FileManager.default.removeItem(at: dir) }
        do {
            let url = server.url("?table=uploads")
            #expect(try await ctl(["queue", "init", url], in: dir).status == 0)
            let worker = try await ServiceProcess.start(CLITests.binary, [try pipeline(in: dir), "--queue", url, "--progress", "none"],
                                                        subcommand: "work")
            #expect(try await worker.get("/livez").status == 200)
            #expect(try await worker.get("/readyz").status == 200)
            let image = dir.appendingPathComponent("new.jpg")
            try Fixtures.image("plasma:", width: 300, height: 200).write(to: image)
            _ = try await server.sql("INSERT INTO uploads (source) VALUES ('\(image.path)')")
            // The event: the output appears (generous for a loaded machine; the worker polls every 5 minutes
            // here only if the notification is lost, so this passing means LISTEN woke it).
            for _ in 0..<600 where outputs(dir).isEmpty { try await Task.sleep(for: .milliseconds(100)) }
            #expect(outputs(dir) == ["new.jpg"])
            // The item is counted when it is settled, just after its output is renamed into place.
            let counted = "pipelinectl_items_total{pipeline=\"uploads\",status=\"ok\"} 1"
            var metrics = ""
            for _ in 0..<600 where !metrics.contains(counted) {
                metrics = try await worker.get("/metrics").text
                if !metrics.contains(counted) { try await Task.sleep(for: .milliseconds(100)) }
            }
            #expect(metrics.contains(counted), "\(metrics)")
            #expect(metrics.contains("pipelinectl_queue_waiting{queue="), "\(metrics)")
            #expect(metrics.contains("pipelinectl_queue_oldest_age_seconds{queue="), "\(metrics)")
            #expect(!metrics.contains(PostgresServer.password), "the password leaked into /metrics")
            worker.signal(SIGTERM)
            #expect(await worker.wait() == 0, "\(worker.stderr)")
            #expect(try await server.sql("SELECT count(*) FROM uploads") == "0")
        } catch {
            await server.stop()
            throw error
        }
        await server.stop()
    }

    /// A worker's JSONL report in parts: each part a whole report (run line, items, summary of its
    /// items), named by time and run, and `pipelinectl report` reads them as one.
    @Test func theReportIsWrittenInParts() async throws {
        let server = try await PostgresServer.start()
        let dir = try Fixtures.temporaryDirectory("work-pg-rotate")
        defer { try? FileManager.default.removeItem(at: dir) }
        do {
            let url = server.url()
            #expect(try await ctl(["queue", "init", url], in: dir).status == 0)
            var sources: [String] = []
            for index in 1...4 {
                let path = dir.appendingPathComponent("r\(index).jpg")
                try Fixtures.image("plasma:", width: 200, height: 150).write(to: path)
                sources.append(path.path)
            }
            _ = try await ctl(["queue", "enqueue", url], stdin: Data(sources.joined(separator: "\n").utf8), in: dir)
            let reports = dir.appendingPathComponent("reports")
            let wrong = try await ctl(["work", try pipeline(in: dir), "--queue", url, "--report", "x.json", "--report-rotate", "1h"], in: dir)
            #expect(wrong.status == 2 && wrong.stderr.contains("--report-format jsonl"), "\(wrong.stderr)")
            // 1 byte: a new part after every item.
            let run = try await ctl(["work", try pipeline(in: dir), "--queue", url, "--until-empty", "--report", reports.appendingPathComponent("work.jsonl").path,
                                     "--report-format", "jsonl", "--report-rotate", "1B", "--progress", "none"], in: dir)
            #expect(run.status == 0, "\(run.stdout)\(run.stderr)")
            let parts = try FileManager.default.contentsOfDirectory(atPath: reports.path).sorted()
            #expect(parts.count == 4, "\(parts)")
            for part in parts {
                #expect(part.hasPrefix("work-") && part.hasSuffix(".jsonl"), "\(part)")
                let lines = try String(contentsOf: reports.appendingPathComponent(part), encoding: .utf8).split(separator: "\n")
                #expect(lines.count == 3 && lines[0].contains("\"type\":\"run\"") && lines[2].contains("\"type\":\"summary\""), "\(lines)")
            }
            let merged = try await ctl(["report"] + parts.map { reports.appendingPathComponent($0).path }, in: dir)
            #expect(merged.status == 0 && merged.stdout.contains("4 items: 4 ok"), "\(merged.stdout)\(merged.stderr)")
            #expect(!merged.stderr.contains("same run"), "\(merged.stderr)")
        } catch {
            await server.stop()
            throw error
        }
        await server.stop()
    }

    /// A worker killed with SIGKILL mid-batch: the rows it held come back when their lease runs
    /// out, a second worker makes them; every source ends with its output, the queue empty.
    @Test func aKilledWorkerLosesNothing() async throws {
        let server = try await PostgresServer.start()
        let dir = try Fixtures.temporaryDirectory("work-pg-kill")
        defer { try? FileManager.default.removeItem(at: dir) }
        do {
            let url = server.url()
            #expect(try await ctl(["queue", "init", url], in: dir).status == 0)
            let image = try Fixtures.image("plasma:", width: 3000, height: 2000)
            var sources: [String] = []
            for index in 1...6 {
                let path = dir.appendingPathComponent("p\(index).jpg")
                try image.write(to: path)
                sources.append(path.path)
            }
            _ = try await ctl(["queue", "enqueue", url], stdin: Data(sources.joined(separator: "\n").utf8), in: dir)
            let arguments = ["work", try pipeline(in: dir, slow: true), "--queue", url, "--visibility", "10s", "--workers", "1",
                             "--progress", "none"]
            let first = try Command.start(CLITests.binary, arguments)
            for _ in 0..<1200 where outputs(dir).isEmpty { try await Task.sleep(for: .milliseconds(100)) }
            #expect(!outputs(dir).isEmpty, "the first worker made nothing")
            kill(first.process.processIdentifier, SIGKILL)
            _ = try await first.wait()
            let held = try await server.sql("SELECT count(*) FROM pipelinectl_queue WHERE state = 'running'")
            #expect((Int(held) ?? 0) > 0, "the first worker was not killed mid-batch")
            let second = try Command.start(CLITests.binary, arguments)
            var left = "?"
            for _ in 0..<1800 where left != "0" {
                left = try await server.sql("SELECT count(*) FROM pipelinectl_queue")
                if left != "0" { try await Task.sleep(for: .milliseconds(200)) }
            }
            kill(second.process.processIdentifier, SIGTERM)
            let ended = try await second.wait()
            #expect(ended.status == 0, "\(ended.stderr)")
            #expect(left == "0", "rows left in the queue")
            #expect(outputs(dir) == (1...6).map { "p\($0).jpg" })
        } catch {
            await server.stop()
            throw error
        }
        await server.stop()
    }
}
