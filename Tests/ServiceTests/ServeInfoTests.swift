import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdTesting
import MagickKit
@testable import PipelineHummingbird
@testable import PipelineService
@testable import PipelineKit
import Plugins
import Testing
import TestImages

/// `/info/SIGNATURE/PIPELINE/SOURCE` through ``ImageRoutes`` in this process: the facts of photos
/// the test makes (dimensions, format, alpha, frames), a BlurHash whose mean colour is the
/// image's, the declared breakpoints; its own signature (an image's does not open it); refusals.
@Suite struct ServeInfoTests {
    /// The mean colour a BlurHash holds: its DC component (characters 2 to 5, base 83, sRGB).
    static func blurHashMean(_ hash: String) -> [Int] {
        let digits = Array("0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz#$%*+,-.:;=?@[]^_{|}~")
        let value = hash.dropFirst(2).prefix(4).reduce(0) { $0 * 83 + (digits.firstIndex(of: $1) ?? 0) }
        return [value >> 16, (value >> 8) & 255, value & 255]
    }

    /// The image's mean colour, by ImageMagick: averaged in linear light, as BlurHash averages,
    /// then written as sRGB (0-255).
    static func mean(_ file: URL) async throws -> [Int] {
        let result = try await Command.run("/usr/bin/convert", [file.path + "[0]", "-colorspace", "RGB", "-scale", "1x1!", "-colorspace", "sRGB", "-format",
                                                                "%[fx:int(255*r+0.5)] %[fx:int(255*g+0.5)] %[fx:int(255*b+0.5)]", "info:"])
        return result.stdout.split(separator: " ").compactMap { Int($0) }
    }

    @Test func factsOfEachPhotoAreRightAndItsBlurHashHasItsColour() async throws {
        let setup = try ServeHintsTests.Setup()
        let images: [(name: String, data: Data, format: String, width: Int, height: Int, alpha: Bool)] = [
            ("g.jpg", try Fixtures.image("gradient:#d02020-#2040c0", width: 1200, height: 900, format: "JPEG"), "JPEG", 1200, 900, false),
            ("p.png", try Fixtures.alphaPNG(400, 300), "PNG", 400, 300, true),
            ("w.webp", try Fixtures.image("plasma:", width: 640, height: 480, format: "WEBP"), "WEBP", 640, 480, false),
            ("t.tif", try Fixtures.image("gradient:#10a010-#f0f0f0", width: 300, height: 500, format: "TIFF"), "TIFF", 300, 500, false),
        ]
        for image in images { try image.data.write(to: setup.images.appendingPathComponent(image.name)) }
        let (app, _) = try ServeHintsTests.app(setup)
        let library = try ServeInProcessTests.library([setup.pipelines.path])
        try await app.test(.router) { client in
            for image in images {
                let path = try library.signedInfoPath(pipeline: "hinted", source: setup.path(image.name))
                #expect(path.hasPrefix("/info/"))
                let answer = try await client.execute(uri: path, method: .get)
                #expect(answer.status == .ok && answer.headers[.contentType] == "application/json", "\(image.name): \(String(buffer: answer.body))")
                let json = try #require(try JSONSerialization.jsonObject(with: Data(buffer: answer.body)) as? [String: Any])
                let facts = try #require(json["facts"] as? [String: Any])
                #expect(facts["width"] as? Int == image.width && facts["height"] as? Int == image.height, "\(image.name) \(facts)")
                #expect(facts["format"] as? String == image.format, "\(image.name) \(facts)")
                #expect(facts["alpha"] as? Bool == image.alpha && facts["frames"] as? Int == 1, "\(image.name)")
                #expect((facts["dhash"] as? String)?.count == 16 && facts["thumbhash"] is String && facts["dominant_color"] is String)
                let hash = try #require(facts["blurhash"] as? String)
                // Transparent pixels have no colour to agree on: the mean is checked on the opaque images.
                if !image.alpha {
                    let expected = try await Self.mean(setup.images.appendingPathComponent(image.name))
                    let got = Self.blurHashMean(hash)
                    #expect(zip(expected, got).allSatisfy { abs($0 - $1) <= 16 }, "\(image.name): BlurHash mean \(got), image \(expected)")
                }
                let breakpoints = try #require(json["breakpoints"] as? [String: Any])
                #expect(breakpoints["declared"] as? [Int] == [160, 320, 640] && breakpoints["param"] as? String == "w")
                #expect(answer.headers[HTTPField.Name("Surrogate-Key")!]?.hasPrefix(CacheTags().source(setup.path(image.name))) == true)
                let again = try await client.execute(uri: path, method: .get, headers: [.ifNoneMatch: answer.headers[.eTag] ?? ""])
                #expect(again.status == .notModified)
            }
        }
    }

