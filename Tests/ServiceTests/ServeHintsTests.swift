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

/// Client Hints and cache tags through ``ImageRoutes`` in this process: a hint picks among the
/// declared widths without a new signature; `Vary` names the hints read; garbage never fails;
/// the redirect mode points at the signed URL of the width; every answer carries its tags.
/// (Chromium's own hints, same-origin and delegated, are in EndToEndTests' ServeHintsPageTests.)
@Suite struct ServeHintsTests {
    struct Setup {
        let dir: URL
        var pipelines: URL { dir.appendingPathComponent("pipelines") }
        var images: URL { dir.appendingPathComponent("images") }

        init(mode: String = "vary") throws {
            dir = try Fixtures.temporaryDirectory("hints")
            try FileManager.default.createDirectory(at: pipelines, withIntermediateDirectories: true)
            try FileManager.default.createDirectory(at: images, withIntermediateDirectories: true)
            try Fixtures.jpeg(1200, 900).write(to: images.appendingPathComponent("a.jpg"))
            try Fixtures.jpeg(800, 600).write(to: images.appendingPathComponent("b.jpg"))
            try """
                version: 1
                name: hinted
                params:
                  w: { sets: processors.0.resize.width, min: 16, max: 1024 }
                serve:
                  sources: ["\(images.path)/"]
                  breakpoints: [160, 320, 640]
                  breakpoint_param: w
                  hints: \(mode)
                data_cache: { disk: { path: \(dir.appendingPathComponent("cache").path), store: processed } }
                processors:
                  - resize: { width: 480, mode: fit }
                encoder: jpeg
                """.write(to: pipelines.appendingPathComponent("hinted.yaml"), atomically: true, encoding: .utf8)
        }

        func path(_ name: String) -> String { images.appendingPathComponent(name).path }
    }

    static func app(_ setup: Setup, prefix: String = "") throws -> (Application<RouterResponder<BasicRequestContext>>, ImageRoutes) {
        var options = ImageRoutes.Options()
        options.accessLog = .off
        let routes = ImageRoutes(library: try ServeInProcessTests.library([setup.pipelines.path]), options: options)
        let router = Router()
        routes.add(to: router, atPath: prefix)
        return (Application(router: router), routes)
    }

    static func width(_ response: TestResponse) async throws -> Int {
        let description = try await Identified.data(Data(buffer: response.body)).description
        return Int(description.split(separator: " ")[1].split(separator: "x")[0]) ?? 0
    }

    static func headers(_ pairs: [String: String]) -> HTTPFields {
        var fields = HTTPFields()
        for (name, value) in pairs { fields.append(HTTPField(name: HTTPField.Name(name)!, value: value)) }
        return fields
    }

    @Test func hintsPickADeclaredWidthAndTheAnswerVariesOnThem() async throws {
        let setup = try Setup()
        let (app, routes) = try Self.app(setup)
        let signed = try ServeInProcessTests.sign("hinted", setup.path("a.jpg"))
        try await app.test(.router) { client in
            let plain = try await client.execute(uri: signed, method: .get)
            #expect(plain.status == .ok)
            #expect(try await Self.width(plain) == 640)  // no hints: the width as written (480), snapped up
            #expect(plain.headers[.vary] == Breakpoints.headerNames.joined(separator: ", "))
            #expect(plain.headers[HTTPField.Name("Accept-CH")!] == Breakpoints.acceptCH)

            let hinted = try await client.execute(uri: signed, method: .get, headers: Self.headers(["Sec-CH-Width": "300", "Width": "300"]))
            #expect(try await Self.width(hinted) == 320)
            #expect(hinted.headers[.vary] == "Sec-CH-Width, Save-Data")
            let dpr2 = try await client.execute(uri: signed, method: .get, headers: Self.headers(["Sec-CH-Viewport-Width": "150", "Sec-CH-DPR": "2"]))
            #expect(try await Self.width(dpr2) == 320)
            let saving = try await client.execute(uri: signed, method: .get, headers: Self.headers(["Sec-CH-Width": "300", "Save-Data": "on"]))
            #expect(try await Self.width(saving) == 160)

            // The URL's own width wins, and then no hint is read.
            let explicit = try await client.execute(uri: try ServeInProcessTests.sign("hinted", setup.path("a.jpg"), params: ["w": "100"]),
                                                    method: .get, headers: Self.headers(["Sec-CH-Width": "300"]))
            #expect(try await Self.width(explicit) == 100)
            #expect(explicit.headers[.vary] == nil)

            // Garbage, zero, negative, huge: a declared width, never an error.
            for value in ["abc", "0", "-300", "1e999", "99999999999999999999", String(repeating: "9", count: 4000)] {
                let odd = try await client.execute(uri: signed, method: .get, headers: Self.headers(["Sec-CH-Width": value, "Sec-CH-DPR": value]))
                #expect(odd.status == .ok, "\(value.prefix(20))")
                #expect([640, 160, 320].contains(try await Self.width(odd)), "\(value.prefix(20))")
            }
            let above = try await client.execute(uri: signed, method: .get, headers: Self.headers(["Sec-CH-Width": "5000"]))
            #expect(try await Self.width(above) == 640)

            // Any number of hinted widths: at most one answer per declared width.
            var etags = Set<String>()
            for width in stride(from: 1, through: 2100, by: 37) {
                let answer = try await client.execute(uri: signed, method: .get, headers: Self.headers(["Sec-CH-Width": String(width)]))
                etags.insert(answer.headers[.eTag] ?? "")
            }
            #expect(etags.count == 3, "\(etags)")
        }
        // The cache holds one output per declared width for the source, whatever the hints were,
        // and one for the width the signed URL named itself (w=100).
        let cache = try #require(routes.service.presets["hinted"]?.runner.dataCacheStage as? any DataCacheMaintenance)
        let stats = try await cache.statistics()
        #expect(stats.outputs == 3 + 1, "\(stats)")
    }

