import FlyingFox
import Foundation
import Synchronization

/// A real HTTP server on 127.0.0.1 with a free port, for tests. Routes are set per path; every
/// request is counted by path.
public final class TestServer: Sendable {
    public typealias Handler = @Sendable (HTTPRequest) async throws -> HTTPResponse

    private let server: HTTPServer
    private let task: Task<Void, any Error>
    private let routes = Mutex<[String: Handler]>([:])
    private let counts = Mutex<[String: Int]>([:])
    private let unrouted = Mutex<[String]>([])
    private let stopped = Mutex(false)
    /// The port the server listens on.
    public let port: UInt16

    private init(server: HTTPServer, task: Task<Void, any Error>, port: UInt16) {
        self.server = server
        self.task = task
        self.port = port
    }

    /// Starts a server and waits until it listens.
    public static func start() async throws -> TestServer {
        let box = RouteBox()
        let server = HTTPServer(address: try .inet(ip4: "127.0.0.1", port: 0), timeout: 30, logger: .disabled)
        await server.appendRoute("*") { request in try await box.handle(request) }
        let task = Task { try await server.run() }
        // An event, not a clock: FlyingFox's default 5 s ran out in `make test` while suites doing
        // synchronous ImageMagick work held both of Swift's cooperative threads. The bound only
        // catches a server that never starts.
        try await server.waitUntilListening(timeout: 300)
        guard case .ip4(_, let port)? = await server.listeningAddress else {
            throw URLError(.cannotConnectToHost)
        }
        let test = TestServer(server: server, task: task, port: port)
        box.owner.withLock { $0 = test }
        return test
    }

    /// `http://127.0.0.1:PORT/path`.
    public func url(_ path: String) -> String { "http://127.0.0.1:\(port)\(path.hasPrefix("/") ? "" : "/")\(path)" }

    /// Serves `handler` at `path` (exact match, without query).
    public func route(_ path: String, _ handler: @escaping Handler) {
        routes.withLock { $0[path] = handler }
    }

    /// Serves `body` at `path` with `status` and `contentType`.
    public func serve(_ path: String, _ body: Data, status: HTTPStatusCode = .ok, contentType: String = "image/jpeg") {
        route(path) { _ in
            HTTPResponse(statusCode: status, headers: [.contentType: contentType], body: body)
        }
    }

    /// Requests received for `path` so far.
    public func requests(_ path: String) -> Int { counts.withLock { $0[path] ?? 0 } }

    /// Requests that matched no route (answered 404), for diagnosing tests.
    public var unmatched: [String] { unrouted.withLock { $0 } }

    /// Requests received for every path.
    public var totalRequests: Int { counts.withLock { $0.values.reduce(0, +) } }

    /// Stops serving: every request is answered 503 from now on. The listening socket stays open
    /// until the test process ends, so its descriptor number is never reused by another test's
    /// server while a stale accept could still be pending on it (that once routed one test's
    /// requests to another test's server).
    public func stop() async {
        stopped.withLock { $0 = true }
    }

    /// A loopback port with nothing listening on it (for connection-refused tests, and for a
    /// server a test starts later on a port named beforehand). Taken below Linux's ephemeral range
    /// (32768-60999) when one is free there: a port the kernel picks from that range can be given
    /// to another test's outgoing connection before the server binds it ("Address already in
    /// use", seen with Varnish and the cores busy).
    public static func unusedPort() throws -> UInt16 {
        for _ in 0..<50 {
            let candidate = UInt16.random(in: 20000..<32000)
            if let port = try? bound(to: candidate) { return port }
        }
        return try bound(to: 0)
    }

    /// Binds a socket to loopback `port` (0: any) and closes it; the port it had.
    private static func bound(to port: UInt16) throws -> UInt16 {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        defer { close(fd) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        address.sin_port = port.bigEndian
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let ok = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                bind(fd, $0, length) == 0 && getsockname(fd, $0, &length) == 0
            }
        }
        guard ok else { throw URLError(.cannotConnectToHost) }
        return UInt16(bigEndian: address.sin_port)  // bound, never listened: connections are refused
    }

    fileprivate func handle(_ request: HTTPRequest) async throws -> HTTPResponse {
        if stopped.withLock({ $0 }) { return HTTPResponse(statusCode: .serviceUnavailable) }
        counts.withLock { $0[request.path, default: 0] += 1 }
        guard let handler = routes.withLock({ $0[request.path] }) else {
            unrouted.withLock { $0.append("\(request.method.rawValue) \(request.path) (routes: \(routes.withLock { $0.count }))") }
            return HTTPResponse(statusCode: .notFound, headers: [.contentType: "text/plain"], body: Data("not found".utf8))
        }
        return try await handler(request)
    }

    private final class RouteBox: Sendable {
        let owner = Mutex<TestServer?>(nil)
        func handle(_ request: HTTPRequest) async throws -> HTTPResponse {
            guard let server = owner.withLock({ $0 }) else { return HTTPResponse(statusCode: .serviceUnavailable) }
            return try await server.handle(request)
        }
    }
}

/// A resource served with caching headers, answering conditional requests as an origin would:
/// 304 when `If-None-Match` matches its ETag (or, without one, when `If-Modified-Since` equals its
/// Last-Modified). Its body and headers may change between requests; it counts both answers.
public final class CacheableResource: Sendable {
    private struct State {
        var body: Data
        var headers: [String: String]
        var full = 0
        var notModified = 0
        var conditionalHeaders: [[String: String]] = []
    }
    private let state: Mutex<State>

    public init(body: Data, headers: [String: String]) {
        state = Mutex(State(body: body, headers: headers))
    }

    /// Replaces the body and headers (the source changed).
    public func update(body: Data? = nil, headers: [String: String]) {
        state.withLock {
            if let body { $0.body = body }
            $0.headers = headers
        }
    }

    /// Full (200) answers so far.
    public var fullResponses: Int { state.withLock { $0.full } }
    /// 304 answers so far.
    public var notModifiedResponses: Int { state.withLock { $0.notModified } }
    /// The conditional headers of each request, in order (empty for an unconditional one).
    public var conditionalHeaders: [[String: String]] { state.withLock { $0.conditionalHeaders } }

    func respond(_ request: HTTPRequest) -> HTTPResponse {
        state.withLock { state in
            var conditional: [String: String] = [:]
            if let tag = request.headers[HTTPHeader("If-None-Match")] { conditional["If-None-Match"] = tag }
            if let since = request.headers[HTTPHeader("If-Modified-Since")] { conditional["If-Modified-Since"] = since }
            state.conditionalHeaders.append(conditional)
            var headers: HTTPHeaders = [.contentType: "image/jpeg"]
            for (name, value) in state.headers { headers[HTTPHeader(name)] = value }
            let etag = state.headers["ETag"], modified = state.headers["Last-Modified"]
            let matches = if let tag = conditional["If-None-Match"] { tag == etag } else {
                conditional["If-Modified-Since"] != nil && conditional["If-Modified-Since"] == modified
            }
            if matches {
                state.notModified += 1
                headers[.contentType] = nil
                return HTTPResponse(statusCode: .notModified, headers: headers)
            }
            state.full += 1
            return HTTPResponse(statusCode: .ok, headers: headers, body: state.body)
        }
    }
}

extension TestServer {
    /// Serves `resource` at `path`.
    public func serve(_ path: String, _ resource: CacheableResource) {
        route(path) { request in resource.respond(request) }
    }
}
