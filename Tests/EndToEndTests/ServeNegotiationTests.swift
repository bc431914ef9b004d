import Foundation
import PipelineKit
import Testing
import TestImages

/// `auto` in `pipelinectl serve` never sends a format the request did not accept: from WebP, AVIF,
/// GIF, JPEG and PNG sources, with `Accept: image/jpeg`, `*/*`, `image/*`, or no `Accept` at all.
@Suite struct ServeNegotiationTests {
    @Test func aClientThatDoesNotNameAVIFOrWebPNeverGetsThem() async throws {
        let setup = try ServeTests.Setup()
        try Fixtures.image("gradient:navy-orange", width: 300, height: 200, format: "WEBP").write(to: setup.images.appendingPathComponent("opaque.webp"))
        let alpha = try Fixtures.alphaPNG(200, 200)
        try alpha.write(to: setup.images.appendingPathComponent("alpha.png"))
        try Fixtures.image("gradient:navy-orange", width: 300, height: 200, format: "GIF").write(to: setup.images.appendingPathComponent("a.gif"))
        let convert = try await Command.run("/usr/bin/convert", [setup.path("alpha.png"), setup.path("alpha.webp")])
        #expect(convert.status == 0, "\(convert.stderr)")
        try Fixtures.image("gradient:navy-orange", width: 300, height: 200, format: "PNG").write(to: setup.images.appendingPathComponent("opaque.png"))
        let made = try await Command.run("/usr/bin/avifenc", [setup.path("opaque.png"), setup.path("opaque.avif")])
        #expect(made.status == 0, "\(made.stderr)")
        let service = try await ServeTests.start(setup)
        defer { service.stop() }
        // Source -> what a client that names neither AVIF nor WebP gets, by Accept.
        let cases: [(String, [String?: String])] = [
            ("opaque.webp", ["image/jpeg": "image/jpeg", "*/*": "image/jpeg", "image/*": "image/jpeg", nil: "image/jpeg"]),
            ("alpha.webp", ["image/jpeg": "image/png", "*/*": "image/png", nil: "image/png"]),
            ("opaque.avif", ["image/jpeg": "image/jpeg", "*/*": "image/jpeg", nil: "image/jpeg"]),
            ("a.gif", ["image/jpeg": "image/jpeg", "*/*": "image/gif", "image/gif,image/jpeg": "image/gif", nil: "image/gif"]),
            ("a.jpg", ["image/jpeg": "image/jpeg", "*/*": "image/jpeg", nil: "image/jpeg"]),
            ("b.png", ["image/jpeg": "image/png", "*/*": "image/png", nil: "image/png"]),
        ]
        for (source, answers) in cases {
            for (accept, type) in answers {
                let response = try await service.get(try ServeTests.sign("resize", setup.path(source)),
                                                     headers: accept.map { ["Accept": $0] } ?? [:])
                #expect(response.status == 200 && response.headers["content-type"] == type,
                        "\(source) with Accept \(accept ?? "(none)"): \(response.status) \(response.headers["content-type"] ?? "") \(response.text.prefix(200))")
            }
        }
        // A client that names them still gets them.
        let webp = try await service.get(try ServeTests.sign("resize", setup.path("a.jpg")), headers: ["Accept": "image/webp,*/*"])
        #expect(webp.headers["content-type"] == "image/webp")
        let avif = try await service.get(try ServeTests.sign("resize", setup.path("a.jpg")), headers: ["Accept": "image/avif,image/webp,*/*"])
        #expect(avif.headers["content-type"] == "image/avif")
    }

    /// A pipeline that prefers WebP gets AVIF only for clients that take no WebP; one that caps
    /// AVIF's pixels gets WebP above the cap.
    @Test func aPipelineCanPreferWebPOrCapAVIF() async throws {
        let setup = try ServeTests.Setup()
        try setup.write("webpfirst", """
            processors:
              - resize: { width: 256, height: 256 }
            encoder: { auto: { prefer: [webp, avif] } }
            output: { dir: \(setup.dir.path)/out }
            serve: { sources: ["\(setup.images.path)/"] }
            """)
        try setup.write("smallavif", """
            processors:
              - resize: { width: 256, height: 256 }
            encoder: { auto: { avif_max_pixels: 10000 } }
            output: { dir: \(setup.dir.path)/out }
            serve: { sources: ["\(setup.images.path)/"] }
            """)
        let service = try await ServeTests.start(setup)
        defer { service.stop() }
        let chromium = ["Accept": "image/avif,image/webp,image/apng,image/*,*/*;q=0.8"]
        let first = try await service.get(try ServeTests.sign("webpfirst", setup.path("a.jpg")), headers: chromium)
        #expect(first.status == 200 && first.headers["content-type"] == "image/webp", "\(first.headers)")
        let noWebP = try await service.get(try ServeTests.sign("webpfirst", setup.path("a.jpg")), headers: ["Accept": "image/avif,*/*"])
        #expect(noWebP.headers["content-type"] == "image/avif")
        // 256x192 is 49,152 pixels, over the cap of 10,000.
        let capped = try await service.get(try ServeTests.sign("smallavif", setup.path("a.jpg")), headers: chromium)
        #expect(capped.headers["content-type"] == "image/webp", "\(capped.headers)")
    }
}
