import Crypto
import Foundation
import PipelineKit
import Tracing

/// Where an S3-compatible store is and who we are to it, resolved from the AWS environment
/// variables users already have, each overridable by a pipeline option.
public struct S3Settings: Sendable {
    /// Where an S3-compatible store is and the credentials for it: the options of the `s3`
    /// loader, data cache, destination (`output:` when `dir` is an `s3://` URL) and list. Each
    /// defaults to the AWS environment variable users already set.
    public static let options: [OptionSpec] = [
        .string("endpoint", doc: "S3 endpoint URL (default: AWS_ENDPOINT_URL_S3, else AWS_ENDPOINT_URL, else AWS's for the region).")
            .example("http://127.0.0.1:9000"),
        .string("region", doc: "S3 region (default: AWS_REGION, else AWS_DEFAULT_REGION, else us-east-1)."),
        .oneOf("addressing", ["auto", "path", "virtual"], default: "auto",
               doc: "path: ENDPOINT/BUCKET/KEY; virtual: BUCKET.ENDPOINT/KEY; auto: virtual for AWS, path for any other endpoint."),
        .string("access_key_id", doc: "S3 access key (default: AWS_ACCESS_KEY_ID). Write \"${VAR}\", never the key itself."),
        .string("secret_access_key", doc: "S3 secret key (default: AWS_SECRET_ACCESS_KEY). Write \"${VAR}\"."),
        .string("session_token", doc: "Session token of temporary S3 credentials (default: AWS_SESSION_TOKEN)."),
    ]

    /// `https://s3.REGION.amazonaws.com`, or an S3-compatible store's URL (MinIO, R2, Ceph, moto).
    var endpoint: URLComponents
    var region: String
    var credentials: S3Credentials
    /// `endpoint/bucket/key` rather than `bucket.endpoint/key`: the default for any endpoint but AWS's own.
    var pathStyle: Bool

    /// Reads the options of ``options``, each defaulting to its AWS variable.
    init(options: PluginOptions, environment: [String: String]) throws {
        func setting(_ option: String, _ variables: [String]) -> String? {
            if let value = options.string(option), !value.isEmpty { return value }
            return variables.lazy.compactMap { environment[$0] }.first { !$0.isEmpty }
        }
        region = setting("region", ["AWS_REGION", "AWS_DEFAULT_REGION"]) ?? "us-east-1"
        let custom = setting("endpoint", ["AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL"])
        let endpointText = custom ?? "https://s3.\(region).amazonaws.com"
        guard let endpoint = URLComponents(string: endpointText), let scheme = endpoint.scheme,
              ["http", "https"].contains(scheme.lowercased()), endpoint.host?.isEmpty == false else {
            throw PipelineError(.invalidOption, "the S3 endpoint '\(endpointText)' is not an http:// or https:// URL")
        }
        self.endpoint = endpoint
        switch options.string("addressing") ?? "auto" {
        case "path": pathStyle = true
        case "virtual": pathStyle = false
        default: pathStyle = custom != nil
        }
        guard let key = setting("access_key_id", ["AWS_ACCESS_KEY_ID"]),
              let secret = setting("secret_access_key", ["AWS_SECRET_ACCESS_KEY"]) else {
            throw PipelineError(.invalidOption, "S3 needs credentials: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY "
                + "(or the options access_key_id and secret_access_key)")
        }
        credentials = S3Credentials(accessKey: key, secretKey: secret,
                                    sessionToken: setting("session_token", ["AWS_SESSION_TOKEN"]))
    }
}

/// An object's address: `s3://bucket/key`.
struct S3Location: Sendable, Hashable {
    let bucket: String
    let key: String

    /// Parses `s3://bucket/key` (the key may be empty: a bucket or a prefix).
    init(_ url: String) throws {
        guard url.lowercased().hasPrefix("s3://") else { throw PipelineError(.invalidSource, "not an s3:// URL: \(url)") }
        let rest = url.dropFirst(5)
        let bucket = String(rest.prefix { $0 != "/" })
        guard !bucket.isEmpty else { throw PipelineError(.invalidSource, "no bucket in \(url)") }
        self.bucket = bucket
        key = String(rest.dropFirst(bucket.count).drop { $0 == "/" })
    }

