import Foundation

/// A real OTLP/HTTP trace receiver on loopback (Tests/TestSupport/otlp-receiver.py): the
/// OpenTelemetry project's protobuf definitions (`opentelemetry-proto` on PyPI, which `make test`
/// installs) decode what the exporter sends. No OpenTelemetry Collector is packaged in Debian or on
/// PyPI, so this is the peer. `answer`: the status it gives every export (500: an exporter behind
/// a failing proxy). `delay`: seconds it waits before answering each export (a slow exporter).
public final class OTLPReceiver: @unchecked Sendable {
    public let port: UInt16
    private let process: Process
    private let file: URL

    public var endpoint: String { "http://127.0.0.1:\(port)" }

    private init(port: UInt16, process: Process, file: URL) {
        self.port = port
        self.process = process
        self.file = file
    }

    public static func start(answer: Int = 200, delay: Double = 0) async throws -> OTLPReceiver {
        let file = try Fixtures.temporaryDirectory("otlp").appendingPathComponent("spans.jsonl")
        let (process, port, _) = try await startPythonServer(
            "otlp-receiver.py", ["--out", file.path, "--answer", "\(answer)", "--delay", "\(delay)"], port: { $0.hasPrefix("listening ") ? UInt16($0.dropFirst(10)) : nil },
            missing: "the OTLP receiver did not start (is opentelemetry-proto installed? make test installs it)")
        return OTLPReceiver(port: port, process: process, file: file)
    }

    /// One span as received.
    public struct Span: Sendable {
        public let traceID: String
        public let spanID: String
        public let parentSpanID: String
        public let name: String
        public let statusCode: Int
        public let attributes: [String: String]
        public let links: [(traceID: String, spanID: String)]
        public let resource: [String: String]
    }

    /// Every span received so far.
    public func spans() throws -> [Span] {
        guard let text = try? String(contentsOf: file, encoding: .utf8) else { return [] }
        return text.split(separator: "\n").compactMap { line in
            guard let object = try? JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any],
                  let name = object["name"] as? String else { return nil }
            func strings(_ value: Any?) -> [String: String] {
                ((value as? [String: Any]) ?? [:]).mapValues { "\($0)" }
            }
            let links = ((object["links"] as? [[String: Any]]) ?? []).map { ($0["trace_id"] as? String ?? "", $0["span_id"] as? String ?? "") }
            return Span(traceID: object["trace_id"] as? String ?? "", spanID: object["span_id"] as? String ?? "",
                        parentSpanID: object["parent_span_id"] as? String ?? "", name: name,
                        statusCode: (object["status"] as? [String: Any])?["code"] as? Int ?? 0,
                        attributes: strings(object["attributes"]), links: links, resource: strings(object["resource"]))
        }
    }

    /// Exports refused so far (with `answer` other than 200).
    public func refusals() -> Int {
        guard let text = try? String(contentsOf: file, encoding: .utf8) else { return 0 }
        return text.split(separator: "\n").filter { $0.contains("\"refused\"") }.count
    }

    public func stop() {
        if process.isRunning { kill(process.processIdentifier, SIGKILL) }
        process.waitUntilExit()
    }

    deinit { if process.isRunning { kill(process.processIdentifier, SIGKILL) } }
}
