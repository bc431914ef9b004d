import Foundation
import Hummingbird
@testable import PipelineHummingbird
import PipelineKit
import Plugins
import Synchronization
import Testing
import TestImages

/// What `pipelinectl serve` answers, decided by the service's logic alone: signatures and key
/// rotation, params and variants, ETag/304 and Accept, the source boundary and bad images, with
/// the access log and the metrics. The routes `serve` runs (``ImageRoutes`` with the close
/// watcher) on a real Hummingbird server on loopback in this process, asked over real sockets
/// exactly as EndToEndTests' ServeTests ask the binary; those keep what needs a process
/// (options, signals, drain, exit codes, thread placement, connection limits).
@Suite struct ServeLogicTests {
    static let key = ServeSetup.key
    static let oldKey = ServeSetup.oldKey

    typealias Setup = ServeSetup

    static func sign(_ pipeline: String, _ source: String, variant: String? = nil, params: [String: String] = [:],
                     expires: Int? = nil, key: String = key) throws -> String {
        try ServeSetup.sign(pipeline, source, variant: variant, params: params, expires: expires, key: key)
    }

    static func problem(_ response: RawHTTP.Response) -> (kind: String, detail: String) { ServeSetup.problem(response) }

    /// `serve`'s admission flags (`--jobs`, `--queue`, `--queue-wait`, `--timeout`) as route options.
    static func start(_ setup: Setup, _ flags: [String] = [], keys: String = key,
                      timers: ManualTimers? = nil) async throws -> InProcessServe {
        var options = ImageRoutes.Options()
        if let timers { options.timers = timers }
        for (flag, value) in zip(flags, flags.dropFirst()) {
            switch flag {
            case "--jobs": options.jobs = Int(value)!
            case "--queue": options.queue = Int(value)!
            case "--queue-wait": options.queueWait = Units.parseDuration(value)!
            case "--timeout": options.timeout = Units.parseDuration(value)!
            default: continue
            }
        }
        return try await InProcessServe.start(pipelines: setup.pipelines.path, keys: keys, options: options)
    }


    @Test func signedRequestsAreServedAndEveryOtherSignatureIsRefusedBeforeAnyWork() async throws {
        let setup = try Setup()
        // The old key still verifies; the first signs.
        let service = try await Self.start(setup, keys: Self.key + "," + Self.oldKey)
        defer { service.stop() }
        let good = try await service.get(try Self.sign("resize", setup.path("a.jpg")))
        #expect(good.status == 200, "\(good.text)")
        #expect(good.headers["content-type"] == "image/jpeg")
        let image = try await Identified.data(good.body)
        #expect(image.width == 256 && image.height == 192)
        let rotated = try await service.get(try Self.sign("resize", setup.path("a.jpg"), key: Self.oldKey))
        #expect(rotated.status == 200)
        let stranger = try await service.get(try Self.sign("resize", setup.path("a.jpg"), key: "x:" + String(repeating: "11", count: 32)))
        #expect(stranger.status == 403 && Self.problem(stranger).kind == "bad_signature")
        // The signature covers the parameters: changing one after signing is refused.
        let signed = try Self.sign("resize", setup.path("a.jpg"), params: ["w": "100"])
        let tampered = try await service.get(signed.replacingOccurrences(of: "w=100", with: "w=1000"))
        #expect(tampered.status == 403 && tampered.headers["content-type"] == "application/problem+json")
        let expired = try await service.get(try Self.sign("resize", setup.path("a.jpg"), expires: Int(Date().timeIntervalSince1970) - 10))
        #expect(expired.status == 403 && Self.problem(expired).kind == "expired", "\(expired.text)")
        let later = try await service.get(try Self.sign("resize", setup.path("a.jpg"), expires: Int(Date().timeIntervalSince1970) + 3600))
        #expect(later.status == 200)
        // No signature, or something else where it goes: 403, as the docs say, and no word of
        // which pipelines exist.
        for target in ["/abc/nosuch/" + setup.path("a.jpg"), "/resize" + setup.path("a.jpg"), "/resize/" + setup.path("a.jpg"), "/"] {
            let unsigned = try await service.get(target)
            #expect(unsigned.status == 403 && Self.problem(unsigned).kind == "bad_signature", "\(target): \(unsigned.status) \(unsigned.text)")
        }
        // A signed request for a pipeline that is not served: 404, naming it.
        let unknown = try await service.get(try Self.sign("nosuch", setup.path("a.jpg")))
        #expect(unknown.status == 404 && Self.problem(unknown).detail.contains("nosuch"))
        // The access log has the request and never the signature.
        let log = service.accessLog.joined(separator: "\n")
        #expect(log.contains("\"status\":200") && log.contains("\"pipeline\":\"resize\""))
        // A made image's line says where its time went.
        let made = try #require(service.accessLog.first { $0.contains("\"status\":200") })
        #expect(["\"queue_ms\":", "\"load_ms\":", "\"decode_ms\":", "\"process_ms\":", "\"encode_ms\":"].allSatisfy(made.contains), "\(made)")
        #expect(!log.contains(String(signed.split(separator: "/")[0])))
    }

