import Foundation
import PipelineKit
import Synchronization
import Tracing

/// `http`: fetches `http://` and `https://` URLs with libcurl.
///
/// One transfer engine (one thread driving libcurl's multi interface) per loader. Safe defaults
/// for untrusted URLs: http and https only, also after redirects; loopback and link-local
/// addresses refused, checked on the address actually connected to; bodies larger than
/// `max_bytes` aborted while streaming. Failures that can succeed later are retried with
/// exponential backoff and jitter, and a body that broke off is resumed with `Range`/`If-Range`.
private extension UInt8 {
    var isHexDigit: Bool { (0x30...0x39).contains(self) || (0x61...0x66).contains(self | 0x20) }
}

public struct HTTPLoader: DataLoading {
    public static let plugin = Plugin.loader(
        PluginSpec(
            name: "http",
            summary: "Fetches http:// and https:// URLs with libcurl (redirects, retries, resume, limits, blocked address ranges).",
            options: [
                .duration("timeout", default: "30s", min: "1ms", max: "1d", doc: "Longest time for a whole transfer (each attempt)."),
                .duration("connect_timeout", default: "10s", min: "1ms", max: "1h", doc: "Longest time to connect."),
                .size("low_speed_bytes", default: "0B", doc: "Abort a transfer slower than this many bytes a second for low_speed_time (0: off)."),
                .duration("low_speed_time", default: "30s", min: "1s", max: "1h", doc: "How long a transfer may stay below low_speed_bytes."),
                .size("max_bytes", default: "50MB", min: "1B", doc: "Largest body accepted (after Content-Encoding is undone); checked from Content-Length and while streaming."),
                .size("ranges_above", default: "16MB", min: "0B",
                      doc: "A video larger than this is not fetched whole: after its first 64 KiB the transfer stops, and the decoder fetches by range only the parts it needs (a poster at 1h of a 2-hour film reads a few megabytes). Needs a server that answers ranges (Accept-Ranges: bytes) and pins the content with a strong ETag or a Last-Modified; each range is sent with If-Match (or If-Unmodified-Since), to the final URL only, without redirects. Such a body is never stored in the data cache. Other bodies are read whole as before."),
                .size("max_ranged_bytes", default: "64GB", min: "0B",
                      doc: "Largest body read by range (the decoder's max_video_read bounds what is read of it); 0B: never read by range."),
                .int("max_redirects", default: 5, range: 0...50, doc: "Redirects followed before failing as too_many_redirects."),
                .int("max_concurrent", default: 8, range: 1...512, doc: "Transfers running at once."),
                .int("max_per_host", default: 0, range: 0...512, doc: "Connections to one host at once (0: only max_concurrent applies)."),
                .number("rate_limit", default: 0, range: 0...100_000, doc: "Requests started per second on average (0: unlimited; Nuke uses 80)."),
                .int("rate_burst", default: 25, range: 1...100_000, doc: "Requests that may start at once before rate_limit applies."),
                .oneOf("order", LoadOrder.allCases.map(\.rawValue), default: "fifo", doc: "Which pending load starts first: the oldest or the newest."),
                .int("retry_attempts", default: 3, range: 1...20, doc: "Attempts in all for failures that can succeed later (connect, timeout, truncated, 408, 429, 5xx)."),
                .duration("retry_backoff", default: "250ms", min: "0s", max: "1h", doc: "Delay before the first retry; doubled each time, with jitter."),
                .duration("retry_max_delay", default: "10s", min: "0s", max: "1d", doc: "Longest delay between attempts; a longer Retry-After fails the item instead."),
                .list("accept", of: .string, default: [.string("image/*"), .string("application/octet-stream")],
                      doc: "Acceptable Content-Types (`type/*` allowed); others, and HTML or text bodies whatever their type, fail as not_an_image."),
                .string("user_agent", default: "pipelinectl/0.1", doc: "The User-Agent header."),
                .map("headers", doc: "Extra request headers, name to value.").example("{ X-Api-Version: \"2\" }"),
                .oneOf("auth", ["none", "basic", "bearer"], default: "none", doc: "Authentication; credentials come from environment variables."),
                .string("auth_user_env", default: "PIPELINE_HTTP_USER", doc: "Environment variable holding the basic-auth user."),
                .string("auth_password_env", default: "PIPELINE_HTTP_PASSWORD", doc: "Environment variable holding the basic-auth password."),
                .string("auth_token_env", default: "PIPELINE_HTTP_TOKEN", doc: "Environment variable holding the bearer token."),
                .path("ca_file", access: .readableFile, doc: "PEM file of CA certificates to trust instead of the system's."),
                .string("proxy", doc: "Proxy URL; by default curl's environment variables (https_proxy, no_proxy, ...) apply."),
                .list("strip_query", of: .string, default: [],
                      doc: "Query parameters left out of the cache key, so signed or expiring URLs of one image share cache entries.")
                    .example("[sig, token, expires]"),
                .string("cache_key", doc: "Cache key template from {scheme} {host} {port} {path} {query} (query after strip_query).")
                    .example("\"{host}{path}\""),
                .bool("allow_loopback", default: false, doc: "Allow connecting to 127.0.0.0/8, ::1 and 0.0.0.0."),
                .bool("allow_link_local", default: false, doc: "Allow 169.254.0.0/16 and fe80::/10 (cloud metadata lives there)."),
                .bool("allow_private", default: true, doc: "Allow 10/8, 172.16/12, 192.168/16, 100.64/10 and fc00::/7."),
                .list("allow_hosts", of: .string, default: [], doc: "Only these hosts (`*.example.com` for subdomains), also for redirects; empty: any."),
                .list("deny_hosts", of: .string, default: [], doc: "Never these hosts, also for redirects."),
                .list("traceparent_to", of: .string, default: [],
                      doc: "URL prefixes whose requests carry the item's W3C `traceparent` and `tracestate` (with traces on), so an origin's own spans join the item's trace; `*` for every URL. Empty: none, so trace ids never reach third parties. Redirects the origin makes get them too.")
                    .example("[\"https://images.internal.example.com/\"]"),
            ]),
        schemes: ["http", "https"],
        check: { options in
            _ = try HTTPLoader.policy(options, environment: ProcessInfo.processInfo.environment)
            try HTTPLoader.checkCacheKey(options.string("cache_key"))
        }
    ) { options in try HTTPLoader(options: options, environment: ProcessInfo.processInfo.environment) }

