import Foundation
import PipelineKit

/// `sqs` (notifier): sends each "ready" event as a message to an SQS queue, its body the event's
/// JSON, with the event's id and type as message attributes (`pipelinectl-event-id`,
/// `pipelinectl-event-type`). On a FIFO queue (`.fifo`) the event id is the deduplication id, so
/// SQS itself drops a second copy within five minutes.
struct SQSNotifier: EventSending {
    static let plugin = Plugin.notifier(
        PluginSpec(
            name: "sqs",
            summary: "Sends each finished item's event as a message to an SQS queue (AWS credentials from the environment, as `work` reads them).",
            options: [
                .string("queue", required: true, doc: "The queue's URL, or sqs://ACCOUNT/NAME.").example("https://sqs.eu-west-1.amazonaws.com/123456789012/images-ready"),
                .string("group", default: "pipelinectl", doc: "The MessageGroupId on a FIFO queue."),
            ] + EventRetry.options),
        check: { options in _ = try SQSQueue(try PurgeClient.required(options, "queue", purger: "sqs"), environment: ProcessInfo.processInfo.environment) },
        make: { options in try SQSNotifier(options: options) })

    let client: SQSClient
    let group: String

    init(options: PluginOptions, environment: [String: String] = ProcessInfo.processInfo.environment) throws {
        let queue = try SQSQueue(try PurgeClient.required(options, "queue", purger: "sqs"), environment: environment)
        // One try per send: the engine's attempts and backoff are the policy.
        client = SQSClient(queue: queue, credentials: try SQSClient.credentials(environment: environment), attempts: 1)
        group = options.string("group") ?? "pipelinectl"
    }

    func send(_ event: ItemEvent) async throws {
        let fifo = client.queue.url.hasSuffix(".fifo")
        try await client.send(String(decoding: event.body, as: UTF8.self),
                              attributes: ["pipelinectl-event-id": event.id, "pipelinectl-event-type": event.type],
                              extra: fifo ? ["MessageGroupId": group, "MessageDeduplicationId": event.id] : [:])
    }
}
