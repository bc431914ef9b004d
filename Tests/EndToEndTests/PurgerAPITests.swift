import FlyingFox
import Foundation
import PipelineKit
import Synchronization
import Testing
import TestImages

/// The CDN purgers against their APIs: CloudFront's on moto (signatures checked), Cloudflare's
/// and Fastly's on a loopback server that checks the request shapes their documentation gives
/// (methods, paths, auth headers, bodies, batch sizes) and answers as they do.
@Suite struct PurgerAPITests {
    static let widths = [160, 320, 640]

    static func setup(_ purge: String) throws -> ServeSetup {
        let setup = try ServeSetup()
        try setup.write("cdn", """
            processors:
              - resize: { width: 480, mode: fit }
            encoder: jpeg
            output: { dir: \(setup.dir.path)/out }
            params:
              w: { sets: processors.0.resize.width, min: 16, max: 1024 }
            serve:
              sources: ["\(setup.images.path)/"]
              breakpoints: [160, 320, 640]
              breakpoint_param: w
            purge:
              - \(purge)
            """)
        return setup
    }

    /// What serve answers for `source` that a purge can name: the signed URL without a width and at each declared width.
    static func paths(_ source: String) throws -> [String] {
        try [ServeSetup.sign("cdn", source)] + widths.map { try ServeSetup.sign("cdn", source, params: ["w": String($0)]) }
    }

    static func purge(_ setup: ServeSetup, _ sources: [String], environment extra: [String: String] = [:], keys: Bool = true) async throws -> Command.Result {
        var environment = ProcessInfo.processInfo.environment
        if keys { environment["PIPELINECTL_KEYS"] = ServeSetup.key } else { environment["PIPELINECTL_KEYS"] = nil }
        for (name, value) in extra { environment[name] = value }
        return try await Command.run(CLITests.binary, ["cache", "purge", setup.pipelines.appendingPathComponent("cdn.yaml").path] + sources,
                                     environment: environment)
    }

    @Test func cloudFrontGetsASignedInvalidationOfTheAnswersPaths() async throws {
        let moto = try await MotoServer.start(buckets: [])
        defer { moto.stop() }
        let distribution = try await moto.boto("""
            cf = boto3.client("cloudfront", **kw)
            origin = {"Id": "o", "DomainName": "img.example.com", "CustomOriginConfig": {"HTTPPort": 80, "HTTPSPort": 443, "OriginProtocolPolicy": "http-only"}}
            d = cf.create_distribution(DistributionConfig={"CallerReference": "t", "Origins": {"Quantity": 1, "Items": [origin]}, "Comment": "", "Enabled": True,
                "DefaultCacheBehavior": {"TargetOriginId": "o", "ViewerProtocolPolicy": "allow-all", "MinTTL": 0,
                                         "ForwardedValues": {"QueryString": True, "Cookies": {"Forward": "none"}}}})
            print(d["Distribution"]["Id"])
            """)
        let setup = try Self.setup("cloudfront: { distribution: \(distribution), path_prefix: /img }")
        let source = setup.path("a.jpg")
        let purged = try await Self.purge(setup, [source], environment: moto.environment)
        #expect(purged.status == 0, "\(purged.stdout) \(purged.stderr)")
        #expect(purged.stdout.contains("cloudfront: invalidation") && purged.stdout.contains("of 4 paths in \(distribution)"), "\(purged.stdout)")
        // What moto holds (its state, read back: its list and get calls fail when signatures are checked).
        let state = try await Command.run("/usr/bin/curl", ["-sf", moto.endpoint + "/moto-api/data.json"])
        let json = try #require(try JSONSerialization.jsonObject(with: Data(state.stdout.utf8)) as? [String: Any])
        let invalidations = ((json["cloudfront"] as? [String: Any])?["Invalidation"] as? [[String: Any]]) ?? []
        #expect(invalidations.count == 1)
        #expect(invalidations.first?["paths"] as? [String] == (try Self.paths(source)).map { "/img" + $0 }, "\(invalidations)")

        // A wrong secret: CloudFront (moto) refuses the signature; exit 3 naming the purger and the status.
        var wrong = moto.environment
        wrong["AWS_SECRET_ACCESS_KEY"] = "not-the-secret"
        let refused = try await Self.purge(setup, [source], environment: wrong)
        #expect(refused.status == 3, "\(refused.stdout) \(refused.stderr)")
        #expect(refused.stderr.contains("purger 'cloudfront'") && refused.stderr.contains("HTTP 403"), "\(refused.stderr)")
        // No signing keys: the paths cannot be named; said, exit 2.
        let keyless = try await Self.purge(setup, [source], environment: moto.environment, keys: false)
        #expect(keyless.status == 2 && keyless.stderr.contains("give the signing keys"), "\(keyless.stderr)")
    }

