import Foundation
import PipelineKit

/// What a queue message asks for. Bodies are S3 event notifications (`Records[].s3`, the form S3
/// sends to SQS, also wrapped in an SNS notification when S3 publishes through SNS), or a plain
/// source line, as in a URL list.
enum QueueMessage: Sendable, Equatable {
    /// Sources to process: `s3://bucket/key` for each created object, or the line given; with
    /// each one's version when the message tells it (an S3 record's ETag and version id, or its
    /// sequencer): the same object redelivered is a duplicate, a re-upload a new item. `facts`:
    /// each S3 record's bucket, key, version id, ETag and sequencer, for its receive span.
    case sources([String], versions: [String?] = [], facts: [[String: String]] = [])
    /// S3's test event, sent when a notification is configured: nothing to do.
    case testEvent
    /// A notification with nothing to process (objects removed, no records).
    case nothing(String)

    /// Reads a message body. Keys in S3 notifications are URL-encoded (`+` for a space): decoded.
    /// - Throws: ``PipelineError`` of kind `invalid_source` naming what is wrong with the body.
    static func parse(_ body: String) throws -> QueueMessage {
        let trimmed = body.trimmingCharacters(in: .whitespacesAndNewlines)
        guard !trimmed.isEmpty else { throw PipelineError(.invalidSource, "the message is empty") }
        guard trimmed.hasPrefix("{") else {
            guard !trimmed.contains("\n") else {
                throw PipelineError(.invalidSource, "a plain message names one source; this one has several lines")
            }
            return .sources([trimmed])
        }
        guard let object = (try? JSONSerialization.jsonObject(with: Data(trimmed.utf8))) as? [String: Any] else {
            throw PipelineError(.invalidSource, "the message starts with '{' but is not a JSON object")
        }
        // S3 -> SNS -> SQS: the S3 event is the SNS notification's Message, as a string.
        if object["Type"] as? String == "Notification", let inner = object["Message"] as? String {
            return try parse(inner)
        }
        if object["Event"] as? String == "s3:TestEvent" { return .testEvent }
        guard let records = object["Records"] as? [[String: Any]] else {
            throw PipelineError(.invalidSource, "a JSON message must be an S3 event notification (with Records); this one has "
                + (object.keys.sorted().prefix(5).joined(separator: ", ")))
        }
        var sources: [String] = []
        var versions: [String?] = []
        var facts: [[String: String]] = []
        for (index, record) in records.enumerated() {
            let name = record["eventName"] as? String ?? ""
            guard name.hasPrefix("ObjectCreated:") || name.isEmpty else { continue }
            guard let s3 = record["s3"] as? [String: Any], let bucket = (s3["bucket"] as? [String: Any])?["name"] as? String,
                  let key = (s3["object"] as? [String: Any])?["key"] as? String, !bucket.isEmpty, !key.isEmpty else {
                throw PipelineError(.invalidSource, "record \(index + 1) of the S3 notification has no s3.bucket.name or s3.object.key")
            }
            guard let decoded = key.replacingOccurrences(of: "+", with: " ").removingPercentEncoding else {
                throw PipelineError(.invalidSource, "record \(index + 1): the key '\(key)' is not valid URL encoding")
            }
            sources.append("s3://\(bucket)/\(decoded)")
            let object = s3["object"] as? [String: Any] ?? [:]
            let etag = (object["eTag"] as? String)?.trimmingCharacters(in: CharacterSet(charactersIn: "\""))
            let tags = [etag, object["versionId"] as? String].compactMap { $0 }.filter { !$0.isEmpty }
            versions.append(tags.isEmpty ? (object["sequencer"] as? String).map { "sequencer:" + $0 } : tags.joined(separator: ":"))
            var fact = ["aws.s3.bucket": bucket, "aws.s3.key": decoded]
            for (name, key) in [("version_id", "versionId"), ("etag", "eTag"), ("sequencer", "sequencer")] {
                if let value = object[key] as? String, !value.isEmpty { fact["pipelinectl.s3." + name] = value }
            }
            if !name.isEmpty { fact["pipelinectl.s3.event"] = name }
            facts.append(fact)
        }
        return sources.isEmpty ? .nothing("no ObjectCreated records (\(records.count) record\(records.count == 1 ? "" : "s"))")
            : .sources(sources, versions: versions, facts: facts)
    }
}
