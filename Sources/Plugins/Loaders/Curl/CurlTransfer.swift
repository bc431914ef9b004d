import CCurl
import Foundation
import PipelineKit
import Synchronization

/// What one transfer is allowed to do.
struct TransferPolicy: Sendable {
    enum Auth: Sendable, Equatable {
        case none
        case basic(user: String, password: String)
        case bearer(String)
    }

    var timeout: Double = 30
    var connectTimeout: Double = 10
    var lowSpeedBytes = 0
    var lowSpeedTime: Double = 0
    var maxBytes: Int = 50_000_000
    var maxRedirects: Int = 5
    var userAgent = "pipelinectl/0.1"
    var headers: [String: String] = [:]
    var auth = Auth.none
    var caFile: String?
    var proxy: String?
    var addressPolicy = AddressPolicy()
    var hostPolicy = HostPolicy()
    /// Where the source must stay: every redirect hop is checked before it is followed.
    var boundary: SourceBoundary?
    /// When a body is left to be read by range instead (nil: never).
    var ranges: RangedHeadRule?
}

/// A request other than the loader's image GET (object storage): its method, headers and body.
/// Sent as given: no `Accept` header, no redirects followed.
struct RequestSpec: Sendable {
    var method: String
    var headers: [String: String]
    var body: Data?
}

/// Where a transfer resumes from, after an earlier attempt broke off.
struct ResumePoint: Sendable {
    let offset: Int
    /// The ETag or Last-Modified of the earlier response, sent as `If-Range`.
    let validator: String
}

/// The outcome of a finished transfer.
struct TransferResponse: Sendable {
    var status: Int
    var body: Data
    var contentType: String?
    var effectiveURL: String?
    /// Whether the body continues the resume point's bytes (206) rather than replacing them.
    var isContinuation: Bool
    /// The response's caching headers.
    var directives: CacheDirectives
    /// A conditional request was answered 304 Not Modified (the body is empty).
    var notModified: Bool { status == 304 }
    /// The whole body's size, when the transfer stopped after the first bytes for the body to
    /// be read by range (``TransferPolicy/ranges``); `body` is then only those bytes.
    var rangedSize: Int? = nil
}

/// A failed transfer, with what a retry needs: the bytes so far and how to resume them.
struct TransferFailure: Error, Sendable {
    var error: PipelineError
    var status: Int
    var partial: Data
    var validator: String?
    var retryAfter: Double?
    /// Whether the failure may succeed later (connect errors, timeouts, 408, 429, 5xx, breaks).
    var retryable: Bool
}

/// The one owner of a `CURL *` easy handle and of the buffers its callbacks write into.
///
/// Created on any thread; configured, run and finished only on the transfer engine's thread.
final class CurlTransfer: @unchecked Sendable {
    private static let serials = Atomic<UInt64>(0)
    /// Unique for the process's life (an object identifier can be reused after a transfer ends).
    let serial = CurlTransfer.serials.add(1, ordering: .relaxed).newValue
    let handle: UnsafeMutableRawPointer
    let url: String
    let policy: TransferPolicy
    let resume: ResumePoint?
    /// Validators of a cached copy: sent as If-None-Match / If-Modified-Since.
    let conditional: CacheDirectives?
    /// Set for object storage requests.
    let request: RequestSpec?
    /// The bytes asked for, when this is a range request.
    let range: RangeRequest?
    /// Called on the engine's thread with the outcome, for a caller waiting on its own thread
    /// (``CurlTransferEngine/performWaiting(_:)``).
    var finished: (@Sendable (Result<TransferResponse, any Error>) -> Void)?
    /// Every response header of the final response, lower-case names (object storage requests only).
    var responseHeaders: [String: String] = [:]
    private var headerList: UnsafeMutablePointer<curl_slist>?
    private var errorBuffer = [CChar](repeating: 0, count: Int(CURL_ERROR_SIZE) + 1)
    var continuation: CheckedContinuation<TransferResponse, any Error>?

