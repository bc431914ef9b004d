import Foundation
import PipelineKit

/// `cloudflare`: Cloudflare's purge API (`POST /zones/ZONE/purge_cache`) with an API token, by
/// URL (every plan: the signed URL of each variant at each declared width, so `cache purge`
/// needs the signing keys) or by tag (the answers' `Cache-Tag`; an Enterprise plan).
struct CloudflarePurger: CachePurging {
    enum By: String, CaseIterable { case url, tag }

    let zone: String
    let token: String
    let by: By
    let baseURL: String
    let api: String
    let client: PurgeClient

    static let plugin = Plugin.purger(PluginSpec(
        name: "cloudflare",
        summary: "Purges Cloudflare's cache through its API: by URL (every plan) or by Cache-Tag (Enterprise).",
        options: [
            .string("zone", required: true, doc: "The zone's id.").example("023e105f4ecef8ad9ca31a8372d0c353"),
            .string("token", required: true, doc: "An API token with Cache Purge permission (write ${CLOUDFLARE_API_TOKEN}, not the token).")
                .example("${CLOUDFLARE_API_TOKEN}"),
            .oneOf("by", By.allCases.map(\.rawValue), default: "url", doc: "url: the answers' URLs (30 a call); tag: their Cache-Tag (Enterprise plans)."),
            .string("base_url", default: "", doc: "The public URL of serve's routes, before /SIGNATURE/... (required with by: url).")
                .example("https://img.example.com/img"),
            .string("api", default: "https://api.cloudflare.com/client/v4", doc: "The API's base URL."),
            .duration("timeout", default: "30s", min: "1s", max: "5m", doc: "How long one request may take."),
        ]), check: { options in try check(options) }) { options in
        try check(options)
        return CloudflarePurger(zone: options.string("zone")!, token: options.string("token")!, by: By(rawValue: options.string("by")!)!,
                                baseURL: PurgeClient.trimmed(options.string("base_url")!), api: PurgeClient.trimmed(options.string("api")!),
                                client: PurgeClient(purger: "cloudflare", timeout: options.seconds("timeout")!))
    }

    static func check(_ options: PluginOptions) throws {
        _ = try PurgeClient.required(options, "zone", purger: "cloudflare")
        _ = try PurgeClient.required(options, "token", purger: "cloudflare")
        try PurgeClient.checkURL(options.string("api") ?? "", option: "api", purger: "cloudflare")
        if options.string("by") != "tag" {
            try PurgeClient.checkURL(try PurgeClient.required(options, "base_url", purger: "cloudflare"), option: "base_url", purger: "cloudflare")
        }
    }

    func purge(_ request: PurgeRequest) async throws -> String {
        let field: String, items: [String]
        switch by {
        case .tag: (field, items) = ("tags", request.tags)
        case .url:
            guard !request.paths.isEmpty else {
                throw PipelineError(.invalidOption, "purger 'cloudflare' purges by URL, and the answers' URLs are signed: "
                    + "give the signing keys (--keys-file, or PIPELINECTL_KEYS) to cache purge, or purge by tag")
            }
            (field, items) = ("files", request.paths.map { baseURL + $0 })
        }
        for batch in items.batched(30) {
            let body = try JSONSerialization.data(withJSONObject: [field: batch], options: [.sortedKeys, .withoutEscapingSlashes])
            let answer = try await client.send("POST", "\(api)/zones/\(ServeRequest.pathSegment(zone))/purge_cache",
                                               headers: ["Authorization": "Bearer \(token)", "Content-Type": "application/json"], body: body)
            let json = (try? JSONSerialization.jsonObject(with: answer.body)) as? [String: Any]
            guard json?["success"] as? Bool == true else {
                let message = ((json?["errors"] as? [[String: Any]])?.first?["message"] as? String) ?? String(decoding: answer.body.prefix(200), as: UTF8.self)
                throw PipelineError(.httpStatus, "purger 'cloudflare': the purge was not accepted (HTTP \(answer.status)): \(message)")
            }
        }
        return "cloudflare: purged \(items.count) \(by == .tag ? "tag" : "URL")\(items.count == 1 ? "" : "s") in zone \(zone)"
    }
}
