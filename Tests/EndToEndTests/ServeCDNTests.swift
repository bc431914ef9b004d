import FlyingFox
import Foundation
import PipelineKit
import Testing
import TestImages

/// `serve` behind a real Varnish 7.1 with xkey (deploy/varnish/pipelinectl.vcl), and headless
/// Chromium asking for images with Client Hints: the width snapped from the layout width at
/// scale factors 1 and 2, on one origin and across origins with delegation; `cache purge`
/// removing exactly one source's answers from Varnish (xkey, then BAN); the redirect mode
/// caching under the width's URL; a purger that is refused.
@Suite(.enabled(if: VarnishServer.isInstalled, "needs Debian's varnish and varnish-modules (make test installs them)"))
struct ServeCDNTests {
    struct Setup {
        let serve: ServeSetup
        let varnishPort: UInt16
        var dir: URL { serve.dir }

        init() throws {
            serve = try ServeSetup()
            varnishPort = try MotoServer.freePort()
            try Fixtures.jpeg(1200, 900).write(to: serve.images.appendingPathComponent("wide.jpg"))
            for (name, mode, purge) in [("tagged", "vary", "{ url: \"http://127.0.0.1:\(varnishPort)/\" }"),
                                        ("banned", "vary", "{ url: \"http://127.0.0.1:\(varnishPort)/\", mode: ban }"),
                                        ("redirected", "redirect", "{ url: \"http://127.0.0.1:\(varnishPort)/\" }"),
                                        ("refused", "vary", "{ url: \"http://127.0.0.1:\(varnishPort)/\", header: x-not-read }")] {
                try serve.write(name, """
                    processors:
                      - resize: { width: 480, mode: fit }
                    encoder: jpeg
                    output: { dir: \(serve.dir.path)/out }
                    params:
                      w: { sets: processors.0.resize.width, min: 16, max: 1024 }
                    serve:
                      sources: ["\(serve.images.path)/"]
                      breakpoints: [160, 320, 640]
                      breakpoint_param: w
                      hints: \(mode)
                    purge:
                      - varnish: \(purge)
                    """)
            }
        }

        func path(_ name: String) -> String { serve.images.appendingPathComponent(name).path }
    }

    static func purge(_ pipeline: String, _ setup: Setup, _ sources: [String]) async throws -> Command.Result {
        var environment = ProcessInfo.processInfo.environment
        environment["PIPELINECTL_KEYS"] = ServeSetup.key
        return try await Command.run(CLITests.binary, ["cache", "purge", setup.serve.pipelines.appendingPathComponent("\(pipeline).yaml").path]
                                     + sources, environment: environment)
    }

    /// Chromium's page, its images' natural widths written into the DOM once they loaded.
    static func widths(page: String, scale: Int) async throws -> String {
        let browser = ["--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--window-size=800,600",
                       "--force-device-scale-factor=\(scale)", "--virtual-time-budget=20000"]
        let dom = try await Command.run("/usr/bin/chromium", browser + ["--dump-dom", page])
        guard let range = dom.stdout.range(of: #"data-widths="[^"]*""#, options: .regularExpression) else {
            return "no widths: \(dom.stdout.suffix(400)) \(dom.stderr.suffix(600))"
        }
        return String(dom.stdout[range].dropFirst(13).dropLast())
    }

    static func page(_ images: [(id: String, size: Int, src: String)]) -> String {
        """
        <!doctype html><html><head><style>body{margin:0} img{display:block}</style></head><body>
        \(images.map { "<img id=\"\($0.id)\" sizes=\"\($0.size)px\" style=\"width:\($0.size)px\" src=\"\($0.src)\">" }.joined(separator: "\n"))
        <script>
          window.addEventListener("load", () => {
            document.body.dataset.widths = [...document.images].map(i => i.id + ":" + (i.complete ? i.naturalWidth : "x")).join(",");
          });
        </script>
        </body></html>
        """
    }

    @Test(.enabled(if: FileManager.default.fileExists(atPath: "/usr/bin/chromium"), "needs Debian's chromium (make test installs it)"))
    func chromiumsHintsPickTheDeclaredWidthOnOneOriginAndAcrossOrigins() async throws {
        let setup = try Setup()
        let service = try await ServeTests.start(setup.serve)
        defer { service.stop() }
        let wide = setup.path("wide.jpg")
        // One origin: Varnish serves the page (with Accept-CH) and, from serve, its images.
        let samePage = setup.dir.appendingPathComponent("page.html")
        try Self.page([("a", 150, try ServeTests.sign("tagged", wide)), ("b", 300, try ServeTests.sign("tagged", setup.path("a.jpg")))])
            .write(to: samePage, atomically: true, encoding: .utf8)
        let varnish = try await VarnishServer.start(port: setup.varnishPort, backend: service.port, extraVCL: """
            sub vcl_recv { if (req.url == "/page.html") { return (synth(750)); } }
            sub vcl_synth {
                if (resp.status == 750) {
                    set resp.status = 200;
                    set resp.http.Content-Type = "text/html";
                    set resp.http.Accept-CH = "Sec-CH-Width, Sec-CH-DPR, Sec-CH-Viewport-Width";
                    synthetic(std.fileread("\(samePage.path)"));
                    return (deliver);
                }
            }
            """)
        defer { varnish.stop() }
        // Another origin: a page server of the test's; the images come from serve itself, and the
        // page delegates the hints to it (or, in the control, does not).
        let pages = try await TestServer.start()
        let serveOrigin = "http://127.0.0.1:\(service.port)"
        let crossPage = Data(Self.page([("c", 150, serveOrigin + (try ServeTests.sign("tagged", wide, params: [:]))),
                                        ("d", 300, serveOrigin + (try ServeTests.sign("tagged", setup.path("a.jpg"))))]).utf8)
        for (path, delegate) in [("/delegated.html", true), ("/undelegated.html", false)] {
            pages.route(path) { _ in
                var headers: HTTPHeaders = [.contentType: "text/html", HTTPHeader("Accept-CH"): "Sec-CH-Width, Sec-CH-DPR"]
                if delegate { headers[HTTPHeader("Permissions-Policy")] = "ch-width=(self \"\(serveOrigin)\"), ch-dpr=(self \"\(serveOrigin)\")" }
                return HTTPResponse(statusCode: .ok, headers: headers, body: crossPage)
            }
        }
        // Layout width 150 px: 160 at scale 1, 300 device px -> 320 at scale 2; 300 px: 320, then 640.
        #expect(try await Self.widths(page: "http://127.0.0.1:\(setup.varnishPort)/page.html", scale: 1) == "a:160,b:320")
        #expect(try await Self.widths(page: "http://127.0.0.1:\(setup.varnishPort)/page.html", scale: 2) == "a:320,b:640")
        #expect(try await Self.widths(page: pages.url("/delegated.html"), scale: 1) == "c:160,d:320")
        #expect(try await Self.widths(page: pages.url("/delegated.html"), scale: 2) == "c:320,d:640")
        // Without delegation Chromium sends no hints to another origin: the default width (480 -> 640).
        #expect(try await Self.widths(page: pages.url("/undelegated.html"), scale: 2) == "c:640,d:640")
    }