    init(bucket: String, key: String) {
        self.bucket = bucket
        self.key = key
    }

    var url: String { "s3://\(bucket)/\(key)" }
}

/// What a HEAD or GET says about an object.
struct S3Object: Sendable {
    var data: Data
    var contentType: String?
    var etag: String?
    /// The object's whole size (`Content-Length` of a HEAD).
    var size: Int?
    /// User metadata (`x-amz-meta-NAME`), by lower-case NAME.
    var metadata: [String: String] = [:]
    /// Set when only the first bytes are in `data`: the object is to be read by range.
    var rangedSize: Int? = nil
}

/// How a PUT with `If-None-Match: *` ended.
enum S3PutOutcome: Sendable {
    case written
    /// The object already existed (412): another writer got there first, and its object is kept.
    case alreadyThere
    /// The store does not support conditional writes (501): nothing was written.
    case notSupported
}

/// The few S3 calls we need (GET, HEAD, PUT, DELETE, ListObjectsV2), signed with our SigV4 and
/// sent by the curl engine the http loader uses: connections reused, timeouts, and retries with
/// backoff on 5xx, `SlowDown` and broken connections. Refused credentials fail at once as `auth`.
final class S3Client: Sendable {
    let settings: S3Settings
    let policy: TransferPolicy
    let attempts: Int
    /// Whether an object's GET carries the `traceparent` of its client span (the `s3` loader's
    /// `traceparent` option).
    let propagatesTrace: Bool
    private let engine: CurlTransferEngine

    init(settings: S3Settings, maxBytes: Int = 1 << 30, timeout: Double = 120, attempts: Int = 4, ranges: RangedHeadRule? = nil,
         propagatesTrace: Bool = false) {
        self.settings = settings
        self.propagatesTrace = propagatesTrace
        var policy = TransferPolicy()
        policy.maxBytes = maxBytes
        policy.ranges = ranges
        policy.timeout = timeout
        policy.maxRedirects = 0
        // The endpoint is the user's own configuration: a store on loopback or a private network is normal.
        policy.addressPolicy = AddressPolicy(allowLoopback: true, allowLinkLocal: false, allowPrivate: true, optionPath: nil)
        self.policy = policy
        self.attempts = attempts
        engine = CurlTransferEngine(name: "pk-s3", maxPerHost: 0)
    }

    /// The object; `nil` when there is no such key (a missing bucket is an error that says so).
    func get(_ object: S3Location) async throws -> S3Object? {
        let response = try await send("GET", object, answered: [404], operation: "GetObject")
        if response.status == 404 { try Self.checkBucket(response, method: "GET", object: object) }
        return response.status == 404 ? nil : S3Object(response)
    }

    /// Throws for a 404 whose body says the bucket, not the key, is missing.
    static func checkBucket(_ response: Response, method: String, object: S3Location) throws {
        let body = String(decoding: response.body, as: UTF8.self)
        if ListingParser.element("Code", in: body[...]) == "NoSuchBucket" {
            throw describe(TransferFailure(error: PipelineError(.notFound, "no such bucket"), status: 404, partial: response.body,
                                           validator: nil, retryAfter: nil, retryable: false), method: method, object: object)
        }
    }

    /// `length` bytes of the object from `offset` (fewer at its end); `nil` when there is no object.
    func get(_ object: S3Location, offset: Int, length: Int) async throws -> Data? {
        let response = try await send("GET", object, headers: ["Range": "bytes=\(offset)-\(offset + length - 1)"], answered: [404])
        return response.status == 404 ? nil : response.body
    }

    /// The object's facts without its body; `nil` when there is none.
    func head(_ object: S3Location) async throws -> S3Object? {
        let response = try await send("HEAD", object, answered: [404])
        return response.status == 404 ? nil : S3Object(response)
    }