    @Test func theRedirectModeSendsHintedRequestsToTheSignedURLOfTheirWidth() async throws {
        let setup = try Setup(mode: "redirect")
        let (app, _) = try Self.app(setup, prefix: "/img")
        let path = ServeRequest.path(pipeline: "hinted", variant: nil, source: setup.path("a.jpg"), parameters: [:], version: "3")
        let keys = try SigningKeys(parsing: ServeInProcessTests.key, origin: "test")
        try await app.test(.router) { client in
            let hinted = try await client.execute(uri: "/img/" + keys.sign(path) + path, method: .get,
                                                  headers: Self.headers(["Sec-CH-Width": "300"]))
            #expect(hinted.status == .temporaryRedirect)
            #expect(hinted.headers[.cacheControl] == "no-store")
            #expect(hinted.headers[.vary] == "Sec-CH-Width, Save-Data")
            let location = try #require(hinted.headers[.location])
            let canonical = ServeRequest.path(pipeline: "hinted", variant: nil, source: setup.path("a.jpg"), parameters: ["w": "320"], version: "3")
            #expect(location == "/img/" + keys.sign(canonical) + canonical)
            let followed = try await client.execute(uri: location, method: .get, headers: Self.headers(["Sec-CH-Width": "1000"]))
            #expect(followed.status == .ok)
            #expect(try await Self.width(followed) == 320)  // the URL's width: the hints are not read again
            #expect(followed.headers[.vary] == nil)

            let none = try await client.execute(uri: "/img/" + keys.sign(path) + path, method: .get)
            #expect(none.status == .temporaryRedirect)
            #expect(none.headers[.location]?.contains("w=640") == true)
            let garbage = try await client.execute(uri: "/img/" + keys.sign(path) + path, method: .get,
                                                   headers: Self.headers(["Sec-CH-Width": "-1"]))
            #expect(garbage.headers[.location]?.contains("w=640") == true)
        }
    }

    @Test func answersCarryTheTagsOfTheirSourcePipelineAndVariant() async throws {
        let setup = try Setup()
        let (app, _) = try Self.app(setup)
        let tags = CacheTags()
        let source = setup.path("b.jpg")
        try await app.test(.router) { client in
            let answer = try await client.execute(uri: try ServeInProcessTests.sign("hinted", source), method: .get)
            let expected = [tags.source(source), "pk-p-hinted"]
            #expect(answer.headers[HTTPField.Name("Surrogate-Key")!] == expected.joined(separator: " "))
            #expect(answer.headers[HTTPField.Name("Cache-Tag")!] == expected.joined(separator: ","))
            let revalidated = try await client.execute(uri: try ServeInProcessTests.sign("hinted", source), method: .get,
                                                       headers: [.ifNoneMatch: answer.headers[.eTag] ?? ""])
            #expect(revalidated.status == .notModified)
            #expect(revalidated.headers[HTTPField.Name("Surrogate-Key")!] == expected.joined(separator: " "))
            let missing = try await client.execute(uri: try ServeInProcessTests.sign("hinted", setup.path("none.jpg")), method: .get)
            #expect(missing.status == .notFound && missing.headers[HTTPField.Name("Surrogate-Key")!] == nil)
        }
    }
}
