import Foundation
import Testing
import TestImages

/// OpenTelemetry traces from the real binary to a real OTLP/HTTP receiver on loopback (the
/// OpenTelemetry project's protobuf definitions decode them: no Collector is packaged in Debian or
/// on PyPI). Configured only by the standard variables.
@Suite struct TracesTests {
    static func pipeline(_ dir: URL) throws -> (pipeline: URL, list: URL) {
        let pipeline = dir.appendingPathComponent("traced.yaml")
        try """
            processors:
              - resize: { width: 64 }
              - sharpen: { sigma: 0.5 }
            encoder: { jpeg: { quality: 80 } }
            output: { dir: \(dir.path)/out }
            """.write(to: pipeline, atomically: true, encoding: .utf8)
        var lines: [String] = []
        for index in 0..<3 {
            let file = dir.appendingPathComponent("p\(index).jpg")
            try Fixtures.jpeg(320 + 16 * index, 240).write(to: file)
            lines.append(file.path)
        }
        lines.append(dir.appendingPathComponent("missing.jpg").path)
        let list = dir.appendingPathComponent("urls.txt")
        try lines.joined(separator: "\n").write(to: list, atomically: true, encoding: .utf8)
        return (pipeline, list)
    }

    /// `run` of the test pipeline in a new directory with `variables` added to the environment.
    static func run(_ name: String, _ variables: [String: String]) async throws -> Command.Result {
        let dir = try Fixtures.temporaryDirectory(name)
        let (pipeline, list) = try Self.pipeline(dir)
        let environment = ProcessInfo.processInfo.environment.merging(variables) { $1 }
        return try await Command.run(CLITests.binary, ["run", pipeline.path, list.path, "--progress", "none"],
                                     environment: environment, directory: Fixtures.packageRoot)
    }

    /// `run` with an endpoint: one trace per item, each with its item span and, under it, load,
    /// decode, each processor, encode and store; the failed item's span carries its kind; the
    /// service name comes from OTEL_SERVICE_NAME.
    @Test func aRunExportsOneTracePerItem() async throws {
        let receiver = try await OTLPReceiver.start()
        defer { receiver.stop() }
        let run = try await Self.run("traces", ["OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint, "OTEL_SERVICE_NAME": "thumbnailer"])
        #expect(run.status == 1, "one item fails: \(run.stdout)\(run.stderr)")
        let spans = try receiver.spans()
        let items = spans.filter { $0.name == "item" }
        #expect(items.count == 4 && Set(items.map(\.traceID)).count == 4, "\(spans.map(\.name))")
        for item in items where item.attributes["pipelinectl.status"] == "ok" {
            let children = spans.filter { $0.parentSpanID == item.spanID && $0.traceID == item.traceID }.map(\.name)
            #expect(children.sorted() == ["decode", "encode", "load", "process resize", "process sharpen", "store"], "\(children)")
        }
        let failed = try #require(items.first { $0.attributes["pipelinectl.status"] == "failed" })
        #expect(failed.statusCode == 2 && failed.attributes["pipelinectl.error.kind"] == "not_found")
        #expect(items.allSatisfy { $0.resource["service.name"] == "thumbnailer" })
    }

    /// An exporter that answers 500, or nothing listening: the run's outcome and exit code are the
    /// same as without traces, and it ends (the last flush is bounded).
    @Test(arguments: ["refusing", "down"])
    func anExporterThatFailsChangesNothing(_ how: String) async throws {
        let receiver = try await OTLPReceiver.start(answer: 500)
        defer { receiver.stop() }
        let endpoint = how == "down" ? "http://127.0.0.1:\(try TestServer.unusedPort())" : receiver.endpoint
        let run = try await Self.run("traces-down", ["OTEL_EXPORTER_OTLP_ENDPOINT": endpoint])
        #expect(run.status == 1, "\(run.stdout)\(run.stderr)")
        #expect(run.stdout.contains("3 ok, 1 failed"), "\(run.stdout)")
        if how == "refusing" { #expect(receiver.refusals() >= 1) }
    }

    /// OTEL_SDK_DISABLED=true turns traces off whatever else is set: nothing is sent.
    @Test func disabledSendsNothing() async throws {
        let receiver = try await OTLPReceiver.start()
        defer { receiver.stop() }
        let run = try await Self.run("traces-off", ["OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint, "OTEL_SDK_DISABLED": "true"])
        #expect(run.status == 1)
        #expect(try receiver.spans().isEmpty)
    }

    /// `serve` with an endpoint: a request with a `traceparent` is a server span of that trace,
    /// the request's parent its parent, and the item it ran is its child with the stages under
    /// it; a malformed `traceparent` starts a new trace and the request is answered as usual.
    @Test func aServeRequestContinuesItsTraceparent() async throws {
        let receiver = try await OTLPReceiver.start()
        defer { receiver.stop() }
        let setup = try ServeTests.Setup()
        let service = try await ServiceProcess.start(CLITests.binary, [setup.pipelines.path], environment: [
            "PIPELINECTL_KEYS": ServeTests.key, "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint, "OTEL_BSP_SCHEDULE_DELAY": "100",
        ])
        defer { service.stop() }
        let trace = "0af7651916cd43dd8448eb211c80319c", parent = "b7ad6b7169203331"
        let answer = try await service.get(try ServeTests.sign("resize", setup.path("a.jpg")),
                                           headers: ["traceparent": "00-\(trace)-\(parent)-01"])
        #expect(answer.status == 200, "\(answer.status) \(answer.text)")
        let malformed = try await service.get(try ServeTests.sign("resize", setup.path("b.png")),
                                              headers: ["traceparent": "00-not-a-trace"])
        #expect(malformed.status == 200, "\(malformed.status) \(malformed.text)")
        // Spans go out in batches every 100 ms (OTEL_BSP_SCHEDULE_DELAY): an event, polled for.
        var spans: [OTLPReceiver.Span] = []
        for _ in 0..<600 where !(spans.contains { $0.name == "item" && $0.traceID == trace }) {
            spans = try receiver.spans()
            try await Task.sleep(for: .milliseconds(100))
        }
        let server = try #require(spans.first { $0.traceID == trace && $0.parentSpanID == parent }, "\(spans.map { "\($0.name) \($0.traceID)" })")
        let item = try #require(spans.first { $0.name == "item" && $0.traceID == trace })
        #expect(item.parentSpanID == server.spanID)
        let stages = Set(spans.filter { $0.parentSpanID == item.spanID }.map(\.name))
        #expect(stages.isSuperset(of: ["load", "decode", "encode"]), "\(stages)")
        // The malformed one: an item of a trace of its own, not of the first request's.
        for _ in 0..<600 where spans.filter({ $0.name == "item" }).count < 2 {
            spans = try receiver.spans()
            try await Task.sleep(for: .milliseconds(100))
        }
        let other = try #require(spans.first { $0.name == "item" && $0.traceID != trace })
        #expect(other.attributes["pipelinectl.status"] == "ok")
    }
}
