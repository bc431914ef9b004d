import FlyingFox
import Foundation
import PipelineKit
import Synchronization
import Testing
import TestImages

/// "Ready" events with queues, against moto (signatures checked): the `sqs` and `sns` notifiers
/// deliver one message per item; `work` killed with SIGKILL while its webhook hangs loses no
/// event: the queue keeps the message, the next worker makes the item again and sends the event
/// with the same id.
@Suite(.serialized) struct EventsQueueTests {
    /// The pipeline the worker runs: thumbnails of the uploads into the same bucket, then `tail`
    /// (its `notify:` or `purge:` list); its path.
    static func uploadsPipeline(_ dir: URL, _ tail: String) throws -> String {
        let path = dir.appendingPathComponent("uploads.yaml")
        try """
            version: 1
            name: uploads
            processors: [ { resize: { width: 120 } } ]
            encoder: jpeg
            output: { dir: "s3://uploads/out", name: "{stem}.{ext}" }
            """.appending("\n" + tail + "\n").write(to: path, atomically: true, encoding: .utf8)
        return path.path
    }

    /// The queue `events`, notified of every upload to the bucket `uploads`; its URL.
    static func uploadsQueue(_ moto: MotoServer) async throws -> String {
        try await moto.boto("""
            q = sqs.create_queue(QueueName='events')['QueueUrl']
            arn = sqs.get_queue_attributes(QueueUrl=q, AttributeNames=['QueueArn'])['Attributes']['QueueArn']
            s3.put_bucket_notification_configuration(Bucket='uploads', NotificationConfiguration={
                'QueueConfigurations': [{'QueueArn': arn, 'Events': ['s3:ObjectCreated:*']}]})
            print(q)
            """)
    }

    @Test func sqsAndSnsNotifiersDeliverEachEvent() async throws {
        let moto = try await MotoServer.start(buckets: ["unused"])
        defer { moto.stop() }
        let names = try await moto.boto("""
            ready = sqs.create_queue(QueueName='ready')['QueueUrl']
            fanout = sqs.create_queue(QueueName='fanout')['QueueUrl']
            arn = sqs.get_queue_attributes(QueueUrl=fanout, AttributeNames=['QueueArn'])['Attributes']['QueueArn']
            topic = sns.create_topic(Name='images-ready')['TopicArn']
            sns.subscribe(TopicArn=topic, Protocol='sqs', Endpoint=arn, Attributes={'RawMessageDelivery': 'true'})
            print(ready); print(fanout); print(topic)
            """).split(separator: "\n").map(String.init)
        let (ready, fanout, topic) = (names[0], names[1], names[2])
        let dir = try Fixtures.temporaryDirectory("events-queues")
        defer { try? FileManager.default.removeItem(at: dir) }
        for name in ["a.jpg", "b.jpg"] { try Fixtures.image("plasma:", width: 300, height: 200).write(to: dir.appendingPathComponent(name)) }
        try ["a.jpg", "b.jpg"].map { dir.appendingPathComponent($0).path }.joined(separator: "\n")
            .write(to: dir.appendingPathComponent("list.txt"), atomically: true, encoding: .utf8)
        let pipeline = dir.appendingPathComponent("p.yaml")
        try """
            version: 1
            name: queued
            processors: [ { resize: { width: 100 } } ]
            encoder: jpeg
            output: { dir: \(dir.path)/out }
            notify:
              - sqs: { queue: "\(ready)", on: ready }
              - sns: { topic: "\(topic)" }
            """.write(to: pipeline, atomically: true, encoding: .utf8)
        let run = try await Command.run(CLITests.binary, ["run", pipeline.path, dir.appendingPathComponent("list.txt").path,
                                                          "--report", dir.appendingPathComponent("r.json").path, "--progress", "none"],
                                        environment: moto.environment)
        #expect(run.status == 0, "\(run.stderr)")
        let report = try #require(try JSONSerialization.jsonObject(with: Data(contentsOf: dir.appendingPathComponent("r.json"))) as? [String: Any])
        let ids = Set((report["items"] as? [[String: Any]] ?? []).compactMap { ($0["event"] as? [String: Any])?["id"] as? String })
        #expect(ids.count == 2)
        #expect((report["summary"] as? [String: Any])?["events_delivered"] as? Int == 4, "two events to two notifiers")
        // Each queue holds one message per item: its body the event, its attributes the id.
        for queue in [ready, fanout] {
            let seen = try await moto.boto("""
                got = []
                for _ in range(5):
                    for m in sqs.receive_message(QueueUrl=args[0], MaxNumberOfMessages=10, MessageAttributeNames=['All'], WaitTimeSeconds=1).get('Messages', []):
                        body = json.loads(m['Body'])
                        got.append(m['MessageAttributes']['pipelinectl-event-id']['StringValue'] + ' ' + body['data']['id'] + ' ' + body['type'])
                        sqs.delete_message(QueueUrl=args[0], ReceiptHandle=m['ReceiptHandle'])
                    if len(got) >= 2: break
                print('\\n'.join(sorted(got)))
                """, [queue]).split(separator: "\n").map { $0.split(separator: " ").map(String.init) }
            #expect(Set(seen.map { $0[0] }) == ids, "\(queue): \(seen)")
            #expect(seen.allSatisfy { $0.count == 3 && $0[0] == $0[1] && $0[2] == "item.ready" })
        }
    }

