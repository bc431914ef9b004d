import Foundation
import Testing
import TestImages

/// `pipelinectl work`, the real binary, against moto's S3 and SQS on loopback: uploads to a bucket
/// notify a queue, the worker makes their outputs into the same bucket (which notifies the queue
/// again: no loop), a poison upload is dead-lettered with its kind, duplicates make one set of
/// outputs; SIGTERM stops a waiting worker with exit 0 and nothing left unacknowledged, and a busy
/// one after finishing what runs, handing back what it never started; a worker killed with SIGKILL
/// loses nothing.
@Suite(.serialized) struct WorkTests {
    /// Queues `events` (notified of every upload to `uploads`) and `dead`; their URLs.
    func setUp(_ moto: MotoServer) async throws -> (events: String, dead: String) {
        let urls = try await moto.boto("""
            q = sqs.create_queue(QueueName='events')['QueueUrl']
            d = sqs.create_queue(QueueName='dead')['QueueUrl']
            arn = sqs.get_queue_attributes(QueueUrl=q, AttributeNames=['QueueArn'])['Attributes']['QueueArn']
            s3.put_bucket_notification_configuration(Bucket='uploads', NotificationConfiguration={
                'QueueConfigurations': [{'QueueArn': arn, 'Events': ['s3:ObjectCreated:*']}]})
            print(q); print(d)
            """).split(separator: "\n").map(String.init)
        return (urls[0], urls[1])
    }

    /// The pipeline the tests run: thumbnails of the uploads, written into the watched bucket. With
    /// `slow`, each item first takes a heavy blur, so that a worker is still busy when it is killed.
    func pipeline(in dir: URL, slow: Bool = false) throws -> String {
        let path = dir.appendingPathComponent("uploads.yaml")
        try """
            version: 1
            name: uploads
            processors:\(slow ? "\n  - blur: { sigma: 5 }" : "")
              - resize: { width: 120 }
            encoder: jpeg
            output: { dir: "s3://uploads/out", name: "{stem}.{ext}" }
            """.write(to: path, atomically: true, encoding: .utf8)
        return path.path
    }

    func upload(_ moto: MotoServer, _ keys: [String], html: [String] = [], size: (Int, Int) = (400, 300)) async throws {
        let file = try Fixtures.temporaryDirectory("upload").appendingPathComponent("image.jpg")
        defer { try? FileManager.default.removeItem(at: file.deletingLastPathComponent()) }
        try Fixtures.image("plasma:", width: size.0, height: size.1).write(to: file)
        _ = try await moto.boto("""
            image = open(args[0], 'rb').read()
            for key in json.loads(args[1]): s3.put_object(Bucket='uploads', Key=key, Body=image)
            for key in json.loads(args[2]): s3.put_object(Bucket='uploads', Key=key, Body=b'<html>no</html>')
            """, [file.path, String(decoding: try JSONSerialization.data(withJSONObject: keys), as: UTF8.self),
                  String(decoding: try JSONSerialization.data(withJSONObject: html), as: UTF8.self)])
    }

    /// Visible and in-flight messages of `queue`.
    func depth(_ moto: MotoServer, _ queue: String) async throws -> String {
        try await moto.boto("""
            a = sqs.get_queue_attributes(QueueUrl=args[0], AttributeNames=['ApproximateNumberOfMessages', 'ApproximateNumberOfMessagesNotVisible'])['Attributes']
            print(a['ApproximateNumberOfMessages'], a['ApproximateNumberOfMessagesNotVisible'])
            """, [queue])
    }

    func outputs(_ moto: MotoServer) async throws -> [String] {
        try await moto.boto("""
            for o in s3.list_objects_v2(Bucket='uploads', Prefix='out/').get('Contents', []): print(o['Key'])
            """).split(separator: "\n").map(String.init).sorted()
    }

    /// The outputs, once `enough` says they are (looked at every 100 ms, for up to two minutes: the
    /// event the test waits for, with room for a loaded machine); the last seen otherwise.
    func outputs(_ moto: MotoServer, when enough: ([String]) -> Bool) async throws -> [String] {
        var made: [String] = []
        for _ in 0..<1200 {
            made = try await outputs(moto)
            if enough(made) { break }
            try await Task.sleep(for: .milliseconds(100))
        }
        return made
    }