    let policy: TransferPolicy
    public let maxConcurrentLoads: Int
    public let loadOrder: LoadOrder
    let retry: RetryPolicy
    let accept: [String]
    let stripQuery: Set<String>
    let cacheKeyTemplate: String?
    /// `traceparent_to`: the URL prefixes trace context is sent to.
    let traceTo: [String]
    let rateLimiter: RateLimiter?
    private let engine: CurlTransferEngine

    struct RetryPolicy: Sendable {
        var attempts: Int
        var backoff: Double
        var maxDelay: Double

        /// The wait after the `attempt`-th failed: doubling from `backoff`, with jitter, at most
        /// `maxDelay`, at least the server's Retry-After.
        func delay(after attempt: Int, retryAfter: Double?) -> Double {
            max(min(maxDelay, backoff * pow(2, Double(attempt - 1))) * Double.random(in: 0.5...1.0), retryAfter ?? 0)
        }
    }

    init(options: PluginOptions, environment: [String: String]) throws {
        policy = try Self.policy(options, environment: environment)
        maxConcurrentLoads = options.int("max_concurrent")!
        loadOrder = LoadOrder(rawValue: options.string("order")!)!
        retry = RetryPolicy(attempts: options.int("retry_attempts")!, backoff: options.seconds("retry_backoff")!,
                            maxDelay: options.seconds("retry_max_delay")!)
        accept = (options.list("accept") ?? []).map { $0.description.lowercased() }
        stripQuery = Set((options.list("strip_query") ?? []).map(\.description))
        cacheKeyTemplate = options.string("cache_key")
        traceTo = (options.list("traceparent_to") ?? []).map(\.description)
        try Self.checkCacheKey(cacheKeyTemplate)
        let rate = options.number("rate_limit")!
        rateLimiter = rate > 0 ? RateLimiter(rate: rate, burst: options.int("rate_burst")!) : nil
        engine = CurlTransferEngine(name: "pk-curl", maxPerHost: options.int("max_per_host")!)
    }

