import Foundation
import PipelineKit
import Testing
import TestImages

/// The source boundary of `pipelinectl serve`, attacked as a hostile client would: through every
/// encoding of `..`, links inside a served directory, prefixes escaped by dot segments, and
/// redirects from an allowed origin. Nothing outside is read, and nothing answers differently for
/// files that exist and files that do not.
@Suite struct ServeBoundaryTests {
    /// The signed target for a path written by hand (`/PIPELINE/SOURCE-AS-SENT`).
    static func signRaw(_ path: String) throws -> String {
        "/" + (try SigningKeys(parsing: ServeTests.key, origin: "test")).sign(path) + path
    }

    static func base64URL(_ text: String) -> String {
        Data(text.utf8).base64EncodedString().replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_")
            .replacingOccurrences(of: "=", with: "")
    }

    @Test func noEncodingLinkOrDotSegmentReadsOutsideTheServedDirectory() async throws {
        let setup = try ServeTests.Setup()
        let fm = FileManager.default
        let outside = setup.dir.appendingPathComponent("outside")
        try fm.createDirectory(at: outside, withIntermediateDirectories: true)
        // A real image outside: were it read, it would be served (200), not merely refused.
        try Fixtures.jpeg(64, 64).write(to: outside.appendingPathComponent("secret.jpg"))
        try fm.createSymbolicLink(atPath: setup.path("out.jpg"), withDestinationPath: outside.appendingPathComponent("secret.jpg").path)
        try fm.createSymbolicLink(atPath: setup.path("outdir"), withDestinationPath: outside.path)
        try fm.createSymbolicLink(atPath: setup.path("gone.jpg"), withDestinationPath: outside.appendingPathComponent("missing.jpg").path)
        try fm.createSymbolicLink(atPath: setup.path("in.jpg"), withDestinationPath: setup.path("a.jpg"))
        let service = try await ServeTests.start(setup)
        defer { service.stop() }
        let images = setup.images.path
        // Each pair: an existing file outside, then a missing one reached the same way.
        let pairs: [(String, String)] = [
            ("/etc/shadow", "/etc/no-such-file"),
            (images + "/../outside/secret.jpg", images + "/../outside/missing.jpg"),
            // Encoded once in the source, so twice in the request (as `pipelinectl sign` sends it).
            ("file://" + images + "/%2e%2e/outside/secret.jpg", "file://" + images + "/%2e%2e/outside/missing.jpg"),
            ("file://" + images + "/%2E%2E/%2E%2E/%2E%2E/%2E%2E/%2E%2E/etc/shadow", "file://" + images + "/%2E%2E/%2E%2E/%2E%2E/%2E%2E/%2E%2E/etc/nothing"),
            // Encoded twice in the source, three times in the request.
            ("file://" + images + "/%252e%252e/outside/secret.jpg", "file://" + images + "/%252e%252e/outside/missing.jpg"),
            // Encoded slashes.
            ("file://" + images + "/..%2f..%2foutside%2fsecret.jpg", "file://" + images + "/..%2f..%2foutside%2fmissing.jpg"),
            // Links inside the served directory that lead out.
            (images + "/out.jpg", images + "/gone.jpg"),
            (images + "/outdir/secret.jpg", images + "/outdir/missing.jpg"),
            ("file://" + images + "/outdir/secret.jpg", "file://" + images + "/outdir/missing.jpg"),
        ]
        for (exists, missing) in pairs {
            let a = try await service.get(try ServeTests.sign("resize", exists))
            let b = try await service.get(try ServeTests.sign("resize", missing))
            #expect(a.status == 403 && ServeTests.problem(a).kind == "source_not_allowed", "\(exists): \(a.status) \(a.text)")
            #expect(a.status == b.status && a.body == b.body, "\(exists) / \(missing): \(a.text) / \(b.text)")
        }
        // The request's own encodings, written by hand: `%252e` in the request path, and `b64:`.
        let raw = [
            "/resize/file:%2F%2F" + images.replacingOccurrences(of: "/", with: "%2F") + "%2F%252e%252e%2Foutside%2Fsecret.jpg",
            "/resize/" + images.dropFirst() + "/%252e%252e/outside/secret.jpg",
            "/resize/b64:" + Self.base64URL(images + "/../outside/secret.jpg"),
            "/resize/b64:" + Self.base64URL("file://" + images + "/%2e%2e/outside/secret.jpg"),
            "/resize/b64:" + Self.base64URL(images + "/outdir/secret.jpg"),
        ]
        for path in raw {
            let answer = try await service.get(try Self.signRaw(path))
            #expect(answer.status == 403 && ServeTests.problem(answer).kind == "source_not_allowed", "\(path): \(answer.status) \(answer.text)")
        }
        // Inside stays served: a file, a link to a file inside, a dot segment that stays inside.
        for source in [images + "/a.jpg", images + "/in.jpg", images + "/./a.jpg", "file://" + images + "/a.jpg"] {
            let answer = try await service.get(try ServeTests.sign("resize", source))
            #expect(answer.status == 200, "\(source): \(answer.status) \(answer.text)")
        }
        #expect(try await service.get(try ServeTests.sign("resize", images + "/missing.jpg")).status == 404)
    }

