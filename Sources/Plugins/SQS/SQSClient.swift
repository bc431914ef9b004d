import Foundation
import PipelineKit

/// A queue of Amazon SQS (or a compatible server), as `pipelinectl work` will name it: the queue's
/// own URL (`https://sqs.eu-west-1.amazonaws.com/123456789012/uploads`, or a local server's
/// `http://127.0.0.1:4566/000000000000/uploads`), or `sqs://ACCOUNT/NAME`, which is resolved against
/// `AWS_ENDPOINT_URL_SQS`, `AWS_ENDPOINT_URL` or the region's endpoint.
struct SQSQueue: Sendable, Equatable {
    /// The queue URL every call names.
    let url: String
    /// Where requests go: the queue URL's scheme, host and port.
    let endpoint: URLComponents
    let region: String

    /// The queue's name: the last part of its URL.
    var name: String { url.split(separator: "/").last.map(String.init) ?? url }

    init(_ text: String, environment: [String: String]) throws {
        func variable(_ names: [String]) -> String? { names.lazy.compactMap { environment[$0] }.first { !$0.isEmpty } }
        var region = variable(["AWS_REGION", "AWS_DEFAULT_REGION"]) ?? "us-east-1"
        var queueURL = text
        if text.lowercased().hasPrefix("sqs://") {
            let parts = text.dropFirst(6).split(separator: "/", omittingEmptySubsequences: false)
            guard parts.count == 2, !parts[0].isEmpty, !parts[1].isEmpty else {
                throw PipelineError(.invalidSource, "'\(text)': an sqs:// queue is sqs://ACCOUNT/NAME, or give the queue's URL")
            }
            let base = variable(["AWS_ENDPOINT_URL_SQS", "AWS_ENDPOINT_URL"]) ?? "https://sqs.\(region).amazonaws.com"
            queueURL = (base.hasSuffix("/") ? String(base.dropLast()) : base) + "/\(parts[0])/\(parts[1])"
        }
        guard let components = URLComponents(string: queueURL), let scheme = components.scheme?.lowercased(),
              ["http", "https"].contains(scheme), let host = components.host, !host.isEmpty,
              components.path.split(separator: "/").count == 2 else {
            throw PipelineError(.invalidSource, "'\(text)' is not a queue: give its URL (https://sqs.REGION.amazonaws.com/ACCOUNT/NAME) or sqs://ACCOUNT/NAME")
        }
        // AWS's own endpoints name their region: sqs.eu-west-1.amazonaws.com.
        let labels = host.split(separator: ".")
        if labels.count >= 4, labels[0] == "sqs", host.hasSuffix(".amazonaws.com") { region = String(labels[1]) }
        var endpoint = URLComponents()
        endpoint.scheme = scheme
        endpoint.host = host
        endpoint.port = components.port
        endpoint.path = "/"
        self.url = queueURL
        self.endpoint = endpoint
        self.region = region
    }
}

/// One message as received: its body, the handle that deletes it or changes its visibility, and
/// how many times it has been received (SQS counts, so a poison message can be recognised).
struct SQSMessage: Sendable, Equatable {
    let id: String
    let body: String
    let receiptHandle: String
    let receiveCount: Int
    /// The message's string attributes that carry a trace (`traceparent`, `tracestate`).
    var attributes: [String: String] = [:]
}

/// The SQS calls a worker needs, in SQS's JSON protocol (`X-Amz-Target: AmazonSQS.ACTION`), signed
/// with our SigV4 (service `sqs`) and sent by the curl engine the S3 client uses: connections
/// reused, retries with backoff on 5xx and broken connections; refused credentials fail at once as
/// `auth`.
final class SQSClient: Sendable {
    let queue: SQSQueue
    let credentials: S3Credentials
    let attempts: Int
    private let policy: TransferPolicy
    private let engine: CurlTransferEngine

