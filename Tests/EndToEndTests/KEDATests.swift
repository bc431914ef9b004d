import Foundation
import Testing
import TestImages

/// The worker manifests (deploy/kubernetes/worker-sqs.yaml, worker-postgres.yaml), checked offline
/// as they are shipped: the built-in kinds by kubernetes-validate, KEDA's ScaledObject and
/// TriggerAuthentication against the CRD schemas KEDA publishes (a copy in Fixtures/keda, unknown
/// fields refused as server-side strict validation does), the trigger metadata against the keys
/// KEDA's scalers read, the pipeline in the ConfigMap with `pipelinectl validate`, and the
/// PostgreSQL scaler's query run on a real queue table.
@Suite struct KEDAManifestTests {
    static let deploy = DeployFileTests.deploy
    static let schemas = URL(fileURLWithPath: #filePath).deletingLastPathComponent().appendingPathComponent("Fixtures/keda")

    /// The facts the Python check prints: the KEDA objects' problems, the trigger, the container.
    func check(_ manifest: String, pipelineCopy: URL) async throws -> [String: Any] {
        let path = Self.deploy.appendingPathComponent("kubernetes/\(manifest)").path
        let validated = try await Command.run("/usr/bin/env", ["kubernetes-validate", "--strict", "-k", "1.33.0", path])
        #expect(validated.status == 0, "\(validated.stdout)\(validated.stderr)")
        #expect(!validated.stdout.contains("failed"), "\(validated.stdout)")
        let script = """
            import json, sys, yaml, jsonschema
            docs = [d for d in yaml.safe_load_all(open(sys.argv[1])) if d]
            def schema(crd):
                spec = yaml.safe_load(open(crd))["spec"]
                version = next(v for v in spec["versions"] if v["name"] == "v1alpha1")
                return spec["names"]["kind"], version["schema"]["openAPIV3Schema"]
            def strict(node):
                # The API server's strict field validation: no field the schema does not name.
                if isinstance(node, dict):
                    if node.get("type") == "object" and "properties" in node and "additionalProperties" not in node \\
                            and not node.get("x-kubernetes-preserve-unknown-fields"):
                        node["additionalProperties"] = False
                    for value in node.values(): strict(value)
                elif isinstance(node, list):
                    for value in node: strict(value)
                return node
            schemas = dict(schema(f"{sys.argv[2]}/keda.sh_{n}.yaml") for n in ["scaledobjects", "triggerauthentications"])
            problems, checked = [], []
            for d in docs:
                if d["apiVersion"].startswith("keda.sh/"):
                    s = strict(schemas[d["kind"]])
                    for e in jsonschema.Draft7Validator(s).iter_errors(d):
                        problems.append(f"{d['kind']}/{d['metadata']['name']}: {'.'.join(map(str, e.path))}: {e.message}")
                    checked.append(d["kind"])
            deployment = next(d for d in docs if d["kind"] == "Deployment")
            scaled = next(d for d in docs if d["kind"] == "ScaledObject")
            container = deployment["spec"]["template"]["spec"]["containers"][0]
            open(sys.argv[3], "w").write(next(d for d in docs if d["kind"] == "ConfigMap")["data"]["uploads.yaml"])
            print(json.dumps({"problems": problems, "checked": checked, "trigger": scaled["spec"]["triggers"][0],
                              "target": scaled["spec"]["scaleTargetRef"]["name"], "deployment": deployment["metadata"]["name"],
                              "args": container["args"], "env": {e["name"]: e.get("value", "") for e in container["env"]},
                              "auth": [d["metadata"]["name"] for d in docs if d["kind"] == "TriggerAuthentication"],
                              "grace": deployment["spec"]["template"]["spec"]["terminationGracePeriodSeconds"],
                              "probes": [container["livenessProbe"]["httpGet"]["path"], container["readinessProbe"]["httpGet"]["path"]]}))
            """
        let result = try await Command.run("/usr/bin/env", ["python3", "-c", script, path, Self.schemas.path, pipelineCopy.path])
        let facts = try #require(try JSONSerialization.jsonObject(with: Data(result.stdout.utf8)) as? [String: Any], "\(result.stderr)")
        #expect((facts["problems"] as? [String]) == [], "\(facts["problems"] ?? "")")
        #expect(facts["target"] as? String == facts["deployment"] as? String, "the ScaledObject scales another Deployment")
        #expect(facts["probes"] as? [String] == ["/livez", "/readyz"])
        let args = facts["args"] as? [String] ?? []
        #expect(args.first == "work" && args.contains("--listen"), "\(args)")
        // The pod's grace covers --stop-grace and a long poll in progress.
        if let stop = args.firstIndex(of: "--stop-grace"), let seconds = Int(args[stop + 1].dropLast()) {
            #expect((facts["grace"] as? Int ?? 0) >= seconds + 10)
        } else {
            Issue.record("no --stop-grace in \(args)")
        }
        // The pipeline in the ConfigMap is valid with the settings the Deployment gives.
        var environment = ProcessInfo.processInfo.environment
        environment["OUTPUT_URL"] = (facts["env"] as? [String: String])?["OUTPUT_URL"]
        let valid = try await Command.run(CLITests.binary, ["validate", pipelineCopy.path], environment: environment)
        #expect(valid.status == 0, "\(valid.stdout)\(valid.stderr)")
        return facts
    }

    @Test func theSQSWorkerManifestValidates() async throws {
        let copy = Fixtures.packageRoot.appendingPathComponent(".build/k8s-worker-sqs.yaml")
        let facts = try await check("worker-sqs.yaml", pipelineCopy: copy)
        #expect(facts["checked"] as? [String] == ["TriggerAuthentication", "ScaledObject"])
        let trigger = try #require(facts["trigger"] as? [String: Any])
        #expect(trigger["type"] as? String == "aws-sqs-queue")
        let metadata = try #require(trigger["metadata"] as? [String: String])
        // The keys KEDA's aws-sqs-queue scaler reads (pkg/scalers/aws_sqs_queue_scaler.go).
        let known: Set = ["queueURL", "queueURLFromEnv", "queueLength", "activationQueueLength", "awsRegion", "awsEndpoint",
                          "scaleOnInFlight", "scaleOnDelayed", "identityOwner"]
        #expect(Set(metadata.keys).isSubset(of: known), "unknown keys: \(Set(metadata.keys).subtracting(known))")
        #expect(metadata["queueURL"] == (facts["env"] as? [String: String])?["QUEUE_URL"], "KEDA watches another queue than the workers read")
        #expect(metadata["awsRegion"] != nil && Int(metadata["queueLength"] ?? "") != nil)
        #expect(((trigger["authenticationRef"] as? [String: Any])?["name"] as? String).map { (facts["auth"] as? [String])?.contains($0) == true } == true)
    }

    @Test func thePostgresWorkerManifestValidatesAndItsQueryCountsTheQueue() async throws {
        let copy = Fixtures.packageRoot.appendingPathComponent(".build/k8s-worker-postgres.yaml")
        let facts = try await check("worker-postgres.yaml", pipelineCopy: copy)
        #expect(facts["checked"] as? [String] == ["ScaledObject"])
        let trigger = try #require(facts["trigger"] as? [String: Any])
        #expect(trigger["type"] as? String == "postgresql")
        let metadata = try #require(trigger["metadata"] as? [String: String])
        // The keys KEDA's postgresql scaler reads (pkg/scalers/postgresql_scaler.go).
        let known: Set = ["query", "targetQueryValue", "activationTargetQueryValue", "connectionFromEnv", "host", "port", "userName",
                          "dbName", "sslmode", "passwordFromEnv"]
        #expect(Set(metadata.keys).isSubset(of: known), "unknown keys: \(Set(metadata.keys).subtracting(known))")
        #expect((facts["env"] as? [String: String])?.keys.contains(metadata["connectionFromEnv"] ?? "?") == true,
                "connectionFromEnv names no variable of the container")
        #expect(Double(metadata["targetQueryValue"] ?? "") != nil)
        // The query counts what a worker would take: queued and due, or running.
        let query = try #require(metadata["query"])
        let server = try await PostgresServer.start()
        do {
            let dir = try Fixtures.temporaryDirectory("keda")
            defer { try? FileManager.default.removeItem(at: dir) }
            #expect(try await Command.run(CLITests.binary, ["queue", "init", server.url()]).status == 0)
            _ = try await Command.run(CLITests.binary, ["queue", "enqueue", server.url()], stdin: Data("/a.jpg\n/b.jpg\n/c.jpg\n/d.jpg\n".utf8))
            _ = try await server.sql("UPDATE pipelinectl_queue SET state = 'running' WHERE source = '/b.jpg'")
            _ = try await server.sql("UPDATE pipelinectl_queue SET state = 'failed' WHERE source = '/c.jpg'")
            _ = try await server.sql("UPDATE pipelinectl_queue SET visible_at = now() + interval '1 hour' WHERE source = '/d.jpg'")
            #expect(try await server.sql(query) == "2", "a queued and b running; not c (failed) nor d (waiting for a retry)")
        } catch {
            await server.stop()
            throw error
        }
        await server.stop()
    }
}
