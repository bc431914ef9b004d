import Foundation
import PipelineKit

/// `fastly`: Fastly's surrogate-key purge (`POST /service/SERVICE/purge` with the keys in a
/// `Surrogate-Key` header, up to 256 a call), with an API token; soft purges mark content
/// stale instead of removing it.
struct FastlyPurger: CachePurging {
    let service: String
    let token: String
    let soft: Bool
    let api: String
    let client: PurgeClient

    static let plugin = Plugin.purger(PluginSpec(
        name: "fastly",
        summary: "Purges Fastly by the answers' Surrogate-Key (bulk surrogate-key purge).",
        options: [
            .string("service", required: true, doc: "The Fastly service id.").example("SU1Z0isxPaozGVKXdv0eY"),
            .string("token", required: true, doc: "An API token with purge_select scope (write ${FASTLY_API_TOKEN}, not the token).")
                .example("${FASTLY_API_TOKEN}"),
            .bool("soft", default: false, doc: "Mark the answers stale rather than remove them (Fastly-Soft-Purge)."),
            .string("api", default: "https://api.fastly.com", doc: "The API's base URL."),
            .duration("timeout", default: "30s", min: "1s", max: "5m", doc: "How long one request may take."),
        ]), check: { options in try check(options) }) { options in
        try check(options)
        return FastlyPurger(service: options.string("service")!, token: options.string("token")!, soft: options.bool("soft") ?? false,
                            api: PurgeClient.trimmed(options.string("api")!), client: PurgeClient(purger: "fastly", timeout: options.seconds("timeout")!))
    }

    static func check(_ options: PluginOptions) throws {
        _ = try PurgeClient.required(options, "service", purger: "fastly")
        _ = try PurgeClient.required(options, "token", purger: "fastly")
        try PurgeClient.checkURL(options.string("api") ?? "", option: "api", purger: "fastly")
    }

    func purge(_ request: PurgeRequest) async throws -> String {
        guard !request.tags.isEmpty else { return "fastly: no keys to purge" }
        for keys in request.tags.batched(256) {
            var headers = ["Fastly-Key": token, "Surrogate-Key": keys.joined(separator: " "), "Accept": "application/json"]
            if soft { headers["Fastly-Soft-Purge"] = "1" }
            _ = try await client.send("POST", "\(api)/service/\(ServeRequest.pathSegment(service))/purge", headers: headers)
        }
        return "fastly: \(soft ? "soft-" : "")purged \(request.tags.count) surrogate key\(request.tags.count == 1 ? "" : "s") in service \(service)"
    }
}
