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
        try await server.waitUntilListening()
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

    /// A loopback port with nothing listening on it (for connection-refused tests).
    public static func unusedPort() throws -> UInt16 {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        defer { close(fd) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
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
