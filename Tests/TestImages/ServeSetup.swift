import Foundation
import PipelineKit

/// What the serve suites ask for (EndToEndTests' ServeTests and its neighbours, against the
/// binary; PipelineKitTests' ServeLogicTests, in the test's process): a directory with images
/// (`a.jpg` 800x600, `b.png` with alpha, `c.jpg` that is no image) and the pipelines `resize`
/// (params `w` and `mode`, local images and loopback sources), `strict` (no `serve:`) and
/// `responsive` (variants `small` and `large`); the keys they are signed with.
public struct ServeSetup {
    /// The key that signs; ``oldKey`` only verifies, when the service is given both.
    public static let key = "k1:" + String(repeating: "ab", count: 32)
    public static let oldKey = "k0:" + String(repeating: "cd", count: 32)

    public let dir: URL
    public let images: URL
    public var pipelines: URL { dir.appendingPathComponent("pipelines") }

    public init(originPort: UInt16? = nil) throws {
        dir = try Fixtures.temporaryDirectory("serve")
        images = dir.appendingPathComponent("img")
        try FileManager.default.createDirectory(at: images, withIntermediateDirectories: true)
        try FileManager.default.createDirectory(at: dir.appendingPathComponent("pipelines"), withIntermediateDirectories: true)
        try Fixtures.jpeg(800, 600).write(to: images.appendingPathComponent("a.jpg"))
        try Fixtures.alphaPNG(400, 400).write(to: images.appendingPathComponent("b.png"))
        try Data("not an image at all\n".utf8).write(to: images.appendingPathComponent("c.jpg"))
        // A transfer is never cut by its own time limit within a test: a closed origin
        // connection can only be a cancellation.
        try write("resize", """
            loader:
              http: { allow_loopback: true, retry_attempts: 1, timeout: 10m }
            processors:
              - resize: { width: 256, height: 256, mode: fit }
            encoder: auto
            output: { dir: \(dir.path)/out }
            params:
              w: { sets: processors.0.resize.width, min: 16, max: 1024 }
              mode: { sets: processors.0.resize.mode, values: [fit, fill] }
            serve:
              sources: ["\(images.path)/", "http://127.0.0.1:"]
            """)
        try write("strict", """
            processors:
              - resize: { width: 64, height: 64 }
            encoder: jpeg
            output: { dir: \(dir.path)/out }
            """)
        try write("responsive", """
            processors:
              - auto_orient: {}
            variants:
              small:
                processors: [ { resize: { width: 100, height: 100 } } ]
                encoder: jpeg
              large:
                processors: [ { resize: { width: 300, height: 300 } } ]
                encoder: png
            output: { dir: \(dir.path)/out }
            serve:
              sources: ["\(images.path)/"]
              cache_control: "public, max-age=60"
            """)
    }

    public func write(_ name: String, _ text: String) throws {
        try ("version: 1\nname: \(name)\n" + text).write(to: pipelines.appendingPathComponent(name + ".yaml"), atomically: true, encoding: .utf8)
    }

    public func path(_ name: String) -> String { images.appendingPathComponent(name).path }

    /// `/SIGNATURE/PIPELINE[/VARIANT]/SOURCE[?PARAMS]`, signed with `key`.
    public static func sign(_ pipeline: String, _ source: String, variant: String? = nil, params: [String: String] = [:],
                            expires: Int? = nil, key: String = key) throws -> String {
        let path = ServeRequest.path(pipeline: pipeline, variant: variant, source: source, parameters: params, expires: expires)
        return "/" + (try SigningKeys(parsing: key, origin: "test")).sign(path) + path
    }

    /// A problem+json answer's kind (its title) and detail.
    public static func problem(_ response: RawHTTP.Response) -> (kind: String, detail: String) {
        let body = (try? JSONSerialization.jsonObject(with: response.body)) as? [String: Any] ?? [:]
        return (body["title"] as? String ?? "", body["detail"] as? String ?? "")
    }

    /// An origin whose every answer (`jpeg`) waits for one `signal()` of the gate; `fetched`
    /// records each request's path as it arrives.
    public static func gatedOrigin(_ jpeg: Data) throws -> (ScriptedServer, DispatchSemaphore, EventLog) {
        let gate = DispatchSemaphore(value: 0)
        let fetched = EventLog()
        let origin = try ScriptedServer { request, connection in
            fetched.record(request.path)
            gate.wait()
            connection.write("HTTP/1.1 200 OK\r\nContent-Type: image/jpeg\r\nContent-Length: \(jpeg.count)\r\nConnection: close\r\n\r\n")
            connection.write(jpeg)
        }
        return (origin, gate, fetched)
    }

    /// Polls `/metrics` (an event the test waits on, not a time) until `count` requests are admitted.
    public static func waitForInFlight(_ service: some ServeClient, _ count: Int) async -> Bool {
        await waitForMetric(service, "pipelinectl_requests_in_flight", count)
    }

    /// Polls `/metrics` until the gauge `name` reads `count`.
    public static func waitForMetric(_ service: some ServeClient, _ name: String, _ count: Int) async -> Bool {
        for _ in 0..<3000 {
            if let metrics = try? await service.get("/metrics", headers: [:], method: "GET"),
               metrics.text.split(separator: "\n").contains(where: { $0.hasPrefix(name + " ") && $0.hasSuffix(" \(count).0") }) {
                return true
            }
            try? await Task.sleep(for: .milliseconds(20))
        }
        return false
    }
}

/// A service asked over HTTP: the binary (``ServiceProcess``) or the routes in the test's process.
public protocol ServeClient: Sendable {
    func get(_ target: String, headers: [String: String], method: String) async throws -> RawHTTP.Response
}

extension ServiceProcess: ServeClient {}
