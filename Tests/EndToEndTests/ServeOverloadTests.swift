import Foundation
import PipelineKit
import Testing
import TestImages

/// What the service does when more is asked of it than it has places for: requests wait their
/// turn for a bounded time, and clients take turns.
@Suite struct ServeOverloadTests {
    /// One job place, held at the origin: a client with four requests waiting and a second one
    /// with two. As places come free they alternate between the clients (named by
    /// `X-Forwarded-For` from a trusted proxy), not in arrival order.
    @Test func clientsTakeTurnsForJobPlaces() async throws {
        let jpeg = try Fixtures.jpeg(64, 64)
        let (origin, gate, fetched) = try ServeTests.gatedOrigin(jpeg)
        defer { origin.stop() }
        let setup = try ServeTests.Setup()
        let service = try await ServeTests.start(setup, ["--jobs", "1", "--queue-wait", "10m", "--timeout", "10m", "--trusted-proxy", "127.0.0.1"])
        defer { service.stop() }
        func ask(_ client: String, _ name: String) -> Task<Int, any Error> {
            Task {
                try await service.get(try ServeTests.sign("resize", origin.url("/\(name).jpg")),
                                      headers: ["X-Forwarded-For": "\(client), 127.0.0.1"]).status
            }
        }
        var requests = [ask("203.0.113.1", "a1")]
        #expect(await fetched.wait(for: "/a1.jpg"))
        for (index, name) in ["a2", "a3", "a4"].enumerated() {
            requests.append(ask("203.0.113.1", name))
            #expect(await ServeTests.waitForInFlight(service, 2 + index))
        }
        for (index, name) in ["b1", "b2"].enumerated() {
            requests.append(ask("198.51.100.7", name))
            #expect(await ServeTests.waitForInFlight(service, 5 + index))
        }
        for _ in 0..<6 { gate.signal() }
        for request in requests { #expect(try await request.value == 200) }
        #expect(fetched.events == ["/a1.jpg", "/b1.jpg", "/a2.jpg", "/b2.jpg", "/a3.jpg", "/a4.jpg"], "\(fetched.events)")
    }

    /// A request waits for a place at most --queue-wait, then gets 429 with Retry-After; the
    /// request holding the place is answered as usual.
    @Test func aWaitForAPlaceIsBoundedAndEndsIn429() async throws {
        let jpeg = try Fixtures.jpeg(64, 64)
        let (origin, gate, fetched) = try ServeTests.gatedOrigin(jpeg)
        defer { origin.stop() }
        let setup = try ServeTests.Setup()
        let service = try await ServeTests.start(setup, ["--jobs", "1", "--queue-wait", "1s"])
        defer { service.stop() }
        let holder = Task { try await service.get(try ServeTests.sign("resize", origin.url("/held.jpg"))) }
        #expect(await fetched.wait(for: "/held.jpg"))
        let waited = try await service.get(try ServeTests.sign("resize", origin.url("/other.jpg")))
        #expect(waited.status == 429 && waited.headers["retry-after"] == "1" && ServeTests.problem(waited).detail.contains("--queue-wait"),
                "\(waited.status) \(waited.text)")
        #expect(origin.requests("/other.jpg") == 0)
        gate.signal()
        #expect(try await holder.value.status == 200)
    }
}