    /// Requests a fake API received: method, path, headers (lower-cased), body.
    final class Received: Sendable {
        let requests = Mutex<[(method: String, path: String, headers: [String: String], body: Data)]>([])
        func record(_ request: HTTPRequest) async throws {
            let body = try await request.bodyData
            var headers: [String: String] = [:]
            for (name, value) in request.headers { headers[name.rawValue.lowercased()] = value }
            requests.withLock { $0.append((request.method.rawValue, request.path, headers, body)) }
        }
        var all: [(method: String, path: String, headers: [String: String], body: Data)] { requests.withLock { $0 } }
    }

    @Test func cloudflareIsPurgedByURLInBatchesOf30AndByTag() async throws {
        let api = try await TestServer.start()
        let received = Received()
        api.route("/client/v4/zones/zone1/purge_cache") { request in
            try await received.record(request)
            let good = request.method == .POST && request.headers[HTTPHeader("Authorization")] == "Bearer cf-token"
                && request.headers[.contentType] == "application/json"
            let body = good ? #"{"success":true,"errors":[],"messages":[],"result":{"id":"zone1"}}"#
                : #"{"success":false,"errors":[{"code":10000,"message":"Authentication error"}],"messages":[],"result":null}"#
            return HTTPResponse(statusCode: good ? .ok : .forbidden, headers: [.contentType: "application/json"], body: Data(body.utf8))
        }
        let setup = try Self.setup("cloudflare: { zone: zone1, token: \"${CF_TOKEN}\", base_url: \"https://img.example.com/img/\", api: \"\(api.url("/client/v4"))\" }")
        // Eight sources: 32 URLs, sent as 30 and 2.
        let sources = (0..<8).map { setup.path("s\($0).jpg") }
        let purged = try await Self.purge(setup, sources, environment: ["CF_TOKEN": "cf-token"])
        #expect(purged.status == 0, "\(purged.stdout) \(purged.stderr)")
        #expect(purged.stdout.contains("cloudflare: purged 32 URLs in zone zone1"), "\(purged.stdout)")
        let calls = received.all
        #expect(calls.map(\.method) == ["POST", "POST"])
        let files = calls.compactMap { (try? JSONSerialization.jsonObject(with: $0.body) as? [String: [String]])?["files"] }
        #expect(files.map(\.count) == [30, 2])
        #expect(files.flatMap { $0 } == (try sources.flatMap { try Self.paths($0) }).map { "https://img.example.com/img" + $0 })

        // By tag: the sources' Cache-Tag, as serve sends it.
        let tagged = try Self.setup("cloudflare: { zone: zone1, token: cf-token, by: tag, api: \"\(api.url("/client/v4"))\" }")
        let byTag = try await Self.purge(tagged, [tagged.path("a.jpg")], keys: false)
        #expect(byTag.status == 0, "\(byTag.stdout) \(byTag.stderr)")
        let tags = (try? JSONSerialization.jsonObject(with: received.all.last!.body) as? [String: [String]])?["tags"]
        #expect(tags == [CacheTags().source(tagged.path("a.jpg"))])

        // A refused token: Cloudflare's 403 and its message; exit 3.
        let refused = try await Self.purge(setup, [sources[0]], environment: ["CF_TOKEN": "wrong"])
        #expect(refused.status == 3, "\(refused.stdout) \(refused.stderr)")
        #expect(refused.stderr.contains("purger 'cloudflare'") && refused.stderr.contains("HTTP 403"), "\(refused.stderr)")
        await api.stop()
    }

    @Test func fastlyIsPurgedBySurrogateKey() async throws {
        let api = try await TestServer.start()
        let received = Received()
        api.route("/service/svc1/purge") { request in
            try await received.record(request)
            let good = request.method == .POST && request.headers[HTTPHeader("Fastly-Key")] == "fastly-token"
            return HTTPResponse(statusCode: good ? .ok : .unauthorized, headers: [.contentType: "application/json"],
                                body: Data((good ? #"{"pk-s-x":"108-1391560174-974124"}"# : #"{"msg":"Provided credentials are missing or invalid"}"#).utf8))
        }
        let setup = try Self.setup("fastly: { service: svc1, token: fastly-token, soft: true, api: \"\(api.url("/"))\" }")
        let purged = try await Self.purge(setup, [setup.path("a.jpg"), setup.path("b.png")], keys: false)
        #expect(purged.status == 0, "\(purged.stdout) \(purged.stderr)")
        #expect(purged.stdout.contains("fastly: soft-purged 2 surrogate keys in service svc1"), "\(purged.stdout)")
        let call = try #require(received.all.first)
        #expect(call.method == "POST" && call.headers["fastly-soft-purge"] == "1")
        #expect(call.headers["surrogate-key"] == [setup.path("a.jpg"), setup.path("b.png")].map { CacheTags().source($0) }.joined(separator: " "))

        let wrong = try Self.setup("fastly: { service: svc1, token: nope, api: \"\(api.url("/"))\" }")
        let refused = try await Self.purge(wrong, [wrong.path("a.jpg")], keys: false)
        #expect(refused.status == 3 && refused.stderr.contains("purger 'fastly'") && refused.stderr.contains("HTTP 401"), "\(refused.stderr)")
        await api.stop()
    }
}