    init(queue: SQSQueue, credentials: S3Credentials, attempts: Int = 4) {
        self.queue = queue
        self.credentials = credentials
        self.attempts = attempts
        var policy = TransferPolicy()
        policy.maxBytes = 16 << 20
        policy.timeout = 60  // a long poll waits up to 20 s
        policy.maxRedirects = 0
        // The queue is the user's own configuration: a server on loopback or a private network is normal.
        policy.addressPolicy = AddressPolicy(allowLoopback: true, allowLinkLocal: false, allowPrivate: true, optionPath: nil)
        self.policy = policy
        engine = CurlTransferEngine(name: "pk-sqs", maxPerHost: 0)
    }

    /// Credentials from the AWS environment variables.
    static func credentials(environment: [String: String]) throws -> S3Credentials {
        guard let key = environment["AWS_ACCESS_KEY_ID"], !key.isEmpty,
              let secret = environment["AWS_SECRET_ACCESS_KEY"], !secret.isEmpty else {
            throw PipelineError(.auth, "SQS needs credentials: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY")
        }
        return S3Credentials(accessKey: key, secretKey: secret, sessionToken: environment["AWS_SESSION_TOKEN"].flatMap { $0.isEmpty ? nil : $0 })
    }

    /// Up to `limit` (1 to 10) messages, waiting up to `wait` seconds for the first (a long poll);
    /// each stays invisible to other receivers for `visibility` seconds.
    func receive(limit: Int = 10, wait: Int = 20, visibility: Int) async throws -> [SQSMessage] {
        let answer = try await call("ReceiveMessage", [
            "QueueUrl": queue.url, "MaxNumberOfMessages": min(10, max(1, limit)), "WaitTimeSeconds": min(20, max(0, wait)),
            "VisibilityTimeout": visibility, "MessageSystemAttributeNames": ["ApproximateReceiveCount"],
            "AttributeNames": ["ApproximateReceiveCount"], "MessageAttributeNames": MessageTrace.carrierNames,
        ])
        let messages = answer["Messages"] as? [[String: Any]] ?? []
        return messages.compactMap { message in
            guard let id = message["MessageId"] as? String, let handle = message["ReceiptHandle"] as? String else { return nil }
            let attributes = message["Attributes"] as? [String: String] ?? [:]
            var carried: [String: String] = [:]
            for (name, value) in message["MessageAttributes"] as? [String: [String: Any]] ?? [:] {
                if let text = value["StringValue"] as? String { carried[name.lowercased()] = text }
            }
            return SQSMessage(id: id, body: message["Body"] as? String ?? "", receiptHandle: handle,
                              receiveCount: attributes["ApproximateReceiveCount"].flatMap { Int($0) } ?? 1, attributes: carried)
        }
    }

    /// Acknowledges a message: it is not delivered again.
    func delete(_ message: SQSMessage) async throws {
        _ = try await call("DeleteMessage", ["QueueUrl": queue.url, "ReceiptHandle": message.receiptHandle])
    }

    /// Deletes up to 10 messages in one call; those the queue did not delete.
    func delete(_ messages: [SQSMessage]) async throws -> [SQSMessage] {
        guard !messages.isEmpty else { return [] }
        let entries = messages.prefix(10).enumerated().map { ["Id": "m\($0.offset)", "ReceiptHandle": $0.element.receiptHandle] }
        let answer = try await call("DeleteMessageBatch", ["QueueUrl": queue.url, "Entries": entries])
        let failed = (answer["Failed"] as? [[String: Any]] ?? []).compactMap { ($0["Id"] as? String).flatMap { Int($0.dropFirst()) } }
        return failed.compactMap { $0 < messages.count ? messages[$0] : nil } + messages.dropFirst(10)
    }

    /// Keeps a message invisible for `seconds` more from now (0: deliver it again at once).
    func extendVisibility(_ message: SQSMessage, seconds: Int) async throws {
        _ = try await call("ChangeMessageVisibility", ["QueueUrl": queue.url, "ReceiptHandle": message.receiptHandle,
                                                       "VisibilityTimeout": max(0, min(43_200, seconds))])
    }

