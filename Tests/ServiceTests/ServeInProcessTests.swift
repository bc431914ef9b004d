import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdTesting
import MagickKit
import NIOCore
@testable import PipelineHummingbird
@testable import PipelineService
@testable import PipelineKit
import Plugins
import Synchronization
import Testing
import TestImages

/// The service's logic through ``ImageRoutes`` on a Hummingbird `Router`, in this process
/// (HummingbirdTesting's router client): signatures, params, ETag/304, Accept, HEAD, admission
/// with 429, the access log and metrics, routes under a prefix. Real ImageMagick; the admission
/// case holds a scripted load and waits on its events. What needs a process (signals, drain, exit
/// codes, connections) stays in EndToEndTests.
@Suite struct ServeInProcessTests {
    static let key = "main:" + String(repeating: "5a", count: 32)

    struct Setup {
        let dir: URL
        var pipelines: URL { dir.appendingPathComponent("pipelines") }
        var images: URL { dir.appendingPathComponent("images") }

        init() throws {
            dir = try Fixtures.temporaryDirectory("inprocess")
            try FileManager.default.createDirectory(at: pipelines, withIntermediateDirectories: true)
            try FileManager.default.createDirectory(at: images, withIntermediateDirectories: true)
            try Fixtures.jpeg(640, 480).write(to: images.appendingPathComponent("a.jpg"))
            try """
                version: 1
                name: fit
                params:
                  w: { sets: processors.0.resize.width, min: 16, max: 1024 }
                serve:
                  sources: ["\(images.path)/"]
                processors:
                  - resize: { width: 200, height: 200, mode: fit }
                encoder: auto
                """.write(to: pipelines.appendingPathComponent("fit.yaml"), atomically: true, encoding: .utf8)
            try """
                version: 1
                name: modern
                serve:
                  sources: ["\(images.path)/"]
                processors:
                  - resize: { width: 200, height: 200, mode: fit }
                encoder: { auto: { prefer: [jxl, avif, webp] } }
                """.write(to: pipelines.appendingPathComponent("modern.yaml"), atomically: true, encoding: .utf8)
        }

        func path(_ name: String) -> String { images.appendingPathComponent(name).path }
    }

    static func sign(_ pipeline: String, _ source: String, params: [String: String] = [:], expires: Int? = nil,
                     variant: String? = nil) throws -> String {
        let path = ServeRequest.path(pipeline: pipeline, variant: variant, source: source, parameters: params, expires: expires)
        return "/" + (try SigningKeys(parsing: key, origin: "test")).sign(path) + path
    }

    static func library(_ paths: [String], registry: PluginRegistry = BuiltIns.registry()) throws -> ImagePipelines {
        var options = ImagePipelines.Options()
        options.keys = try SigningKeys(parsing: key, origin: "test")
        options.workers = 2
        return try ImagePipelines(paths: paths, registry: registry, options: options)
    }

    static func problemKind(_ response: TestResponse) -> String {
        ((try? JSONSerialization.jsonObject(with: Data(buffer: response.body))) as? [String: Any])?["title"] as? String ?? ""
    }