    // Written by curl's callbacks on the engine thread (and read for progress).
    var body = Data()
    var status = 0
    var contentType: String?
    var contentLength: Int?
    var etag: String?
    var lastModified: String?
    /// Caching headers of the final response, lowercased names.
    var cachingHeaders: [String: String] = [:]
    var retryAfter: Double?
    var contentRangeStart: Int?
    var acceptsRanges = false
    var contentEncoding: String?
    /// Whether the body may be left to be read by range: decided when the headers end, then
    /// again (`false`) when its first bytes are not what the rule takes.
    var rangeCandidate = false
    /// The transfer stopped after the first bytes: the body is to be read by range.
    var switchedToRanges = false
    var exceededMaxBytes = false
    /// A body to be read by range is larger than the rule's largest.
    var exceededRangedSize = false
    /// A range request was answered with a whole body.
    var rangeRefused = false
    var blockedAddress: String?
    var blockedHost: String?
    var blockedScheme: String?
    var blockedRedirect: String?
    var currentURL: String

    init(url: String, policy: TransferPolicy, resume: ResumePoint? = nil, conditional: CacheDirectives? = nil,
         request: RequestSpec? = nil, range: RangeRequest? = nil) {
        self.url = url
        self.policy = policy
        self.resume = resume
        self.conditional = conditional
        self.request = request
        self.range = range
        self.currentURL = url
        self.handle = curl_easy_init()!
    }

    deinit {
        curl_easy_cleanup(handle)
        if let headerList { curl_slist_free_all(headerList) }
    }

    /// Bytes this attempt may still receive.
    var remainingBytes: Int { range?.count ?? (policy.maxBytes - (resume?.offset ?? 0)) }

    /// The largest Content-Length curl lets through: a body to be read by range may be larger
    /// than `max_bytes` (the header check and the write callback hold the rest to it).
    var largestAnnounced: Int {
        // A range request: the status is checked first (a 200 instead of 206 fails as such).
        if range != nil { return Int(Int32.max) }
        guard resume == nil, let ranges = policy.ranges else { return remainingBytes }
        return max(remainingBytes, ranges.maxSize)
    }

    /// Sets every option. The transfer must stay alive until curl is done with it (the engine
    /// keeps it in its table of active transfers).
    func configure() {
        let me = Unmanaged.passUnretained(self).toOpaque()
        _ = pk_easy_setopt_str(handle, CURLOPT_URL, url)
        _ = pk_easy_setopt_long(handle, CURLOPT_NOSIGNAL, 1)
        _ = errorBuffer.withUnsafeMutableBufferPointer { pk_easy_setopt_ptr(handle, CURLOPT_ERRORBUFFER, $0.baseAddress) }
        // Protocols, also after redirects: http and https only.
        _ = pk_easy_setopt_str(handle, CURLOPT_PROTOCOLS_STR, "http,https")
        _ = pk_easy_setopt_str(handle, CURLOPT_REDIR_PROTOCOLS_STR, "http,https")
        _ = pk_easy_setopt_long(handle, CURLOPT_FOLLOWLOCATION, request == nil && range == nil ? 1 : 0)
        _ = pk_easy_setopt_long(handle, CURLOPT_MAXREDIRS, policy.maxRedirects)
        _ = pk_easy_setopt_long(handle, CURLOPT_TIMEOUT_MS, Int(policy.timeout * 1000))
        _ = pk_easy_setopt_long(handle, CURLOPT_CONNECTTIMEOUT_MS, Int(policy.connectTimeout * 1000))
        if policy.lowSpeedBytes > 0, policy.lowSpeedTime > 0 {
            _ = pk_easy_setopt_long(handle, CURLOPT_LOW_SPEED_LIMIT, policy.lowSpeedBytes)
            _ = pk_easy_setopt_long(handle, CURLOPT_LOW_SPEED_TIME, max(1, Int(policy.lowSpeedTime.rounded(.up))))
        }
        // Rejects early from Content-Length; the write callback enforces it while streaming.
        _ = pk_easy_setopt_off(handle, CURLOPT_MAXFILESIZE_LARGE, curl_off_t(largestAnnounced))
        // Every encoding curl supports; the limit applies to the decoded bytes. A range is of
        // the body as stored: no encoding.
        _ = pk_easy_setopt_str(handle, CURLOPT_ACCEPT_ENCODING, range == nil ? "" : nil)
        _ = pk_easy_setopt_str(handle, CURLOPT_USERAGENT, policy.userAgent)
        if let caFile = policy.caFile { _ = pk_easy_setopt_str(handle, CURLOPT_CAINFO, caFile) }
        if let proxy = policy.proxy { _ = pk_easy_setopt_str(handle, CURLOPT_PROXY, proxy) }
        var list: UnsafeMutablePointer<curl_slist>?
        if let request {
            configure(request, &list)
        } else {
            list = curl_slist_append(list, "Accept: image/avif,image/webp,image/png,image/jpeg,image/*;q=0.8,application/octet-stream;q=0.5")
        }
        switch policy.auth {
        case .none: break
        case .basic(let user, let password):
            _ = pk_easy_setopt_long(handle, CURLOPT_HTTPAUTH, 1)  // CURLAUTH_BASIC, a cast macro Swift cannot import
            _ = pk_easy_setopt_str(handle, CURLOPT_USERNAME, user)
            _ = pk_easy_setopt_str(handle, CURLOPT_PASSWORD, password)
        case .bearer(let token):
            list = curl_slist_append(list, "Authorization: Bearer \(token)")
        }
        for (name, value) in conditions { list = curl_slist_append(list, "\(name): \(value)") }
        for (name, value) in policy.headers.sorted(by: { $0.key < $1.key }) {
            list = curl_slist_append(list, "\(name): \(value)")
        }
        headerList = list
        _ = pk_easy_setopt_slist(handle, CURLOPT_HTTPHEADER, list)
        _ = pk_easy_setopt_write(handle, curlWrite)
        _ = pk_easy_setopt_ptr(handle, CURLOPT_WRITEDATA, me)
        _ = pk_easy_setopt_header(handle, curlHeader)
        _ = pk_easy_setopt_ptr(handle, CURLOPT_HEADERDATA, me)
        _ = pk_easy_setopt_opensocket(handle, curlOpenSocket)
        _ = pk_easy_setopt_ptr(handle, CURLOPT_OPENSOCKETDATA, me)
    }