    @Test func parametersAreCheckedByTheOptionsTheySetAndNamedWhenWrong() async throws {
        let setup = try Setup()
        let service = try await Self.start(setup)
        defer { service.stop() }
        let a = setup.path("a.jpg")
        let sized = try await service.get(try Self.sign("resize", a, params: ["w": "100"]))
        #expect(sized.status == 200)
        #expect(try await Identified.data(sized.body).width == 100)
        let filled = try await service.get(try Self.sign("resize", a, params: ["w": "100", "mode": "fill"]))
        #expect(try await Identified.data(filled.body).height == 256)
        for (params, words) in [(["w": "5000"], ["'w'", "1024"]), (["w": "abc"], ["'w'"]), (["q": "80"], ["unknown parameter 'q'"]),
                                (["mode": "stretch"], ["'mode'", "stretch"])] {
            let response = try await service.get(try Self.sign("resize", a, params: params))
            #expect(response.status == 400, "\(params): \(response.status) \(response.text)")
            for word in words { #expect(Self.problem(response).detail.contains(word), "\(params): \(response.text)") }
        }
        let twice = try await service.get(try Self.sign("resize", a, params: ["w": "100"]).replacingOccurrences(of: "?w=100", with: "?w=100&w=200")
            .replacingOccurrences(of: "XX", with: ""))
        #expect(twice.status == 403)  // the signature covers the query as sent
        let small = try await service.get(try Self.sign("responsive", a, variant: "small"))
        #expect(small.status == 200 && small.headers["content-type"] == "image/jpeg" && small.headers["cache-control"] == "public, max-age=60")
        let large = try await service.get(try Self.sign("responsive", a, variant: "large"))
        #expect(large.headers["content-type"] == "image/png")
        #expect(try await Identified.data(large.body).width == 300)
        let noVariant = try await service.get(try Self.sign("responsive", a, variant: "medium"))
        #expect(noVariant.status == 404 && Self.problem(noVariant).detail.contains("small"), "\(noVariant.text)")
        // The access log names the variant of each.
        let log = service.accessLog
        #expect(log.contains { $0.contains("\"variant\":\"small\"") } && log.contains { $0.contains("\"variant\":\"large\"") }, "\(log)")
    }

    @Test func etagAnswers304AndAcceptChoosesTheFormat() async throws {
        let setup = try Setup()
        let service = try await Self.start(setup)
        defer { service.stop() }
        let target = try Self.sign("resize", setup.path("a.jpg"))
        let first = try await service.get(target)
        let etag = try #require(first.headers["etag"])
        #expect(first.headers["vary"] == "Accept" && first.headers["cache-control"]?.contains("immutable") == true)
        let again = try await service.get(target, headers: ["If-None-Match": etag])
        #expect(again.status == 304 && again.body.isEmpty && again.headers["etag"] == etag)
        let other = try await service.get(target, headers: ["If-None-Match": "\"something-else\""])
        #expect(other.status == 200)
        let webp = try await service.get(target, headers: ["Accept": "image/webp,*/*"])
        #expect(webp.headers["content-type"] == "image/webp" && webp.headers["etag"] != etag)
        #expect(try await Identified.data(webp.body).format == "WEBP")
        let avif = try await service.get(target, headers: ["Accept": "image/avif,image/webp,image/*,*/*;q=0.8"])
        #expect(avif.headers["content-type"] == "image/avif", "\(avif.headers)")
        let refused = try await service.get(target, headers: ["Accept": "image/avif;q=0,image/webp"])
        #expect(refused.headers["content-type"] == "image/webp")
        // PNG with alpha stays PNG without an Accept that names a better format.
        let png = try await service.get(try Self.sign("resize", setup.path("b.png")))
        #expect(png.headers["content-type"] == "image/png")
        // /metrics counts the answers by status, and names the build serving them.
        let metrics = try await service.get("/metrics").text.split(separator: "\n").map(String.init)
        #expect(metrics.contains("pipelinectl_requests_total{pipeline=\"resize\",status=\"304\"} 1"), "\(metrics.filter { $0.contains("requests_total") })")
        #expect(metrics.contains { $0.hasPrefix("pipelinectl_build_info{version=\"\(PipelineKitVersion.current)\",revision=\"") },
                "\(metrics.filter { $0.contains("build_info") })")
    }