    /// `?facts=header`: the header's facts, nothing decoded, agreeing with the full facts; and
    /// full facts a data cache keeps are answered again without a decode.
    @Test func headerFactsDecodeNothingAndKnownFactsComeFromTheCache() async throws {
        let setup = try ServeHintsTests.Setup()
        let images: [(name: String, data: Data)] = [
            ("g.jpg", try Fixtures.image("gradient:#d02020-#2040c0", width: 1200, height: 900, format: "JPEG")),
            ("p.png", try Fixtures.alphaPNG(400, 300)),
            ("w.webp", try Fixtures.image("plasma:", width: 640, height: 480, format: "WEBP")),
            ("t.tif", try Fixtures.image("gradient:#10a010-#f0f0f0", width: 300, height: 500, format: "TIFF")),
        ]
        for image in images { try image.data.write(to: setup.images.appendingPathComponent(image.name)) }
        let (app, routes) = try ServeHintsTests.app(setup)
        let library = try ServeInProcessTests.library([setup.pipelines.path])
        let decodes: @Sendable () throws -> Int = { try routes.service.library.infoRunner(pipeline: "hinted").making.decodes.value }
        try await app.test(.router) { client in
            for image in images {
                let before = try decodes()
                let header = try await client.execute(uri: try library.signedInfoPath(pipeline: "hinted", source: setup.path(image.name), headerOnly: true),
                                                      method: .get)
                #expect(header.status == .ok, "\(image.name): \(String(buffer: header.body))")
                let headerFacts = try #require((try JSONSerialization.jsonObject(with: Data(buffer: header.body)) as? [String: Any])?["facts"] as? [String: Any])
                #expect(try decodes() == before, "\(image.name): the header alone")
                #expect(headerFacts["blurhash"] == nil && headerFacts["dhash"] == nil)
                let full = try await client.execute(uri: try library.signedInfoPath(pipeline: "hinted", source: setup.path(image.name)), method: .get)
                let fullFacts = try #require((try JSONSerialization.jsonObject(with: Data(buffer: full.body)) as? [String: Any])?["facts"] as? [String: Any])
                #expect(try decodes() == before + 1)
                for key in ["format", "width", "height"] {
                    #expect("\(headerFacts[key] ?? "-")" == "\(fullFacts[key] ?? "+")", "\(image.name): \(key)")
                }
                // Asked again (no If-None-Match): the facts the data cache kept, no decode.
                let again = try await client.execute(uri: try library.signedInfoPath(pipeline: "hinted", source: setup.path(image.name)), method: .get)
                #expect(again.status == .ok && Data(buffer: again.body) == Data(buffer: full.body))
                #expect(try decodes() == before + 1, "\(image.name): known facts are not decoded again")
            }
            // A file replaced under the same name is not answered with the facts of the old one.
            let replaced = setup.images.appendingPathComponent("g.jpg")
            try Fixtures.image("gradient:#d02020-#2040c0", width: 640, height: 200, format: "JPEG").write(to: replaced)
            for headerOnly in [false, true] {
                let fresh = try await client.execute(uri: try library.signedInfoPath(pipeline: "hinted", source: setup.path("g.jpg"), headerOnly: headerOnly),
                                                     method: .get)
                let facts = try #require((try JSONSerialization.jsonObject(with: Data(buffer: fresh.body)) as? [String: Any])?["facts"] as? [String: Any])
                #expect(facts["width"] as? Int == 640 && facts["height"] as? Int == 200, "header only: \(headerOnly)")
            }
            // A signed request for facts that do not exist: 400, naming what may be asked.
            let path = ServeRequest.path(pipeline: "hinted", variant: nil, source: setup.path("g.jpg"), parameters: ["facts": "pixels"], expires: nil)
            let signed = "/info/" + (try SigningKeys(parsing: ServeInProcessTests.key, origin: "test")).sign(ServeRequest.infoSigned(path)) + path
            let bad = try await client.execute(uri: signed, method: .get)
            #expect(bad.status == .badRequest && String(buffer: bad.body).contains("facts=pixels"), "\(String(buffer: bad.body))")
        }
    }

