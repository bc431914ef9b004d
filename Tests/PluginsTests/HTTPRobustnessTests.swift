import FlyingFox
import Foundation
import PipelineKit
@testable import Plugins
import Synchronization
import Testing
import TestImages

/// The loader against servers that misbehave, each case with its exact outcome.
@Suite struct HTTPRobustnessTests {
    func loader(_ overrides: [String: OptionValue] = [:], environment: [String: String] = [:]) throws -> HTTPLoader {
        var all: [String: OptionValue] = ["allow_loopback": .bool(true), "retry_backoff": .number(0.05)]
        for (k, v) in overrides { all[k] = v }
        return try HTTPLoader(options: HTTPLoader.plugin.options(all), environment: environment)
    }

    func outcome(_ loader: HTTPLoader, _ url: String) async -> Result<Data, PipelineError> {
        do { return .success(try await loader.load(Source(text: url, index: 1)).data) } catch {
            return .failure(error as! PipelineError)
        }
    }

    @Test func serverErrorIsRetriedThenSucceeds() async throws {
        let server = try await TestServer.start()
        let body = try Fixtures.jpeg(20, 20)
        let calls = Mutex(0)
        server.route("/flaky.jpg") { _ in
            let n = calls.withLock { $0 += 1; return $0 }
            return n < 3 ? HTTPResponse(statusCode: .internalServerError)
                : HTTPResponse(statusCode: .ok, headers: [.contentType: "image/jpeg"], body: body)
        }
        #expect(await outcome(try loader(), server.url("/flaky.jpg")) == .success(body))
        #expect(server.requests("/flaky.jpg") == 3)
        await server.stop()
    }

    @Test func notFoundIsNotRetried() async throws {
        let server = try await TestServer.start()
        #expect(await outcome(try loader(), server.url("/nope.jpg")) == .failure(PipelineError(.httpStatus, "HTTP 404 Not Found")))
        #expect(server.requests("/nope.jpg") == 1)
        await server.stop()
    }