    /// Writes the object whole (S3 makes a PUT visible only when complete). With `ifAbsent`, sends
    /// `If-None-Match: *` so that an existing object is kept: `.alreadyThere` when one was, and
    /// `.notSupported` (nothing written) from a store without conditional writes (501).
    @discardableResult
    func put(_ object: S3Location, _ data: Data, contentType: String, headers: [String: String] = [:],
             ifAbsent: Bool = false) async throws -> S3PutOutcome {
        var all = headers
        all["Content-Type"] = contentType
        if ifAbsent {
            all["If-None-Match"] = "*"
            let response = try await send("PUT", object, headers: all, body: data, answered: [412, 501], operation: "PutObject")
            return response.status == 412 ? .alreadyThere : response.status == 501 ? .notSupported : .written
        }
        _ = try await send("PUT", object, headers: all, body: data, operation: "PutObject")
        return .written
    }

    /// Deletes the object; deleting one that is not there is not an error (S3 answers 204 either way).
    func delete(_ object: S3Location) async throws {
        _ = try await send("DELETE", object, answered: [404])
    }

    /// Deletes up to 1,000 keys of `bucket` in one request (DeleteObjects); returns the keys the
    /// store could not delete, with its reason.
    func delete(bucket: String, keys: [String]) async throws -> [(key: String, reason: String)] {
        precondition(keys.count <= 1000)
        guard !keys.isEmpty else { return [] }
        let escape = { (text: String) in
            text.replacingOccurrences(of: "&", with: "&amp;").replacingOccurrences(of: "<", with: "&lt;")
                .replacingOccurrences(of: ">", with: "&gt;")
        }
        let body = Data(("<Delete><Quiet>true</Quiet>" + keys.map { "<Object><Key>\(escape($0))</Key></Object>" }.joined()
            + "</Delete>").utf8)
        let md5 = Data(Insecure.MD5.hash(data: body)).base64EncodedString()
        let response = try await send("POST", S3Location(bucket: bucket, key: ""), query: [("delete", "")],
                                      headers: ["Content-MD5": md5, "Content-Type": "application/xml"], body: body)
        let text = String(decoding: response.body, as: UTF8.self)
        return text.components(separatedBy: "<Error>").dropFirst().map { chunk in
            (ListingParser.element("Key", in: chunk[...]).map(ListingParser.unescape) ?? "?",
             [ListingParser.element("Code", in: chunk[...]), ListingParser.element("Message", in: chunk[...])]
                .compactMap { $0 }.joined(separator: ": "))
        }
    }

    /// One page of keys under `prefix`, and the token of the next page.
    func list(bucket: String, prefix: String, after token: String?, maxKeys: Int = 1000) async throws -> (keys: [(key: String, size: Int, modified: String)], next: String?) {
        var query = [("list-type", "2"), ("prefix", prefix), ("max-keys", String(maxKeys))]
        if let token { query.append(("continuation-token", token)) }
        let response = try await send("GET", S3Location(bucket: bucket, key: ""), query: query)
        let listing = ListingParser.parse(response.body)
        return (listing.keys, listing.truncated ? listing.nextToken : nil)
    }

    struct Response {
        var status: Int
        var body: Data
        var headers: [String: String]
        /// The object's size when only its first bytes were read, the rest to be read by range.
        var rangedSize: Int? = nil
    }
}

extension S3Object {
    init(_ response: S3Client.Response) {
        var metadata: [String: String] = [:]
        for (name, value) in response.headers where name.hasPrefix("x-amz-meta-") { metadata[String(name.dropFirst(11))] = value }
        self.init(data: response.body, contentType: response.headers["content-type"], etag: response.headers["etag"],
                  size: response.rangedSize ?? response.headers["content-length"].flatMap { Int($0) }, metadata: metadata)
        rangedSize = response.rangedSize
    }
}

extension S3Client {

