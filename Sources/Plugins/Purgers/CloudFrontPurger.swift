import Foundation
import PipelineKit

/// `cloudfront`: an invalidation of the answers' paths in a CloudFront distribution, through
/// the CloudFront API (`CreateInvalidation`, SigV4 with the AWS environment's credentials).
/// CloudFront takes no tags and no wildcard before the end of a path, so it names the signed
/// path of each variant at each declared width: `cache purge` needs the signing keys.
struct CloudFrontPurger: CachePurging {
    let distribution: String
    let endpoint: URLComponents
    let pathPrefix: String
    let credentials: S3Credentials
    let client: PurgeClient

    static let plugin = Plugin.purger(PluginSpec(
        name: "cloudfront",
        summary: "Invalidates the answers' paths in a CloudFront distribution (CreateInvalidation, signed with the AWS environment's credentials).",
        options: [
            .string("distribution", required: true, doc: "The distribution's id.").example("E2QWRUHAPOMQZL"),
            .string("endpoint", doc: "The CloudFront API (default: AWS_ENDPOINT_URL_CLOUDFRONT, AWS_ENDPOINT_URL, else https://cloudfront.amazonaws.com)."),
            .string("path_prefix", default: "", doc: "Where the distribution has serve's routes (the path before /SIGNATURE/...).").example("/img"),
            .duration("timeout", default: "30s", min: "1s", max: "5m", doc: "How long the request may take."),
        ]), check: { options in _ = try PurgeClient.required(options, "distribution", purger: "cloudfront") }) { options in
        let environment = ProcessInfo.processInfo.environment
        let base = options.string("endpoint").flatMap { $0.isEmpty ? nil : $0 }
            ?? [environment["AWS_ENDPOINT_URL_CLOUDFRONT"], environment["AWS_ENDPOINT_URL"]].compactMap { $0 }.first { !$0.isEmpty }
            ?? "https://cloudfront.amazonaws.com"
        try PurgeClient.checkURL(base, option: "endpoint", purger: "cloudfront")
        let credentials: S3Credentials
        do { credentials = try SQSClient.credentials(environment: environment) } catch {
            throw PipelineError(.auth, "purger 'cloudfront' needs credentials: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY")
        }
        let prefix = PurgeClient.trimmed(options.string("path_prefix") ?? "")
        return CloudFrontPurger(distribution: try PurgeClient.required(options, "distribution", purger: "cloudfront"),
                                endpoint: URLComponents(string: PurgeClient.trimmed(base))!,
                                pathPrefix: prefix.isEmpty || prefix.hasPrefix("/") ? prefix : "/" + prefix,
                                credentials: credentials,
                                client: PurgeClient(purger: "cloudfront", timeout: options.seconds("timeout")!))
    }

    func purge(_ request: PurgeRequest) async throws -> String {
        guard !request.paths.isEmpty else {
            throw PipelineError(.invalidOption, "purger 'cloudfront' invalidates paths, and the answers' paths are signed: "
                + "give the signing keys (--keys-file, or PIPELINECTL_KEYS) to cache purge")
        }
        var ids: [String] = []
        // CloudFront takes up to 3,000 paths in progress per distribution; one invalidation per 1,000.
        for paths in request.paths.map({ pathPrefix + $0 }).batched(1000) {
            ids.append(try await invalidate(paths))
        }
        return "cloudfront: invalidation\(ids.count == 1 ? "" : "s") \(ids.joined(separator: ", ")) of \(request.paths.count) path\(request.paths.count == 1 ? "" : "s") in \(distribution)"
    }

    /// One `CreateInvalidation`; its id.
    func invalidate(_ paths: [String]) async throws -> String {
        func xml(_ text: String) -> String {
            text.replacingOccurrences(of: "&", with: "&amp;").replacingOccurrences(of: "<", with: "&lt;").replacingOccurrences(of: ">", with: "&gt;")
        }
        let body = Data(("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
            + "<InvalidationBatch xmlns=\"http://cloudfront.amazonaws.com/doc/2020-05-31/\">"
            + "<Paths><Quantity>\(paths.count)</Quantity><Items>" + paths.map { "<Path>\(xml($0))</Path>" }.joined() + "</Items></Paths>"
            + "<CallerReference>pipelinectl-\(UUID().uuidString)</CallerReference></InvalidationBatch>").utf8)
        let host = endpoint.host! + (endpoint.port.map { ":\($0)" } ?? "")
        let path = endpoint.path + "/2020-05-31/distribution/\(ServeRequest.pathSegment(distribution))/invalidation"
        var headers = ["Content-Type": "text/xml"]
        for (name, value) in SigV4.sign(method: "POST", host: host, path: path, query: [], headers: headers, payloadHash: SigV4.payloadHash(body),
                                        credentials: credentials, region: "us-east-1", date: Date(), service: "cloudfront") {
            headers[name] = value
        }
        let answer = try await client.send("POST", "\(endpoint.scheme!)://\(host)\(path)", headers: headers, body: body)
        let text = String(decoding: answer.body, as: UTF8.self)
        guard let start = text.range(of: "<Id>"), let end = text.range(of: "</Id>", range: start.upperBound..<text.endIndex) else {
            return "(no id in the answer)"
        }
        return String(text[start.upperBound..<end.lowerBound])
    }
}