    @Test func persistentServerErrorFailsAfterAllAttempts() async throws {
        let server = try await TestServer.start()
        server.route("/down.jpg") { _ in HTTPResponse(statusCode: .serviceUnavailable) }
        #expect(await outcome(try loader(["retry_attempts": .int(2)]), server.url("/down.jpg"))
            == .failure(PipelineError(.httpStatus, "HTTP 503 Service Unavailable (after 2 attempts)")))
        #expect(server.requests("/down.jpg") == 2)
        await server.stop()
    }

    @Test func tooManyRequestsHonoursRetryAfter() async throws {
        let server = try await TestServer.start()
        let body = try Fixtures.jpeg(10, 10)
        let calls = Mutex(0)
        server.route("/busy.jpg") { _ in
            let n = calls.withLock { $0 += 1; return $0 }
            return n == 1 ? HTTPResponse(statusCode: .tooManyRequests, headers: [HTTPHeader("Retry-After"): "1"] as HTTPHeaders)
                : HTTPResponse(statusCode: .ok, headers: [.contentType: "image/jpeg"], body: body)
        }
        let start = ContinuousClock.now
        #expect(await outcome(try loader(), server.url("/busy.jpg")) == .success(body))
        #expect(ContinuousClock.now - start >= .seconds(1))
        server.route("/later.jpg") { _ in HTTPResponse(statusCode: .tooManyRequests, headers: [HTTPHeader("Retry-After"): "3600"] as HTTPHeaders) }
        #expect(await outcome(try loader(), server.url("/later.jpg"))
            == .failure(PipelineError(.httpStatus, "HTTP 429 Too Many Requests (Retry-After 3600s exceeds retry_max_delay)")))
        #expect(server.requests("/later.jpg") == 1)
        await server.stop()
    }

    /// Aborted by the low-speed limit, not dripped to the end: counted in chunks the server got
    /// out before the client closed (10 bytes every 0.2 s; 150 to the end, 30 s), not by the clock
    /// of the test, whose task may wait for a thread long after curl gave up on a busy machine.
    @Test func drippingBodyIsAbortedForLowSpeed() async throws {
        let delivered = Mutex(0)
        let server = try ScriptedServer { _, connection in
            connection.write("HTTP/1.1 200 OK\r\nContent-Type: image/jpeg\r\nContent-Length: 100000\r\n\r\n")
            for _ in 0..<150 {
                guard connection.write(Data(repeating: 0xFF, count: 10)) else { return }
                delivered.withLock { $0 += 1 }
                usleep(200_000)
            }
        }
        let result = await outcome(try loader(["low_speed_bytes": .int(1000), "low_speed_time": .number(1), "retry_attempts": .int(1)]),
                                   server.url("/drip.jpg"))
        guard case .failure(let error) = result else { Issue.record("expected a failure"); return }
        #expect(error.kind == .timeout)
        #expect(error.message.hasPrefix("Operation too slow. Less than 1000 bytes/sec transferred the last 1 seconds"))
        // The client closed after about 1 s (5 chunks); the kernel may take a chunk or two more.
        // Half the drip is far past any abort and far before its end.
        #expect(delivered.withLock { $0 } < 75)
        server.stop()
    }

    @Test func bodyBeyondMaxBytesWithoutContentLengthIsAbortedEarly() async throws {
        let sent = Mutex(0)
        let events = EventLog()
        let server = try ScriptedServer { _, connection in
            defer { events.record("server stopped writing") }
            connection.write("HTTP/1.1 200 OK\r\nContent-Type: image/jpeg\r\nConnection: close\r\n\r\n")
            for _ in 0..<1000 {  // 64 MB if nobody stopped us
                guard connection.write(Data(repeating: 0xFF, count: 65536)) else { return }
                sent.withLock { $0 += 65536 }
            }
        }
        let result = await outcome(try loader(["max_bytes": .int(1_000_000)]), server.url("/endless.jpg"))
        #expect(result == .failure(PipelineError(.tooLarge, "body exceeds max_bytes (1MB)")))
        #expect(await events.wait(for: "server stopped writing"))
        #expect(sent.withLock { $0 } < 16_000_000)  // the transfer stopped long before the end
        server.stop()
    }

    @Test func contentLengthThatLiesIsTruncated() async throws {
        let server = try ScriptedServer { _, connection in
            connection.write("HTTP/1.1 200 OK\r\nContent-Type: image/jpeg\r\nContent-Length: 10000\r\nConnection: close\r\n\r\n")
            connection.write(Data(repeating: 0xFF, count: 5000))
        }
        let result = await outcome(try loader(["retry_attempts": .int(2)]), server.url("/short.jpg"))
        #expect(result == .failure(PipelineError(.truncated, "transfer closed with 5000 bytes remaining to read (after 2 attempts)")))
        #expect(server.requests("/short.jpg") == 2)
        server.stop()
    }

    @Test func resetMidBodyIsResumedWithRange() async throws {
        let body = try Fixtures.image("plasma:", width: 300, height: 200)
        let half = body.count / 2
        let server = try ScriptedServer { request, connection in
            if let range = request.headers["range"] {
                #expect(range == "bytes=\(half)-")
                #expect(request.headers["if-range"] == "\"v1\"")
                connection.write("HTTP/1.1 206 Partial Content\r\nContent-Type: image/jpeg\r\nETag: \"v1\"\r\n"
                    + "Content-Range: bytes \(half)-\(body.count - 1)/\(body.count)\r\nContent-Length: \(body.count - half)\r\n\r\n")
                connection.write(body[half...])
            } else {
                connection.write("HTTP/1.1 200 OK\r\nContent-Type: image/jpeg\r\nETag: \"v1\"\r\nContent-Length: \(body.count)\r\n\r\n")
                connection.write(body[..<half])
                connection.waitUntilDelivered()
                connection.reset()
            }
        }
        #expect(await outcome(try loader(), server.url("/big.jpg")) == .success(body))
        #expect(server.requests("/big.jpg") == 2)
        server.stop()
    }

    @Test func serverThatIgnoresRangeStartsOver() async throws {
        let body = try Fixtures.image("plasma:", width: 300, height: 200)
        let calls = Mutex(0)
        let server = try ScriptedServer { _, connection in
            let n = calls.withLock { $0 += 1; return $0 }
            connection.write("HTTP/1.1 200 OK\r\nContent-Type: image/jpeg\r\nETag: \"v1\"\r\nContent-Length: \(body.count)\r\n\r\n")
            if n == 1 {
                connection.write(body[..<(body.count / 3)])
                connection.waitUntilDelivered()
                connection.reset()
            } else {
                connection.write(body)
            }
        }
        #expect(await outcome(try loader(), server.url("/x.jpg")) == .success(body))
        #expect(server.received.last?.headers["range"] != nil)  // it asked for the rest
        server.stop()
    }

    @Test func htmlServedAsImageIsNotAnImage() async throws {
        let server = try await TestServer.start()
        server.serve("/error.jpg", Data("<!doctype html><title>Oops</title>".utf8), contentType: "image/jpeg")
        server.serve("/page", Data("hello".utf8), contentType: "text/html; charset=utf-8")
        #expect(await outcome(try loader(), server.url("/error.jpg"))
            == .failure(PipelineError(.notAnImage, "the body is HTML although served as image/jpeg")))
        #expect(await outcome(try loader(), server.url("/page"))
            == .failure(PipelineError(.notAnImage, "served as text/html; charset=utf-8, which is not in 'accept'")))
        await server.stop()
    }

    @Test func gzipBombIsStoppedOnTheDecodedSize() async throws {
        let dir = try Fixtures.temporaryDirectory("bomb")
        let path = dir.appendingPathComponent("bomb.gz").path
        _ = try await Command.run("/bin/sh", ["-c", "head -c 200000000 /dev/zero | gzip -9 -c > \(path)"])
        let compressed = try Data(contentsOf: URL(fileURLWithPath: path))
        #expect(compressed.count < 500_000)
        let server = try await TestServer.start()
        server.route("/bomb.jpg") { _ in
            HTTPResponse(statusCode: .ok, headers: [.contentType: "image/jpeg", .contentEncoding: "gzip"], body: compressed)
        }
        #expect(await outcome(try loader(["max_bytes": .int(5_000_000)]), server.url("/bomb.jpg"))
            == .failure(PipelineError(.tooLarge, "body exceeds max_bytes (5MB)")))
        await server.stop()
    }

    @Test func basicAuthFromEnvironment() async throws {
        let server = try await TestServer.start()
        let body = try Fixtures.jpeg(8, 8)
        server.route("/private.jpg") { request in
            request.headers[.authorization] == "Basic " + Data("alice:s3cret".utf8).base64EncodedString()
                ? HTTPResponse(statusCode: .ok, headers: [.contentType: "image/jpeg"], body: body)
                : HTTPResponse(statusCode: .unauthorized)
        }
        let env = ["IMG_USER": "alice", "IMG_PASS": "s3cret"]
        let authed = try loader(["auth": .string("basic"), "auth_user_env": .string("IMG_USER"),
                                 "auth_password_env": .string("IMG_PASS")], environment: env)
        #expect(await outcome(authed, server.url("/private.jpg")) == .success(body))
        #expect(await outcome(try loader(), server.url("/private.jpg")) == .failure(PipelineError(.httpStatus, "HTTP 401 Unauthorized")))
        #expect(throws: PipelineError("invalid_option", "auth needs the environment variable IMG_PASS (named by 'auth_password_env'), which is not set")) {
            try loader(["auth": .string("basic"), "auth_user_env": .string("IMG_USER"), "auth_password_env": .string("IMG_PASS")],
                       environment: ["IMG_USER": "alice"])
        }
        await server.stop()
    }

    @Test func bearerTokenFromEnvironment() async throws {
        let server = try await TestServer.start()
        let body = try Fixtures.jpeg(8, 8)
        server.route("/t.jpg") { request in
            request.headers[.authorization] == "Bearer tok-123"
                ? HTTPResponse(statusCode: .ok, headers: [.contentType: "image/jpeg"], body: body) : HTTPResponse(statusCode: .forbidden)
        }
        let authed = try loader(["auth": .string("bearer")], environment: ["PIPELINE_HTTP_TOKEN": "tok-123"])
        #expect(await outcome(authed, server.url("/t.jpg")) == .success(body))
        await server.stop()
    }

    @Test func hostPatternsApplyToRedirects() async throws {
        let server = try await TestServer.start()
        server.route("/away") { _ in HTTPResponse(statusCode: .found, headers: [.location: "http://evil.example.net/x.jpg"] as HTTPHeaders) }
        let result = await outcome(try loader(["deny_hosts": .list([.string("*.example.net")])]), server.url("/away"))
        #expect(result == .failure(PipelineError(.blockedAddress, "host 'evil.example.net' is not allowed by allow_hosts/deny_hosts")))
        let onlyCDN = try loader(["allow_hosts": .list([.string("cdn.example.com")])])
        #expect(await outcome(onlyCDN, server.url("/x.jpg"))
            == .failure(PipelineError(.blockedAddress, "host '127.0.0.1' is not allowed by allow_hosts/deny_hosts")))
        await server.stop()
    }

    /// Cancelled, not run to its end: counted in chunks the server got out before the client
    /// closed (100 bytes every 0.1 s; 300 to the end, 30 s), not by the test's clock, whose task
    /// waited 15.7 s for a thread in a full suite with both cores busy.
    @Test func cancellingTheTaskStopsTheTransfer() async throws {
        let delivered = Mutex(0)
        let events = EventLog()
        let server = try ScriptedServer { _, connection in
            defer { events.record("server stopped writing") }
            connection.write("HTTP/1.1 200 OK\r\nContent-Type: image/jpeg\r\nContent-Length: 1000000\r\n\r\n")
            for _ in 0..<300 {
                guard connection.write(Data(repeating: 0xFF, count: 100)) else { return }
                delivered.withLock { $0 += 1 }
                usleep(100_000)
            }
        }
        let loader = try loader()
        let task = Task { try await loader.load(Source(text: server.url("/slow.jpg"), index: 1)) }
        // Published while it runs: wait (bounded) for the headers, however busy the machine is.
        for _ in 0..<100 where loader.progress().first?.expected == nil || (loader.progress().first?.received ?? 0) == 0 {
            try await Task.sleep(for: .milliseconds(50))
        }
        #expect(loader.progress().first?.expected == 1_000_000)
        #expect((loader.progress().first?.received ?? 0) > 0)
        task.cancel()
        let result = await task.result
        #expect((try? result.get()) == nil)
        if case .failure(let error) = result { #expect((error as? PipelineError)?.kind == .cancelled) }
        #expect(loader.progress().isEmpty)  // removed before the caller resumes
        // Stopped, not run to its end: the server's writes failed once the client closed.
        #expect(await events.wait(for: "server stopped writing"))
        #expect(delivered.withLock { $0 } < 300)
        server.stop()
    }

    @Test func signedURLsShareACacheKey() throws {
        let loader = try loader(["strip_query": .list([.string("sig"), .string("expires")])])
        let a = loader.cacheKey(for: Source(text: "https://cdn.test/p/1.jpg?w=200&sig=abc&expires=1", index: 1))
        let b = loader.cacheKey(for: Source(text: "https://cdn.test/p/1.jpg?w=200&sig=xyz&expires=2", index: 2))
        #expect(a == b && a == "https://cdn.test/p/1.jpg?w=200")
        let templated = try self.loader(["cache_key": .string("{host}{path}")])
        #expect(templated.cacheKey(for: Source(text: "https://cdn.test/p/1.jpg?token=1", index: 1)) == "cdn.test/p/1.jpg")
        #expect(throws: PipelineError.self) { try self.loader(["cache_key": .string("{hots}{path}")]) }
    }

    /// The cheap path of `cacheKey` (taken for text URLComponents keeps as it is) gives what
    /// URLComponents gives, on generated URLs of every RFC 3986 character and others.
    @Test func theFastCacheKeyAgreesWithURLComponents() throws {
        let loader = try loader([:])
        var generator = SystemRandomNumberGenerator()
        let pieces = ["http", "https", "HTTP", "://", "/", "?", "#", "[", "]", "[::1]", "@", ":", "%", "%2F", "%zz", "%4", "a", "Z", "0",
                      "-", ".", "_", "~", "!", "$", "&", "'", "(", ")", "*", "+", ",", ";", "=", "..", "//", "host.test", ":8080",
                      " ", "é", "\"", "<", "^", "`", "{", "|", "\\", "\t"]
        var fast = 0
        for _ in 0..<50_000 {
            let count = Int.random(in: 1...12, using: &generator)
            let start = ["", "http://", "https://", "HTTP://", "s3://"].randomElement(using: &generator)!
            let text = start + (0..<count).map { _ in pieces.randomElement(using: &generator)! }.joined()
            let slow = URLComponents(string: text)?.string ?? text
            #expect(loader.cacheKey(for: Source(text: text, index: 1)) == slow, "\(text)")
            if HTTPLoader.keepsItsText(text) { fast += 1 }
        }
        #expect(fast > 2_000)  // the cheap path was exercised (about 8% of the texts)
        for text in ["https://cdn.test/p/1.jpg?w=200", "http://[::1]:8080/a%20b.png#x", "HTTP://Host.TEST/A.JPG", "http://a b/"] {
            #expect(loader.cacheKey(for: Source(text: text, index: 1)) == (URLComponents(string: text)?.string ?? text))
        }
    }

    @Test func rateLimitSpacesRequests() async throws {
        let server = try await TestServer.start()
        let body = try Fixtures.jpeg(8, 8)
        for i in 0..<12 { server.serve("/\(i).jpg", body) }
        let loader = try loader(["rate_limit": .number(10), "rate_burst": .int(2), "max_concurrent": .int(12)])
        let start = ContinuousClock.now
        try await withThrowingTaskGroup(of: Void.self) { group in
            for i in 0..<12 { group.addTask { _ = try await loader.load(Source(text: server.url("/\(i).jpg"), index: i)) } }
            try await group.waitForAll()
        }
        // 2 at once, then 10 more at 10/s: about a second.
        #expect(ContinuousClock.now - start >= .milliseconds(900))
        await server.stop()
    }
}