    /// Sends one signed request, retrying what may succeed later. A status in `answered` is an
    /// answer for the caller (404 to a GET, 412 to a conditional PUT), not a failure.
    /// `operation`: each attempt is a client span `S3.OPERATION` of the task's trace
    /// (OpenTelemetry's AWS conventions), whose context the request carries when the client
    /// propagates traces (an unsigned header: the signature does not cover it).
    func send(_ method: String, _ object: S3Location, query: [(String, String)] = [], headers: [String: String] = [:],
              body: Data? = nil, answered: Set<Int> = [], operation: String? = nil) async throws -> Response {
        var attempt = 0
        while true {
            attempt += 1
            let span = operation.map { S3Client.span($0, object, attempt: attempt) }
            defer { span?.end() }
            let transfer = signed(method, object, query: query, headers: headers, body: body,
                                  traced: propagatesTrace ? span.map { EngineSpans.propagation(of: $0.context) } ?? [:] : [:])
            do {
                let response = try await engine.perform(transfer)
                span?.attributes["http.response.status_code"] = response.status
                return Response(status: response.status, body: response.body, headers: transfer.responseHeaders,
                                rangedSize: response.rangedSize)
            } catch let failure as TransferFailure {
                span?.attributes["http.response.status_code"] = failure.status
                if answered.contains(failure.status) {
                    return Response(status: failure.status, body: failure.partial, headers: transfer.responseHeaders)
                }
                span?.attributes["error.type"] = failure.error.kind.rawValue
                span?.setStatus(SpanStatus(code: .error, message: failure.error.message))
                let error = Self.describe(failure, method: method, object: object)
                guard failure.retryable || Self.isSlowDown(failure), attempt < attempts else { throw error }
                try await Task.sleep(for: .seconds(min(8, 0.2 * pow(2, Double(attempt - 1))) * Double.random(in: 0.5...1)))
            }
        }
    }

    /// A client span for one attempt of `operation` on `object`.
    static func span(_ operation: String, _ object: S3Location, attempt: Int) -> any Span {
        let span = InstrumentationSystem.tracer.startSpan("S3." + operation, context: ServiceContext.current ?? .topLevel, ofKind: .client)
        if span.isRecording {
            span.updateAttributes { attributes in
                attributes["rpc.system"] = "aws-api"
                attributes["rpc.service"] = "S3"
                attributes["rpc.method"] = operation
                attributes["aws.s3.bucket"] = object.bucket
                attributes["aws.s3.key"] = object.key
                if attempt > 1 { attributes["http.request.resend_count"] = attempt - 1 }
            }
        }
        return span
    }

    /// One request signed now (a retry is signed again); `traced`: trace headers sent unsigned.
    func signed(_ method: String, _ object: S3Location, query: [(String, String)] = [], headers: [String: String] = [:],
                body: Data? = nil, range: RangeRequest? = nil, traced: [String: String] = [:]) -> CurlTransfer {
        let (url, host, path) = address(object, query: query)
        var all = headers
        let signed = SigV4.sign(method: method, host: host, path: path, query: query, headers: headers,
                                payloadHash: SigV4.payloadHash(body ?? Data()), credentials: settings.credentials,
                                region: settings.region, date: Date())
        for (name, value) in signed { all[name] = value }
        for (name, value) in traced { all[name] = value }
        return CurlTransfer(url: url, policy: policy, request: RequestSpec(method: method, headers: all, body: body), range: range)
    }

    /// The object's body to be read by range from its first answer: each range a signed GET with
    /// `If-Match` its ETag, retried as other requests are, blocking the reading thread.
    func rangedBody(_ object: S3Location, _ first: S3Object, size: Int) throws -> BlockRangedBody {
        guard let validator = RangeRequest.validator(etag: first.etag, lastModified: nil) else {
            throw PipelineError(.httpStatus, "s3://\(object.bucket)/\(object.key): no ETag to read it by range")
        }
        let attempts = self.attempts
        return BlockRangedBody(size: size, name: "s3://\(object.bucket)/\(object.key)", validator: validator,
                               largestWhole: policy.maxBytes) { [self] request in
            try retryingOnThisThread(attempts: attempts, delay: { attempt, _ in min(8, 0.2 * pow(2, Double(attempt - 1))) * Double.random(in: 0.5...1) }) {
                engine.performWaiting(signed("GET", object, range: request)).map(\.body)
            }
        }
    }

    /// A URL anyone may GET `object` with until `expires` seconds from now (at most 7 days).
    func presignedURL(_ object: S3Location, expires: Int, date: Date = Date()) -> String {
        let (url, host, path) = address(object, query: [])
        let query = SigV4.presign(method: "GET", host: host, path: path, credentials: settings.credentials,
                                  region: settings.region, date: date, expires: expires)
        return url + "?" + query.map { SigV4.encode($0.0) + "=" + SigV4.encode($0.1) }.joined(separator: "&")
    }