    /// The conditional and range headers: a revalidation's validators, a resume's Range with
    /// If-Range, or a range request's Range with its precondition.
    private var conditions: [(String, String)] {
        var headers: [(String, String)] = []
        if let conditional, resume == nil {
            if let etag = conditional.etag { headers.append(("If-None-Match", etag)) }
            if let date = conditional.lastModified { headers.append(("If-Modified-Since", date)) }
        }
        if let resume { headers += [("Range", "bytes=\(resume.offset)-"), ("If-Range", resume.validator)] }
        if let range { headers += [("Range", "bytes=\(range.start)-\(range.end)"), range.precondition] }
        return headers
    }

    /// Method, headers and body of an object storage request. curl's own `Expect: 100-continue`
    /// and form Content-Type are turned off: the request is sent exactly as it was signed.
    private func configure(_ request: RequestSpec, _ list: inout UnsafeMutablePointer<curl_slist>?) {
        _ = pk_easy_setopt_str(handle, CURLOPT_ACCEPT_ENCODING, nil)
        // An object's key is literal: `in/../out/x` is its own object, and the request is signed
        // with that path. libcurl would otherwise remove the dot segments before sending.
        _ = pk_easy_setopt_long(handle, CURLOPT_PATH_AS_IS, 1)
        switch request.method {
        case "GET": break
        case "HEAD": _ = pk_easy_setopt_long(handle, CURLOPT_NOBODY, 1)
        default: _ = pk_easy_setopt_str(handle, CURLOPT_CUSTOMREQUEST, request.method)
        }
        if let body = request.body {
            _ = pk_easy_setopt_off(handle, CURLOPT_POSTFIELDSIZE_LARGE, curl_off_t(body.count))
            _ = body.withUnsafeBytes { pk_easy_setopt_ptr(handle, CURLOPT_COPYPOSTFIELDS, UnsafeMutableRawPointer(mutating: $0.baseAddress ?? UnsafeRawPointer(bitPattern: 1)!)) }
        }
        list = curl_slist_append(list, "Expect:")
        if request.headers.keys.contains(where: { $0.lowercased() == "content-type" }) == false {
            list = curl_slist_append(list, "Content-Type:")
        }
        for (name, value) in request.headers.sorted(by: { $0.key < $1.key }) {
            list = curl_slist_append(list, "\(name): \(value)")
        }
    }