    /// Sends a message, with string attributes (a dead-letter entry carries the error kind so).
    @discardableResult
    /// `extra`: more SendMessage parameters (a FIFO queue's `MessageGroupId` and `MessageDeduplicationId`).
    func send(_ body: String, attributes: [String: String] = [:], extra: [String: String] = [:]) async throws -> String {
        var parameters: [String: Any] = ["QueueUrl": queue.url, "MessageBody": body]
        for (name, value) in extra { parameters[name] = value }
        if !attributes.isEmpty {
            parameters["MessageAttributes"] = attributes.mapValues { ["DataType": "String", "StringValue": $0] }
        }
        let answer = try await call("SendMessage", parameters)
        return answer["MessageId"] as? String ?? ""
    }

    /// The queue's approximate depth: visible messages, those in flight, and the age of the oldest
    /// (where the server tells it).
    func depth() async throws -> (visible: Int, inFlight: Int) {
        let answer = try await call("GetQueueAttributes", [
            "QueueUrl": queue.url, "AttributeNames": ["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"],
        ])
        let attributes = answer["Attributes"] as? [String: String] ?? [:]
        return (Int(attributes["ApproximateNumberOfMessages"] ?? "") ?? 0, Int(attributes["ApproximateNumberOfMessagesNotVisible"] ?? "") ?? 0)
    }

    /// One signed JSON call, retried while the failure may pass; the answer's JSON object.
    func call(_ action: String, _ parameters: [String: Any]) async throws -> [String: Any] {
        let body = try JSONSerialization.data(withJSONObject: parameters, options: [.sortedKeys])
        let host = queue.endpoint.host! + (queue.endpoint.port.map { ":\($0)" } ?? "")
        let url = "\(queue.endpoint.scheme!)://\(host)/"
        var attempt = 0
        while true {
            attempt += 1
            let headers = ["Content-Type": "application/x-amz-json-1.0", "X-Amz-Target": "AmazonSQS.\(action)"]
            var all = headers
            let signed = SigV4.sign(method: "POST", host: host, path: "/", query: [], headers: headers,
                                    payloadHash: SigV4.payloadHash(body), credentials: credentials,
                                    region: queue.region, date: Date(), service: "sqs")
            for (name, value) in signed { all[name] = value }
            let transfer = CurlTransfer(url: url, policy: policy, request: RequestSpec(method: "POST", headers: all, body: body))
            do {
                let response = try await engine.perform(transfer)
                if response.body.isEmpty { return [:] }
                return (try? JSONSerialization.jsonObject(with: response.body) as? [String: Any]) ?? [:]
            } catch let failure as TransferFailure {
                let error = Self.describe(failure, action: action, queue: queue.url)
                guard failure.retryable, error.kind != .auth, attempt < attempts else { throw error }
                try await Task.sleep(for: .seconds(min(8, 0.2 * pow(2, Double(attempt - 1))) * Double.random(in: 0.5...1)))
            }
        }
    }

    /// A failure in words: SQS's error type and message; refused credentials as `auth`.
    static func describe(_ failure: TransferFailure, action: String, queue: String) -> PipelineError {
        let answer = (try? JSONSerialization.jsonObject(with: failure.partial) as? [String: Any]) ?? [:]
        let type = (answer["__type"] as? String).map { $0.split(separator: "#").last.map(String.init) ?? $0 }
        let message = answer["message"] as? String ?? answer["Message"] as? String
        let what = "SQS \(action) on \(queue)"
        if failure.status == 0 { return PipelineError(failure.error.kind, "\(what): \(failure.error.message)") }
        if ["InvalidClientTokenId", "SignatureDoesNotMatch", "AccessDenied", "AccessDeniedException", "UnrecognizedClientException",
            "ExpiredToken", "MissingAuthenticationToken"].contains(type ?? "") || failure.status == 403 {
            return PipelineError(.auth, "\(what): the queue refused the credentials (\(type ?? "HTTP \(failure.status)"))")
        }
        if type?.contains("NonExistentQueue") == true || type == "QueueDoesNotExist" {
            return PipelineError(.notFound, "\(what): no such queue")
        }
        let detail = [type, message].compactMap { $0 }.joined(separator: ": ")
        return PipelineError(.httpStatus, "\(what): HTTP \(failure.status)" + (detail.isEmpty ? "" : " \(detail)"))
    }
}