    @Test func sourcesOutsideTheAllowedPlacesAndBadImagesGetTheirOwnErrors() async throws {
        let setup = try Setup()
        let service = try await Self.start(setup)
        defer { service.stop() }
        let cases: [(String, String, Int, String)] = [
            ("resize", "/etc/passwd", 403, "source_not_allowed"),
            ("resize", setup.path("../../etc/passwd"), 403, "source_not_allowed"),
            ("strict", setup.path("a.jpg"), 403, "source_not_allowed"),  // no local directory listed
            ("strict", "http://127.0.0.1:9/a.jpg", 403, "blocked_address"),
            ("strict", "http://10.255.255.1/a.jpg", 403, "blocked_address"),
            ("strict", "http://169.254.169.254/latest/meta-data", 403, "blocked_address"),
            ("resize", "https://elsewhere.example/a.jpg", 403, "source_not_allowed"),
            ("resize", setup.path("missing.jpg"), 404, "not_found"),
            ("resize", setup.path("c.jpg"), 415, "not_an_image"),
        ]
        for (pipeline, source, status, kind) in cases {
            let response = try await service.get(try Self.sign(pipeline, source))
            #expect(response.status == status && Self.problem(response).kind == kind, "\(source): \(response.status) \(response.text)")
        }
        // The service is still up and well.
        #expect(try await service.get(try Self.sign("resize", setup.path("a.jpg"))).status == 200)
    }

    /// Identical requests join the one running job without a place of their own (six of them
    /// with one place); a request for another source, with every place taken, is refused at once.
    @Test func identicalRequestsShareOneFetchAndOverloadIsRefusedAtOnce() async throws {
        let jpeg = try Fixtures.jpeg(640, 480)
        let (origin, gate, fetched) = try Self.gatedOrigin(jpeg)
        defer { origin.stop() }
        let setup = try Setup()
        // --timeout: the first request waits at the origin until every other is in; on a loaded
        // machine that can take longer than the default 30 s.
        let service = try await Self.start(setup, ["--jobs", "1", "--queue", "0", "--timeout", "10m"])
        defer { service.stop() }
        let target = try Self.sign("resize", origin.url("/one.jpg"))
        let answers = InProcessServe.Shared<[Int]>([])
        let first = Task { let r = try await service.get(target); answers.value.withLock { $0.append(r.status) }; return r.body }
        #expect(await fetched.wait(for: "/one.jpg"))
        let clients = [first] + (0..<5).map { _ in
            Task { let r = try await service.get(target); answers.value.withLock { $0.append(r.status) }; return r.body }
        }
        #expect(await Self.waitForInFlight(service, 6))
        // The one place is taken: a request for another source is refused at once.
        let refused = try await service.get(try Self.sign("resize", origin.url("/two.jpg")))
        #expect(refused.status == 429 && refused.headers["retry-after"] == "1", "\(refused.status) \(refused.text)")
        gate.signal()
        var bodies: [Data] = []
        for client in clients { bodies.append(try await client.value) }
        #expect(answers.value.withLock { $0 } == Array(repeating: 200, count: 6))
        #expect(Set(bodies).count == 1)
        #expect(origin.requests("/one.jpg") == 1)
        #expect(origin.requests("/two.jpg") == 0)
    }

