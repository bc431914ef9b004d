import Foundation
@testable import PipelineKit
@testable import Plugins
import Testing
import TestImages

/// The SQS client `pipelinectl work` builds on, against moto's server on loopback (which checks
/// every signature), and the reading of queue message bodies: S3 event notifications, S3's test
/// event, SNS-wrapped notifications and plain source lines.
@Suite(.serialized) struct SQSClientTests {
    func client(_ moto: MotoServer, _ queueURL: String, secret: String? = nil) throws -> SQSClient {
        let queue = try SQSQueue(queueURL, environment: moto.environment)
        return SQSClient(queue: queue, credentials: S3Credentials(accessKey: moto.accessKey, secretKey: secret ?? moto.secretKey), attempts: 1)
    }

    @Test func messagesAreReceivedDeletedAndMadeVisibleAgain() async throws {
        let moto = try await MotoServer.start(buckets: [])
        defer { moto.stop() }
        let url = try await moto.boto("print(sqs.create_queue(QueueName='uploads')['QueueUrl'])")
        let sqs = try client(moto, url)
        for line in ["a.jpg", "b.jpg", "c.jpg"] { try await sqs.send(line) }
        let first = try await sqs.receive(limit: 10, wait: 1, visibility: 30)
        #expect(Set(first.map(\.body)) == ["a.jpg", "b.jpg", "c.jpg"])
        #expect(first.allSatisfy { $0.receiveCount == 1 })
        // Invisible while held: nothing more to receive.
        #expect(try await sqs.receive(limit: 10, wait: 0, visibility: 30).isEmpty)
        let depth = try await sqs.depth()
        #expect(depth.visible == 0 && depth.inFlight == 3)
        // Acknowledged: gone. Released: delivered again, counted.
        let a = try #require(first.first { $0.body == "a.jpg" }), b = try #require(first.first { $0.body == "b.jpg" })
        try await sqs.delete(a)
        try await sqs.extendVisibility(b, seconds: 0)
        let again = try await sqs.receive(limit: 10, wait: 1, visibility: 30)
        #expect(again.map(\.body) == ["b.jpg"])
        #expect(again.first?.receiveCount == 2)
        #expect(try await sqs.depth().inFlight == 2)  // b again, and c
        // A dead-letter entry keeps the error kind as an attribute.
        let dead = try await moto.boto("print(sqs.create_queue(QueueName='dead')['QueueUrl'])")
        try await client(moto, dead).send("c.jpg", attributes: ["pipelinectl-error-kind": "not_an_image"])
        let kind = try await moto.boto("""
            m = sqs.receive_message(QueueUrl=args[0], MessageAttributeNames=["All"])["Messages"][0]
            print(m["Body"], m["MessageAttributes"]["pipelinectl-error-kind"]["StringValue"])
            """, [dead])
        #expect(kind == "c.jpg not_an_image")
    }