    @Test func signedAnswersETagsAcceptAndRefusalsInProcess() async throws {
        let setup = try Setup()
        let lines = Mutex<[String]>([])
        var options = ImageRoutes.Options()
        options.accessLog = .custom { line in lines.withLock { $0.append(line) } }
        let routes = ImageRoutes(library: try Self.library([setup.pipelines.path]), options: options)
        let router = Router()
        routes.operations.add(to: router)
        routes.add(to: router)
        let app = Application(router: router)
        let signed = try Self.sign("fit", setup.path("a.jpg"))
        try await app.test(.router) { client in
            let plain = try await client.execute(uri: signed, method: .get)
            #expect(plain.status == .ok && plain.headers[.contentType] == "image/jpeg")
            #expect(plain.headers[.vary] == "Accept")
            let etag = try #require(plain.headers[.eTag])
            #expect(try await Identified.data(Data(buffer: plain.body)).description == "JPEG 200x150")

            let again = try await client.execute(uri: signed, method: .get, headers: [.ifNoneMatch: etag])
            #expect(again.status == .notModified && again.body.readableBytes == 0)
            let avif = try await client.execute(uri: signed, method: .get, headers: [.accept: "image/avif,image/webp,*/*"])
            #expect(avif.status == .ok && avif.headers[.contentType] == "image/avif")
            let webp = try await client.execute(uri: signed, method: .get, headers: [.accept: "image/webp,*/*"])
            #expect(webp.status == .ok && webp.headers[.contentType] == "image/webp")
            // JPEG XL only where the pipeline's prefer names it and the client asks for it.
            let safari = "image/webp,image/avif,image/jxl,image/heic,image/png,image/*;q=0.8,*/*;q=0.5"
            let notListed = try await client.execute(uri: signed, method: .get, headers: [.accept: safari])
            #expect(notListed.headers[.contentType] == "image/avif")
            let modern = try Self.sign("modern", setup.path("a.jpg"))
            let jxl = try await client.execute(uri: modern, method: .get, headers: [.accept: safari])
            #expect(jxl.status == .ok && jxl.headers[.contentType] == "image/jxl" && jxl.headers[.vary] == "Accept")
            #expect(FormatSniffer.sniff(Data(buffer: jxl.body)) == .image(.jxl))
            let chrome = try await client.execute(uri: modern, method: .get, headers: [.accept: "image/avif,image/webp,image/apng,image/*,*/*;q=0.8"])
            #expect(chrome.headers[.contentType] == "image/avif")
            let old = try await client.execute(uri: modern, method: .get, headers: [.accept: "*/*"])
            #expect(old.headers[.contentType] == "image/jpeg")
            #expect(webp.headers[.eTag] != etag)  // other bytes, another ETag
            let head = try await client.execute(uri: signed, method: .head)
            #expect(head.status == .ok && head.body.readableBytes == 0 && head.headers[.contentLength] == plain.headers[.contentLength])

            let narrow = try await client.execute(uri: try Self.sign("fit", setup.path("a.jpg"), params: ["w": "64"]), method: .get)
            #expect(narrow.status == .ok)
            #expect(try await Identified.data(Data(buffer: narrow.body)).description == "JPEG 64x48")
            let wide = try await client.execute(uri: try Self.sign("fit", setup.path("a.jpg"), params: ["w": "5000"]), method: .get)
            #expect(wide.status == .badRequest && Self.problemKind(wide) == "bad_parameter")
            let tampered = try await client.execute(uri: signed.replacingOccurrences(of: "a.jpg", with: "b.jpg"), method: .get)
            #expect(tampered.status == .forbidden && Self.problemKind(tampered) == "bad_signature")
            let unsigned = try await client.execute(uri: "/fit/" + setup.path("a.jpg"), method: .get)
            #expect(unsigned.status == .forbidden && Self.problemKind(unsigned) == "bad_signature")
            let expired = try await client.execute(uri: try Self.sign("fit", setup.path("a.jpg"), expires: 1000), method: .get)
            #expect(expired.status == .forbidden && Self.problemKind(expired) == "expired")
            let outside = try await client.execute(uri: try Self.sign("fit", "/etc/passwd"), method: .get)
            #expect(outside.status == .forbidden && Self.problemKind(outside) == "source_not_allowed")
            let missing = try await client.execute(uri: try Self.sign("fit", setup.path("none.jpg")), method: .get)
            #expect(missing.status == .notFound && Self.problemKind(missing) == "not_found")
            let unknown = try await client.execute(uri: try Self.sign("nosuch", setup.path("a.jpg")), method: .get)
            #expect(unknown.status == .notFound)
            let post = try await client.execute(uri: signed, method: .post)
            #expect(post.status == .methodNotAllowed && post.headers[.allow] == "GET, HEAD")

            let metrics = try await client.execute(uri: "/metrics", method: .get)
            let text = String(buffer: metrics.body)
            #expect(text.contains("pipelinectl_requests_total{pipeline=\"fit\",status=\"200\"}"), "\(text.prefix(400))")
            #expect(text.contains("pipelinectl_items_total{pipeline=\"fit\",status=\"ok\"}"))
            let ready = try await client.execute(uri: "/readyz", method: .get)
            #expect(ready.status == .ok)
        }
        let logged = lines.withLock { $0 }
        #expect(logged.count == 18, "\(logged.count) lines")  // every request but the operations routes
        #expect(logged.first?.contains("\"pipeline\":\"fit\"") == true && logged.first?.contains("\"status\":200") == true)
        #expect(!logged.contains { $0.contains(signed.split(separator: "/")[0]) })  // no signature in the log
        routes.drain()
        try await app.test(.router) { client in
            let draining = try await client.execute(uri: "/readyz", method: .get)
            #expect(draining.status == .serviceUnavailable)
        }
    }