    @Test func aKilledWorkerSendsItsEventsAgainWithTheirIds() async throws {
        let moto = try await MotoServer.start(buckets: ["uploads"])
        defer { moto.stop() }
        let events = try await Self.uploadsQueue(moto)
        let dir = try Fixtures.temporaryDirectory("events-work")
        defer { try? FileManager.default.removeItem(at: dir) }
        let image = dir.appendingPathComponent("image.jpg")
        try Fixtures.image("plasma:", width: 400, height: 300).write(to: image)
        _ = try await moto.boto("""
            image = open(args[0], 'rb').read()
            for key in ['in/p1.jpg', 'in/p2.jpg', 'in/p3.jpg']: s3.put_object(Bucket='uploads', Key=key, Body=image)
            """, [image.path])
        func pipeline(_ receiver: String) throws -> String {
            try Self.uploadsPipeline(dir, "notify:\n  - webhook: { url: \"\(receiver)\", timeout: 5m, attempts: 1 }")
        }
        let hanging = try await EventsTests.Receiver { _ in nil }
        let arguments = ["--queue", events, "--visibility", "10s", "--progress", "none"]
        let first = try Command.start(CLITests.binary, ["work", try pipeline(hanging.url)] + arguments, environment: moto.environment)
        try await hanging.wait { !$0.isEmpty }
        let before = Set(hanging.all.map(\.id))
        #expect(!before.isEmpty, "the worker sent nothing")
        kill(first.process.processIdentifier, SIGKILL)
        _ = try await first.wait()
        hanging.release()
        await hanging.server.stop()

        let receiver = try await EventsTests.Receiver { _ in .ok }
        let second = try Command.start(CLITests.binary, ["work", try pipeline(receiver.url)] + arguments, environment: moto.environment)
        // The killed worker's messages come back when their visibility runs out (10 s).
        try await receiver.wait { Set($0.map(\.id)).count >= 3 }
        let after = Set(receiver.all.map(\.id))
        #expect(after.count == 3, "one event per upload: \(after)")
        #expect(before.isSubset(of: after), "an event sent before the kill comes again with its id: \(before) \(after)")
        var depth = ""
        for _ in 0..<600 where depth != "0 0" {
            depth = try await moto.boto("""
                a = sqs.get_queue_attributes(QueueUrl=args[0], AttributeNames=['ApproximateNumberOfMessages', 'ApproximateNumberOfMessagesNotVisible'])['Attributes']
                print(a['ApproximateNumberOfMessages'], a['ApproximateNumberOfMessagesNotVisible'])
                """, [events])
            if depth != "0 0" { try await Task.sleep(for: .milliseconds(100)) }
        }
        #expect(depth == "0 0", "every message acknowledged once its event was taken")
        kill(second.process.processIdentifier, SIGTERM)
        let ended = try await second.wait()
        #expect(ended.status == 0, "\(ended.stderr)")
        await receiver.server.stop()
    }

    /// `work --purge-replaced`: an upload whose outputs replace those of earlier content has its
    /// source purged at the CDN (a Fastly-shaped API on loopback); a first upload, and the same
    /// bytes uploaded again, purge nothing.
    @Test func aReuploadPurgesWhatItReplaces() async throws {
        let moto = try await MotoServer.start(buckets: ["uploads"])
        defer { moto.stop() }
        let events = try await Self.uploadsQueue(moto)
        let api = try await TestServer.start()
        let keys = Mutex<[String]>([])
        api.route("/service/svc1/purge") { request in
            keys.withLock { $0.append(request.headers[HTTPHeader("Surrogate-Key")] ?? "") }
            return HTTPResponse(statusCode: .ok, headers: [.contentType: "application/json"], body: Data("{}".utf8))
        }
        let dir = try Fixtures.temporaryDirectory("events-purge")
        defer { try? FileManager.default.removeItem(at: dir) }
        let pipeline = URL(fileURLWithPath: try Self.uploadsPipeline(dir, "purge:\n  - fastly: { service: svc1, token: t, api: \"\(api.url("/"))\" }"))
        func upload(_ spec: String) async throws {
            let image = dir.appendingPathComponent("image.jpg")
            try Fixtures.image(spec, width: 400, height: 300).write(to: image)
            _ = try await moto.boto("s3.put_object(Bucket='uploads', Key='in/p1.jpg', Body=open(args[0], 'rb').read())", [image.path])
        }
        func work(_ report: String) async throws -> [String: Any] {
            let path = dir.appendingPathComponent(report).path
            let ran = try await Command.run(CLITests.binary, ["work", pipeline.path, "--queue", events, "--until-empty", "--purge-replaced",
                                                              "--report", path, "--progress", "none"], environment: moto.environment)
            #expect(ran.status == 0, "\(ran.stderr)")
            let made = try JSONSerialization.jsonObject(with: Data(contentsOf: URL(fileURLWithPath: path))) as? [String: Any]
            return try #require((made?["items"] as? [[String: Any]])?.first { ($0["source"] as? String) == "s3://uploads/in/p1.jpg" })
        }
        try await upload("plasma:")
        let first = try await work("first.json")
        #expect(first["replaced"] == nil && first["purge"] == nil && keys.withLock { $0.isEmpty }, "a first upload replaces nothing")
        try await upload("gradient:navy-orange")
        let second = try await work("second.json")
        #expect((second["replaced"] as? [String])?.first?.hasSuffix("out/p1.jpg") == true, "\(second)")
        #expect((second["purge"] as? String)?.hasPrefix("fastly: purged") == true, "\(String(describing: second["purge"]))")
        #expect(keys.withLock { $0 } == [CacheTags().source("s3://uploads/in/p1.jpg")])
        try await upload("gradient:navy-orange")
        let third = try await work("third.json")
        #expect(third["replaced"] == nil && third["purge"] == nil, "the same bytes again: kept, nothing to purge")
        #expect(keys.withLock { $0.count } == 1)
        await api.stop()
    }
}
