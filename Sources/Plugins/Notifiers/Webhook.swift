import Crypto
import Foundation
import PipelineKit

/// `webhook`: POSTs each "ready" event as JSON, signed the Standard Webhooks way
/// (`webhook-id`, `webhook-timestamp`, `webhook-signature: v1,BASE64`), so a receiver can check
/// where it came from and reject replays. A 2xx answer takes the event; anything else, or no
/// answer within `timeout`, leaves it to the engine's retries.
struct Webhook: EventSending {
    static let plugin = Plugin.notifier(
        PluginSpec(
            name: "webhook",
            summary: "POSTs each finished item's event as JSON, HMAC-signed as Standard Webhooks sign (webhook-id, -timestamp, -signature).",
            options: [
                .string("url", required: true, doc: "Where events are POSTed (http or https).").example("https://cms.example.com/hooks/images"),
                .string("secret", doc: "The signing secret: whsec_ and base64, as Standard Webhooks libraries take it (other text is used as its bytes); use ${ENV} to keep it out of the file. Without one, events are not signed."),
                .duration("timeout", default: "10s", min: "100ms", max: "5m", doc: "Time for one try, connection included."),
                .map("headers", doc: "Extra request headers (an Authorization, a tenant id)."),
            ] + EventRetry.options),
        check: { options in try check(options) },
        make: { options in try Webhook(options: options) })

    let url: String
    /// The HMAC key's bytes (a `SymmetricKey` is made per signature: it is not `Sendable`).
    let key: Data?
    let headers: [String: String]
    let client: PurgeClient

    init(options: PluginOptions) throws {
        try Self.check(options)
        url = options.string("url")!.trimmingCharacters(in: .whitespaces)
        key = Self.key(options.string("secret") ?? "")
        var headers: [String: String] = [:]
        if case .map(let extra)? = options["headers"] { for (name, value) in extra { headers[name] = value.description } }
        self.headers = headers
        client = PurgeClient(purger: "webhook", timeout: options.number("timeout") ?? 10, role: "notifier")
    }

    static func check(_ options: PluginOptions) throws {
        try PurgeClient.checkURL(PurgeClient.required(options, "url", purger: "webhook"), option: "url", purger: "webhook")
        if let secret = options.string("secret"), secret.hasPrefix("whsec_"), Data(base64Encoded: String(secret.dropFirst(6))) == nil {
            throw PipelineError(.invalidOption, "notifier 'webhook': secret starts with whsec_ but the rest is not base64")
        }
    }

    /// The HMAC key: the bytes after `whsec_` (base64), or the text's own bytes.
    static func key(_ secret: String) -> Data? {
        guard !secret.isEmpty else { return nil }
        if secret.hasPrefix("whsec_"), let bytes = Data(base64Encoded: String(secret.dropFirst(6))) { return bytes }
        return Data(secret.utf8)
    }

    /// `v1,` and the base64 HMAC-SHA256 of `ID.TIMESTAMP.BODY`.
    static func signature(id: String, timestamp: Int, body: Data, key: Data) -> String {
        var signed = Data("\(id).\(timestamp).".utf8)
        signed.append(body)
        return "v1," + Data(HMAC<SHA256>.authenticationCode(for: signed, using: SymmetricKey(data: key))).base64EncodedString()
    }

    func send(_ event: ItemEvent) async throws {
        let timestamp = Int(Date().timeIntervalSince1970)
        var headers = self.headers
        headers["Content-Type"] = "application/json"
        headers["webhook-id"] = event.id
        headers["webhook-timestamp"] = String(timestamp)
        if let key { headers["webhook-signature"] = Self.signature(id: event.id, timestamp: timestamp, body: event.body, key: key) }
        _ = try await client.send("POST", url, headers: headers, body: event.body)
    }
}