    @Test func routesUnderAPrefixAnswerThereAndLeaveTheAppsOwnRoutesAlone() async throws {
        let setup = try Setup()
        var options = ImageRoutes.Options()
        options.accessLog = .off
        let routes = ImageRoutes(library: try Self.library([setup.pipelines.path]), options: options)
        let router = Router()
        router.get("/hello") { _, _ in "hello" }
        routes.add(to: router, atPath: "/img")
        let app = Application(router: router)
        try await app.test(.router) { client in
            let image = try await client.execute(uri: "/img" + (try Self.sign("fit", setup.path("a.jpg"))), method: .get)
            #expect(image.status == .ok && image.headers[.contentType] == "image/jpeg")
            let hello = try await client.execute(uri: "/hello", method: .get)
            #expect(String(buffer: hello.body) == "hello")
        }
    }

    @Test func pastEveryPlaceARequestIsRefusedWith429AndRetryAfter() async throws {
        let loader = ScriptedLoader()
        loader.script("a", .hold(Data("40x20".utf8)))
        loader.script("b", .bytes(Data("40x20".utf8)))
        let dir = try Fixtures.temporaryDirectory("inprocess-429")
        try ("version: 1\nname: scripted\n" + ScriptedStages.pipeline + "\noutput:\n  dir: \(dir.path)/out\n")
            .write(to: dir.appendingPathComponent("scripted.yaml"), atomically: true, encoding: .utf8)
        var options = ImageRoutes.Options()
        options.jobs = 1
        options.queue = 0
        options.accessLog = .off
        let routes = ImageRoutes(library: try Self.library([dir.path], registry: ScriptedStages.registry(loader)), options: options)
        let router = Router()
        routes.add(to: router)
        let app = Application(router: router)
        try await app.test(.router) { client in
            async let held = client.execute(uri: try Self.sign("scripted", "scripted://a"), method: .get)
            #expect(await loader.log.wait(for: "started a"))
            let refused = try await client.execute(uri: try Self.sign("scripted", "scripted://b"), method: .get)
            #expect(refused.status == .tooManyRequests && refused.headers[.retryAfter] == "1" && Self.problemKind(refused) == "busy")
            // The same source joins the running work without a place of its own: never refused.
            async let joined = client.execute(uri: try Self.sign("scripted", "scripted://a"), method: .get)
            let runner = try #require(routes.service.presets["scripted"]?.runner)
            let deadline = ContinuousClock.now + .seconds(60)
            while routes.service.requestsInFlight < 2, ContinuousClock.now < deadline { await Task.yield() }
            loader.release("a")
            let first = try await held
            #expect(first.status == .ok && String(buffer: first.body) == "fake 20x10")
            let second = try await joined
            #expect(second.status == .ok && String(buffer: second.body) == "fake 20x10")
            #expect(loader.calls("a") == 1 && !runner.isSharingWork(for: Source(text: "scripted://a", index: 1)))
            // The place is free again.
            let after = try await client.execute(uri: try Self.sign("scripted", "scripted://b"), method: .get)
            #expect(after.status == .ok)
        }
    }

