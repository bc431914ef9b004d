import Foundation
import PipelineKit

/// `sns` (notifier): publishes each "ready" event to an SNS topic, its message the event's JSON,
/// with the event's id and type as message attributes; subscribers (queues, Lambdas, HTTPS
/// endpoints) get it from there. SNS's Query protocol (`Action=Publish`), signed with our SigV4
/// (service `sns`), sent by the curl engine; one try per call (the engine retries).
struct SNSNotifier: EventSending {
    static let plugin = Plugin.notifier(
        PluginSpec(
            name: "sns",
            summary: "Publishes each finished item's event to an SNS topic (AWS credentials from the environment; AWS_ENDPOINT_URL_SNS for a local server).",
            options: [
                .string("topic", required: true, doc: "The topic's ARN (arn:aws:sns:REGION:ACCOUNT:NAME).").example("arn:aws:sns:eu-west-1:123456789012:images-ready"),
                .duration("timeout", default: "10s", min: "100ms", max: "5m", doc: "Time for one try, connection included."),
            ] + EventRetry.options),
        check: { options in _ = try Topic(try PurgeClient.required(options, "topic", purger: "sns"), environment: ProcessInfo.processInfo.environment) },
        make: { options in try SNSNotifier(options: options) })

    /// A topic: its ARN, its region and where its API answers.
    struct Topic: Sendable {
        let arn: String
        let region: String
        let endpoint: URLComponents

        init(_ arn: String, environment: [String: String]) throws {
            let parts = arn.split(separator: ":", omittingEmptySubsequences: false)
            guard parts.count == 6, parts[0] == "arn", parts[2] == "sns", !parts[3].isEmpty, !parts[5].isEmpty else {
                throw PipelineError(.invalidOption, "notifier 'sns': topic '\(arn)' is not a topic ARN (arn:aws:sns:REGION:ACCOUNT:NAME)")
            }
            self.arn = arn
            region = String(parts[3])
            let base = ["AWS_ENDPOINT_URL_SNS", "AWS_ENDPOINT_URL"].lazy.compactMap { environment[$0] }.first { !$0.isEmpty }
                ?? "https://sns.\(region).amazonaws.com"
            guard let url = URLComponents(string: base), ["http", "https"].contains(url.scheme?.lowercased() ?? ""), url.host?.isEmpty == false else {
                throw PipelineError(.invalidOption, "notifier 'sns': the endpoint '\(base)' is not an http(s) URL")
            }
            endpoint = url
        }
    }

    let topic: Topic
    let credentials: S3Credentials
    let policy: TransferPolicy
    private static let engine = CurlTransferEngine(name: "pk-sns", maxPerHost: 0)

    init(options: PluginOptions, environment: [String: String] = ProcessInfo.processInfo.environment) throws {
        topic = try Topic(try PurgeClient.required(options, "topic", purger: "sns"), environment: environment)
        credentials = try SQSClient.credentials(environment: environment)
        var policy = TransferPolicy()
        policy.maxBytes = 1 << 20
        policy.timeout = options.number("timeout") ?? 10
        policy.connectTimeout = min(policy.timeout, 10)
        policy.maxRedirects = 0
        policy.addressPolicy = AddressPolicy(allowLoopback: true, allowLinkLocal: false, allowPrivate: true, optionPath: nil)
        self.policy = policy
    }

    func send(_ event: ItemEvent) async throws {
        let fields = [
            ("Action", "Publish"), ("Version", "2010-03-31"), ("TopicArn", topic.arn),
            ("Message", String(decoding: event.body, as: UTF8.self)),
            ("MessageAttributes.entry.1.Name", "pipelinectl-event-id"),
            ("MessageAttributes.entry.1.Value.DataType", "String"), ("MessageAttributes.entry.1.Value.StringValue", event.id),
            ("MessageAttributes.entry.2.Name", "pipelinectl-event-type"),
            ("MessageAttributes.entry.2.Value.DataType", "String"), ("MessageAttributes.entry.2.Value.StringValue", event.type),
        ]
        let body = Data(fields.map { "\(Self.encoded($0.0))=\(Self.encoded($0.1))" }.joined(separator: "&").utf8)
        let host = topic.endpoint.host! + (topic.endpoint.port.map { ":\($0)" } ?? "")
        let path = topic.endpoint.path.isEmpty ? "/" : topic.endpoint.path
        let headers = ["Content-Type": "application/x-www-form-urlencoded; charset=utf-8"]
        var all = headers
        for (name, value) in SigV4.sign(method: "POST", host: host, path: path, query: [], headers: headers,
                                        payloadHash: SigV4.payloadHash(body), credentials: credentials, region: topic.region,
                                        date: Date(), service: "sns") { all[name] = value }
        let url = "\(topic.endpoint.scheme!)://\(host)\(path)"
        do {
            _ = try await Self.engine.perform(CurlTransfer(url: url, policy: policy, request: RequestSpec(method: "POST", headers: all, body: body)))
        } catch let failure as TransferFailure {
            let text = String(decoding: failure.partial.prefix(2000), as: UTF8.self)
            let code = Self.element("Code", in: text), message = Self.element("Message", in: text)
            let what = "notifier 'sns': Publish to \(topic.arn)"
            if failure.status == 0 { throw PipelineError(failure.error.kind, "\(what): \(failure.error.message)") }
            let detail = [code, message].compactMap { $0 }.joined(separator: ": ")
            throw PipelineError([401, 403].contains(failure.status) ? .auth : .httpStatus,
                                "\(what) answered HTTP \(failure.status)" + (detail.isEmpty ? "" : " \(detail)"))
        }
    }

    /// `text` for a form body: everything but RFC 3986's unreserved characters percent-encoded.
    static func encoded(_ text: String) -> String {
        var allowed = CharacterSet.alphanumerics
        allowed.insert(charactersIn: "-._~")
        return text.addingPercentEncoding(withAllowedCharacters: allowed) ?? text
    }

    /// The text of the first `<name>` element of an XML answer.
    static func element(_ name: String, in text: String) -> String? {
        guard let open = text.range(of: "<\(name)>"), let close = text.range(of: "</\(name)>", range: open.upperBound..<text.endIndex) else { return nil }
        return String(text[open.upperBound..<close.lowerBound])
    }
}
