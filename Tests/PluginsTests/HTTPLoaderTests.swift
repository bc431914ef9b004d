import FlyingFox
import Foundation
import PipelineKit
@testable import Plugins
import Testing
import TestImages

@Suite struct HTTPLoaderTests {
    func loader(_ overrides: [String: OptionValue] = [:], loopback: Bool = true) throws -> HTTPLoader {
        var all = overrides
        if loopback { all["allow_loopback"] = .bool(true) }
        return try HTTPLoader(options: HTTPLoader.plugin.options(all), environment: [:])
    }

    func failure(_ loader: HTTPLoader, _ url: String) async -> PipelineError? {
        do {
            _ = try await loader.load(Source(text: url, index: 1))
            return nil
        } catch {
            return error as? PipelineError
        }
    }

    @Test func fetchesBodyAndContentType() async throws {
        let server = try await TestServer.start()
        let body = try Fixtures.jpeg(64, 48)
        server.serve("/a.jpg", body)
        let loaded = try await loader().load(Source(text: server.url("/a.jpg"), index: 1))
        #expect(loaded.data == body)
        #expect(loaded.contentType == "image/jpeg")
        await server.stop()
    }

    @Test func notFoundIsHTTPStatus() async throws {
        let server = try await TestServer.start()
        #expect(await failure(try loader(), server.url("/missing.jpg")) == PipelineError(.httpStatus, "HTTP 404 Not Found"))
        await server.stop()
    }

    @Test func loopbackIsRefusedByDefault() async throws {
        let server = try await TestServer.start()
        server.serve("/a.jpg", Data([1, 2, 3]))
        let error = await failure(try loader(loopback: false), server.url("/a.jpg"))
        #expect(error?.kind == .blockedAddress)
        #expect(error?.message.hasPrefix("refused to connect to 127.0.0.1 (loopback address; set loader.http.allow_loopback: true to permit)") == true, "\(error?.message ?? "")")
        #expect(server.requests("/a.jpg") == 0)
        await server.stop()
    }

    @Test func redirectToFileIsBlockedProtocol() async throws {
        let server = try await TestServer.start()
        server.route("/r") { _ in HTTPResponse(statusCode: .found, headers: [.location: "file:///etc/passwd"] as HTTPHeaders) }
        #expect(await failure(try loader(), server.url("/r"))?.kind == .blockedProtocol)
        await server.stop()
    }

    @Test func redirectToCloudMetadataIsBlockedAddress() async throws {
        let server = try await TestServer.start()
        server.route("/r") { _ in
            HTTPResponse(statusCode: .found, headers: [.location: "http://169.254.169.254/latest/meta-data/"] as HTTPHeaders)
        }
        let error = await failure(try loader(), server.url("/r"))
        #expect(error?.kind == .blockedAddress)
        #expect(error?.message.contains("169.254.169.254 (link-local address") == true)
        await server.stop()
    }

    @Test func redirectChainWithinLimitAndLoop() async throws {
        let server = try await TestServer.start()
        let body = try Fixtures.jpeg(10, 10)
        server.serve("/final.jpg", body)
        server.route("/r1") { _ in HTTPResponse(statusCode: .found, headers: [.location: "/r2"] as HTTPHeaders) }
        server.route("/r2") { _ in HTTPResponse(statusCode: .movedPermanently, headers: [.location: "/final.jpg"] as HTTPHeaders) }
        server.route("/loop") { _ in HTTPResponse(statusCode: .found, headers: [.location: "/loop"] as HTTPHeaders) }
        let loaded = try await loader().load(Source(text: server.url("/r1"), index: 1))
        #expect(loaded.data == body)
        #expect(loaded.finalURL == server.url("/final.jpg"))
        #expect(await failure(try loader(["max_redirects": .int(3)]), server.url("/loop"))?.kind == .tooManyRedirects)
        #expect(server.requests("/loop") == 4)
        await server.stop()
    }

    @Test func bodyBeyondMaxBytesIsTooLarge() async throws {
        let server = try await TestServer.start()
        server.serve("/big.jpg", Data(repeating: 0xFF, count: 200_000))
        let error = await failure(try loader(["max_bytes": .int(100_000)]), server.url("/big.jpg"))
        #expect(error == PipelineError(.tooLarge, "body exceeds max_bytes (100KB)"))
        await server.stop()
    }

    @Test func slowHeadersTimeOut() async throws {
        let server = try await TestServer.start()
        server.route("/slow") { _ in
            try await Task.sleep(for: .seconds(30))
            return HTTPResponse(statusCode: .ok)
        }
        let start = ContinuousClock.now
        let error = await failure(try loader(["timeout": .number(0.5), "retry_attempts": .int(1)]), server.url("/slow"))
        #expect(error?.kind == .timeout)
        // Cut off, not waited out (30 s). The bound is loose: this process's other tests can keep
        // the awaiting task from resuming for a few seconds on two cores.
        #expect(ContinuousClock.now - start < .seconds(15))
        await server.stop()
    }

    @Test func connectionRefusedIsConnect() async throws {
        // A port nothing listens on.
        let url = "http://127.0.0.1:\(try TestServer.unusedPort())/x.jpg"
        #expect(await failure(try loader(["retry_attempts": .int(1)]), url)?.kind == .connect)
    }

    @Test func manyConcurrentTransfersOnOneThread() async throws {
        let server = try await TestServer.start()
        let body = try Fixtures.jpeg(32, 32)
        for i in 0..<40 { server.serve("/\(i).jpg", body) }
        let loader = try loader()
        try await withThrowingTaskGroup(of: Int.self) { group in
            for i in 0..<40 { group.addTask { try await loader.load(Source(text: server.url("/\(i).jpg"), index: i)).data.count } }
            for try await count in group { #expect(count == body.count) }
        }
        #expect(server.totalRequests == 40)
        await server.stop()
    }

    @Test func invalidHeaderOptionIsRejected() {
        #expect(throws: PipelineError.self) {
            try HTTPLoader(options: HTTPLoader.plugin.options(["headers": .map(["X-A": .string("a\r\nInjected: 1")])]), environment: [:])
        }
    }
}

@Suite struct FileLoaderTests {
    let loader = FileLoader(maxBytes: 1000, maxConcurrentLoads: 2)

    @Test func readsRelativeToTheListAndFileURLs() async throws {
        let dir = try Fixtures.temporaryDirectory()
        try Data("abc".utf8).write(to: dir.appendingPathComponent("x.bin"))
        let relative = try await loader.load(Source(text: "x.bin", index: 1, base: dir.path))
        #expect(relative.data == Data("abc".utf8))
        let url = try await loader.load(Source(text: "file://" + dir.appendingPathComponent("x.bin").path, index: 2))
        #expect(url.data == Data("abc".utf8))
    }

    @Test func missingFileIsNotFound() async throws {
        do {
            _ = try await loader.load(Source(text: "/nonexistent/file.jpg", index: 1))
            Issue.record("expected a failure")
        } catch let error as PipelineError {
            #expect(error == PipelineError(.notFound, "/nonexistent/file.jpg: No such file or directory"))
        }
    }

    @Test func largeFileIsTooLarge() async throws {
        let dir = try Fixtures.temporaryDirectory()
        let path = dir.appendingPathComponent("big").path
        try Data(count: 2000).write(to: URL(fileURLWithPath: path))
        await #expect(throws: PipelineError(.tooLarge, "\(path) is 2000 bytes; max_bytes is 1KB")) {
            _ = try await loader.load(Source(text: path, index: 1))
        }
    }
}