    /// Thirty requests at once for the sizes of one new source, with one job place and no queue:
    /// they join the first one's work, so none is refused; one fetch serves them all.
    @Test func thirtySizesOfOneNewSourceAreNeverRefused() async throws {
        let jpeg = try Fixtures.jpeg(640, 480)
        let (origin, gate, fetched) = try Self.gatedOrigin(jpeg)
        defer { origin.stop() }
        let setup = try Setup()
        let service = try await Self.start(setup, ["--jobs", "1", "--queue", "0", "--timeout", "10m"])
        defer { service.stop() }
        let first = Task { try await service.get(try Self.sign("resize", origin.url("/page.jpg"), params: ["w": "16"])) }
        #expect(await fetched.wait(for: "/page.jpg"))
        let others = (1..<30).map { index in
            Task { try await service.get(try Self.sign("resize", origin.url("/page.jpg"), params: ["w": String(16 + 8 * index)])) }
        }
        #expect(await Self.waitForInFlight(service, 30))
        gate.signal()
        var statuses: [Int] = []
        for client in [first] + others { statuses.append(try await client.value.status) }
        #expect(statuses == Array(repeating: 200, count: 30), "\(statuses)")
        #expect(origin.requests("/page.jpg") == 1)
        // One decode: the other 29 used it.
        let metrics = try await service.get("/metrics").text
        #expect(metrics.contains("pipelinectl_decodes_shared_total{pipeline=\"resize\"} 29\n"), "\(metrics)")
    }

    /// Once jobs are seen to be slow, a request that would wait longer than `--queue-wait` is
    /// refused at once, though queue places are free. The first job is held at the origin while
    /// the service's clock (moved by the test) passes 2.5 s, so the next one waiting expects 2.5 s.
    @Test func aQueueOfSlowJobsIsKeptToTheExpectedWait() async throws {
        let jpeg = try Fixtures.jpeg(64, 48)
        let (origin, gate, fetched) = try Self.gatedOrigin(jpeg)
        defer { origin.stop() }
        let setup = try Setup()
        // --timeout: were the third admitted, it would fail as 504 rather than hang the test.
        // (60 s: 20 s was exceeded by the first request on a machine kept busy, make test beside
        // two busy loops.)
        let timers = ManualTimers()
        let service = try await Self.start(setup, ["--jobs", "1", "--queue", "8", "--queue-wait", "1s", "--timeout", "60s"],
                                           timers: timers)
        defer { service.stop() }
        let first = Task { try await service.get(try Self.sign("resize", origin.url("/first.jpg"))) }
        #expect(await fetched.wait(for: "/first.jpg"))
        timers.advance(by: .milliseconds(2500))
        gate.signal()
        let answered = try await first.value
        #expect(answered.status == 200, "\(answered.status) \(answered.text)")
        let second = Task { try await service.get(try Self.sign("resize", origin.url("/second.jpg"))) }
        #expect(await fetched.wait(for: "/second.jpg"))
        let refused = try await service.get(try Self.sign("resize", origin.url("/third.jpg")))
        #expect(refused.status == 429 && refused.headers["retry-after"] == "1", "\(refused.status) \(refused.text)")
        #expect(Self.problem(refused).detail.contains("past --queue-wait"), "\(refused.text)")
        gate.signal()
        #expect(try await second.value.status == 200)
        #expect(origin.requests("/third.jpg") == 0)
    }