    /// A request whose client closes its connection stops its work (the held load is cancelled,
    /// 499 in the access log); when another request shares that work, it goes on and that one
    /// gets its image. On a real server on loopback, with the watcher in each connection.
    @Test func aRequestWhoseClientGoesAwayStopsItsWorkUnlessAnotherSharesIt() async throws {
        let loader = ScriptedLoader()
        loader.script("alone", .hold(Data("40x20".utf8)))
        loader.script("shared", .hold(Data("40x20".utf8)))
        let dir = try Fixtures.temporaryDirectory("inprocess-gone")
        defer { try? FileManager.default.removeItem(at: dir) }
        try ("version: 1\nname: scripted\n" + ScriptedStages.pipeline + "\noutput:\n  dir: \(dir.path)/out\n")
            .write(to: dir.appendingPathComponent("scripted.yaml"), atomically: true, encoding: .utf8)
        let answered = EventLog()
        var options = ImageRoutes.Options()
        options.accessLog = .custom { line in
            let fields = (try? JSONSerialization.jsonObject(with: Data(line.utf8))) as? [String: Any] ?? [:]
            answered.record("\(fields["status"] ?? "-") \(fields["source"] ?? "-")")
        }
        let routes = ImageRoutes(library: try Self.library([dir.path], registry: ScriptedStages.registry(loader)), options: options)
        let router = Router(context: ImageRequestContext.self)
        routes.add(to: router)
        let app = Application(router: router, server: .http1(configuration: .init(additionalChannelHandlers: [ClientCloseWatcher()])),
                              configuration: .init(address: .hostname("127.0.0.1", port: 0)))
        try await app.test(.live) { client in
            let port = UInt16(try #require(client.port))
            let alone = try RawHTTP.send(port: port, target: try Self.sign("scripted", "scripted://alone"), keepAlive: true)
            #expect(await loader.log.wait(for: "started alone"))
            close(alone)
            #expect(await loader.log.wait(for: "cancelled alone"))
            #expect(await answered.wait(for: "499 scripted://alone"))

            let leaving = try RawHTTP.send(port: port, target: try Self.sign("scripted", "scripted://shared"), keepAlive: true)
            #expect(await loader.log.wait(for: "started shared"))
            // Over a socket of its own, without the test client's 20 s read limit: on a loaded machine
            // the waits below can take longer.
            async let staying = RawHTTP.get(port: port, target: try Self.sign("scripted", "scripted://shared"))
            // Both wait on the one item's work (admitted is not yet waiting: were the first to leave
            // before the second subscribed, the second would rightly start the work afresh).
            let runner = try #require(routes.service.presets["scripted"]?.runner)
            let deadline = ContinuousClock.now + .seconds(60)
            while runner.itemWork.waiting < 2, ContinuousClock.now < deadline { try await Task.sleep(for: .milliseconds(5)) }
            #expect(runner.itemWork.waiting == 2)
            close(leaving)
            #expect(await answered.wait(for: "499 scripted://shared"))
            loader.release("shared")
            let kept = try await staying
            #expect(kept.status == 200 && kept.text == "fake 20x10")
            #expect(loader.log.count("cancelled shared") == 0 && loader.calls("shared") == 1)
        }
    }

    /// A request past its time limit is answered 504 `timeout` and its held load cancelled,
    /// whichever clock is the stricter: the engine's limit on the item (the library's
    /// `itemTimeout`, then the only timer) or the routes' own `timeout`.
    @Test func aRequestPastItsTimeLimitIs504AndItsLoadStops() async throws {
        let dir = try Fixtures.temporaryDirectory("inprocess-504")
        defer { try? FileManager.default.removeItem(at: dir) }
        try ("version: 1\nname: scripted\n" + ScriptedStages.pipeline + "\noutput:\n  dir: \(dir.path)/out\n")
            .write(to: dir.appendingPathComponent("scripted.yaml"), atomically: true, encoding: .utf8)
        for (itemLimit, routeLimit) in [(2.0, 30.0), (300.0, 2.0)] {
            let loader = ScriptedLoader()
            loader.script("held", .hold(Data("40x20".utf8)))
            var libraryOptions = ImagePipelines.Options()
            libraryOptions.keys = try SigningKeys(parsing: Self.key, origin: "test")
            libraryOptions.itemTimeout = itemLimit
            let library = try ImagePipelines(paths: [dir.path], registry: ScriptedStages.registry(loader), options: libraryOptions)
            var options = ImageRoutes.Options()
            options.timeout = routeLimit
            options.accessLog = .off
            let routes = ImageRoutes(library: library, options: options)
            let router = Router()
            routes.add(to: router)
            try await Application(router: router).test(.router) { client in
                let late = try await client.execute(uri: try Self.sign("scripted", "scripted://held"), method: .get)
                #expect(late.status == .gatewayTimeout && Self.problemKind(late) == "timeout", "item \(itemLimit) s, route \(routeLimit) s: \(late.status)")
            }
            // On a loaded machine the limit can pass before the load has even started; a load that
            // started is cancelled.
            if loader.calls("held") > 0 {
                #expect(await loader.log.wait(for: "cancelled held"), "item \(itemLimit) s, route \(routeLimit) s")
            }
        }
    }

    /// `gravity` as a request parameter: `faces` keeps the face of a photo set at the left of a
    /// wide picture, `centre` cuts it off, and a value the option does not take is a 400 naming
    /// the ones it does. (face_recognition's obama.jpg, fetched by `make test-deps`.)
    /// A video's poster time is a declared parameter: `t=2.6` answers the frame ffmpeg takes at
    /// 2.6 s, `t` past the end the last frame, a time that is not one 400, and a video from a
    /// pipeline whose decoder does not list video 415.
    @Test func aVideosPosterTimeIsAParameter() async throws {
        let setup = try Setup()
        let clip = setup.images.appendingPathComponent("clip.mp4")
        let made = try await Command.run("/usr/bin/ffmpeg", ["-hide_banner", "-loglevel", "error", "-y", "-f", "lavfi", "-i",
                                                            "testsrc2=size=320x240:rate=25", "-t", "4", "-g", "50", "-pix_fmt", "yuv420p",
                                                            "-c:v", "libx264", "-preset", "ultrafast", clip.path])
        try #require(made.status == 0, "\(made.stderr)")
        let reference = setup.dir.appendingPathComponent("ffmpeg.png")
        let frame = try await Command.run("/usr/bin/ffmpeg", ["-hide_banner", "-loglevel", "error", "-y", "-ss", "2.6", "-i", clip.path,
                                                             "-frames:v", "1", reference.path])
        try #require(frame.status == 0, "\(frame.stderr)")
        try """
            version: 1
            name: poster
            params:
              t: { sets: decoder.imagemagick.frame, max: 3600 }
            serve:
              sources: ["\(setup.images.path)/"]
            decoder: { imagemagick: { formats: [jpeg, png, video] } }
            encoder: png
            """.write(to: setup.pipelines.appendingPathComponent("poster.yaml"), atomically: true, encoding: .utf8)
        let routes = ImageRoutes(library: try Self.library([setup.pipelines.path]), options: ImageRoutes.Options())
        let router = Router()
        routes.add(to: router)
        let app = Application(router: router)
        try await app.test(.router) { client in
            let answer = try await client.execute(uri: try Self.sign("poster", clip.path, params: ["t": "2.6"]), method: .get)
            #expect(answer.status == .ok && answer.headers[.contentType] == "image/png", "\(answer.status)")
            let ours = Wand(), theirs = Wand()
            try ours.read(Data(buffer: answer.body), format: "PNG")
            try theirs.read(try Data(contentsOf: reference), format: "PNG")
            #expect(try ours.psnr(against: theirs) > 40)
            let late = try await client.execute(uri: try Self.sign("poster", clip.path, params: ["t": "30m"]), method: .get)
            #expect(late.status == .ok, "\(late.status)")
            for bad in ["soon", "-3s", "2h"] {
                let wrong = try await client.execute(uri: try Self.sign("poster", clip.path, params: ["t": bad]), method: .get)
                #expect(wrong.status == .badRequest && Self.problemKind(wrong) == "bad_parameter", "t=\(bad): \(wrong.status)")
            }
            let refused = try await client.execute(uri: try Self.sign("fit", clip.path), method: .get)
            #expect(refused.status == .unsupportedMediaType && Self.problemKind(refused) == "unsupported_format", "\(refused.status)")
        }
    }

    @Test func gravityIsAParameterAndFacesKeepsTheFace() async throws {
        let setup = try Setup()
        let photo = Fixtures.packageRoot.appendingPathComponent(".build/test-data/face_recognition-1.3.0/tests/test_images/obama.jpg")
        let wide = setup.images.appendingPathComponent("wide.jpg")
        // The face (366,136 259x259 in the 910x1137 photo) lands at about 120-290 x 45-215.
        let made = try await Command.run("/usr/bin/convert", ["-size", "1600x500", "xc:gray60", "(", photo.path, "-resize", "x500", ")",
                                                             "-geometry", "+0+0", "-composite", "-quality", "90", wide.path])
        #expect(made.status == 0, "\(made.stderr)")
        // The same picture with a region marked at its far right (not a face).
        let marked = setup.images.appendingPathComponent("marked.jpg")
        try FileManager.default.copyItem(at: wide, to: marked)
        let tagged = try await Command.run("/usr/bin/env", ["exiftool", "-q", "-overwrite_original",
                                                            "-XMP-mwg-rs:RegionInfo={RegionList=[{Area={X=0.93,Y=0.5,W=0.1,H=0.2,Unit=normalized},Type=Focus}]}", marked.path])
        #expect(tagged.status == 0, "\(tagged.stderr)")
        try """
            version: 1
            name: square
            params:
              g: { sets: processors.0.resize.gravity }
            serve:
              sources: ["\(setup.images.path)/"]
            processors:
              - resize: { width: 200, height: 200, mode: fill }
            encoder: png
            """.write(to: setup.pipelines.appendingPathComponent("square.yaml"), atomically: true, encoding: .utf8)
        let routes = ImageRoutes(library: try Self.library([setup.pipelines.path]), options: ImageRoutes.Options())
        let router = Router()
        routes.add(to: router)
        let app = Application(router: router)
        let detect = try DetectFaces.plugin.makeProcessor(DetectFaces.plugin.options([:]))
        try await app.test(.router) { client in
            var found: [String: Int] = [:]
            for gravity in ["faces", "centre"] {
                let answer = try await client.execute(uri: try Self.sign("square", wide.path, params: ["g": gravity]), method: .get)
                #expect(answer.status == .ok, "\(gravity): \(answer.status)")
                let wand = Wand()
                try wand.read(Data(buffer: answer.body), format: "PNG")
                let scanned = try detect.process(PipelineImage(taking: wand, sourceFormat: "PNG"))
                found[gravity] = FaceScan(fact: scanned.facts["faces"], size: PixelSize(width: 200, height: 200))?.faces.count
            }
            #expect(found["faces"] == 1 && found["centre"] == 0, "faces found in each answer: \(found)")
            // `regions` crops to the marked region (far from the face); `faces` passes over a region that is not a face.
            for (gravity, faces) in [("regions", 0), ("faces", 1)] {
                let answer = try await client.execute(uri: try Self.sign("square", marked.path, params: ["g": gravity]), method: .get)
                #expect(answer.status == .ok, "\(gravity): \(answer.status)")
                let wand = Wand()
                try wand.read(Data(buffer: answer.body), format: "PNG")
                let scanned = try detect.process(PipelineImage(taking: wand, sourceFormat: "PNG"))
                let count = FaceScan(fact: scanned.facts["faces"], size: PixelSize(width: 200, height: 200))?.faces.count
                #expect(count == faces, "marked.jpg by \(gravity): \(count as Any) faces in the answer")
            }
            let wrong = try await client.execute(uri: try Self.sign("square", wide.path, params: ["g": "sideways"]), method: .get)
            #expect(wrong.status == .badRequest && Self.problemKind(wrong) == "bad_parameter")
            #expect(String(buffer: wrong.body).contains("faces"), "the answer names the values: \(String(buffer: wrong.body))")
        }
    }
}
