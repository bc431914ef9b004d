import Foundation
import PipelineKit
import Synchronization
import FlyingFox
import Testing
import TestImages

/// `pipelinectl serve` as users run it: the real binary on a loopback port, real images, a real
/// origin server, requests over real sockets; what needs the process (its options and start-up
/// errors, thread placement, stored results and `cache purge`, connections kept open, a client
/// that leaves, SIGTERM's drain and exit code). The service's logic alone (signatures, params,
/// negotiation, boundaries, admission, shared work) is tested in this process:
/// PipelineKitTests' ServeLogicTests and ServeInProcessTests.
@Suite struct ServeTests {
    static let key = ServeSetup.key
    static let oldKey = ServeSetup.oldKey

    /// The directory of pipelines and images the serve suites share (TestSupport).
    typealias Setup = ServeSetup

    static func sign(_ pipeline: String, _ source: String, variant: String? = nil, params: [String: String] = [:],
                     expires: Int? = nil, key: String = key) throws -> String {
        try ServeSetup.sign(pipeline, source, variant: variant, params: params, expires: expires, key: key)
    }

    static func start(_ setup: Setup, _ extra: [String] = [], keys: String = key) async throws -> ServiceProcess {
        try await ServiceProcess.start(CLITests.binary, [setup.pipelines.path] + extra, environment: ["PIPELINECTL_KEYS": keys])
    }

    static func problem(_ response: RawHTTP.Response) -> (kind: String, detail: String) { ServeSetup.problem(response) }

    /// A real browser: a page with `<img srcset>` and `<picture>` whose images come from the
    /// service. Chromium's own Accept header gets AVIF, every image loads at the width the markup
    /// chose, and the screenshot shows the images' colour where they are.
    @Test(.enabled(if: FileManager.default.fileExists(atPath: "/usr/bin/chromium"), "needs Debian's chromium (make test installs it)"))
    func aBrowserLoadsSrcsetAndPictureFromTheService() async throws {
        let setup = try Setup()
        try Fixtures.image("xc:#d02020", width: 800, height: 600).write(to: setup.images.appendingPathComponent("red.jpg"))
        let service = try await Self.start(setup)
        defer { service.stop() }
        let base = "http://127.0.0.1:\(service.port)"
        let red = setup.path("red.jpg")
        let page = setup.dir.appendingPathComponent("page.html")
        try """
            <!doctype html><html><head><style>body{margin:0;background:#fff} img{display:block}</style></head><body>
            <img id="srcset" width="200" height="150" sizes="200px"
                 srcset="\(base)\(try Self.sign("resize", red, params: ["w": "200"])) 200w, \(base)\(try Self.sign("resize", red, params: ["w": "400"])) 400w">
            <picture>
              <source media="(min-width: 2000px)" srcset="\(base)\(try Self.sign("responsive", red, variant: "large"))">
              <img id="picture" width="100" height="75" src="\(base)\(try Self.sign("responsive", red, variant: "small"))">
            </picture>
            <script>
              window.addEventListener("load", () => {
                document.body.dataset.widths = [...document.images].map(i => i.id + ":" + (i.complete ? i.naturalWidth : "x")).join(",");
              });
            </script>
            </body></html>
            """.write(to: page, atomically: true, encoding: .utf8)
        let browser = ["--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--window-size=400,300"]
        let dom = try await Command.run("/usr/bin/chromium", browser + ["--dump-dom", page.absoluteString])
        // A 1x screen with sizes=200px takes the 200w candidate; <picture> falls back to its <img>.
        #expect(dom.stdout.contains("data-widths=\"srcset:200,picture:100\""), "\(dom.stdout.suffix(600)) \(dom.stderr.suffix(1000))")
        let types = service.accessLog.compactMap { line -> String? in
            let object = (try? JSONSerialization.jsonObject(with: Data(line.utf8))) as? [String: Any]
            return object.flatMap { ($0["pipeline"] as? String ?? "") + " " + ($0["type"] as? String ?? "") }
        }
        #expect(types.contains("resize image/avif"), "\(types)")  // auto: from Chromium's Accept
        #expect(types.contains("responsive image/jpeg"), "\(types)")  // a fixed encoder keeps its format
        let shot = setup.dir.appendingPathComponent("page.png")
        _ = try await Command.run("/usr/bin/chromium", browser + ["--screenshot=\(shot.path)", page.absoluteString])
        for (x, y) in [(100, 75), (50, 190)] {
            let pixel = try await Command.run("/usr/bin/convert", [shot.path, "-format", "%[fx:int(255*p{\(x),\(y)}.r)] %[fx:int(255*p{\(x),\(y)}.g)]", "info:"])
            let values = pixel.stdout.split(separator: " ").compactMap { Int($0) }
            #expect(values.count == 2 && values[0] > 150 && values[1] < 90, "pixel \(x),\(y): \(pixel.stdout) \(pixel.stderr)")
        }
    }