    /// `sign` refuses what the service would refuse, with the same reason.
    @Test func signRefusesSourcesTheServiceWouldRefuse() async throws {
        let setup = try ServeTests.Setup()
        let file = setup.pipelines.appendingPathComponent("resize.yaml").path
        let environment = ProcessInfo.processInfo.environment.merging(["PIPELINECTL_KEYS": ServeTests.key]) { $1 }
        let inside = try await Command.run(CLITests.binary, ["sign", file, setup.path("a.jpg")], environment: environment)
        #expect(inside.status == 0, "\(inside.stderr)")
        for source in ["/etc/passwd", setup.path("../../etc/passwd"), "file://" + setup.images.path + "/%2e%2e/x.jpg",
                       "https://elsewhere.example/a.jpg"] {
            let refused = try await Command.run(CLITests.binary, ["sign", file, source], environment: environment)
            #expect(refused.status == 2 && refused.stderr.contains("source_not_allowed"), "\(source): \(refused.status) \(refused.stderr)")
        }
        // A pipeline with only the top-level sources: what the service serves from them, sign signs.
        try setup.write("toplevel", """
            sources: ["\(setup.images.path)/"]
            processors:
              - resize: { width: 64, height: 64 }
            encoder: jpeg
            output: { dir: \(setup.dir.path)/out }
            """)
        let top = setup.pipelines.appendingPathComponent("toplevel.yaml").path
        let local = try await Command.run(CLITests.binary, ["sign", top, setup.path("a.jpg")], environment: environment)
        #expect(local.status == 0, "\(local.stderr)")
        let elsewhere = try await Command.run(CLITests.binary, ["sign", top, "https://elsewhere.example/a.jpg"], environment: environment)
        #expect(elsewhere.status == 2 && elsewhere.stderr.contains("source_not_allowed"), "\(elsewhere.stderr)")
    }

    /// A source under a prefix, escaping it with dot segments, and redirects from the allowed
    /// origin to everywhere else: each refused before any request reaches where it points.
    @Test func dotSegmentsAndRedirectsCannotLeaveTheAllowedPrefix() async throws {
        let jpeg = try Fixtures.jpeg(320, 240)
        // The second origin counts every request it gets: it must get none.
        let other = try ScriptedServer { _, connection in
            connection.write("HTTP/1.1 200 OK\r\nContent-Type: image/jpeg\r\nContent-Length: \(jpeg.count)\r\nConnection: close\r\n\r\n")
            connection.write(jpeg)
        }
        defer { other.stop() }
        let portBox = Shared<UInt16>(0)
        let origin = try ScriptedServer { request, connection in
            let port = portBox.value.withLock { $0 }
            let targets = [
                "/img/to-other-port.jpg": "http://127.0.0.1:\(other.port)/x.jpg",
                "/img/to-localhost.jpg": "http://localhost:\(port)/img/a.jpg",
                "/img/to-v6.jpg": "http://[::1]:\(port)/img/a.jpg",
                "/img/to-private.jpg": "/private/x.jpg",
                "/img/to-dots.jpg": "/img/../private/y.jpg",
                "/img/to-file.jpg": "file:///etc/passwd",
                "/img/to-gopher.jpg": "gopher://127.0.0.1:\(other.port)/",
                "/img/to-inside.jpg": "/img/a.jpg",
            ]
            if let location = targets[request.path] {
                connection.write("HTTP/1.1 302 Found\r\nLocation: \(location)\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
            } else {
                connection.write("HTTP/1.1 200 OK\r\nContent-Type: image/jpeg\r\nContent-Length: \(jpeg.count)\r\nConnection: close\r\n\r\n")
                connection.write(jpeg)
            }
        }
        defer { origin.stop() }
        portBox.value.withLock { $0 = origin.port }
        let setup = try ServeTests.Setup()
        try setup.write("origin", """
            loader:
              http: { allow_loopback: true, retry_attempts: 1 }
            processors:
              - resize: { width: 64, height: 64 }
            encoder: jpeg
            output: { dir: \(setup.dir.path)/out }
            serve:
              sources: ["http://127.0.0.1:\(origin.port)/img/"]
            """)
        let service = try await ServeTests.start(setup)
        defer { service.stop() }
        let refused: [(String, String)] = [
            (origin.url("/img/../private/x.jpg"), "source_not_allowed"),
            (origin.url("/img/%2e%2e/private/x.jpg"), "source_not_allowed"),
            ("http://127.0.0.1:\(other.port)/img/a.jpg", "source_not_allowed"),
            ("http://localhost:\(origin.port)/img/a.jpg", "source_not_allowed"),
            (origin.url("/img/to-other-port.jpg"), "source_not_allowed"),
            (origin.url("/img/to-localhost.jpg"), "source_not_allowed"),
            (origin.url("/img/to-v6.jpg"), "source_not_allowed"),
            (origin.url("/img/to-private.jpg"), "source_not_allowed"),
            (origin.url("/img/to-dots.jpg"), "source_not_allowed"),
            (origin.url("/img/to-file.jpg"), "blocked_protocol"),
            (origin.url("/img/to-gopher.jpg"), "blocked_protocol"),
        ]
        for (source, kind) in refused {
            let answer = try await service.get(try ServeTests.sign("origin", source))
            #expect(answer.status == 403 && ServeTests.problem(answer).kind == kind, "\(source): \(answer.status) \(answer.text)")
        }
        #expect(other.received.isEmpty, "the other origin got \(other.received.map(\.path))")
        #expect(origin.requests("/private/x.jpg") == 0 && origin.requests("/private/y.jpg") == 0)
        // Only the allowed origin's own paths were asked for, and no redirect target outside.
        #expect(origin.received.allSatisfy { $0.path.hasPrefix("/img/") }, "\(origin.received.map(\.path))")
        // A redirect that stays inside is followed.
        let inside = try await service.get(try ServeTests.sign("origin", origin.url("/img/to-inside.jpg")))
        #expect(inside.status == 200, "\(inside.status) \(inside.text)")
    }
}
