import Crypto
import Foundation
import PipelineKit

/// AWS credentials: an access key, its secret, and the session token of temporary credentials.
public struct S3Credentials: Sendable, Equatable {
    public var accessKey: String
    public var secretKey: String
    public var sessionToken: String?

    public init(accessKey: String, secretKey: String, sessionToken: String? = nil) {
        self.accessKey = accessKey
        self.secretKey = secretKey
        self.sessionToken = sessionToken
    }
}

/// AWS Signature Version 4 for S3 requests, written for our client: every header the request
/// carries is signed, the path is used as sent (S3 does not encode it twice), and the query is
/// sorted and encoded as the specification says.
///
/// Held byte for byte against botocore by the golden vectors in
/// `Tests/PluginsTests/Fixtures/sigv4/vectors.json` (see `make-vectors.py` there). libcurl's
/// `CURLOPT_AWS_SIGV4` is not used: Debian 12's 7.88 mis-signs unsorted query strings.
enum SigV4 {
    /// The SHA-256 of an empty body, which GET, HEAD and DELETE send.
    static let emptyPayloadHash = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"

    /// The headers to add to a request: `Authorization`, `x-amz-date`, `x-amz-content-sha256`, and
    /// `x-amz-security-token` with temporary credentials.
    ///
    /// - Parameters:
    ///   - path: the request path as sent, percent-encoded (`/bucket/dir%20one/a.jpg`).
    ///   - query: the query's name/value pairs, not encoded.
    ///   - headers: every other header the request sends (names in any case), without `Host`.
    ///   - host: the `Host` header (`127.0.0.1:9000`, `bucket.s3.eu-west-1.amazonaws.com`).
    static func sign(method: String, host: String, path: String, query: [(String, String)], headers: [String: String],
                     payloadHash: String, credentials: S3Credentials, region: String, date: Date,
                     service: String = "s3") -> [String: String] {
        let stamp = timestamp(date)
        let day = String(stamp.prefix(8))
        var signed: [String: String] = [:]
        for (name, value) in headers { signed[name.lowercased()] = canonicalValue(value) }
        signed["host"] = host
        signed["x-amz-date"] = stamp
        signed["x-amz-content-sha256"] = payloadHash
        if let token = credentials.sessionToken { signed["x-amz-security-token"] = token }
        let names = signed.keys.sorted()
        let encoded: [(name: String, value: String)] = query.map { (encode($0.0), encode($0.1)) }
        let sortedQuery = encoded.sorted { $0.name == $1.name ? $0.value < $1.value : $0.name < $1.name }
        let canonicalQuery = sortedQuery.map { $0.name + "=" + $0.value }.joined(separator: "&")
        let canonicalHeaders = names.map { $0 + ":" + signed[$0]! + "\n" }.joined()
        let signedNames = names.joined(separator: ";")
        let canonicalRequest: String = [method, path.isEmpty ? "/" : path, canonicalQuery, canonicalHeaders,
                                        signedNames, payloadHash].joined(separator: "\n")
        let scope = "\(day)/\(region)/\(service)/aws4_request"
        let signature = signature(canonicalRequest, stamp: stamp, scope: scope, secret: credentials.secretKey,
                                  parts: [day, region, service, "aws4_request"])
        var added = ["x-amz-date": stamp, "x-amz-content-sha256": payloadHash]
        if let token = credentials.sessionToken { added["x-amz-security-token"] = token }
        added["authorization"] = "AWS4-HMAC-SHA256 Credential=\(credentials.accessKey)/\(scope), "
            + "SignedHeaders=\(signedNames), Signature=\(signature)"
        return added
    }

    /// The hex signature of `canonicalRequest`: its hash signed with the key derived from `secret`
    /// through the scope's `parts` (day, region, service, `aws4_request`).
    static func signature(_ canonicalRequest: String, stamp: String, scope: String, secret: String, parts: [String]) -> String {
        let stringToSign = ["AWS4-HMAC-SHA256", stamp, scope, hex(SHA256.hash(data: Data(canonicalRequest.utf8)))]
            .joined(separator: "\n")
        var key = SymmetricKey(data: Data(("AWS4" + secret).utf8))
        for part in parts {
            key = SymmetricKey(data: Data(HMAC<SHA256>.authenticationCode(for: Data(part.utf8), using: key)))
        }
        return hex(HMAC<SHA256>.authenticationCode(for: Data(stringToSign.utf8), using: key))
    }

    /// The query of a presigned URL (query-string authentication): anyone holding the URL may send
    /// `method` to it until `expires` seconds after `date` (at most 7 days, as S3 allows). Only
    /// `host` is signed, and the payload is `UNSIGNED-PAYLOAD`.
    static func presign(method: String, host: String, path: String, credentials: S3Credentials, region: String,
                        date: Date, expires: Int, service: String = "s3") -> [(String, String)] {
        let stamp = timestamp(date)
        let day = String(stamp.prefix(8))
        let scope = "\(day)/\(region)/\(service)/aws4_request"
        var query = [("X-Amz-Algorithm", "AWS4-HMAC-SHA256"), ("X-Amz-Credential", "\(credentials.accessKey)/\(scope)"),
                     ("X-Amz-Date", stamp), ("X-Amz-Expires", String(min(max(1, expires), 604_800))), ("X-Amz-SignedHeaders", "host")]
        if let token = credentials.sessionToken { query.append(("X-Amz-Security-Token", token)) }
        let canonicalQuery = query.map { (encode($0.0), encode($0.1)) }.sorted { $0.0 < $1.0 }.map { $0.0 + "=" + $0.1 }
            .joined(separator: "&")
        let canonicalRequest = [method, path.isEmpty ? "/" : path, canonicalQuery, "host:\(host)\n", "host", "UNSIGNED-PAYLOAD"]
            .joined(separator: "\n")
        query.append(("X-Amz-Signature", signature(canonicalRequest, stamp: stamp, scope: scope, secret: credentials.secretKey,
                                                   parts: [day, region, service, "aws4_request"])))
        return query
    }

    /// `20261122T083005Z`.
    static func timestamp(_ date: Date) -> String {
        var calendar = Calendar(identifier: .gregorian)
        calendar.timeZone = TimeZone(identifier: "UTC")!
        let c = calendar.dateComponents([.year, .month, .day, .hour, .minute, .second], from: date)
        return String(format: "%04d%02d%02dT%02d%02d%02dZ", c.year!, c.month!, c.day!, c.hour!, c.minute!, c.second!)
    }

    /// A header value as signed: trimmed, runs of spaces made one.
    static func canonicalValue(_ value: String) -> String {
        value.trimmingCharacters(in: .whitespaces).split(separator: " ", omittingEmptySubsequences: true).joined(separator: " ")
    }

    /// Percent-encodes everything but the unreserved characters of RFC 3986 (`/` too, unless kept).
    static func encode(_ text: String, keepSlash: Bool = false) -> String {
        var out = ""
        for byte in text.utf8 {
            let c = Character(Unicode.Scalar(byte))
            if (byte < 0x80 && (c.isLetter || c.isNumber)) || "-_.~".contains(c) || (keepSlash && c == "/") {
                out.append(c)
            } else {
                out += String(format: "%%%02X", byte)
            }
        }
        return out
    }

    /// The SHA-256 of `data` in lower-case hex.
    static func payloadHash(_ data: Data) -> String { data.isEmpty ? emptyPayloadHash : hex(SHA256.hash(data: data)) }

    static func hex<D: Sequence>(_ bytes: D) -> String where D.Element == UInt8 {
        bytes.map { String(format: "%02x", $0) }.joined()
    }
}