    /// What every transfer is allowed and sent: limits, headers, credentials from the environment,
    /// address and host rules. Throws for a header that cannot be sent or credentials that are not set.
    static func policy(_ options: PluginOptions, environment: [String: String]) throws -> TransferPolicy {
        var policy = TransferPolicy()
        policy.timeout = options.seconds("timeout")!
        policy.connectTimeout = options.seconds("connect_timeout")!
        policy.lowSpeedBytes = options.bytes("low_speed_bytes")!
        policy.lowSpeedTime = options.seconds("low_speed_time")!
        policy.maxBytes = options.bytes("max_bytes")!
        policy.maxRedirects = options.int("max_redirects")!
        if let most = options.bytes("max_ranged_bytes"), most > 0 {
            policy.ranges = RangedHeadRule(above: options.bytes("ranges_above")!, maxSize: most)
        }
        policy.userAgent = options.string("user_agent")!
        for (name, value) in options.map("headers") ?? [:] {
            guard !name.isEmpty, name.allSatisfy({ $0.isLetter || $0.isNumber || $0 == "-" || $0 == "_" }) else {
                throw PipelineError(.invalidOption, "header name '\(name)' is not a valid HTTP header name")
            }
            let text = value.description
            guard !text.contains("\r"), !text.contains("\n") else {
                throw PipelineError(.invalidOption, "header '\(name)' may not contain a line break")
            }
            policy.headers[name] = text
        }
        func env(_ option: String) throws -> String {
            let name = options.string(option)!
            guard let value = environment[name], !value.isEmpty else {
                throw PipelineError(.invalidOption, "auth needs the environment variable \(name) (named by '\(option)'), which is not set")
            }
            return value
        }
        switch options.string("auth")! {
        case "basic": policy.auth = .basic(user: try env("auth_user_env"), password: try env("auth_password_env"))
        case "bearer": policy.auth = .bearer(try env("auth_token_env"))
        default: policy.auth = .none
        }
        policy.caFile = options.string("ca_file")  // readability is checked by validation (access: .readableFile)
        policy.proxy = options.string("proxy")
        policy.addressPolicy = AddressPolicy(allowLoopback: options.bool("allow_loopback")!,
                                             allowLinkLocal: options.bool("allow_link_local")!,
                                             allowPrivate: options.bool("allow_private")!)
        policy.hostPolicy = HostPolicy(allow: (options.list("allow_hosts") ?? []).map(\.description),
                                       deny: (options.list("deny_hosts") ?? []).map(\.description))
        return policy
    }

    /// Throws for a `cache_key` template with a placeholder it does not know.
    static func checkCacheKey(_ template: String?) throws {
        guard let template else { return }
        let known = ["scheme", "host", "port", "path", "query"]
        if let first = template.matches(of: /\{([a-z]*)\}/).map({ String($0.1) }).first(where: { !known.contains($0) }) {
            throw PipelineError(.invalidOption, "unknown placeholder '{\(first)}' in cache_key" + Suggest.hint(for: first, in: known))
        }
    }

