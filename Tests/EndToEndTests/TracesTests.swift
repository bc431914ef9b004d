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
    /// `report`: where the run writes its JSON-lines report.
    static func run(_ name: String, _ variables: [String: String], report: URL? = nil, extra: [String] = []) async throws -> Command.Result {
        let dir = try Fixtures.temporaryDirectory(name)
        let (pipeline, list) = try Self.pipeline(dir)
        let environment = ProcessInfo.processInfo.environment.merging(variables) { $1 }
        let reporting = report.map { ["--report", $0.path, "--report-format", "jsonl"] } ?? []
        return try await Command.run(CLITests.binary, ["run", pipeline.path, list.path, "--progress", "none"] + reporting + extra,
                                     environment: environment, directory: Fixtures.packageRoot)
    }

    /// The report's item lines as JSON objects.
    static func items(_ report: URL) throws -> [[String: Any]] {
        try String(contentsOf: report, encoding: .utf8).split(separator: "\n").compactMap {
            try? JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any]
        }.filter { $0["type"] as? String == "item" }
    }

    /// `run` with an endpoint: one trace per item, each with its item span and, under it, load,
    /// decode, each processor, encode and store; the failed item's span carries its kind; the
    /// service name comes from OTEL_SERVICE_NAME.
    @Test func aRunExportsOneTracePerItem() async throws {
        let receiver = try await OTLPReceiver.start()
        defer { receiver.stop() }
        let report = try Fixtures.temporaryDirectory("traces-report").appendingPathComponent("report.jsonl")
        let run = try await Self.run("traces", ["OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint, "OTEL_SERVICE_NAME": "thumbnailer"],
                                     report: report, extra: ["--log-format", "json"])
        #expect(run.status == 1, "one item fails: \(run.stdout)\(run.stderr)")
        let spans = try receiver.spans()
        let items = spans.filter { $0.name == "item" }
        #expect(items.count == 4 && Set(items.map(\.traceID)).count == 4, "\(spans.map(\.name))")
        // The run is a span of its own trace, which each item links to.
        let runSpan = try #require(spans.first { $0.name == "run traced" }, "\(spans.map(\.name))")
        #expect(items.allSatisfy { $0.traceID != runSpan.traceID && $0.links.contains { $0.spanID == runSpan.spanID } })
        // Each report line names its item's trace: the failed one too.
        let lines = try Self.items(report)
        #expect(Set(lines.compactMap { $0["trace_id"] as? String }) == Set(items.map(\.traceID)), "\(lines)")
        for item in items where item.attributes["pipelinectl.status"] == "ok" {
            let children = spans.filter { $0.parentSpanID == item.spanID && $0.traceID == item.traceID }.map(\.name)
            #expect(children.sorted() == ["decode", "encode", "load", "process resize", "process sharpen", "store"], "\(children)")
        }
        let failed = try #require(items.first { $0.attributes["pipelinectl.status"] == "failed" })
        #expect(failed.statusCode == 2 && failed.attributes["pipelinectl.error.kind"] == "not_found")
        // The JSON log line of the failure names its trace and span.
        let logged = run.stderr.split(separator: "\n").compactMap { try? JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any] }
        #expect(logged.contains { $0["trace_id"] as? String == failed.traceID && ($0["span_id"] as? String)?.count == 16 }, "\(run.stderr)")
        #expect(items.allSatisfy { $0.resource["service.name"] == "thumbnailer" })
    }

    /// Sampling nothing (`always_off`): the items that went well send nothing, and the failed one
    /// is exported whole, under the trace id its report line names.
    @Test func aFailedItemIsExportedWhateverTheSampling() async throws {
        let receiver = try await OTLPReceiver.start()
        defer { receiver.stop() }
        let report = try Fixtures.temporaryDirectory("traces-sampled-report").appendingPathComponent("report.jsonl")
        let run = try await Self.run("traces-sampled", ["OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint, "OTEL_TRACES_SAMPLER": "always_off"],
                                     report: report)
        #expect(run.status == 1, "\(run.stdout)\(run.stderr)")
        let spans = try receiver.spans()
        let items = spans.filter { $0.name == "item" }
        #expect(items.count == 1 && items.first?.attributes["pipelinectl.error.kind"] == "not_found", "\(spans.map(\.name))")
        let failed = try #require(try Self.items(report).first { $0["status"] as? String == "failed" })
        #expect(items.first?.traceID == failed["trace_id"] as? String && ["1", "true"].contains(items.first?.attributes["pipelinectl.kept_on_failure"] ?? ""),
                "\(items.first?.attributes ?? [:])")
        #expect(spans.allSatisfy { $0.traceID == items.first?.traceID }, "only the failed item's trace")
        #expect(try Self.items(report).allSatisfy { ($0["trace_id"] as? String)?.count == 32 }, "every line names its trace, sampled or not")
    }

    /// An exporter that answers 500, nothing listening, or one that takes the export and never
    /// answers: the run's outcome and exit code are the same as without traces, and it ends (the
    /// last flush is bounded: 5 s for the one that never answers).
    @Test(arguments: ["refusing", "down", "stuck"])
    func anExporterThatFailsChangesNothing(_ how: String) async throws {
        let receiver = try await OTLPReceiver.start(answer: how == "refusing" ? 500 : 200, delay: how == "stuck" ? 600 : 0)
        defer { receiver.stop() }
        let endpoint = how == "down" ? "http://127.0.0.1:\(try TestServer.unusedPort())" : receiver.endpoint
        let run = try await Self.run("traces-down", ["OTEL_EXPORTER_OTLP_ENDPOINT": endpoint])
        #expect(run.status == 1, "\(run.stdout)\(run.stderr)")
        #expect(run.stdout.contains("3 ok, 1 failed"), "\(run.stdout)")
        if how == "refusing" { #expect(receiver.refusals() >= 1) }
        if how == "stuck" { #expect(run.stderr.contains("did not take the last ones within 5"), "\(run.stderr)") }
        // The spans lost are said once, however many batches failed.
        let said = run.stderr.components(separatedBy: "spans are being dropped").count - 1
        #expect(said == 1, "\(run.stderr)")
        // Nothing listening is found out at the last flush, which then does not wait out its
        // bound (5 s at the end of every run, before).
        if how == "down" { #expect(run.stderr.contains("cannot be reached"), "\(run.stderr)") }
    }

    /// An exporter that answers each export a second late still gets every span of the run: the
    /// last flush waits for it.
    @Test func aSlowExporterGetsEverySpan() async throws {
        let receiver = try await OTLPReceiver.start(delay: 1)
        defer { receiver.stop() }
        let run = try await Self.run("traces-slow", ["OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint])
        #expect(run.status == 1, "\(run.stdout)\(run.stderr)")
        #expect(!run.stderr.contains("spans are being dropped"), "\(run.stderr)")
        let items = try receiver.spans().filter { $0.name == "item" }
        #expect(items.count == 4, "\(items.map(\.traceID))")
    }

    /// `serve` with nothing listening at the endpoint: requests are answered, and SIGTERM ends it
    /// with exit 0 without waiting on the exporter's last flush (10 s, before), saying why once.
    @Test func aServiceWithItsExporterDownStopsAtOnce() async throws {
        let setup = try ServeTests.Setup()
        let endpoint = "http://127.0.0.1:\(try TestServer.unusedPort())"
        let service = try await ServiceProcess.start(CLITests.binary, [setup.pipelines.path], environment: [
            "PIPELINECTL_KEYS": ServeTests.key, "OTEL_EXPORTER_OTLP_ENDPOINT": endpoint,
        ])
        defer { service.stop() }
        let answer = try await service.get(try ServeTests.sign("resize", setup.path("a.jpg")))
        #expect(answer.status == 200, "\(answer.status) \(answer.text)")
        service.signal(SIGTERM)
        #expect(await service.wait() == 0, "\(service.stderr)")
        #expect(service.stderr.contains("cannot be reached"), "\(service.stderr)")
        #expect(service.stderr.components(separatedBy: "spans are being dropped").count == 2, "said once: \(service.stderr)")
    }

    /// OTEL_SDK_DISABLED=true turns traces off whatever else is set: nothing is sent.
    @Test func disabledSendsNothing() async throws {
        let receiver = try await OTLPReceiver.start()
        defer { receiver.stop() }
        let report = try Fixtures.temporaryDirectory("traces-off-report").appendingPathComponent("report.jsonl")
        let run = try await Self.run("traces-off", ["OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint, "OTEL_SDK_DISABLED": "true"],
                                     report: report)
        #expect(run.status == 1)
        #expect(try receiver.spans().isEmpty)
        #expect(try Self.items(report).allSatisfy { $0["trace_id"] == nil }, "no trace, no trace id")
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
        // The answer names the request's trace (W3C traceresponse); a failed one in its body too.
        #expect(answer.headers["traceresponse"]?.hasPrefix("00-\(trace)-") == true, "\(answer.headers)")
        // A's path under b's signature: refused as bad_signature.
        let signedA = try ServeTests.sign("resize", setup.path("a.jpg")), signedB = try ServeTests.sign("resize", setup.path("b.png"))
        let forged = "/" + signedB.split(separator: "/")[0] + "/" + signedA.split(separator: "/").dropFirst().joined(separator: "/")
        let refused = try await service.get(forged, headers: ["traceparent": "00-\(trace)-\(parent)-01"])
        let problem = try JSONSerialization.jsonObject(with: refused.body) as? [String: Any]
        #expect(refused.status >= 400 && problem?["trace_id"] as? String == trace, "\(refused.status) \(refused.text)")
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

    /// `work` on a PostgreSQL queue filled by `queue enqueue --traceparent`: each row is a receive
    /// span continuing that trace, its item that span's child with every stage under it; the
    /// origin gets the `traceparent` of the load's GET span (it is listed in `traceparent_to`)
    /// and another host does not; each report line names the trace.
    @Test func aWorkerContinuesTheQueuedTraceToTheOrigin() async throws {
        let database = try await PostgresServer.start()
        do { try await workerContinuesTheQueuedTrace(database) } catch {
            await database.stop()
            throw error
        }
        await database.stop()
    }

    func workerContinuesTheQueuedTrace(_ database: PostgresServer) async throws {
        let receiver = try await OTLPReceiver.start()
        defer { receiver.stop() }
        let jpeg = try Fixtures.jpeg(320, 240)
        let origin = try ScriptedServer { request, connection in
            guard request.path.hasPrefix("/img/") else {
                connection.write("HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
                return
            }
            connection.write("HTTP/1.1 200 OK\r\nContent-Type: image/jpeg\r\nContent-Length: \(jpeg.count)\r\nConnection: close\r\n\r\n")
            connection.write(jpeg)
        }
        defer { origin.stop() }
        let dir = try Fixtures.temporaryDirectory("traces-work")
        let pipeline = dir.appendingPathComponent("uploads.yaml")
        try """
            loader: { http: { allow_loopback: true, traceparent_to: ["\(origin.url("/img/"))"] } }
            processors:
              - resize: { width: 64 }
            encoder: jpeg
            output: { dir: \(dir.path)/out }
            """.write(to: pipeline, atomically: true, encoding: .utf8)
        let url = database.url()
        #expect(try await Command.run(CLITests.binary, ["queue", "init", url], directory: dir).status == 0)
        let trace = "4bf92f3577b34da6a3ce929d0e0e4736", parent = "00f067aa0ba902b7"
        let bad = try await Command.run(CLITests.binary, ["queue", "enqueue", url, "--traceparent", "00-nope"], stdin: Data(), directory: dir)
        #expect(bad.status == 2 && bad.stderr.contains("--traceparent expects a W3C traceparent"), "\(bad.stderr)")
        let sources = [origin.url("/img/a.jpg"), origin.url("/other/b.jpg")].joined(separator: "\n")
        let enqueued = try await Command.run(CLITests.binary, ["queue", "enqueue", url, "-", "--traceparent", "00-\(trace)-\(parent)-01"],
                                             stdin: Data(sources.utf8), directory: dir)
        #expect(enqueued.status == 0, "\(enqueued.stderr)")
        let report = dir.appendingPathComponent("work.jsonl")
        let environment = ProcessInfo.processInfo.environment.merging(["OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint]) { $1 }
        let work = try await Command.run(CLITests.binary, ["work", pipeline.path, "--queue", url, "--until-empty", "--progress", "none",
                                                           "--report", report.path, "--report-format", "jsonl"],
                                         environment: environment, directory: dir)
        #expect(work.status == 1, "the second source is not found: \(work.stdout)\(work.stderr)")
        let spans = try receiver.spans().filter { $0.traceID == trace }
        let receives = spans.filter { $0.name == "process pipelinectl_queue" }
        #expect(receives.count == 2 && receives.allSatisfy { $0.parentSpanID == parent }, "\(spans.map { "\($0.name) \($0.parentSpanID)" })")
        #expect(receives.allSatisfy { $0.attributes["messaging.system"] == "postgresql" && $0.attributes["messaging.message.id"] != nil })
        let items = spans.filter { $0.name == "item" }
        #expect(items.count == 2 && items.allSatisfy { item in receives.contains { $0.spanID == item.parentSpanID } })
        let done = try #require(items.first { $0.attributes["pipelinectl.status"] == "ok" })
        let stages = spans.filter { $0.parentSpanID == done.spanID }
        #expect(Set(stages.map(\.name)) == ["load", "decode", "process resize", "encode", "store"], "\(stages.map(\.name))")
        // The load's request is a client span under it, with HTTP's attributes; the origin saw its
        // context, and the host not listed saw none.
        let load = try #require(stages.first { $0.name == "load" })
        let get = try #require(spans.first { $0.name == "GET" && $0.parentSpanID == load.spanID })
        #expect(get.attributes["http.response.status_code"] == "200" && get.attributes["url.path"] == "/img/a.jpg", "\(get.attributes)")
        let seen = origin.received.filter { $0.path == "/img/a.jpg" }.compactMap { $0.headers["traceparent"] }
        #expect(seen == ["00-\(trace)-\(get.spanID)-01"], "\(seen)")
        #expect(origin.received.filter { $0.path.hasPrefix("/other/") }.allSatisfy { $0.headers["traceparent"] == nil })
        // Every report line names the trace.
        let lines = try String(contentsOf: report, encoding: .utf8).split(separator: "\n").filter { $0.contains("\"type\":\"item\"") }
        #expect(lines.count == 2 && lines.allSatisfy { $0.contains("\"trace_id\":\"\(trace)\"") }, "\(lines)")
    }

    /// One upload through moto's S3 and SQS to `work`: the notification carries no context, so
    /// the trace starts at its receive span, which names the object (key, ETag, sequencer); the
    /// item and every stage are under it. A message sent with a `traceparent` attribute
    /// continues that trace instead.
    @Test func anUploadThroughSQSIsOneTraceFromItsReceive() async throws {
        let receiver = try await OTLPReceiver.start()
        defer { receiver.stop() }
        let moto = try await MotoServer.start(buckets: ["uploads"])
        defer { moto.stop() }
        let queue = try await moto.boto("""
            q = sqs.create_queue(QueueName='uploads-events')['QueueUrl']
            arn = sqs.get_queue_attributes(QueueUrl=q, AttributeNames=['QueueArn'])['Attributes']['QueueArn']
            s3.put_bucket_notification_configuration(Bucket='uploads', NotificationConfiguration={
                'QueueConfigurations': [{'QueueArn': arn, 'Events': ['s3:ObjectCreated:*'], 'Filter': {'Key': {'FilterRules': [{'Name': 'prefix', 'Value': 'in/'}]}}}]})
            print(q)
            """).trimmingCharacters(in: .whitespacesAndNewlines)
        let dir = try Fixtures.temporaryDirectory("traces-sqs")
        let image = dir.appendingPathComponent("photo.jpg")
        try Fixtures.jpeg(640, 480).write(to: image)
        let trace = "5c1e6b1a2f3d4e5f60718293a4b5c6d7", parent = "1a2b3c4d5e6f7081"
        _ = try await moto.boto("""
            s3.put_object(Bucket='uploads', Key='in/photo.jpg', Body=open(args[0], 'rb').read())
            s3.put_object(Bucket='uploads', Key='app/second.jpg', Body=open(args[0], 'rb').read())
            sqs.send_message(QueueUrl=args[1], MessageBody='s3://uploads/app/second.jpg',
                             MessageAttributes={'traceparent': {'DataType': 'String', 'StringValue': args[2]}})
            """, [image.path, queue, "00-\(trace)-\(parent)-01"])
        let pipeline = dir.appendingPathComponent("uploads.yaml")
        try """
            loader: { s3: { traceparent: true } }
            processors:
              - resize: { width: 120 }
            encoder: jpeg
            output: { dir: "s3://uploads/out", name: "{stem}.{ext}" }
            """.write(to: pipeline, atomically: true, encoding: .utf8)
        // moto's recorder keeps every request it is sent, headers and all: what the store saw.
        _ = try await moto.boto("import urllib.request; urllib.request.urlopen(urllib.request.Request(sys.argv[1] + '/moto-api/recorder/start-recording', method='POST'))")
        let environment = moto.environment.merging(["OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint]) { $1 }
        let work = try await Command.run(CLITests.binary, ["work", pipeline.path, "--queue", queue, "--until-empty", "--progress", "none"],
                                         environment: environment, directory: dir)
        #expect(work.status == 0, "\(work.stdout)\(work.stderr)")
        let spans = try receiver.spans()
        let receives = spans.filter { $0.name == "process uploads-events" }
        #expect(receives.count == 2, "\(spans.map(\.name))")
        let upload = try #require(receives.first { $0.attributes["aws.s3.key"] == "in/photo.jpg" }, "\(receives.map(\.attributes))")
        #expect(upload.parentSpanID.isEmpty && upload.attributes["messaging.system"] == "aws_sqs")
        // moto's notification names the object's ETag (S3's adds its sequencer).
        #expect(upload.attributes["pipelinectl.s3.etag"] != nil && upload.attributes["aws.s3.bucket"] == "uploads", "\(upload.attributes)")
        let item = try #require(spans.first { $0.name == "item" && $0.parentSpanID == upload.spanID })
        #expect(item.traceID == upload.traceID && item.attributes["pipelinectl.status"] == "ok")
        let stages = spans.filter { $0.parentSpanID == item.spanID }
        #expect(Set(stages.map(\.name)) == ["load", "decode", "process resize", "encode", "store"], "\(stages.map(\.name))")
        // The object's GET is a client span under the load; the store got its traceparent.
        let load = try #require(stages.first { $0.name == "load" })
        let get = try #require(spans.first { $0.name == "S3.GetObject" && $0.parentSpanID == load.spanID })
        #expect(get.attributes["aws.s3.key"] == "in/photo.jpg" && get.attributes["http.response.status_code"] == "200", "\(get.attributes)")
        let seen = try await moto.boto("""
            import urllib.request
            for line in urllib.request.urlopen(sys.argv[1] + '/moto-api/recorder/download-recording').read().decode().splitlines():
                entry = json.loads(line)
                if entry['method'] == 'GET' and entry['url'].endswith('/uploads/in/photo.jpg'):
                    print(entry['headers'].get('traceparent', entry['headers'].get('Traceparent', '-')))
            """)
        #expect(seen.split(separator: "\n").contains { $0 == "00-\(upload.traceID)-\(get.spanID)-01" }, "\(seen)")
        // The message sent with a traceparent: its receive span continues it.
        let sent = try #require(receives.first { $0.traceID == trace })
        #expect(sent.parentSpanID == parent)
        #expect(spans.contains { $0.name == "item" && $0.parentSpanID == sent.spanID })
    }
    /// Two `serve` requests for sizes of one new source, each with its own `traceparent`, at
    /// once: one decode serves both (the origin holds the load until both wait on it), and the
    /// request that took the other's decode has a `decode` span of its own trace with a link to
    /// the other's.
    @Test func aSharedDecodeIsLinkedAcrossRequestTraces() async throws {
        let receiver = try await OTLPReceiver.start()
        defer { receiver.stop() }
        let (origin, gate, fetched) = try ServeSetup.gatedOrigin(try Fixtures.jpeg(640, 480))
        defer { origin.stop() }
        let setup = try ServeTests.Setup()
        let service = try await ServiceProcess.start(CLITests.binary, [setup.pipelines.path, "--timeout", "10m"], environment: [
            "PIPELINECTL_KEYS": ServeTests.key, "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint, "OTEL_BSP_SCHEDULE_DELAY": "100",
        ])
        defer { service.stop() }
        let traces = ["3af7651916cd43dd8448eb211c80319c", "4bf7651916cd43dd8448eb211c80319d"]
        func request(_ width: Int, _ trace: String) -> Task<RawHTTP.Response, any Error> {
            Task {
                try await service.get(try ServeTests.sign("resize", origin.url("/page.jpg"), params: ["w": String(width)]),
                                      headers: ["traceparent": "00-\(trace)-b7ad6b7169203331-01"])
            }
        }
        let first = request(16, traces[0])
        #expect(await fetched.wait(for: "/page.jpg"))
        let second = request(200, traces[1])
        #expect(await ServeSetup.waitForInFlight(service, 2))
        gate.signal()
        let statuses = [try await first.value.status, try await second.value.status]
        #expect(statuses == [200, 200])
        #expect(origin.requests("/page.jpg") == 1)
        // Spans go out every 100 ms: polled for, as events.
        var decodes: [OTLPReceiver.Span] = []
        for _ in 0..<600 where decodes.count < 2 {
            decodes = try receiver.spans().filter { $0.name == "decode" && traces.contains($0.traceID) }
            try await Task.sleep(for: .milliseconds(100))
        }
        #expect(Set(decodes.map(\.traceID)) == Set(traces), "\(decodes.map(\.traceID))")
        let joiner = try #require(decodes.first { !$0.links.isEmpty }, "\(decodes.map(\.links))")
        let owner = try #require(decodes.first { $0.links.isEmpty })
        #expect(joiner.links.first?.spanID == owner.spanID && joiner.links.first?.traceID == owner.traceID)
        #expect(joiner.attributes["pipelinectl.decode.shared"] != nil)
    }
}
