import CCurl
import Foundation
import PipelineKit

/// What one transfer is allowed to do.
struct TransferPolicy: Sendable {
    var timeout: Double = 30
    var connectTimeout: Double = 10
    var maxBytes: Int = 50_000_000
    var maxRedirects: Int = 5
    var userAgent = "pipelinectl/0.1"
    var headers: [String: String] = [:]
    var addressPolicy = AddressPolicy()
}

/// The outcome of a finished transfer.
struct TransferResponse: Sendable {
    var status: Int
    var body: Data
    var contentType: String?
    var effectiveURL: String?
}

/// The one owner of a `CURL *` easy handle and of the buffers its callbacks write into.
///
/// Created on any thread; configured, run and finished only on the transfer engine's thread.
final class CurlTransfer: @unchecked Sendable {
    let handle: UnsafeMutableRawPointer
    let url: String
    let policy: TransferPolicy
    private var headerList: UnsafeMutablePointer<curl_slist>?
    var continuation: CheckedContinuation<TransferResponse, any Error>?

    // Written by curl's callbacks on the engine thread.
    var body = Data()
    var status = 0
    var contentType: String?
    var exceededMaxBytes = false
    var blockedAddress: String?

    init(url: String, policy: TransferPolicy) {
        self.url = url
        self.policy = policy
        self.handle = curl_easy_init()!
    }

    deinit {
        curl_easy_cleanup(handle)
        if let headerList { curl_slist_free_all(headerList) }
    }

    /// Sets every option. The transfer must stay alive until curl is done with it (the engine
    /// keeps it in its table of active transfers).
    func configure() {
        let me = Unmanaged.passUnretained(self).toOpaque()
        _ = pk_easy_setopt_str(handle, CURLOPT_URL, url)
        _ = pk_easy_setopt_long(handle, CURLOPT_NOSIGNAL, 1)
        // Protocols, also after redirects: http and https only.
        _ = pk_easy_setopt_str(handle, CURLOPT_PROTOCOLS_STR, "http,https")
        _ = pk_easy_setopt_str(handle, CURLOPT_REDIR_PROTOCOLS_STR, "http,https")
        _ = pk_easy_setopt_long(handle, CURLOPT_FOLLOWLOCATION, 1)
        _ = pk_easy_setopt_long(handle, CURLOPT_MAXREDIRS, policy.maxRedirects)
        _ = pk_easy_setopt_long(handle, CURLOPT_TIMEOUT_MS, Int(policy.timeout * 1000))
        _ = pk_easy_setopt_long(handle, CURLOPT_CONNECTTIMEOUT_MS, Int(policy.connectTimeout * 1000))
        // Rejects early from Content-Length; the write callback enforces it while streaming.
        _ = pk_easy_setopt_off(handle, CURLOPT_MAXFILESIZE_LARGE, curl_off_t(policy.maxBytes))
        // Every encoding curl supports; the limit applies to the decoded bytes.
        _ = pk_easy_setopt_str(handle, CURLOPT_ACCEPT_ENCODING, "")
        _ = pk_easy_setopt_str(handle, CURLOPT_USERAGENT, policy.userAgent)
        var list: UnsafeMutablePointer<curl_slist>?
        list = curl_slist_append(list, "Accept: image/avif,image/webp,image/png,image/jpeg,image/*;q=0.8,application/octet-stream;q=0.5")
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

    /// Turns curl's result into a response or a classified error.
    func finish(_ code: CURLcode) -> Result<TransferResponse, any Error> {
        var effective: UnsafeMutablePointer<CChar>?
        _ = pk_easy_getinfo_str(handle, CURLINFO_EFFECTIVE_URL, &effective)
        let finalURL = effective.map { String(cString: $0) }
        if let blockedAddress {
            return .failure(PipelineError(.blockedAddress, "refused to connect to \(blockedAddress) (\(url))"))
        }
        if exceededMaxBytes || code == CURLE_FILESIZE_EXCEEDED {
            return .failure(PipelineError(.tooLarge, "body exceeds max_bytes (\(Units.formatSize(policy.maxBytes)))"))
        }
        guard code == CURLE_OK else {
            let reason = String(cString: curl_easy_strerror(code))
            return .failure(PipelineError(CurlTransfer.kind(of: code, received: body.count), reason))
        }
        var code = 0
        _ = pk_easy_getinfo_long(handle, CURLINFO_RESPONSE_CODE, &code)
        guard (200..<300).contains(code) else {
            return .failure(PipelineError(.httpStatus, "HTTP \(code)" + CurlTransfer.reasonPhrase(code)))
        }
        return .success(TransferResponse(status: code, body: body, contentType: contentType,
                                         effectiveURL: finalURL == url ? nil : finalURL))
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
        default: return "network"
        }
    }

    static func reasonPhrase(_ code: Int) -> String {
        let phrases = [301: "Moved Permanently", 302: "Found", 304: "Not Modified", 400: "Bad Request",
                       401: "Unauthorized", 403: "Forbidden", 404: "Not Found", 408: "Request Timeout",
                       410: "Gone", 429: "Too Many Requests", 500: "Internal Server Error",
                       502: "Bad Gateway", 503: "Service Unavailable", 504: "Gateway Timeout"]
        return phrases[code].map { " \($0)" } ?? ""
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
    if t.body.count + length > t.policy.maxBytes {
        t.exceededMaxBytes = true
        return 0
    }
    if let data { t.body.append(UnsafeRawPointer(data).assumingMemoryBound(to: UInt8.self), count: length) }
    return length
}

/// Reads the status line and the headers of each response (a redirect chain has several).
private let curlHeader: @convention(c) (UnsafeMutablePointer<CChar>?, Int, Int, UnsafeMutableRawPointer?) -> Int = {
    data, size, count, user in
    let t = transfer(user)
    let length = size * count
    guard let data else { return length }
    let line = String(decoding: UnsafeRawBufferPointer(start: data, count: length), as: UTF8.self)
    if line.hasPrefix("HTTP/") {
        t.contentType = nil
        let parts = line.split(separator: " ")
        t.status = parts.count > 1 ? Int(parts[1]) ?? 0 : 0
    } else if let colon = line.firstIndex(of: ":") {
        let name = line[..<colon].lowercased()
        let value = line[line.index(after: colon)...].trimmingCharacters(in: .whitespacesAndNewlines)
        if name == "content-type" { t.contentType = value }
    }
    return length
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