    public func cacheKey(for source: Source) -> String {
        // The common case, kept cheap because every shard computes it for every line of the list:
        // nothing to strip or rewrite, and only characters URLComponents keeps as they are.
        if stripQuery.isEmpty, cacheKeyTemplate == nil, Self.keepsItsText(source.text) { return source.text }
        guard var components = URLComponents(string: source.text) else { return source.text }
        if !stripQuery.isEmpty, let items = components.queryItems {
            let kept = items.filter { !stripQuery.contains($0.name) }
            components.queryItems = kept.isEmpty ? nil : kept
        }
        guard let template = cacheKeyTemplate else { return components.string ?? source.text }
        return template
            .replacingOccurrences(of: "{scheme}", with: components.scheme ?? "")
            .replacingOccurrences(of: "{host}", with: components.host ?? "")
            .replacingOccurrences(of: "{port}", with: components.port.map(String.init) ?? "")
            .replacingOccurrences(of: "{path}", with: components.percentEncodedPath)
            .replacingOccurrences(of: "{query}", with: components.percentEncodedQuery ?? "")
    }

    /// Whether URLComponents would give `text` back unchanged, judged cheaply: `scheme://`, a host
    /// of unreserved and sub-delimiter characters with an optional `:port`, then only RFC 3986
    /// characters (not `[` `]`), `%` only in two-digit hex escapes, and at most one `#`. Anything
    /// else (user info, an IPv6 host, a space, a stray `%`) takes the URLComponents path.
    /// `HTTPRobustnessTests` holds this against URLComponents on generated URLs.
    static func keepsItsText(_ text: String) -> Bool {
        let (low, high) = uriCharacters  // read once: a static is checked for initialisation on every access
        var text = text
        return text.withUTF8 { bytes in
            let isLetter = { (byte: UInt8) in (0x61...0x7A).contains(byte | 0x20) }
            let isDigit = { (byte: UInt8) in (0x30...0x39).contains(byte) }
            // The scheme: a letter, then letters, digits, + - .; then "://".
            guard let first = bytes.first, isLetter(first),
                  let colon = bytes.firstIndex(of: UInt8(ascii: ":")), colon + 2 < bytes.count,
                  bytes[colon + 1] == UInt8(ascii: "/"), bytes[colon + 2] == UInt8(ascii: "/"),
                  bytes[..<colon].allSatisfy({ isLetter($0) || isDigit($0) || $0 == 0x2B || $0 == 0x2D || $0 == 0x2E })
            else { return false }
            // The host and port.
            var index = colon + 3
            let hostStart = index
            var portStart: Int?
            while index < bytes.count, bytes[index] != UInt8(ascii: "/"), bytes[index] != UInt8(ascii: "?"),
                  bytes[index] != UInt8(ascii: "#") {
                let byte = bytes[index]
                if byte == UInt8(ascii: ":") {
                    guard portStart == nil else { return false }
                    portStart = index + 1
                } else if let portStart {
                    guard isDigit(byte), index - portStart < 5 else { return false }
                } else {
                    // Unreserved and sub-delimiters: the URI characters but : / ? # @ (and [ ] %, not in the set).
                    guard byte != UInt8(ascii: "@"), byte < 64 ? low & (1 << UInt64(byte)) != 0 : byte < 128 && high & (1 << UInt64(byte - 64)) != 0
                    else { return false }
                }
                index += 1
            }
            guard index > hostStart, portStart.map({ index > $0 }) ?? true else { return false }
            // Path, query and fragment.
            var fragments = 0
            while index < bytes.count {
                let byte = bytes[index]
                if byte == UInt8(ascii: "%") {
                    guard index + 2 < bytes.count, bytes[index + 1].isHexDigit, bytes[index + 2].isHexDigit else { return false }
                    index += 3
                    continue
                }
                if byte == UInt8(ascii: "#") {
                    fragments += 1
                    guard fragments == 1 else { return false }
                }
                let allowed = byte < 64 ? low & (1 << UInt64(byte)) != 0 : byte < 128 && high & (1 << UInt64(byte - 64)) != 0
                if !allowed { return false }
                index += 1
            }
            return true
        }
    }