    /// Turns curl's result into a response or a classified ``TransferFailure``.
    func finish(_ code: CURLcode) -> Result<TransferResponse, any Error> {
        var effective: UnsafeMutablePointer<CChar>?
        _ = pk_easy_getinfo_str(handle, CURLINFO_EFFECTIVE_URL, &effective)
        let finalURL = effective.map { String(cString: $0) }
        var responseCode = 0
        _ = pk_easy_getinfo_long(handle, CURLINFO_RESPONSE_CODE, &responseCode)
        func fail(_ kind: ErrorKind, _ message: String, retryable: Bool = false) -> Result<TransferResponse, any Error> {
            .failure(TransferFailure(error: PipelineError(kind, message), status: responseCode, partial: body,
                                     validator: etag ?? lastModified, retryAfter: retryAfter, retryable: retryable))
        }
        if let (kind, message) = refusal(responseCode) { return fail(kind, message) }
        if switchedToRanges {
            return .success(TransferResponse(status: responseCode, body: body, contentType: contentType,
                                             effectiveURL: finalURL == url ? nil : finalURL, isContinuation: false,
                                             directives: directives, rangedSize: contentLength))
        }
        if exceededMaxBytes || code == CURLE_FILESIZE_EXCEEDED {
            return fail(.tooLarge, "body exceeds max_bytes (\(Units.formatSize(policy.maxBytes)))")
        }
        guard code == CURLE_OK else {
            let detail = String(decoding: errorBuffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
            let reason = detail.isEmpty ? String(cString: curl_easy_strerror(code)) : detail
            let kind = CurlTransfer.kind(of: code, received: body.count)
            let retryable = [ErrorKind.connect, .timeout, .truncated, .network].contains(kind)
            return fail(kind, reason, retryable: retryable)
        }
        if responseCode == 304, conditional != nil {
            return .success(TransferResponse(status: 304, body: Data(), contentType: contentType,
                                             effectiveURL: finalURL == url ? nil : finalURL, isContinuation: false,
                                             directives: directives))
        }
        if range != nil, responseCode == 412 {
            return fail(.httpStatus, "HTTP 412 Precondition Failed: the source changed while it was read by range")
        }
        guard (200..<300).contains(responseCode) else {
            let retryable = responseCode == 408 || responseCode == 429 || responseCode >= 500
            return fail(.httpStatus, "HTTP \(responseCode)" + CurlTransfer.reasonPhrase(responseCode), retryable: retryable)
        }
        if let contentLength, responseCode != 206, request?.method != "HEAD", body.count < contentLength {
            return fail(.truncated, "received \(body.count) of \(contentLength) bytes", retryable: true)
        }
        if let range, contentRangeStart != range.start {
            return fail(.httpStatus, "HTTP 206 to a request for bytes \(range.start)-\(range.end) gave bytes from "
                + "\(contentRangeStart.map(String.init) ?? "an unknown start")")
        }
        if let range, body.count != range.count {
            return fail(.truncated, "received \(body.count) of bytes \(range.start)-\(range.end)", retryable: true)
        }
        var continuation = false
        if let resume, responseCode == 206 {
            guard contentRangeStart == resume.offset else {
                return fail(.truncated, "the server resumed at byte \(contentRangeStart ?? -1), not \(resume.offset)", retryable: true)
            }
            continuation = true
        }
        return .success(TransferResponse(status: responseCode, body: body, contentType: contentType,
                                         effectiveURL: finalURL == url ? nil : finalURL, isContinuation: continuation,
                                         directives: directives))
    }

    /// Why the transfer was stopped before its end, when it was refused: an address, scheme,
    /// host or redirect the policy refuses, a range answered whole, a body too large to read by
    /// range.
    private func refusal(_ responseCode: Int) -> (ErrorKind, String)? {
        if let blockedAddress { return (.blockedAddress, "refused to connect to \(blockedAddress)") }
        if let blockedScheme { return (.blockedProtocol, "redirect to a \(blockedScheme): URL refused (only http and https)") }
        if let blockedHost { return (.blockedAddress, "host '\(blockedHost)' is not allowed by allow_hosts/deny_hosts") }
        if let blockedRedirect { return (.sourceNotAllowed, "redirect to \(blockedRedirect) refused: it is outside serve.sources") }
        if rangeRefused, let range {
            return (.httpStatus, "HTTP \(responseCode) to a request for bytes \(range.start)-\(range.end): the server "
                + "no longer answers that range (it answered ranges at first)")
        }
        if exceededRangedSize, let limit = policy.ranges?.maxSize {
            return (.tooLarge, "body of \(Units.formatSize(contentLength ?? 0)) exceeds max_ranged_bytes (\(Units.formatSize(limit)))")
        }
        return nil
    }

    /// The caching headers of the final response.
    var directives: CacheDirectives {
        var headers = cachingHeaders
        headers["etag"] = etag
        headers["last-modified"] = lastModified
        return CacheDirectives(httpHeaders: headers)
    }

    static func kind(of code: CURLcode, received: Int) -> ErrorKind {
        switch code {
        case CURLE_COULDNT_RESOLVE_HOST, CURLE_COULDNT_RESOLVE_PROXY: return .dns
        case CURLE_COULDNT_CONNECT: return .connect
        case CURLE_OPERATION_TIMEDOUT: return .timeout
        case CURLE_TOO_MANY_REDIRECTS: return .tooManyRedirects
        case CURLE_UNSUPPORTED_PROTOCOL: return .blockedProtocol
        case CURLE_PARTIAL_FILE: return .truncated
        case CURLE_SSL_CONNECT_ERROR, CURLE_PEER_FAILED_VERIFICATION, CURLE_SSL_CERTPROBLEM,
             CURLE_SSL_CIPHER, CURLE_SSL_CACERT_BADFILE, CURLE_SSL_ISSUER_ERROR, CURLE_SSL_PINNEDPUBKEYNOTMATCH:
            return .tls
        case CURLE_RECV_ERROR, CURLE_SEND_ERROR, CURLE_GOT_NOTHING:
            return received > 0 ? .truncated : .connect
        case CURLE_URL_MALFORMAT: return .invalidSource
        case CURLE_BAD_CONTENT_ENCODING: return .decodeFailed
        default: return .network
        }
    }

    static func reasonPhrase(_ code: Int) -> String {
        let phrases = [301: "Moved Permanently", 302: "Found", 304: "Not Modified", 400: "Bad Request",
                       401: "Unauthorized", 403: "Forbidden", 404: "Not Found", 408: "Request Timeout",
                       410: "Gone", 429: "Too Many Requests", 500: "Internal Server Error",
                       502: "Bad Gateway", 503: "Service Unavailable", 504: "Gateway Timeout"]
        return phrases[code].map { " \($0)" } ?? ""
    }

    /// Reads one response header line (a redirect chain has several responses).
    fileprivate func header(_ line: String) -> Bool {
        if line.hasPrefix("HTTP/") {
            contentType = nil
            contentLength = nil
            retryAfter = nil
            contentRangeStart = nil
            etag = nil
            lastModified = nil
            cachingHeaders = [:]
            responseHeaders = [:]
            acceptsRanges = false
            contentEncoding = nil
            let parts = line.split(separator: " ")
            status = parts.count > 1 ? Int(parts[1]) ?? 0 : 0
            return true
        }
        guard let colon = line.firstIndex(of: ":") else {
            return line.trimmingCharacters(in: .whitespacesAndNewlines).isEmpty ? headersEnded() : true
        }
        let name = line[..<colon].lowercased()
        let value = line[line.index(after: colon)...].trimmingCharacters(in: .whitespacesAndNewlines)
        if request != nil { responseHeaders[name] = value }
        switch name {
        case "content-type": contentType = value
        case "accept-ranges": acceptsRanges = value.lowercased() == "bytes"
        case "content-encoding": contentEncoding = value.lowercased()
        case "content-length": contentLength = Int(value)
        case "etag": etag = value
        case "last-modified": lastModified = value
        case "cache-control", "expires", "date", "age": cachingHeaders[name] = value
        case "retry-after":
            if let seconds = Double(value) {
                retryAfter = seconds
            } else if let date = HTTPDate.parse(value) {
                retryAfter = max(0, date.timeIntervalSinceNow)
            }
        case "content-range":  // bytes START-END/TOTAL
            let spec = value.split(separator: " ").last ?? ""
            contentRangeStart = spec.split(separator: "-").first.flatMap { Int($0) }
        case "location" where (300..<400).contains(status):
            // Checked before curl follows it: scheme and host patterns of every hop.
            guard let target = URL(string: value, relativeTo: URL(string: currentURL))?.absoluteURL else { return true }
            let scheme = target.scheme?.lowercased() ?? ""
            if scheme != "http" && scheme != "https" {
                blockedScheme = scheme
                return false
            }
            if let host = target.host, !policy.hostPolicy.allows(host) {
                blockedHost = host
                return false
            }
            if let boundary = policy.boundary, !boundary.admitsRedirect(to: target.absoluteString) {
                blockedRedirect = String(target.absoluteString.prefix { $0 != "?" })
                return false
            }
            currentURL = target.absoluteString
        default: break
        }
        return true
    }
}

extension CurlTransfer {
    /// At the end of a response's headers: whether the body may be read by range (a final 200
    /// over the rule's size, ranges offered, no encoding, a validator that pins it); otherwise a
    /// Content-Length over `max_bytes` stops the transfer now. `false` stops it.
    fileprivate func headersEnded() -> Bool {
        if range != nil, (200..<300).contains(status), status != 206 {
            rangeRefused = true
            return false
        }
        guard (200..<300).contains(status), range == nil, resume == nil, request?.method != "HEAD" else { return true }
        if let rule = policy.ranges, status == 200, let length = contentLength, length > max(rule.above, rule.head),
           acceptsRanges, contentEncoding == nil || contentEncoding == "identity",
           RangeRequest.validator(etag: etag, lastModified: lastModified) != nil {
            guard length <= rule.maxSize else {
                exceededRangedSize = true
                return false
            }
            rangeCandidate = true
            return true
        }
        if let length = contentLength, length > remainingBytes, contentEncoding == nil {
            exceededMaxBytes = true
            return false
        }
        return true
    }