    @Test func purgingOneSourceRemovesExactlyItsAnswersFromVarnish() async throws {
        let setup = try Setup()
        let service = try await ServeTests.start(setup.serve)
        defer { service.stop() }
        let varnish = try await VarnishServer.start(port: setup.varnishPort, backend: service.port)
        defer { varnish.stop() }
        func get(_ target: String, _ headers: [String: String] = [:]) async throws -> RawHTTP.Response {
            try await RawHTTP.get(port: setup.varnishPort, target: target, headers: headers)
        }
        for (pipeline, word) in [("tagged", "xkey purge of 1 tag, 3 objects invalidated"), ("banned", "ban of 1 tag")] {
            let a = try ServeTests.sign(pipeline, setup.path("a.jpg")), wide = try ServeTests.sign(pipeline, setup.path("wide.jpg"))
            // Three answers of a.jpg in Varnish (three hinted widths, kept apart by Vary), one of wide.jpg.
            for width in ["100", "300", "600"] { _ = try await get(a, ["Sec-CH-Width": width]) }
            _ = try await get(wide, ["Sec-CH-Width": "100"])
            #expect(try await get(a, ["Sec-CH-Width": "300"]).headers["x-cache"] == "HIT")
            #expect(try await get(wide, ["Sec-CH-Width": "100"]).headers["x-cache"] == "HIT")
            let purged = try await Self.purge(pipeline, setup, [setup.path("a.jpg")])
            #expect(purged.status == 0, "\(purged.stdout) \(purged.stderr)")
            #expect(purged.stdout.contains("varnish: \(word)"), "\(purged.stdout)")
            for width in ["100", "300", "600"] {
                #expect(try await get(a, ["Sec-CH-Width": width]).headers["x-cache"] == "MISS", "\(pipeline) \(width)")
            }
            #expect(try await get(wide, ["Sec-CH-Width": "100"]).headers["x-cache"] == "HIT", "\(pipeline)")  // other sources stay
        }
        // Never served: exit 0, and nothing to purge.
        let never = try await Self.purge("tagged", setup, [setup.path("never.jpg")])
        #expect(never.status == 0 && never.stdout.contains("nothing to purge"), "\(never.stdout) \(never.stderr)")
        // Varnish refuses (the VCL finds no tags in the header it reads): exit 3, naming the purger and the status.
        let refused = try await Self.purge("refused", setup, [setup.path("a.jpg")])
        #expect(refused.status == 3, "\(refused.stdout) \(refused.stderr)")
        #expect(refused.stderr.contains("purger 'varnish'") && refused.stderr.contains("HTTP 403"), "\(refused.stderr)")
    }

    @Test func theRedirectModeIsCachedUnderTheWidthsURLOnly() async throws {
        let setup = try Setup()
        let service = try await ServeTests.start(setup.serve)
        defer { service.stop() }
        let varnish = try await VarnishServer.start(port: setup.varnishPort, backend: service.port)
        defer { varnish.stop() }
        let hintless = try ServeTests.sign("redirected", setup.path("a.jpg"))
        for (hint, width) in [("300", "320"), ("100", "160"), ("300", "320")] {
            let redirect = try await RawHTTP.get(port: setup.varnishPort, target: hintless, headers: ["Sec-CH-Width": hint])
            #expect(redirect.status == 307)
            #expect(redirect.headers["x-cache"] == "MISS")  // never stored: each client gets its own width
            let location = try #require(redirect.headers["location"])
            #expect(location == (try ServeTests.sign("redirected", setup.path("a.jpg"), params: ["w": width])))
        }
        let canonical = try ServeTests.sign("redirected", setup.path("a.jpg"), params: ["w": "320"])
        _ = try await RawHTTP.get(port: setup.varnishPort, target: canonical)
        let again = try await RawHTTP.get(port: setup.varnishPort, target: canonical, headers: ["Sec-CH-Width": "1000"])
        #expect(again.status == 200 && again.headers["x-cache"] == "HIT" && again.headers["vary"] == nil)
    }
}