    /// The RFC 3986 characters but `%`, `[` and `]`, as bit sets over ASCII codes 0-63 and 64-127.
    static let uriCharacters: (UInt64, UInt64) = {
        var masks: (UInt64, UInt64) = (0, 0)
        for byte in "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~:/?#@!$&'()*+,;=".utf8 {
            if byte < 64 { masks.0 |= 1 << UInt64(byte) } else { masks.1 |= 1 << UInt64(byte - 64) }
        }
        return masks
    }()

    public func progress() -> [TransferProgress] { engine.progress() }

    public func load(_ source: Source) async throws -> LoadedData {
        switch try await fetch(source, conditional: nil) {
        case .modified(let data): return data
        case .notModified: throw PipelineError(.httpStatus, "HTTP 304 Not Modified to an unconditional request")
        }
    }

    /// A conditional GET with the cached copy's `ETag` (`If-None-Match`) and `Last-Modified`
    /// (`If-Modified-Since`); a 304 answer reuses the cached bytes.
    public func revalidate(_ source: Source, cached: CacheDirectives) async throws -> Revalidation {
        try await fetch(source, conditional: cached.canRevalidate ? cached : nil)
    }

    /// What `source`'s transfers are allowed and sent. The source itself was admitted by whoever
    /// attached its boundary (the service, the engine's plan); every redirect hop is checked
    /// against it before it is followed.
    func policy(for source: Source) -> TransferPolicy {
        var policy = self.policy
        policy.boundary = source.boundary
        return policy
    }

    /// One attempt at `source`, as a client span `GET` of the task's trace (OpenTelemetry's HTTP
    /// conventions: no query, which may hold credentials); under a `traceparent_to` prefix the
    /// request carries that span's context, as the process's tracer propagates it.
    func attempt(_ source: Source, _ number: Int, policy: TransferPolicy,
                 transfer: (TransferPolicy) -> CurlTransfer) async throws -> TransferResponse {
        let span = InstrumentationSystem.tracer.startSpan("GET", context: ServiceContext.current ?? .topLevel, ofKind: .client)
        defer { span.end() }
        var policy = policy
        if traceTo.contains(where: { $0 == "*" || source.text.hasPrefix($0) }) {
            for (name, value) in EngineSpans.propagation(of: span.context) { policy.headers[name] = value }
        }
        if span.isRecording, let url = URLComponents(string: source.text) {
            span.updateAttributes { attributes in
                attributes["http.request.method"] = "GET"
                attributes["url.scheme"] = url.scheme
                attributes["server.address"] = url.host
                attributes["server.port"] = url.port ?? (url.scheme == "https" ? 443 : 80)
                attributes["url.path"] = url.path
                if number > 1 { attributes["http.request.resend_count"] = number - 1 }
            }
        }
        do {
            let response = try await engine.perform(transfer(policy))
            span.updateAttributes { attributes in
                attributes["http.response.status_code"] = response.status
                attributes["http.response.body.size"] = response.body.count
            }
            return response
        } catch let failure as TransferFailure {
            if failure.status > 0 { span.attributes["http.response.status_code"] = failure.status }
            span.attributes["error.type"] = failure.error.kind.rawValue
            span.setStatus(SpanStatus(code: .error, message: failure.error.message))
            throw failure
        }
    }