    @Test func refusedCredentialsAndMissingQueuesSaySo() async throws {
        let moto = try await MotoServer.start(buckets: [])
        defer { moto.stop() }
        let url = try await moto.boto("print(sqs.create_queue(QueueName='uploads')['QueueUrl'])")
        await #expect {
            _ = try await client(moto, url, secret: "wrong").receive(wait: 0, visibility: 30)
        } throws: { ($0 as? PipelineError)?.kind == .auth && ($0 as? PipelineError)?.message.contains("refused the credentials") == true }
        let missing = url.replacingOccurrences(of: "/uploads", with: "/nosuch")
        await #expect {
            _ = try await client(moto, missing).receive(wait: 0, visibility: 30)
        } throws: { error in
            return (error as? PipelineError)?.kind == .notFound && (error as? PipelineError)?.message.contains("no such queue") == true
        }
    }

    /// S3 sends a test event when the notification is configured, then one event per upload.
    /// (Keys with spaces are left to the unit test below, on S3's documented encoding: moto refuses
    /// boto's own signature for a PUT of such a key.)
    @Test func uploadsToABucketArriveAsSources() async throws {
        let moto = try await MotoServer.start(buckets: ["uploads"])
        defer { moto.stop() }
        let url = try await moto.boto("""
            q = sqs.create_queue(QueueName='events')['QueueUrl']
            arn = sqs.get_queue_attributes(QueueUrl=q, AttributeNames=['QueueArn'])['Attributes']['QueueArn']
            s3.put_bucket_notification_configuration(Bucket='uploads', NotificationConfiguration={
                'QueueConfigurations': [{'QueueArn': arn, 'Events': ['s3:ObjectCreated:*']}]})
            s3.put_object(Bucket='uploads', Key='in/photo-1.jpg', Body=b'x')
            print(q)
            """)
        let sqs = try client(moto, url)
        var parsed: [QueueMessage] = []
        for _ in 0..<5 where parsed.filter({ if case .sources = $0 { return true } else { return false } }).isEmpty {
            for message in try await sqs.receive(limit: 10, wait: 2, visibility: 30) {
                parsed.append(try QueueMessage.parse(message.body))
                try await sqs.delete(message)
            }
        }
        #expect(parsed.contains(.testEvent), "\(parsed)")
        // moto's notification names the object's ETag: the source's version.
        #expect(parsed.contains { if case .sources(["s3://uploads/in/photo-1.jpg"], let versions, _) = $0 { versions.first??.isEmpty == false } else { false } },
                "\(parsed)")
    }

    @Test func messageBodiesAreReadOrRefusedWithTheirReason() throws {
        #expect(try QueueMessage.parse("  https://img.example.com/a.jpg\n") == .sources(["https://img.example.com/a.jpg"]))
        let created = #"{"Records":[{"eventName":"ObjectCreated:Put","s3":{"bucket":{"name":"b"},"object":{"key":"a+b%2Bc.jpg","size":3}}}]}"#
        let createdFacts = [["aws.s3.bucket": "b", "aws.s3.key": "a b+c.jpg", "pipelinectl.s3.event": "ObjectCreated:Put"]]
        #expect(try QueueMessage.parse(created) == .sources(["s3://b/a b+c.jpg"], versions: [nil], facts: createdFacts))
        let tagged = #"{"Records":[{"eventName":"ObjectCreated:Put","s3":{"bucket":{"name":"b"},"object":{"key":"a.jpg","eTag":"e1","sequencer":"0A"}}}]}"#
        // The record's facts go to the message's receive span.
        #expect(try QueueMessage.parse(tagged) == .sources(["s3://b/a.jpg"], versions: ["e1"], facts: [[
            "aws.s3.bucket": "b", "aws.s3.key": "a.jpg", "pipelinectl.s3.etag": "e1", "pipelinectl.s3.sequencer": "0A",
            "pipelinectl.s3.event": "ObjectCreated:Put"]]))
        let removed = #"{"Records":[{"eventName":"ObjectRemoved:Delete","s3":{"bucket":{"name":"b"},"object":{"key":"a.jpg"}}}]}"#
        #expect(try QueueMessage.parse(removed) == .nothing("no ObjectCreated records (1 record)"))
        let sns = try String(data: JSONSerialization.data(withJSONObject: ["Type": "Notification", "Message": created]), encoding: .utf8)!
        #expect(try QueueMessage.parse(sns) == .sources(["s3://b/a b+c.jpg"], versions: [nil], facts: createdFacts))
        #expect(try QueueMessage.parse(#"{"Service":"Amazon S3","Event":"s3:TestEvent","Bucket":"b"}"#) == .testEvent)
        for (body, reason) in [("", "the message is empty"), ("a.jpg\nb.jpg", "has several lines"), ("{not json", "is not a JSON object"),
                               (#"{"hello":1}"#, "must be an S3 event notification"),
                               (#"{"Records":[{"eventName":"ObjectCreated:Put","s3":{}}]}"#, "record 1 of the S3 notification has no")] {
            #expect { try QueueMessage.parse(body) } throws: {
                ($0 as? PipelineError)?.kind == .invalidSource && ($0 as? PipelineError)?.message.contains(reason) == true
            }
        }
    }

    @Test func queueAddressesAreResolved() throws {
        let aws = try SQSQueue("https://sqs.eu-west-1.amazonaws.com/123456789012/uploads", environment: [:])
        #expect(aws.region == "eu-west-1" && aws.endpoint.host == "sqs.eu-west-1.amazonaws.com")
        let named = try SQSQueue("sqs://000000000000/uploads", environment: ["AWS_ENDPOINT_URL": "http://127.0.0.1:4566", "AWS_REGION": "us-west-2"])
        #expect(named.url == "http://127.0.0.1:4566/000000000000/uploads" && named.region == "us-west-2" && named.endpoint.port == 4566)
        for bad in ["sqs://uploads", "ftp://host/1/q", "https://sqs.example.com/uploads"] {
            #expect { try SQSQueue(bad, environment: [:]) } throws: { ($0 as? PipelineError)?.kind == .invalidSource }
        }
    }
}