    /// What stops the service at start: each says what and where, exits 2, and nothing listens.
    @Test func badStartsAreRefusedWithTheirReason() async throws {
        let setup = try Setup()
        func serve(_ arguments: [String], keys: String? = Self.key) async throws -> Command.Result {
            var environment = ProcessInfo.processInfo.environment
            environment["PIPELINECTL_KEYS"] = keys
            return try await Command.run(CLITests.binary, ["serve"] + arguments, environment: environment, directory: Fixtures.packageRoot)
        }
        let noKeys = try await serve([setup.pipelines.path], keys: nil)
        #expect(noKeys.status == 2 && noKeys.stderr.contains("no signing keys") && noKeys.stderr.contains("--allow-unsigned"), "\(noKeys.stderr)")
        let shortKey = try await serve([setup.pipelines.path], keys: "k:abcd")
        #expect(shortKey.status == 2 && shortKey.stderr.contains("key 'k' has 2 bytes"), "\(shortKey.stderr)")
        let listen = try await serve([setup.pipelines.path, "--listen", "localhost"])
        #expect(listen.status == 2 && listen.stderr.contains("--listen expects HOST:PORT"), "\(listen.stderr)")
        let nice = try await serve([setup.pipelines.path, "--http-nice", "20"])
        #expect(nice.status == 2 && nice.stderr.contains("--http-nice must be 0 to 19, got 20"), "\(nice.stderr)")
        let wait = try await serve([setup.pipelines.path, "--queue-wait", "soon"])
        #expect(wait.status == 2 && wait.stderr.contains("--queue-wait expects a duration such as 30s or 2m, got 'soon'"), "\(wait.stderr)")
        try setup.write("broken", "processors:\n  - resize: { widht: 10 }\nencoder: jpeg\n")
        let broken = try await serve([setup.pipelines.path])
        #expect(broken.status == 2 && broken.stderr.contains("broken.yaml:4:") && broken.stderr.contains("did you mean 'width'"), "\(broken.stderr)")
        try FileManager.default.removeItem(at: setup.pipelines.appendingPathComponent("broken.yaml"))
        let twin = setup.dir.appendingPathComponent("twin.yaml")
        try "version: 1\nname: strict\nencoder: jpeg\n".write(to: twin, atomically: true, encoding: .utf8)
        let twice = try await serve([setup.pipelines.path, twin.path])
        #expect(twice.status == 2 && twice.stderr.contains("a pipeline named 'strict' is already loaded"), "\(twice.stderr)")
        let empty = try Fixtures.temporaryDirectory("serve-empty")
        let none = try await serve([empty.path])
        #expect(none.status == 2 && none.stderr.contains("no pipeline files"), "\(none.stderr)")
    }

    @Test func otherMethodsAreRefused() async throws {
        let setup = try Setup()
        let service = try await Self.start(setup)
        defer { service.stop() }
        let post = try await service.get(try Self.sign("resize", setup.path("a.jpg")), method: "POST")
        #expect(post.status == 405 && post.headers["allow"] == "GET, HEAD" && Self.problem(post).kind == "method_not_allowed")
        let head = try await service.get(try Self.sign("resize", setup.path("a.jpg")), method: "HEAD")
        #expect(head.status == 200 && head.body.isEmpty && head.headers["etag"] != nil)
    }