    /// Three sizes of one source asked for at once: one fetch, and one decode (planned for the
    /// largest) whose image the other two resize.
    @Test func sizesOfOneSourceAskedAtOnceShareOneFetchAndOneDecode() async throws {
        let jpeg = try Fixtures.jpeg(640, 480)
        let gate = DispatchSemaphore(value: 0)
        let origin = try ScriptedServer { request, connection in
            gate.wait()
            connection.write("HTTP/1.1 200 OK\r\nContent-Type: image/jpeg\r\nContent-Length: \(jpeg.count)\r\nConnection: close\r\n\r\n")
            connection.write(jpeg)
        }
        defer { origin.stop() }
        let setup = try Setup()
        let service = try await Self.start(setup, ["--jobs", "3"])  // all three run at once
        defer { service.stop() }
        let widths = ["100", "200", "300"]
        let clients = try widths.map { width in
            let target = try Self.sign("resize", origin.url("/shared.jpg"), params: ["w": width])
            return Task { try await service.get(target) }
        }
        // Every request waits on the one load before the origin answers.
        #expect(await Self.waitForMetric(service, "pipelinectl_source_loads_waiting", widths.count))
        gate.signal()
        gate.signal()
        gate.signal()
        for (client, width) in zip(clients, widths) {
            let response = try await client.value
            #expect(response.status == 200)
            #expect(try await Identified.data(response.body).width == Int(width))
        }
        #expect(origin.requests("/shared.jpg") == 1)
        let metrics = try await service.get("/metrics").text
        #expect(metrics.contains("pipelinectl_decodes_shared_total{pipeline=\"resize\"} 2\n"), "\(metrics)")
    }

    static func gatedOrigin(_ jpeg: Data) throws -> (ScriptedServer, DispatchSemaphore, EventLog) { try ServeSetup.gatedOrigin(jpeg) }
    static func waitForInFlight(_ service: InProcessServe, _ count: Int) async -> Bool { await ServeSetup.waitForInFlight(service, count) }
    static func waitForMetric(_ service: InProcessServe, _ name: String, _ count: Int) async -> Bool { await ServeSetup.waitForMetric(service, name, count) }

}

/// The routes of `pipelinectl serve` on a Hummingbird server on a loopback port of this process
/// (the close watcher in each connection), with its access log kept.
final class InProcessServe: ServeClient {
    /// Values set from any thread.
    final class Shared<Value: Sendable>: Sendable {
        let value: Mutex<Value>
        init(_ value: Value) { self.value = Mutex(value) }
    }

    let port: UInt16
    private let lines: LineLog
    private let task: Task<Void, any Error>

    private init(port: UInt16, lines: LineLog, task: Task<Void, any Error>) {
        self.port = port
        self.lines = lines
        self.task = task
    }

    /// The access log's lines so far.
    var accessLog: [String] { lines.all }

    func get(_ target: String, headers: [String: String] = [:], method: String = "GET") async throws -> RawHTTP.Response {
        try await RawHTTP.get(port: port, target: target, headers: headers, method: method)
    }

    func stop() { task.cancel() }

    static func start(pipelines: String, keys: String, options routeOptions: ImageRoutes.Options = ImageRoutes.Options()) async throws -> InProcessServe {
        var options = ImagePipelines.Options()
        options.keys = try SigningKeys(parsing: keys, origin: "test")
        options.workers = 2
        let library = try ImagePipelines(paths: [pipelines], registry: BuiltIns.registry(), options: options)
        let log = LineLog()
        var routeOptions = routeOptions
        routeOptions.accessLog = .custom { log.append($0) }
        let routes = ImageRoutes(library: library, options: routeOptions)
        let router = Router(context: ImageRequestContext.self)
        routes.operations.add(to: router)
        routes.add(to: router)
        let (ports, port) = AsyncStream.makeStream(of: Int.self)
        let app = Application(router: router, server: .http1(configuration: .init(additionalChannelHandlers: [ClientCloseWatcher()])),
                              configuration: .init(address: .hostname("127.0.0.1", port: 0)),
                              onServerRunning: { channel in
                                  port.yield(channel.localAddress?.port ?? 0)
                                  port.finish()
                              })
        let task = Task { try await app.run() }
        guard let bound = await ports.first(where: { _ in true }), bound > 0 else {
            task.cancel()
            throw CancellationError()
        }
        return InProcessServe(port: UInt16(bound), lines: log, task: task)
    }

    /// Lines appended from any thread.
    final class LineLog: Sendable {
        private let lines = Mutex<[String]>([])
        func append(_ line: String) { lines.withLock { $0.append(line) } }
        var all: [String] { lines.withLock { $0 } }
    }
}
