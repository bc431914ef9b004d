import Foundation
import Synchronization
@testable import PipelineKit
@testable import Plugins
import Testing
import TestImages

/// An SQS queue as the list a worker runs over, with the real engine and moto on loopback: uploads
/// to a bucket become outputs and their messages are deleted only then; a poison file goes to the
/// dead-letter queue with its kind on its first receive; duplicate messages make one set of
/// outputs; an upload under the ignored prefix (the worker's own outputs) makes no work; S3's test
/// event is dropped.
@Suite(.serialized) struct SQSListTests {
    @Test func uploadsBecomeOutputsPoisonIsDeadLetteredAndNothingLoops() async throws {
        let moto = try await MotoServer.start(buckets: ["uploads"])
        defer { moto.stop() }
        let jpeg = try Fixtures.image("plasma:", width: 400, height: 300).base64EncodedString()
        let queues = try await moto.boto("""
            import base64
            q = sqs.create_queue(QueueName='events')['QueueUrl']
            d = sqs.create_queue(QueueName='dead')['QueueUrl']
            arn = sqs.get_queue_attributes(QueueUrl=q, AttributeNames=['QueueArn'])['Attributes']['QueueArn']
            s3.put_bucket_notification_configuration(Bucket='uploads', NotificationConfiguration={
                'QueueConfigurations': [{'QueueArn': arn, 'Events': ['s3:ObjectCreated:*']}]})
            image = base64.b64decode(args[0])
            s3.put_object(Bucket='uploads', Key='in/a.jpg', Body=image)
            s3.put_object(Bucket='uploads', Key='in/b.jpg', Body=image)
            s3.put_object(Bucket='uploads', Key='in/page.jpg', Body=b'<html>not an image</html>')
            s3.put_object(Bucket='uploads', Key='out/already-made.jpg', Body=image)
            for _ in range(3):
                sqs.send_message(QueueUrl=q, MessageBody='s3://uploads/in/a.jpg')
            print(q); print(d)
            """, [jpeg]).split(separator: "\n").map(String.init)
        try #require(queues.count == 2)
        let out = try Fixtures.temporaryDirectory("sqs-out")
        defer { try? FileManager.default.removeItem(at: out) }
        let text = """
            version: 1
            name: uploads
            loader:
              s3: { endpoint: "\(moto.endpoint)", region: us-east-1, access_key_id: "\(moto.accessKey)", secret_access_key: "\(moto.secretKey)" }
            processors:
              - resize: { width: 100 }
            encoder: jpeg
            output: { dir: "\(out.path)", name: "{stem}.{ext}" }
            """
        let (parsed, problems) = PipelineFile.parse(text: text, file: "uploads.yaml", registry: BuiltIns.registry())
        let pipeline = try #require(parsed, "\(problems)")
        let runner = try PipelineRunner(pipeline: pipeline, registry: BuiltIns.registry())
        var environment = moto.environment
        environment["AWS_ENDPOINT_URL"] = moto.endpoint
        let list = try SQSList.open(queues[0], deadLetter: queues[1], visibility: 30, ignoredPrefixes: ["s3://uploads/out/"],
                                    untilEmpty: true, environment: environment)
        try await list.check()
        let cursor = try await list.open()
        let results = Mutex<[ItemResult]>([])
        _ = try await runner.run(SourceCursorSequence(cursor, readsAhead: false), settle: { source, result in
            await list.settle(source, as: result)
        }) { item in results.withLock { $0.append(item) } }
        await list.runEnded()  // as runPipeline does: deletes the done messages still waiting for a full batch

        let items = results.withLock { $0 }
        #expect(Set(items.map(\.source)) == ["s3://uploads/in/a.jpg", "s3://uploads/in/b.jpg", "s3://uploads/in/page.jpg"], "\(items.map(\.source))")
        #expect(items.filter { $0.source == "s3://uploads/in/a.jpg" }.count == 4)  // its upload and three duplicates
        #expect(items.filter { $0.status == .failed }.map(\.source) == ["s3://uploads/in/page.jpg"])
        // One set of outputs; nothing made from the ignored prefix.
        #expect(try FileManager.default.contentsOfDirectory(atPath: out.path).filter { !$0.hasPrefix(".") }.sorted() == ["a.jpg", "b.jpg"])
        // Every message settled: none held, none left in the queue, the poison one dead-lettered with its kind.
        #expect(list.heldCount == 0)
        let left = try await moto.boto("""
            import urllib.parse
            a = sqs.get_queue_attributes(QueueUrl=args[0], AttributeNames=['ApproximateNumberOfMessages', 'ApproximateNumberOfMessagesNotVisible'])['Attributes']
            print(a['ApproximateNumberOfMessages'], a['ApproximateNumberOfMessagesNotVisible'])
            for m in sqs.receive_message(QueueUrl=args[1], MaxNumberOfMessages=10, MessageAttributeNames=['All']).get('Messages', []):
                print(m['MessageAttributes']['pipelinectl-error-kind']['StringValue'], urllib.parse.unquote_plus(json.loads(m['Body'])['Records'][0]['s3']['object']['key']))
            """, [queues[0], queues[1]])
        #expect(left == "0 0\nnot_an_image in/page.jpg", "\(left)")
    }

