import Foundation

/// "Ready" events: what `run` and `work` announce about each finished item, through the
/// notifiers of the pipeline's `notify:` list (a webhook, an SQS queue, an SNS topic).
///
/// The body follows Standard Webhooks' payload shape, `{type, timestamp, data}`: `data` is the
/// item as the report gives it (source, status, outputs, variants, facts, the srcset manifest
/// among them) plus the pipeline's name. ``id`` depends only on what was made (the pipeline, the
/// source and its version, each output and its size), so the event of an item made again after a
/// crash or a queue's redelivery has the same id: receivers drop what they have seen.
public struct ItemEvent: Sendable, Equatable {
    /// `item.ready` (outputs stored) or `item.failed`.
    public var type: String
    /// Stable across redeliveries of the same result (`evt_` and 32 hex digits).
    public var id: String
    /// The JSON body, as sent.
    public var body: Data

    public init(type: String, id: String, body: Data) {
        self.type = type
        self.id = id
        self.body = body
    }

    /// The event of `item`, finished by pipeline `pipeline`; `nil` for an item that is not
    /// announced (skipped by `--resume`, a duplicate delivery).
    public static func of(_ item: ItemResult, pipeline: String, source: Source, at date: Date = Date()) -> ItemEvent? {
        guard !item.duplicate, item.status != .skipped else { return nil }
        let type = item.status == .failed ? "item.failed" : "item.ready"
        var identity = [type, pipeline, source.text, source.version ?? ""]
        identity += item.variants.map { "\($0.path)\t\($0.bytes)" }
        identity += item.outputs
        if let error = item.error { identity.append(error.kind.rawValue) }
        let id = "evt_" + Hashing.sha256Hex(identity.joined(separator: "\n")).prefix(32)
        let payload = Payload(type: type, timestamp: date, data: Payload.Data(id: id, pipeline: pipeline, item: item))
        let json = JSONEncoder.sorted
        json.dateEncodingStrategy = .iso8601
        guard let body = try? json.encode(payload) else { return nil }
        return ItemEvent(type: type, id: id, body: body)
    }

    struct Payload: Encodable {
        struct Data: Encodable {
            var id: String
            var pipeline: String
            var item: ItemResult
        }
        var type: String
        var timestamp: Date
        var data: Data
    }
}

/// What became of an item's event, in its report line (`event`).
public struct EventState: Sendable, Codable, Equatable {
    /// The event's id (``ItemEvent/id``).
    public var id: String
    /// `delivered` to every notifier, or `pending`: kept (beside the report, or in the queue,
    /// which delivers the item again) and sent later.
    public var state: String
    /// Why it is pending: each notifier that did not take it, and what it said.
    public var error: String?

    public init(id: String, state: String, error: String? = nil) {
        self.id = id
        self.state = state
        self.error = error
    }
}

/// A notifier: where "ready" events go (the `notify:` list of a pipeline file).
///
/// The engine owns the policy (``EventOutbox``): it keeps the event before the first try, retries
/// with backoff as the notifier's `attempts` and `backoff` options say, and reports what stays
/// pending. A notifier only sends: one attempt, within its own timeout.
public protocol EventSending: Sendable {
    /// Sends `event` once; throws a ``PipelineError`` naming the endpoint and what it answered
    /// when the event was not accepted.
    func send(_ event: ItemEvent) async throws
}

/// The retry options every notifier declares (the engine reads them; one spec for all).
public enum EventRetry {
    /// `attempts` and `backoff`, for a notifier's ``PluginSpec``.
    public static let options: [OptionSpec] = [
        .oneOf("on", ["all", "ready", "failed"], default: "all",
               doc: "Which items are announced: all, only those whose outputs are stored (item.ready), or only failures (item.failed)."),
        .int("attempts", default: 3, range: 1...20, doc: "Tries per event before it is left pending (kept and sent again later)."),
        .duration("backoff", default: "1s", min: "0s", max: "10m", doc: "Wait before the second try; doubled before each further one."),
    ]
}