    /// With the body's first bytes in: `false` (stop) when the rule takes them, the body to be
    /// read by range; otherwise the transfer goes on as any other, within `max_bytes`.
    fileprivate func decideRanges() -> Bool {
        guard let rule = policy.ranges, body.count >= rule.head else { return true }
        rangeCandidate = false
        if rule.accepts(body) {
            switchedToRanges = true
            return false
        }
        if let length = contentLength, length > remainingBytes {
            exceededMaxBytes = true
            return false
        }
        return true
    }
}

private func transfer(_ pointer: UnsafeMutableRawPointer?) -> CurlTransfer {
    Unmanaged<CurlTransfer>.fromOpaque(pointer!).takeUnretainedValue()
}

/// Appends body bytes; returning less than given makes curl abort with CURLE_WRITE_ERROR.
private let curlWrite: @convention(c) (UnsafeMutablePointer<CChar>?, Int, Int, UnsafeMutableRawPointer?) -> Int = {
    data, size, count, user in
    let t = transfer(user)
    let length = size * count
    if t.rangeCandidate {
        if let data { t.body.append(UnsafeRawPointer(data).assumingMemoryBound(to: UInt8.self), count: length) }
        return t.decideRanges() ? length : 0
    }
    if t.body.count + length > t.remainingBytes {
        t.exceededMaxBytes = true
        return 0
    }
    if let data { t.body.append(UnsafeRawPointer(data).assumingMemoryBound(to: UInt8.self), count: length) }
    return length
}

private let curlHeader: @convention(c) (UnsafeMutablePointer<CChar>?, Int, Int, UnsafeMutableRawPointer?) -> Int = {
    data, size, count, user in
    let length = size * count
    guard let data else { return length }
    let line = String(decoding: UnsafeRawBufferPointer(start: data, count: length), as: UTF8.self)
    return transfer(user).header(line) ? length : 0
}

/// Opens every socket curl connects with, after checking the address actually connected to (so a
/// redirect, or DNS that changes its answer, cannot reach a refused range).
private let curlOpenSocket: @convention(c) (UnsafeMutableRawPointer?, curlsocktype, UnsafeMutablePointer<curl_sockaddr>?) -> curl_socket_t = {
    user, purpose, address in
    let t = transfer(user)
    guard let address else { return CURL_SOCKET_BAD }
    let sockaddrPointer = withUnsafeMutablePointer(to: &address.pointee.addr) { UnsafeRawPointer($0) }
    if let refused = t.policy.addressPolicy.refusal(for: sockaddrPointer, family: address.pointee.family) {
        t.blockedAddress = refused
        return CURL_SOCKET_BAD
    }
    return socket(address.pointee.family, address.pointee.socktype, address.pointee.protocol)
}
