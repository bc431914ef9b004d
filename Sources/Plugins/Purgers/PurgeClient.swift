import Foundation
import PipelineKit

/// The HTTP calls of the purgers and the webhook notifier: the curl engine the S3 and SQS clients
/// use, one attempt per call (a purge that fails is reported and the operator runs it again; the
/// engine retries events), loopback and private addresses allowed (a Varnish in front, a
/// receiver, are the operator's own), no redirects followed.
struct PurgeClient: Sendable {
    /// The plugin's name, for messages (`varnish`, `cloudfront`, `webhook`, ...).
    let purger: String
    /// What the plugin is, for messages: `purger` or `notifier`.
    let role: String
    private let policy: TransferPolicy
    private static let engine = CurlTransferEngine(name: "pk-purge", maxPerHost: 0)

    init(purger: String, timeout: Double, role: String = "purger") {
        self.purger = purger
        self.role = role
        var policy = TransferPolicy()
        policy.maxBytes = 4 << 20
        policy.timeout = timeout
        policy.connectTimeout = min(timeout, 10)
        policy.maxRedirects = 0
        policy.addressPolicy = AddressPolicy(allowLoopback: true, allowLinkLocal: false, allowPrivate: true, optionPath: nil)
        self.policy = policy
    }

    /// The answer's status and body; a status of 300 or more, or no answer, throws a
    /// ``PipelineError`` naming the purger, the status and what the CDN said (`auth` for 401 and 403).
    func send(_ method: String, _ url: String, headers: [String: String], body: Data? = nil) async throws -> (status: Int, body: Data) {
        let transfer = CurlTransfer(url: url, policy: policy, request: RequestSpec(method: method, headers: headers, body: body))
        do {
            let response = try await Self.engine.perform(transfer)
            return (response.status, response.body)
        } catch let failure as TransferFailure {
            let said = String(decoding: failure.partial.prefix(300), as: UTF8.self)
                .split(whereSeparator: \.isNewline).joined(separator: " ").trimmingCharacters(in: .whitespaces)
            if failure.status == 0 {
                throw PipelineError(failure.error.kind, "\(role) '\(purger)': \(method) \(url): \(failure.error.message)")
            }
            throw PipelineError([401, 403].contains(failure.status) ? .auth : .httpStatus,
                                "\(role) '\(purger)': \(method) \(url) answered HTTP \(failure.status)" + (said.isEmpty ? "" : ": \(said)"))
        }
    }

    /// A required string option, trimmed; throws naming it when empty.
    static func required(_ options: PluginOptions, _ name: String, purger: String) throws -> String {
        let value = (options.string(name) ?? "").trimmingCharacters(in: .whitespaces)
        guard !value.isEmpty else { throw PipelineError(.invalidOption, "purger '\(purger)' needs '\(name)'") }
        return value
    }

    /// `text` without a trailing `/`.
    static func trimmed(_ text: String) -> String { text.hasSuffix("/") ? String(text.dropLast()) : text }

    /// Checks that `text` is an http or https URL; throws naming the option.
    static func checkURL(_ text: String, option: String, purger: String) throws {
        guard let url = URLComponents(string: text), ["http", "https"].contains(url.scheme?.lowercased() ?? ""), !(url.host ?? "").isEmpty else {
            throw PipelineError(.invalidOption, "purger '\(purger)': \(option) '\(text)' is not an http(s) URL")
        }
    }
}

extension Array {
    /// The array in runs of at most `size`.
    func batched(_ size: Int) -> [[Element]] {
        stride(from: 0, to: count, by: size).map { Array(self[$0..<Swift.min($0 + size, count)]) }
    }
}