    func fetch(_ source: Source, conditional: CacheDirectives?) async throws -> Revalidation {
        guard let components = URLComponents(string: source.text), let host = components.host, !host.isEmpty else {
            throw PipelineError(.invalidSource, "not a valid URL: \(source.text)")
        }
        guard policy.hostPolicy.allows(host) else {
            throw PipelineError(.blockedAddress, "host '\(host)' is not allowed by allow_hosts/deny_hosts")
        }
        let policy = policy(for: source)
        var partial = Data()
        var resume: ResumePoint?
        var attempt = 0
        while true {
            attempt += 1
            try await rateLimiter?.acquire()
            let (resumeAt, sentConditional) = (resume, resume == nil ? conditional : nil)
            do {
                let response = try await self.attempt(source, attempt, policy: policy) { policy in
                    CurlTransfer(url: source.text, policy: policy, resume: resumeAt, conditional: sentConditional)
                }
                if response.notModified, let conditional {
                    return .notModified(conditional.updated(by: response.directives))
                }
                if let size = response.rangedSize {
                    return .modified(try ranged(response, size: size, source: source, policy: policy))
                }
                let body = response.isContinuation ? partial + response.body : response.body
                var loaded = LoadedData(data: body, contentType: response.contentType, finalURL: response.effectiveURL,
                                        directives: response.directives)
                loaded.sniffed = try checkIsImage(body, contentType: response.contentType)
                return .modified(loaded)
            } catch var failure as TransferFailure {
                // Keep what arrived, to resume from it, when the server gave a validator for If-Range.
                // A 206 continued the bytes we had; any other answer replaced them.
                let continued = resume != nil && failure.status == 206
                if [ErrorKind.truncated, .network, .timeout].contains(failure.error.kind),
                   !failure.partial.isEmpty, let validator = failure.validator {
                    partial = (continued ? partial : Data()) + failure.partial
                    resume = ResumePoint(offset: partial.count, validator: validator)
                } else {
                    partial = Data()
                    resume = nil
                }
                guard failure.retryable, attempt < retry.attempts else {
                    if attempt > 1 { failure.error.message += " (after \(attempt) attempts)" }
                    throw failure.error
                }
                let delay = retry.delay(after: attempt, retryAfter: failure.retryAfter)
                if let after = failure.retryAfter, after > retry.maxDelay {
                    failure.error.message += " (Retry-After \(Int(after))s exceeds retry_max_delay)"
                    throw failure.error
                }
                try await Task.sleep(for: .seconds(delay))
            }
        }
    }

    /// A body left to be read by range: its first bytes checked as any body's, the rest fetched
    /// from the final URL as the decoder asks, each range retried as a load is.
    func ranged(_ response: TransferResponse, size: Int, source: Source, policy: TransferPolicy) throws -> LoadedData {
        let url = response.effectiveURL ?? source.text
        let directives = response.directives
        guard let validator = RangeRequest.validator(etag: directives.etag, lastModified: directives.lastModified) else {
            throw PipelineError(.httpStatus, "\(url): no validator to read it by range")
        }
        let (engine, retry) = (self.engine, self.retry)
        let body = BlockRangedBody(size: size, name: url, validator: validator, largestWhole: policy.maxBytes) { request in
            try retryingOnThisThread(attempts: retry.attempts, delay: { min(retry.maxDelay, retry.delay(after: $0, retryAfter: $1.retryAfter)) }) {
                engine.performWaiting(CurlTransfer(url: url, policy: policy, range: request)).map(\.body)
            }
        }
        var loaded = LoadedData(ranged: body, head: response.body, contentType: response.contentType,
                                finalURL: response.effectiveURL, directives: directives)
        loaded.sniffed = try checkIsImage(response.body, contentType: response.contentType)
        return loaded
    }

    /// Rejects bodies that are not images: a Content-Type outside `accept`, or bytes that are
    /// HTML, XML or JSON whatever the Content-Type says. Returns what the first bytes are, for the
    /// decoder (one look per item).
    @discardableResult
    func checkIsImage(_ body: Data, contentType: String?) throws -> FormatSniffer.Sniffed {
        if let contentType, !accept.isEmpty {
            let type = contentType.split(separator: ";").first.map { $0.trimmingCharacters(in: .whitespaces).lowercased() } ?? ""
            let ok = accept.contains { pattern in
                pattern.hasSuffix("/*") ? type.hasPrefix(String(pattern.dropLast(1))) : type == pattern
            }
            if !ok { throw PipelineError(.notAnImage, "served as \(contentType), which is not in 'accept'") }
        }
        let sniffed = FormatSniffer.sniff(body)
        if case .other(let kind) = sniffed, ["HTML", "XML", "JSON", "text"].contains(kind) {
            throw PipelineError(.notAnImage, "the body is \(kind)" + (contentType.map { " although served as \($0)" } ?? ""))
        }
        return sniffed
    }

}