    /// Both kinds of breakpoints in `/info`, each named: the declared widths and, for a variant
    /// with breakpoints by bytes, the widths chosen for this image with their sizes. An image
    /// request for that variant answers its widest width.
    @Test func infoNamesTheBreakpointsByBytesOfTheImage() async throws {
        let setup = try ServeHintsTests.Setup()
        try Fixtures.image("plasma:", width: 1400, height: 900, format: "JPEG", quality: 92).write(to: setup.images.appendingPathComponent("detail.jpg"))
        try """
            version: 1
            name: widths
            serve:
              sources: ["\(setup.images.path)/"]
            variants:
              web:
                breakpoints: { min_width: 200, max_width: 1200, bytes_step: 10KB, max_images: 6, trial_time: 10m }
                encoder: { webp: { quality: 80 } }
            """.write(to: setup.pipelines.appendingPathComponent("widths.yaml"), atomically: true, encoding: .utf8)
        let (app, _) = try ServeHintsTests.app(setup)
        let library = try ServeInProcessTests.library([setup.pipelines.path])
        try await app.test(.router) { client in
            let answer = try await client.execute(uri: try library.signedInfoPath(pipeline: "widths", source: setup.path("detail.jpg")), method: .get)
            #expect(answer.status == .ok, "\(String(buffer: answer.body))")
            let json = try #require(try JSONSerialization.jsonObject(with: Data(buffer: answer.body)) as? [String: Any])
            #expect((json["facts"] as? [String: Any])?["breakpoints"] == nil, "breakpoints are named beside the facts, not among them")
            let web = try #require(((json["breakpoints"] as? [String: Any])?["by_bytes"] as? [String: Any])?["web"] as? [String: Any])
            let widths = try #require(web["widths"] as? [Int]), bytes = try #require(web["bytes"] as? [Int])
            #expect(widths.count > 1 && widths.count <= 6 && widths.last == 1200 && widths.first == 200, "\(widths)")
            #expect(bytes == bytes.sorted() && bytes.count == widths.count)
            let image = try await client.execute(uri: try ServeInProcessTests.sign("widths", setup.path("detail.jpg"), variant: "web"), method: .get)
            #expect(image.status == .ok)
            #expect(try await ServeHintsTests.width(image) == 1200, "the widest answers")
        }
    }

    @Test func aFactsURLHasItsOwnSignatureAndRefusesWhatAnImageWould() async throws {
        let setup = try ServeHintsTests.Setup()
        let (app, _) = try ServeHintsTests.app(setup)
        let library = try ServeInProcessTests.library([setup.pipelines.path])
        let image = try ServeInProcessTests.sign("hinted", setup.path("a.jpg"))
        try await app.test(.router) { client in
            // An image's signature does not open the facts, nor the facts' an image.
            let borrowed = try await client.execute(uri: "/info" + image, method: .get)
            #expect(borrowed.status == .forbidden && ServeInProcessTests.problemKind(borrowed) == "bad_signature")
            let info = try library.signedInfoPath(pipeline: "hinted", source: setup.path("a.jpg"))
            let asImage = try await client.execute(uri: String(info.dropFirst(5)), method: .get)
            #expect(asImage.status == .forbidden && ServeInProcessTests.problemKind(asImage) == "bad_signature")
            let unsigned = try await client.execute(uri: "/info/hinted/" + setup.path("a.jpg"), method: .get)
            #expect(unsigned.status == .forbidden)
            #expect(throws: PipelineError.self) { try library.signedInfoPath(pipeline: "hinted", source: "/etc/passwd") }
            let keys = try SigningKeys(parsing: ServeInProcessTests.key, origin: "test")
            let outsidePath = ServeRequest.path(pipeline: "hinted", variant: nil, source: "/etc/passwd", parameters: [:])
            let outside = try await client.execute(uri: "/info/" + keys.sign(ServeRequest.infoSigned(outsidePath)) + outsidePath, method: .get)
            #expect(outside.status == .forbidden && ServeInProcessTests.problemKind(outside) == "source_not_allowed")
            let missingPath = ServeRequest.path(pipeline: "hinted", variant: nil, source: setup.path("none.jpg"), parameters: [:])
            let missing = try await client.execute(uri: "/info/" + keys.sign(ServeRequest.infoSigned(missingPath)) + missingPath, method: .get)
            #expect(missing.status == .notFound)
            try Data("not an image".utf8).write(to: setup.images.appendingPathComponent("c.jpg"))
            let junkPath = ServeRequest.path(pipeline: "hinted", variant: nil, source: setup.path("c.jpg"), parameters: [:])
            let junk = try await client.execute(uri: "/info/" + keys.sign(ServeRequest.infoSigned(junkPath)) + junkPath, method: .get)
            #expect(junk.status == .unsupportedMediaType && ServeInProcessTests.problemKind(junk) == "not_an_image")
            let paramPath = ServeRequest.path(pipeline: "hinted", variant: nil, source: setup.path("a.jpg"), parameters: ["w": "100"])
            let param = try await client.execute(uri: "/info/" + keys.sign(ServeRequest.infoSigned(paramPath)) + paramPath, method: .get)
            #expect(param.status == .badRequest && ServeInProcessTests.problemKind(param) == "bad_parameter")
        }
    }
}