@Suite struct DataURLLoaderTests {
    let loader = DataURLLoader(maxBytes: 1000)

    @Test func base64AndPercentEncoded() async throws {
        let png = try Fixtures.image("xc:red", width: 2, height: 2, format: "PNG")
        let loaded = try await loader.load(Source(text: "data:image/png;base64," + png.base64EncodedString(), index: 1))
        #expect(loaded.data == png && loaded.contentType == "image/png")
        let text = try await loader.load(Source(text: "data:,hello%20world", index: 1))
        #expect(text.data == Data("hello world".utf8))
    }

    @Test func malformedAndTooLarge() async throws {
        await #expect(throws: PipelineError(.invalidSource, "a data: URL needs a ',' before its payload")) {
            _ = try await loader.load(Source(text: "data:image/png;base64", index: 1))
        }
        let big = "data:;base64," + Data(count: 3000).base64EncodedString()
        await #expect(throws: PipelineError(.tooLarge, "data: URL payload exceeds max_bytes (1KB)")) {
            _ = try await loader.load(Source(text: big, index: 1))
        }
    }
}

@Suite struct LoadOrderTests {
    @Test func lifoServesTheNewestWaiterFirst() async throws {
        let semaphore = AsyncSemaphore(permits: 1, order: .lifo)
        try await semaphore.acquire()
        let order = OrderRecorder()
        try await withThrowingTaskGroup(of: Void.self) { group in
            for i in 0..<3 {
                group.addTask {
                    try await semaphore.acquire()
                    await order.append(i)
                    semaphore.release()
                }
                while semaphore.waiting < i + 1 { await Task.yield() }  // queued in a known order
            }
            semaphore.release()
            try await group.waitForAll()
        }
        #expect(await order.values == [2, 1, 0])
    }

    actor OrderRecorder {
        var values: [Int] = []
        func append(_ value: Int) { values.append(value) }
    }
}