    @Test func aQueueOfUploadsIsDrainedWithoutLoopsOrLosses() async throws {
        let moto = try await MotoServer.start(buckets: ["uploads"])
        defer { moto.stop() }
        let (events, dead) = try await setUp(moto)
        try await upload(moto, ["in/a.jpg", "in/b.jpg", "in/c.jpg"], html: ["in/page.jpg"])
        // in/a.jpg's notification delivered three more times (SQS delivers at least once): the
        // same object, the same ETag.
        _ = try await moto.boto("""
            etag = s3.head_object(Bucket='uploads', Key='in/a.jpg')['ETag'].strip('"')
            body = json.dumps({'Records': [{'eventName': 'ObjectCreated:Put', 's3': {'bucket': {'name': 'uploads'},
                               'object': {'key': 'in/a.jpg', 'eTag': etag}}}]})
            for _ in range(3): sqs.send_message(QueueUrl=args[0], MessageBody=body)
            """, [events])
        let dir = try Fixtures.temporaryDirectory("work")
        defer { try? FileManager.default.removeItem(at: dir) }
        let report = dir.appendingPathComponent("work.jsonl")
        let run = try await Command.run(CLITests.binary, ["work", try pipeline(in: dir), "--queue", events, "--dead-letter", dead,
                                                          "--until-empty", "--report", report.path, "--report-format", "jsonl",
                                                          "--progress", "none", "--metrics", dir.appendingPathComponent("work.prom").path],
                                        environment: moto.environment, directory: dir)
        #expect(run.status == 1, "one item failed: \(run.stdout)\(run.stderr)")
        #expect(run.stdout.contains("failures by kind: not_an_image 1"), "\(run.stdout)")
        // The outputs, once each; the worker's own outputs (in the watched bucket) made no work.
        #expect(try await outputs(moto) == ["out/a.jpg", "out/b.jpg", "out/c.jpg"])
        let sources = try String(contentsOf: report, encoding: .utf8).split(separator: "\n").compactMap { line in
            (try JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any]).flatMap { $0["type"] as? String == "item" ? $0["source"] as? String : nil }
        }
        #expect(sources.count == 7, "a, b, c, the page and three duplicates of a: \(sources)")
        // Counted as four items and three duplicate deliveries: in the summary, the report and the metrics.
        #expect(run.stdout.contains("uploads: 4 items: 3 ok, 1 failed") && run.stdout.contains("duplicates: 3 lines or messages"),
                "\(run.stdout)")
        let lines = try String(contentsOf: report, encoding: .utf8).split(separator: "\n").compactMap {
            try JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any]
        }
        #expect(lines.filter { $0["duplicate"] as? Bool == true }.map { $0["source"] as? String } == Array(repeating: "s3://uploads/in/a.jpg", count: 3))
        let summary = lines.first { $0["type"] as? String == "summary" }
        #expect(summary?["total"] as? Int == 4 && summary?["duplicate_deliveries"] as? Int == 3 && summary?["outputs_written"] as? Int == 3,
                "\(String(describing: summary))")
        let metrics = try String(contentsOf: dir.appendingPathComponent("work.prom"), encoding: .utf8)
        #expect(metrics.contains(#"pipelinectl_items_total{pipeline="uploads",status="ok"} 3"#)
                && metrics.contains(#"pipelinectl_duplicate_deliveries_total{pipeline="uploads"} 3"#), "\(metrics)")
        #expect(!sources.contains { $0.hasPrefix("s3://uploads/out/") }, "an output was processed as a source: \(sources)")
        #expect(try await depth(moto, events) == "0 0")
        let dlq = try await moto.boto("""
            for m in sqs.receive_message(QueueUrl=args[0], MaxNumberOfMessages=10, MessageAttributeNames=['All']).get('Messages', []):
                print(m['MessageAttributes']['pipelinectl-error-kind']['StringValue'], urllib.parse.unquote_plus(json.loads(m['Body'])['Records'][0]['s3']['object']['key']))
            """, [dead])
        #expect(dlq == "not_an_image in/page.jpg")
    }

    /// A video uploaded beside a photo gets its poster like any image: the pipeline's decoder lists
    /// video, and the frame at 1 s of the upload becomes its thumbnail in the bucket.
    @Test func aVideoUploadGetsItsPoster() async throws {
        let moto = try await MotoServer.start(buckets: ["uploads"])
        defer { moto.stop() }
        let (events, dead) = try await setUp(moto)
        let dir = try Fixtures.temporaryDirectory("work-video")
        defer { try? FileManager.default.removeItem(at: dir) }
        let clip = dir.appendingPathComponent("clip.mp4")
        let made = try await Command.run("/usr/bin/ffmpeg", ["-hide_banner", "-loglevel", "error", "-y", "-f", "lavfi", "-i",
                                                            "testsrc2=size=320x240:rate=25", "-t", "3", "-pix_fmt", "yuv420p",
                                                            "-c:v", "libx264", "-preset", "ultrafast", clip.path])
        try #require(made.status == 0, "\(made.stderr)")
        try await upload(moto, ["in/photo.jpg"])
        _ = try await moto.boto("s3.put_object(Bucket='uploads', Key='in/clip.mp4', Body=open(args[0], 'rb').read())", [clip.path])
        let path = dir.appendingPathComponent("posters.yaml")
        try """
            version: 1
            name: posters
            decoder: { imagemagick: { formats: [jpeg, video], frame: 1s } }
            processors:
              - resize: { width: 120 }
            encoder: jpeg
            output: { dir: "s3://uploads/out", name: "{stem}.{ext}" }
            """.write(to: path, atomically: true, encoding: .utf8)
        let run = try await Command.run(CLITests.binary, ["work", path.path, "--queue", events, "--dead-letter", dead, "--until-empty",
                                                          "--progress", "none"], environment: moto.environment, directory: dir)
        #expect(run.status == 0, "\(run.stdout)\(run.stderr)")
        #expect(try await outputs(moto) == ["out/clip.jpg", "out/photo.jpg"])
        let poster = dir.appendingPathComponent("poster.jpg")
        _ = try await moto.boto("open(args[1], 'wb').write(s3.get_object(Bucket='uploads', Key='out/clip.jpg')['Body'].read())", ["", poster.path])
        #expect(try await Identified.file(poster.path) == Identified(format: "JPEG", width: 120, height: 90))
    }

    /// `--report s3://... --report-rotate`: each part uploaded as it closes, each a whole report,
    /// and `pipelinectl report` reads the parts as one run's items.
    @Test func aRotatedReportIsUploadedInParts() async throws {
        let moto = try await MotoServer.start(buckets: ["uploads", "reports"])
        defer { moto.stop() }
        let (events, _) = try await setUp(moto)
        try await upload(moto, ["in/a.jpg", "in/b.jpg", "in/c.jpg"])
        let dir = try Fixtures.temporaryDirectory("work-rotate")
        defer { try? FileManager.default.removeItem(at: dir) }
        let run = try await Command.run(CLITests.binary, ["work", try pipeline(in: dir), "--queue", events, "--until-empty",
                                                          "--report", "s3://reports/worker/work.jsonl", "--report-format", "jsonl",
                                                          "--report-rotate", "1B", "--progress", "none"],
                                        environment: moto.environment, directory: dir)
        #expect(run.status == 0, "\(run.stdout)\(run.stderr)")
        let parts = try await moto.boto("""
            for o in s3.list_objects_v2(Bucket='reports', Prefix='worker/').get('Contents', []):
                s3.download_file('reports', o['Key'], args[0] + '/' + o['Key'].split('/')[-1]); print(o['Key'])
            """, [dir.path]).split(separator: "\n").map(String.init)
        #expect(parts.count == 3 && parts.allSatisfy { $0.hasPrefix("worker/work-") && $0.hasSuffix(".jsonl") }, "\(parts)")
        let merged = try await Command.run(CLITests.binary, ["report"] + parts.map { dir.path + "/" + $0.split(separator: "/").last! },
                                           directory: dir)
        #expect(merged.status == 0 && merged.stdout.contains("3 items: 3 ok"), "\(merged.stdout)\(merged.stderr)")
    }

    @Test func sigtermStopsAWaitingWorkerWithExitZero() async throws {
        let moto = try await MotoServer.start(buckets: ["uploads"])
        defer { moto.stop() }
        let (events, _) = try await setUp(moto)
        let dir = try Fixtures.temporaryDirectory("work-stop")
        defer { try? FileManager.default.removeItem(at: dir) }
        let worker = try Command.start(CLITests.binary, ["work", try pipeline(in: dir), "--queue", events, "--progress", "none"],
                                       environment: moto.environment)
        try await upload(moto, ["in/a.jpg", "in/b.jpg"])
        // Wait for the event the test is about: both outputs stored (generous: a loaded machine).
        let made = try await outputs(moto) { $0.count >= 2 }
        #expect(made == ["out/a.jpg", "out/b.jpg"])
        kill(worker.process.processIdentifier, SIGTERM)
        let ended = try await worker.wait()
        #expect(ended.status == 0, "\(ended.stdout)\(ended.stderr)")
        #expect(ended.stderr.contains("stopping: no new items"))
        #expect(try await depth(moto, events) == "0 0", "every message acknowledged or handed back")
    }

    /// SIGTERM while items run: the worker receives nothing more, finishes the items in flight and
    /// deletes their messages, hands back at once the messages it received but never started, and
    /// exits 0. Every upload then has its output or its message waiting, never both or neither.
    @Test func sigtermFinishesWhatRunsAndHandsBackTheRest() async throws {
        let moto = try await MotoServer.start(buckets: ["uploads"])
        defer { moto.stop() }
        let (events, _) = try await setUp(moto)
        let dir = try Fixtures.temporaryDirectory("work-drain")
        defer { try? FileManager.default.removeItem(at: dir) }
        // One worker: ten items in flight (eight loads and two per worker), about ten messages
        // received and held unstarted once the first is done, ten never received. All thirty would
        // be done before the signal only if this test stalled for twenty slow items.
        let keys = (1...30).map { "in/d\($0).jpg" }
        try await upload(moto, keys, size: (3000, 2000))
        let worker = try Command.start(CLITests.binary, ["work", try pipeline(in: dir, slow: true), "--queue", events,
                                                         "--workers", "1", "--stop-grace", "5m", "--progress", "none"],
                                       environment: moto.environment)
        var made = try await outputs(moto) { !$0.isEmpty }
        #expect(!made.isEmpty, "the worker made nothing")
        kill(worker.process.processIdentifier, SIGTERM)
        let ended = try await worker.wait()
        #expect(ended.status == 0, "\(ended.stdout)\(ended.stderr)")
        #expect(ended.stderr.contains("stopping: no new items"), "\(ended.stderr)")
        made = try await outputs(moto)
        let held = try await depth(moto, events)
        #expect(held.hasSuffix(" 0"), "a message still held after the worker ended: \(held)")
        // The messages waiting: uploads handed back, and the notifications of outputs written last.
        let waiting = try await moto.boto("""
            seen = set()
            while True:
                got = sqs.receive_message(QueueUrl=args[0], MaxNumberOfMessages=10, VisibilityTimeout=300).get('Messages', [])
                if not got: break
                for m in got:
                    for r in json.loads(m['Body']).get('Records', []): seen.add(urllib.parse.unquote_plus(r['s3']['object']['key']))
            print(' '.join(sorted(k for k in seen if k.startswith('in/'))))
            """, [events]).split(separator: " ").map { "out/" + $0.dropFirst("in/".count) }
        #expect(Set(made).isDisjoint(with: waiting) && Set(made).union(waiting) == Set(keys.map { "out/" + $0.dropFirst("in/".count) }),
                "each upload has its output or its message back: outputs \(made), waiting \(waiting); \(ended.stderr)")
        #expect(!waiting.isEmpty, "nothing was left unstarted to hand back: \(made); \(ended.stderr)")
    }

    /// A worker killed with SIGKILL loses nothing: what it held comes back when its visibility
    /// runs out, and a second worker makes the rest; every upload ends with its output, once.
    @Test func aKilledWorkerLosesNothing() async throws {
        let moto = try await MotoServer.start(buckets: ["uploads"])
        defer { moto.stop() }
        let (events, _) = try await setUp(moto)
        let dir = try Fixtures.temporaryDirectory("work-kill")
        defer { try? FileManager.default.removeItem(at: dir) }
        let keys = (1...6).map { "in/p\($0).jpg" }
        try await upload(moto, keys, size: (3000, 2000))  // large enough that one worker takes a while over six
        let arguments = ["work", try pipeline(in: dir, slow: true), "--queue", events, "--visibility", "10s", "--workers", "1", "--progress", "none"]
        let first = try Command.start(CLITests.binary, arguments, environment: moto.environment)
        var made = try await outputs(moto) { !$0.isEmpty }
        #expect(!made.isEmpty, "the first worker made nothing")
        kill(first.process.processIdentifier, SIGKILL)
        _ = try await first.wait()
        // Killed mid-batch: messages it held are still invisible, not acknowledged.
        let held = try await self.depth(moto, events).split(separator: " ").compactMap { Int($0) }
        #expect(held.count == 2 && held[1] > 0, "the first worker was not killed mid-batch: \(held)")
        let second = try Command.start(CLITests.binary, arguments, environment: moto.environment)
        let expected = keys.map { "out/" + $0.dropFirst("in/".count) }.sorted()
        made = try await outputs(moto) { $0 == expected }  // the killed worker's messages return after 10 s
        #expect(made == expected)
        // Every message acknowledged: the second worker has taken over what the first held.
        var depth = ""
        for _ in 0..<600 where depth != "0 0" {
            depth = try await self.depth(moto, events)
            if depth != "0 0" { try await Task.sleep(for: .milliseconds(100)) }
        }
        #expect(depth == "0 0", "every message acknowledged")
        kill(second.process.processIdentifier, SIGTERM)
        let ended = try await second.wait()
        #expect(ended.status == 0, "\(ended.stderr)")
    }
}
