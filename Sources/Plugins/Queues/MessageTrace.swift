import Foundation
import PipelineKit
import Tracing

/// The trace of a queue message's items: each message is a `process QUEUE` span (kind consumer),
/// from its receive to its settling, that continues the W3C `traceparent` the message carries (an
/// SQS message attribute, a PostgreSQL queue column), or starts a trace when it carries none or a
/// malformed one; its items are its children (``Source/trace``). Attributes follow OpenTelemetry's
/// messaging conventions, with an S3 notification's bucket, key, version id, ETag and sequencer.
/// ``HeldMessages`` ends it when the message is settled or handed back.
enum MessageTrace {
    /// The names of the message attributes (or columns) that carry the context.
    static let carrierNames = ["traceparent", "tracestate"]

    /// The span of one message, begun at `receivedAt`; its holder ends it. `facts`: more
    /// attributes (an S3 record's).
    static func start(system: String, destination: String, messageID: String, carrier: [String: String],
                      receivedAt: DefaultTracerClock.Instant, facts: [String: String] = [:]) -> any Span {
        let tracer = InstrumentationSystem.tracer
        var parent = ServiceContext.topLevel
        tracer.extract(carrier, into: &parent, using: HeaderExtractor())
        let span = tracer.startSpan("process " + destination, context: parent, ofKind: .consumer, at: receivedAt)
        if span.isRecording {
            span.updateAttributes { attributes in
                attributes["messaging.system"] = system
                attributes["messaging.operation.type"] = "process"
                attributes["messaging.operation.name"] = "process"
                attributes["messaging.destination.name"] = destination
                attributes["messaging.message.id"] = messageID
                for (name, value) in facts { attributes[name] = value }
            }
        }
        return span
    }
}
