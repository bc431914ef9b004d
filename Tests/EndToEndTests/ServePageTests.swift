import Foundation
import PipelineKit
import Testing
import TestImages

/// A page as a browser loads it: 24 images the service has never made, asked for at once by
/// headless Chromium (a fresh profile each time, so every load reaches the service), three
/// times, while wrk keeps the service busy with other images. Browsers never retry an `<img>`
/// that got 429: every image must come every time.
@Suite struct ServePageTests {
    @Test(.enabled(if: FileManager.default.fileExists(atPath: "/usr/bin/chromium") && FileManager.default.fileExists(atPath: "/usr/bin/wrk"),
                   "needs Debian's chromium and wrk (make test installs them)"))
    func aPageOfNewImagesLoadsWholeThreeTimesUnderABurst() async throws {
        let setup = try ServeTests.Setup()
        let colours = ["navy-orange", "red-blue", "green-yellow", "purple-white", "black-cyan", "gold-teal"]
        for index in 1...24 {
            try Fixtures.image("gradient:\(colours[index % colours.count])", width: 400 + 8 * index, height: 300, format: "JPEG")
                .write(to: setup.images.appendingPathComponent(String(format: "p%02d.jpg", index)))
        }
        for index in 1...8 {
            try Fixtures.image("gradient:\(colours[index % colours.count])", width: 640, height: 480, format: "JPEG")
                .write(to: setup.images.appendingPathComponent("x\(index).jpg"))
        }
        // The defaults, but for the waits: on a machine whose cores other work holds (make stress,
        // CI), a job takes several times as long, and the expected wait would pass --queue-wait's
        // 5 s. Unloaded, the defaults answer all 72 (checked when this test was written).
        let service = try await ServeTests.start(setup, ["--queue-wait", "60s", "--timeout", "120s"])
        defer { service.stop() }
        let base = "http://127.0.0.1:\(service.port)"
        // The burst: four connections asking for other images, at other sizes, all the time.
        var burst: [String] = []
        for index in 1...8 {
            for width in [120, 180, 240, 300] {
                burst.append(try ServeTests.sign("resize", setup.path("x\(index).jpg"), params: ["w": String(width)]))
            }
        }
        let script = setup.dir.appendingPathComponent("burst.lua")
        try """
            local paths = {\(burst.map { "\"\($0)\"" }.joined(separator: ","))}
            local n = 0
            request = function()
              n = n + 1
              return wrk.format("GET", paths[(n % #paths) + 1], { ["Accept"] = "image/avif,image/webp,*/*" })
            end
            """.write(to: script, atomically: true, encoding: .utf8)
        let wrk = try Command.start("/usr/bin/wrk", ["-t", "1", "-c", "4", "-d", "300s", "--timeout", "60s", "-s", script.path, base + "/livez"])
        // SIGKILL: wrk inherits the spawning thread's signal mask, in which SIGTERM is blocked (a
        // terminate() left it running its 300 s against the next suites' CPU).
        defer { kill(wrk.process.processIdentifier, SIGKILL) }
        // The burst is running before the page loads.
        #expect(await ServeTests.waitForMetric(service, "pipelinectl_requests_in_flight", 4))
        let images = try (1...24).map { index in
            "<img id=\"p\(index)\" width=\"100\" src=\"\(base)\(try ServeTests.sign("resize", setup.path(String(format: "p%02d.jpg", index)), params: ["w": "100"]))\">"
        }
        let page = setup.dir.appendingPathComponent("page.html")
        try """
            <!doctype html><html><body>
            \(images.joined(separator: "\n"))
            <script>
              window.addEventListener("load", () => {
                const broken = [...document.images].filter(i => !i.complete || i.naturalWidth === 0).map(i => i.id);
                document.body.dataset.loaded = [...document.images].length - broken.length;
                document.body.dataset.broken = broken.join(",");
              });
            </script>
            </body></html>
            """.write(to: page, atomically: true, encoding: .utf8)
        for load in 1...3 {
            let profile = setup.dir.appendingPathComponent("profile\(load)")
            let dom = try await Command.run("/usr/bin/chromium", ["--headless", "--no-sandbox", "--disable-gpu", "--user-data-dir=\(profile.path)",
                                                                  "--disk-cache-size=1", "--dump-dom", page.absoluteString])
            #expect(dom.stdout.contains("data-loaded=\"24\" data-broken=\"\""), "load \(load): \(dom.stdout.suffix(400)) \(dom.stderr.suffix(600))")
            // Every load reached the service: 24 answers for the page's images each time.
            let answered = service.accessLog.filter { $0.contains("/img/p") && $0.contains("\"status\":200") }.count
            #expect(answered == 24 * load, "load \(load): \(answered) of the page's images answered so far")
        }
        let refused = service.accessLog.filter { $0.contains("\"status\":429") }.count
        #expect(refused == 0, "\(refused) requests refused under a burst of four connections")
    }
}
