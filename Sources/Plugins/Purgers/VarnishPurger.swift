import Foundation
import PipelineKit

/// `varnish`: a Varnish in front of `serve`, purged by tag. With vmod xkey (`mode: xkey`) a
/// `PURGE` request carries the tags in a header that the VCL hands to `xkey.purge`; without it
/// (`mode: ban`) a `BAN` request carries them, and the VCL bans objects whose `Surrogate-Key`
/// holds one. docs/serve.md has both VCLs.
struct VarnishPurger: CachePurging {
    enum Mode: String, CaseIterable { case xkey, ban }

    let url: String
    let mode: Mode
    let header: String
    let client: PurgeClient

    static let plugin = Plugin.purger(PluginSpec(
        name: "varnish",
        summary: "Purges a Varnish in front of serve by the answers' tags: xkey (varnish-modules) or BAN on Surrogate-Key.",
        options: [
            .string("url", required: true, doc: "Where Varnish listens, as the purge requests reach it.").example("http://127.0.0.1:6081/"),
            .oneOf("mode", Mode.allCases.map(\.rawValue), default: "xkey",
                   doc: "xkey: PURGE with the tags for xkey.purge (vmod xkey); ban: BAN with the tags, the VCL bans on Surrogate-Key."),
            .string("header", default: "xkey-purge", doc: "The request header that carries the tags, space-separated (the VCL reads it)."),
            .duration("timeout", default: "10s", min: "1s", max: "5m", doc: "How long one purge request may take."),
        ]), check: { options in try check(options) }) { options in
        try check(options)
        return VarnishPurger(url: options.string("url")!, mode: Mode(rawValue: options.string("mode")!)!, header: options.string("header")!,
                             client: PurgeClient(purger: "varnish", timeout: options.seconds("timeout")!))
    }

    static func check(_ options: PluginOptions) throws {
        try PurgeClient.checkURL(try PurgeClient.required(options, "url", purger: "varnish"), option: "url", purger: "varnish")
        guard !(options.string("header") ?? "").isEmpty else { throw PipelineError(.invalidOption, "purger 'varnish' needs a header name") }
    }

    func purge(_ request: PurgeRequest) async throws -> String {
        guard !request.tags.isEmpty else { return "varnish: no tags to purge" }
        var purged = 0
        var counted = true
        // Varnish takes any header length, but proxies on the way may not: 100 tags a request.
        for tags in request.tags.batched(100) {
            let answer = try await client.send(mode == .xkey ? "PURGE" : "BAN", url, headers: [header: tags.joined(separator: " ")])
            // The VCL of docs/serve.md answers "Invalidated N objects" (xkey.purge's count).
            let text = String(decoding: answer.body, as: UTF8.self)
            if let range = text.range(of: #"Invalidated (\d+)"#, options: .regularExpression),
               let number = Int(text[range].split(separator: " ")[1]) {
                purged += number
            } else {
                counted = false
            }
        }
        let what = mode == .xkey ? "xkey purge" : "ban"
        if counted, purged == 0 { return "varnish: nothing to purge (\(what) of \(request.tags.count) tag\(request.tags.count == 1 ? "" : "s"): no object holds them)" }
        return "varnish: \(what) of \(request.tags.count) tag\(request.tags.count == 1 ? "" : "s")" + (counted ? ", \(purged) object\(purged == 1 ? "" : "s") invalidated" : "")
    }
}