    /// The request URL, its Host header and its path as signed.
    func address(_ object: S3Location, query: [(String, String)]) -> (url: String, host: String, path: String) {
        let endpoint = settings.endpoint
        let port = endpoint.port.map { ":\($0)" } ?? ""
        let base = endpoint.percentEncodedPath.hasSuffix("/") ? String(endpoint.percentEncodedPath.dropLast()) : endpoint.percentEncodedPath
        let key = object.key.isEmpty ? "" : "/" + SigV4.encode(object.key, keepSlash: true)
        let host: String, path: String
        if settings.pathStyle {
            host = endpoint.host! + port
            path = base + "/" + SigV4.encode(object.bucket) + key
        } else {
            host = object.bucket + "." + endpoint.host! + port
            path = base + (key.isEmpty ? "/" : key)
        }
        let queryText = query.map { SigV4.encode($0.0) + "=" + SigV4.encode($0.1) }.joined(separator: "&")
        return ("\(endpoint.scheme!)://\(host)\(path)" + (queryText.isEmpty ? "" : "?" + queryText), host, path)
    }

    static func isSlowDown(_ failure: TransferFailure) -> Bool {
        String(decoding: failure.partial, as: UTF8.self).contains("<Code>SlowDown</Code>")
    }

    /// A failure in words: the store's error code and message, and for refused credentials what to check.
    static func describe(_ failure: TransferFailure, method: String, object: S3Location) -> PipelineError {
        let body = String(decoding: failure.partial, as: UTF8.self)[...]
        let code = ListingParser.element("Code", in: body)
        let what = "\(method) \(object.url)"
        if ["SignatureDoesNotMatch", "InvalidAccessKeyId", "AccessDenied", "InvalidToken", "ExpiredToken"].contains(code ?? "")
            || (failure.status == 403 && code == nil) {
            let hint = code == "SignatureDoesNotMatch" ? "; check AWS_SECRET_ACCESS_KEY"
                : code == "InvalidAccessKeyId" ? "; check AWS_ACCESS_KEY_ID" : ""
            return PipelineError(.auth, "\(what): the store refused the credentials (\(code ?? "HTTP 403"))\(hint)")
        }
        if failure.status == 0 { return PipelineError(failure.error.kind, "\(what): \(failure.error.message)") }
        let detail = [code, ListingParser.element("Message", in: body)].compactMap { $0 }.joined(separator: ": ")
        return PipelineError(failure.status == 404 ? .notFound : .httpStatus,
                             "\(what): HTTP \(failure.status)" + (detail.isEmpty ? "" : " \(detail)"))
    }
}

/// The keys of a ListObjectsV2 answer, and the fields of an error answer (the XML is small and
/// regular: no XML library needed).
enum ListingParser {
    /// The text of the first `<name>` element in `part`.
    static func element(_ name: String, in part: Substring) -> String? {
        guard let start = part.range(of: "<\(name)>"),
              let end = part.range(of: "</\(name)>", range: start.upperBound..<part.endIndex) else { return nil }
        return String(part[start.upperBound..<end.lowerBound])
    }

    static func parse(_ data: Data) -> (keys: [(key: String, size: Int, modified: String)], truncated: Bool, nextToken: String?) {
        let text = String(decoding: data, as: UTF8.self)
        var keys: [(String, Int, String)] = []
        for chunk in text.components(separatedBy: "<Contents>").dropFirst() {
            let part = chunk[...]
            guard let key = element("Key", in: part) else { continue }
            keys.append((unescape(key), Int(element("Size", in: part) ?? "") ?? 0, element("LastModified", in: part) ?? ""))
        }
        let whole = text[...]
        return (keys, element("IsTruncated", in: whole) == "true", element("NextContinuationToken", in: whole).map(unescape))
    }

    static func unescape(_ text: String) -> String {
        text.replacingOccurrences(of: "&lt;", with: "<").replacingOccurrences(of: "&gt;", with: ">")
            .replacingOccurrences(of: "&quot;", with: "\"").replacingOccurrences(of: "&apos;", with: "'")
            .replacingOccurrences(of: "&amp;", with: "&")
    }
}