    /// A failure that may pass releases the message for a later try, with a backoff; it is not
    /// deleted and not dead-lettered.
    @Test func aFailureThatMayPassIsReleasedNotDeleted() async throws {
        #expect(QueueSettlement.mayPass(ItemError(stage: .load, kind: .timeout, message: "timed out")))
        #expect(QueueSettlement.mayPass(ItemError(stage: .load, kind: .httpStatus, message: "HTTP 503 Service Unavailable")))
        #expect(QueueSettlement.mayPass(ItemError(stage: .output, kind: .writeFailed, message: "PUT failed")))
        #expect(!QueueSettlement.mayPass(ItemError(stage: .load, kind: .httpStatus, message: "HTTP 404 Not Found")))
        #expect(!QueueSettlement.mayPass(ItemError(stage: .decode, kind: .notAnImage, message: "HTML")))
        #expect(!QueueSettlement.mayPass(ItemError(stage: .output, kind: .outputCollision, message: "taken")))

        let moto = try await MotoServer.start(buckets: [])
        defer { moto.stop() }
        let url = try await moto.boto("q = sqs.create_queue(QueueName='q')['QueueUrl']; sqs.send_message(QueueUrl=q, MessageBody='https://127.0.0.1:9/a.jpg'); print(q)")
        let list = try SQSList.open(url, visibility: 30, untilEmpty: true, environment: moto.environment)
        let cursor = try await list.open()
        let source = try #require(try await cursor.next())
        var result = ItemResult(source: source.text, index: source.index, status: .failed)
        result.error = ItemError(stage: .load, kind: .connect, message: "connection refused")
        await list.settle(source, as: result)
        #expect(list.heldCount == 0)
        let state = try await moto.boto("""
            a = sqs.get_queue_attributes(QueueUrl=args[0], AttributeNames=['ApproximateNumberOfMessages', 'ApproximateNumberOfMessagesNotVisible'])['Attributes']
            print(a['ApproximateNumberOfMessages'], a['ApproximateNumberOfMessagesNotVisible'])
            """, [url])
        #expect(state == "0 1", "released with a backoff: still in the queue, invisible for now")
    }

    /// A done message's deletion survives the cancellation of the task that flushes it: at the end
    /// of a run the 100 ms flusher is cancelled, possibly between taking a batch and deleting it,
    /// which left that batch neither deleted nor waiting (invisible until its visibility ran out,
    /// then done once more). Found as one message still held after a worker's SIGTERM drain.
    @Test func aDeletionCutOffByCancellationStillHappens() async throws {
        let moto = try await MotoServer.start(buckets: [])
        defer { moto.stop() }
        let url = try await moto.boto("""
            q = sqs.create_queue(QueueName='q')['QueueUrl']
            for i in range(3): sqs.send_message(QueueUrl=q, MessageBody='/tmp/pk-none-%d.jpg' % i)
            print(q)
            """)
        let list = try SQSList.open(url, visibility: 60, untilEmpty: true, environment: moto.environment)
        let cursor = try await list.open()
        // Only the flush below deletes (the list's own flusher and keeper are stopped first).
        list.state.withLock { $0.flusher?.cancel(); $0.keeper?.cancel() }
        for _ in 0..<3 {
            let source = try #require(try await cursor.next())
            await list.settle(source, as: ItemResult(source: source.text, index: source.index, status: .ok))
        }
        #expect(list.state.withLock { $0.done.count } == 3, "fewer than ten wait for a flush")
        let flush = Task { await list.flushDone(all: true) }
        flush.cancel()
        await flush.value
        await list.runEnded()
        let state = try await moto.boto("""
            a = sqs.get_queue_attributes(QueueUrl=args[0], AttributeNames=['ApproximateNumberOfMessages', 'ApproximateNumberOfMessagesNotVisible'])['Attributes']
            print(a['ApproximateNumberOfMessages'], a['ApproximateNumberOfMessagesNotVisible'])
            """, [url])
        #expect(state == "0 0", "every done message deleted: \(state)")
    }
}