    /// Every option `serve` and `sign` take is in docs/serve.md.
    @Test func everyOptionIsDocumented() async throws {
        let docs = try String(contentsOf: Fixtures.packageRoot.appendingPathComponent("docs/serve.md"), encoding: .utf8)
        for command in ["serve", "sign"] {
            let help = try await Command.run(CLITests.binary, [command, "--help"])
            let options = Set(help.stdout.matches(of: /--[a-z][a-z-]*/).map { String($0.output) })
                .subtracting(["--help", "--version"])
            #expect(!options.isEmpty)
            for option in options { #expect(docs.contains(option), "\(command) \(option) is not in docs/serve.md") }
        }
    }

    /// Under overload the cores go to image work: the threads that read, parse and write HTTP run
    /// at `--http-nice`, the image and I/O workers at the service's own priority.
    @Test func httpThreadsRunBelowImageWork() async throws {
        let setup = try Setup()
        let service = try await Self.start(setup, ["--http-nice", "7"])
        defer { service.stop() }
        let good = try await service.get(try Self.sign("resize", setup.path("a.jpg")))
        #expect(good.status == 200, "\(good.text)")
        let threads = service.threads()
        // The main thread keeps the priority the service was started with.
        let base = try #require(threads.first { $0.name == "pipelinectl" }?.nice, "no main thread in \(threads)")
        let lowered = max(base, 7)
        let http = threads.filter { $0.name.hasPrefix("NIO-") }
        #expect(!http.isEmpty && http.allSatisfy { $0.nice == lowered }, "HTTP threads: \(http)")
        let workers = threads.filter { $0.name.hasPrefix("pk-cpu-") || $0.name.hasPrefix("pk-io-") }
        #expect(workers.count >= 2 && workers.allSatisfy { $0.nice == base }, "workers: \(workers) (started at \(base))")
        // Only the HTTP threads: Swift's shared threads, where the engine also runs, are not.
        // (libdispatch runs its own threads at other priorities of its own: not counted.)
        #expect(threads.filter { $0.nice == lowered }.allSatisfy { $0.name.hasPrefix("NIO-") } || base >= 7, "\(threads)")
    }

    /// Held to one CPU (`taskset`, as a container's CPU set holds it), the service defaults to
    /// one job and one worker, not one per core of the machine.
    @Test(.enabled(if: FileManager.default.isExecutableFile(atPath: "/usr/bin/taskset"), "needs taskset (util-linux)"))
    func heldToOneCPUItDefaultsToOneJobAndOneWorker() async throws {
        let setup = try Setup()
        let status = try String(contentsOfFile: "/proc/self/status", encoding: .utf8)
        let allowed = status.split(separator: "\n").first { $0.hasPrefix("Cpus_allowed_list:") }?
            .dropFirst("Cpus_allowed_list:".count).trimmingCharacters(in: .whitespaces) ?? ""
        let cpu = try #require(allowed.split(whereSeparator: { $0 == "," || $0 == "-" }).first.map(String.init), "no CPU in '\(allowed)'")
        // `taskset -c CPU pipelinectl serve DIR --listen 127.0.0.1:0`
        let service = try await ServiceProcess.start("/usr/bin/taskset", [cpu, CLITests.binary, "serve", setup.pipelines.path],
                                                     environment: ["PIPELINECTL_KEYS": Self.key], subcommand: "-c")
        defer { service.stop() }
        let line = try #require(service.listeningLine)
        #expect(line.hasSuffix("; 1 job, 1 worker)"), "\(line)")
        let good = try await service.get(try Self.sign("resize", setup.path("a.jpg")))
        #expect(good.status == 200, "\(good.text)")
        let workers = service.threads().filter { $0.name.hasPrefix("pk-cpu-") }
        #expect(workers.count == 1, "\(workers)")
    }

    /// The service remembers no result of its own: a changed source is seen by the next request,
    /// whatever `output.existing` the file says (it is for batch runs).
    @Test func aChangedSourceIsServedChangedEvenWhenTheFileSaysKeep() async throws {
        let origin = try await TestServer.start()
        let current = Shared(try Fixtures.image("xc:red", width: 300, height: 200))
        origin.route("/v.jpg") { _ in HTTPResponse(statusCode: .ok, headers: [.contentType: "image/jpeg"] as HTTPHeaders, body: current.value.withLock { $0 }) }
        let setup = try Setup()
        try setup.write("keep", """
            loader:
              http: { allow_loopback: true }
            processors:
              - resize: { width: 64, height: 64 }
            encoder: png
            output: { dir: \(setup.dir.path)/out, existing: keep }
            """)
        let service = try await Self.start(setup)
        defer { service.stop() }
        let target = try Self.sign("keep", origin.url("/v.jpg"))
        let first = try await service.get(target)
        current.value.withLock { $0 = try! Fixtures.image("xc:blue", width: 300, height: 150) }
        let second = try await service.get(target)
        #expect(first.status == 200 && second.status == 200)
        #expect(first.headers["etag"] != second.headers["etag"])
        #expect(try await Identified.data(second.body) == Identified(format: "PNG", width: 64, height: 32))
        #expect(origin.requests("/v.jpg") == 2)
        await origin.stop()
    }

    /// Stored results are answered without the origin; `cache purge` removes every stored result
    /// of one source (each parameter set's), and only those.
    @Test func storedResultsAreServedAndPurgedBySource() async throws {
        let origin = try await TestServer.start()
        origin.serve("/a.jpg", try Fixtures.image("plasma:", width: 600, height: 400))
        origin.serve("/b.jpg", try Fixtures.image("gradient:navy-gold", width: 600, height: 400))
        let setup = try Setup()
        try setup.write("cached", """
            loader:
              http: { allow_loopback: true }
            data_cache:
              disk: { path: \(setup.dir.path)/cache, store: all, policy: ttl, ttl: 1d }
            processors:
              - resize: { width: 256, height: 256 }
            encoder: jpeg
            output: { dir: \(setup.dir.path)/out }
            params:
              w: { sets: processors.0.resize.width, min: 16, max: 1024 }
            """)
        let service = try await Self.start(setup)
        defer { service.stop() }
        let requests = try [("/a.jpg", "100"), ("/a.jpg", "200"), ("/b.jpg", "100")].map { try Self.sign("cached", origin.url($0.0), params: ["w": $0.1]) }
        for target in requests { #expect(try await service.get(target).status == 200) }
        for target in requests { #expect(try await service.get(target).status == 200) }
        #expect(origin.requests("/a.jpg") == 1 && origin.requests("/b.jpg") == 1)
        let log = service.accessLog.suffix(3).joined()
        #expect(log.components(separatedBy: "\"cache\":\"stored\"").count - 1 == 3, "\(log)")
        let purged = try await Command.run(CLITests.binary, ["cache", "purge", setup.pipelines.appendingPathComponent("cached.yaml").path,
                                                             origin.url("/a.jpg")], directory: Fixtures.packageRoot)
        // The loaded bytes and both sizes' outputs of a.jpg.
        #expect(purged.status == 0 && purged.stdout.contains("purged 3 entries"), "\(purged.stdout)\(purged.stderr)")
        for target in requests { #expect(try await service.get(target).status == 200) }
        #expect(origin.requests("/a.jpg") == 2 && origin.requests("/b.jpg") == 1)
        // A versioned URL (what reaches browsers and CDNs): `sign --source-version` adds v=, which
        // the signature covers and nothing else reads: the same stored output, a new URL.
        let signed = try await Command.run(CLITests.binary, ["sign", setup.pipelines.appendingPathComponent("cached.yaml").path, origin.url("/a.jpg"),
                                                             "--param", "w=100", "--source-version", "etag-2"],
                                           environment: ProcessInfo.processInfo.environment.merging(["PIPELINECTL_KEYS": Self.key]) { $1 })
        let versioned = signed.stdout.trimmingCharacters(in: .whitespacesAndNewlines)
        #expect(signed.status == 0 && versioned.hasSuffix("?w=100&v=etag-2"), "\(signed.stdout)\(signed.stderr)")
        let answer = try await service.get(versioned)
        #expect(answer.status == 200, "\(answer.text)")
        #expect(try await service.get(versioned.replacingOccurrences(of: "etag-2", with: "etag-3")).status == 403)
        #expect(origin.requests("/a.jpg") == 2)
        await origin.stop()
    }

    /// A stored result needs no job: it is answered while every job and queue place is taken,
    /// and, like a 429, on a connection that stays open for the next request.
    @Test func storedResultsAreAnsweredWhileEveryPlaceIsTakenOnAConnectionKeptOpen() async throws {
        let jpeg = try Fixtures.jpeg(640, 480)
        let gate = DispatchSemaphore(value: 0)
        let origin = try ScriptedServer { request, connection in
            if request.path == "/busy.jpg" { gate.wait() }
            connection.write("HTTP/1.1 200 OK\r\nContent-Type: image/jpeg\r\nContent-Length: \(jpeg.count)\r\nConnection: close\r\n\r\n")
            connection.write(jpeg)
        }
        defer { origin.stop() }
        let setup = try Setup()
        try setup.write("cached", """
            loader:
              http: { allow_loopback: true, timeout: 10m }
            data_cache:
              disk: { path: \(setup.dir.path)/cache, store: processed, policy: ttl, ttl: 1d }
            processors:
              - resize: { width: 100, height: 100 }
            encoder: jpeg
            output: { dir: \(setup.dir.path)/out }
            """)
        let service = try await Self.start(setup, ["--jobs", "1", "--queue", "0"])
        defer { service.stop() }
        let stored = try Self.sign("cached", origin.url("/stored.jpg"))
        let made = try await service.get(stored)
        #expect(made.status == 200)
        // The only place is taken by a request whose origin has not answered.
        let busy = Task { try await service.get(try Self.sign("cached", origin.url("/busy.jpg"))) }
        #expect(await Self.waitForInFlight(service, 1))
        let answers = try await RawHTTP.getKeptAlive(port: service.port, targets: [stored, try Self.sign("cached", origin.url("/new.jpg")), stored])
        #expect(answers.map(\.status) == [200, 429, 200], "\(answers.map { ($0.status, $0.text.prefix(200)) })")
        #expect(answers.first?.body == made.body && answers.last?.headers["etag"] == made.headers["etag"])
        gate.signal()
        #expect(try await busy.value.status == 200)
        #expect(origin.requests("/stored.jpg") == 1 && origin.requests("/new.jpg") == 0)
        let log = service.accessLog.joined()
        #expect(log.components(separatedBy: "\"cache\":\"stored\"").count - 1 == 2, "\(log)")
    }

    /// Answers made by a job keep the connection open as well: a client that asks for one image
    /// after another (a browser, a CDN, wrk) does not reconnect for each.
    @Test func answersMadeByAJobKeepTheConnectionOpen() async throws {
        let jpeg = try Fixtures.jpeg(640, 480)
        let origin = try ScriptedServer { _, connection in
            connection.write("HTTP/1.1 200 OK\r\nContent-Type: image/jpeg\r\nContent-Length: \(jpeg.count)\r\nConnection: close\r\n\r\n")
            connection.write(jpeg)
        }
        defer { origin.stop() }
        let setup = try Setup()
        let service = try await Self.start(setup)
        defer { service.stop() }
        let targets = try ["/a.jpg", "/b.jpg", "/c.jpg"].map { try Self.sign("resize", origin.url($0)) }
        let answers = try await RawHTTP.getKeptAlive(port: service.port, targets: targets)
        #expect(answers.map(\.status) == [200, 200, 200], "\(answers.map { ($0.status, $0.text.prefix(200)) })")
        #expect(answers.allSatisfy { $0.headers["content-type"] == "image/jpeg" && $0.body.starts(with: [0xFF, 0xD8]) })
        #expect(origin.requests("/a.jpg") == 1 && origin.requests("/b.jpg") == 1 && origin.requests("/c.jpg") == 1)
    }

    /// An origin that records each request's path, then holds it until `gate` is signalled once
    /// for it, and answers `jpeg`.
    static func gatedOrigin(_ jpeg: Data) throws -> (ScriptedServer, DispatchSemaphore, EventLog) { try ServeSetup.gatedOrigin(jpeg) }
    static func waitForInFlight(_ service: ServiceProcess, _ count: Int) async -> Bool { await ServeSetup.waitForInFlight(service, count) }
    static func waitForMetric(_ service: ServiceProcess, _ name: String, _ count: Int) async -> Bool { await ServeSetup.waitForMetric(service, name, count) }

    @Test func aClientThatLeavesCancelsTheFetchNobodyElseWaitsFor() async throws {
        let closed = EventLog()
        let origin = try ScriptedServer { request, connection in
            closed.record("open")
            connection.waitForClose()
            closed.record("closed")
        }
        defer { origin.stop() }
        let setup = try Setup()
        let service = try await Self.start(setup, ["--timeout", "10m"])
        defer { service.stop() }
        let fd = try RawHTTP.send(port: service.port, target: try Self.sign("resize", origin.url("/slow.jpg")), keepAlive: true)
        #expect(await closed.wait(for: "open"))
        close(fd)
        // The origin sees its connection closed: the transfer was cancelled, not left to run for 10 minutes.
        #expect(await closed.wait(for: "closed", atMost: 120))
        #expect(await Self.waitForInFlight(service, 0))
        // The close was that connection's alone: a job asked for on another is answered.
        let next = try await service.get(try Self.sign("resize", setup.path("a.jpg")))
        #expect(next.status == 200, "\(next.status) \(next.text.prefix(200))")
    }

    @Test func sigtermDrainsRequestsInFlightAndExitsZero() async throws {
        let setup = try Setup()
        // Places for every client, however long jobs take: a 429 would be an answer, but this is
        // about draining.
        let service = try await Self.start(setup, ["--drain-delay", "10s", "--grace", "120s", "--jobs", "2", "--queue", "16",
                                                   "--queue-wait", "0"])
        defer { service.stop() }
        let targets = try (16...47).map { try Self.sign("resize", setup.path("a.jpg"), params: ["w": String($0 * 8)]) }
        let outcomes = Shared((ok: 0, refused: 0, other: [String]()))
        let started = EventLog()
        let clients = (0..<16).map { client in
            Task {
                var index = client
                while true {
                    do {
                        let response = try await service.get(targets[index % targets.count])
                        if response.status == 200 { outcomes.value.withLock { $0.ok += 1 } } else {
                            outcomes.value.withLock { $0.other.append("\(response.status) \(response.text)") }
                        }
                        started.record("done")
                    } catch RawHTTP.Failure.connect {
                        outcomes.value.withLock { $0.refused += 1 }
                        return
                    } catch RawHTTP.Failure.closed(bytes: 0) {
                        // Never answered: still in the listen queue when the socket closed.
                        outcomes.value.withLock { $0.refused += 1 }
                        return
                    } catch {
                        outcomes.value.withLock { $0.other.append("\(error)") }
                        return
                    }
                    index += 16
                }
            }
        }
        #expect(await started.wait(for: "done", times: 16))
        service.signal(SIGTERM)
        var ready = 200
        var readiness: RawHTTP.Response?
        for _ in 0..<500 where ready == 200 {
            readiness = try? await service.get("/readyz")
            ready = readiness?.status ?? 0
            if ready == 200 { try? await Task.sleep(for: .milliseconds(10)) }
        }
        #expect(ready == 503 || ready == 0, "readiness after SIGTERM: \(ready)")
        // While draining, every answer closes its connection: kept-alive clients move elsewhere.
        #expect(ready == 0 || readiness?.headers["connection"] == "close", "\(readiness?.headers ?? [:])")
        let status = await service.wait()
        for client in clients { await client.value }
        let seen = outcomes.value.withLock { $0 }
        #expect(status == 0, "\(service.stderr)")
        #expect(seen.other.isEmpty, "\(seen.other.count) failed: \(seen.other.prefix(3))")
        #expect(seen.ok >= 16)
    }
}

/// A value behind a lock that tasks can share.
final class Shared<Value: Sendable>: Sendable {
    let value: Mutex<Value>
    init(_ value: Value) { self.value = Mutex(value) }
}
