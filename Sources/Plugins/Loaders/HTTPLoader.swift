import Foundation
import PipelineKit
import Synchronization

/// `http`: fetches `http://` and `https://` URLs with libcurl.
///
/// One transfer engine (one thread driving libcurl's multi interface) per loader; the engine's
/// concurrency limit is `max_concurrent`. Safe defaults for untrusted URLs: http and https only,
/// also after redirects; loopback and link-local addresses refused, checked on the address
/// actually connected to; bodies larger than `max_bytes` aborted while streaming.
public struct HTTPLoader: DataLoading {
    public static let plugin = Plugin.loader(
        PluginSpec(
            name: "http",
            summary: "Fetches http:// and https:// URLs with libcurl (redirects, limits, blocked address ranges).",
            options: [
                .duration("timeout", default: "30s", min: "1ms", max: "1d", doc: "Longest time for a whole transfer."),
                .duration("connect_timeout", default: "10s", min: "1ms", max: "1h", doc: "Longest time to connect."),
                .int("max_concurrent", default: 8, range: 1...512, doc: "Transfers running at once."),
                .size("max_bytes", default: "50MB", min: "1B", doc: "Largest body accepted (after Content-Encoding is undone)."),
                .int("max_redirects", default: 5, range: 0...50, doc: "Redirects followed before failing as too_many_redirects."),
                .string("user_agent", default: "pipelinectl/0.1", doc: "The User-Agent header."),
                .map("headers", doc: "Extra request headers, name to value."),
                .bool("allow_loopback", default: false, doc: "Allow connecting to 127.0.0.0/8, ::1 and 0.0.0.0."),
                .bool("allow_link_local", default: false, doc: "Allow 169.254.0.0/16 and fe80::/10 (cloud metadata lives there)."),
                .bool("allow_private", default: true, doc: "Allow 10/8, 172.16/12, 192.168/16, 100.64/10 and fc00::/7."),
            ]),
        schemes: ["http", "https"]
    ) { options in try HTTPLoader(options: options) }

    let policy: TransferPolicy
    public let maxConcurrentLoads: Int
    private let engine: LazyEngine

    init(options: PluginOptions) throws {
        var policy = TransferPolicy()
        policy.timeout = options.seconds("timeout")!
        policy.connectTimeout = options.seconds("connect_timeout")!
        policy.maxBytes = options.bytes("max_bytes")!
        policy.maxRedirects = options.int("max_redirects")!
        policy.userAgent = options.string("user_agent")!
        for (name, value) in options.map("headers") ?? [:] {
            guard name.allSatisfy({ $0.isLetter || $0.isNumber || $0 == "-" || $0 == "_" }), !name.isEmpty else {
                throw PipelineError("invalid_option", "header name '\(name)' is not a valid HTTP header name")
            }
            let text = value.description
            guard !text.contains("\r"), !text.contains("\n") else {
                throw PipelineError("invalid_option", "header '\(name)' may not contain a line break")
            }
            policy.headers[name] = text
        }
        policy.addressPolicy = AddressPolicy(allowLoopback: options.bool("allow_loopback")!,
                                             allowLinkLocal: options.bool("allow_link_local")!,
                                             allowPrivate: options.bool("allow_private")!)
        self.policy = policy
        self.maxConcurrentLoads = options.int("max_concurrent")!
        self.engine = LazyEngine()
    }

    public func load(_ source: Source) async throws -> LoadedData {
        guard let components = URLComponents(string: source.text), let host = components.host, !host.isEmpty else {
            throw PipelineError(.invalidSource, "not a valid URL: \(source.text)")
        }
        let transfer = CurlTransfer(url: source.text, policy: policy)
        let response = try await engine.get().perform(transfer)
        return LoadedData(data: response.body, contentType: response.contentType, finalURL: response.effectiveURL)
    }

    /// Starts the transfer thread on first use, so validating a pipeline starts nothing.
    final class LazyEngine: Sendable {
        private let engine = Mutex<CurlTransferEngine?>(nil)
        func get() -> CurlTransferEngine {
            engine.withLock { engine in
                if let engine { return engine }
                let made = CurlTransferEngine(name: "pipelinekit-curl")
                engine = made
                return made
            }
        }
    }
}
