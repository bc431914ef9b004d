import Foundation
import PipelineKit
import Testing
import TestImages

/// The files in deploy/: the Slurm script run as a real array job on a one-node Slurm cluster on
/// loopback against moto, the Kubernetes manifest validated offline (kubernetes-validate), the
/// Dockerfile linted (hadolint) and the AWS Batch job definition checked against botocore's model.
extension ObjectStorageTests {
    static let deploy = Fixtures.packageRoot.appendingPathComponent("deploy")

    /// Every object under `prefix` of `bucket`: key without the prefix -> SHA-256 of its bytes.
    func digests(_ moto: MotoServer, _ bucket: String, _ prefix: String) async throws -> [String: String] {
        let out = try await boto(moto, """
            import hashlib, json
            found = {}
            for page in s3.get_paginator("list_objects_v2").paginate(Bucket=args[0]):
                for item in page.get("Contents", []):
                    if item["Key"].startswith(args[1]):
                        body = s3.get_object(Bucket=args[0], Key=item["Key"])["Body"].read()
                        found[item["Key"][len(args[1]):]] = hashlib.sha256(body).hexdigest()
            print(json.dumps(found))
            """, [bucket, prefix])
        return try JSONSerialization.jsonObject(with: Data(out.utf8)) as? [String: String] ?? [:]
    }

    @Test func theSlurmScriptRunsAsARealArrayJob() async throws {
        let slurm = try await SlurmCluster.start()
        defer { slurm.stop() }
        let moto = try await MotoServer.start(buckets: ["lists", "thumbs"])
        defer { moto.stop() }
        let server = try await TestServer.start()
        let dir = try Fixtures.temporaryDirectory("slurm-run")
        var urls: [String] = []
        for i in 0..<20 {
            server.serve("/p\(i).jpg", try Fixtures.image("plasma:", width: 150 + i, height: 100))
            urls.append(server.url("/p\(i).jpg"))
        }
        urls += [urls[5], server.url("/missing.jpg")]
        _ = try await boto(moto, "s3.put_object(Bucket='lists', Key='urls.txt', Body=args[0].encode())", [urls.joined(separator: "\n")])
        let pipeline = dir.appendingPathComponent("thumbs.yaml")
        try """
            loader:
              http: { allow_loopback: true, retry_attempts: 1 }
            processors:
              - resize: { width: 48 }
            encoder: png
            output:
              dir: s3://thumbs/single
              name: "{index}-{stem}.{ext}"
            """.write(to: pipeline, atomically: true, encoding: .utf8)
        try FileManager.default.createDirectory(at: dir.appendingPathComponent("logs"), withIntermediateDirectories: true)

        // The script as a user submits it: 4 shards, at most 2 at once, outputs in the bucket.
        var environment = moto.environment.merging(slurm.environment) { $1 }
        environment["SHARDS"] = "4"
        environment["LIST"] = "s3://lists/urls.txt"
        environment["PIPELINE"] = pipeline.path
        environment["OUTPUT"] = "s3://thumbs/slurm"
        environment["PIPELINECTL"] = Self.binary
        let script = Self.deploy.appendingPathComponent("slurm/thumbnails.sbatch").path
        // The script asks for 2 CPUs and 4 GB per task, as a real site would; this one-node test
        // cluster has less, so the command line asks for less (bounded: a job that cannot run fails the test).
        let job = try await Command.run("/usr/bin/timeout", ["240", SlurmCluster.which("sbatch")!, "--wait", "--array=0-3%2",
                                                             "--cpus-per-task=1", "--mem=200M", "--export=ALL", script],
                                        environment: environment, directory: dir)
        // The missing image fails in one shard (exit 1, not retried); sbatch --wait gives the highest code.
        #expect(job.status == 1, "\(job.stdout)\(job.stderr)")
        let logs = try FileManager.default.contentsOfDirectory(atPath: dir.appendingPathComponent("logs").path)
        #expect(logs.count == 4, "\(logs)")
        for i in 0..<20 { #expect(server.requests("/p\(i).jpg") == 1, "p\(i)") }
        #expect(server.requests("/missing.jpg") == 1)

        // One process over the same list makes the same objects, byte for byte.
        let single = try await run(["run", pipeline.path, "s3://lists/urls.txt", "--progress", "none"], moto.environment)
        #expect(single.status == 1)
        let sharded = try await digests(moto, "thumbs", "slurm/")
        let whole = try await digests(moto, "thumbs", "single/")
        #expect(sharded.count == 21 && sharded == whole, "\(sharded.keys.sorted()) vs \(whole.keys.sorted())")

        // The four reports merge into one.
        let reports = (0..<4).map { dir.appendingPathComponent("reports/run-shard-\($0)-of-4.jsonl").path }
        let merged = try await run(["report"] + reports, moto.environment)
        #expect(merged.stdout.contains("22 items: 21 ok, 1 failed, 0 skipped"), "\(merged.stdout)\(merged.stderr)")
        let failed = try await run(["report"] + reports + ["--failed", "--sources-only"], moto.environment)
        #expect(failed.stdout == server.url("/missing.jpg") + "\n")
        await server.stop()
    }
}

/// The Kubernetes, Docker and AWS Batch files, checked offline as they are shipped.
@Suite struct DeployFileTests {
    static let deploy = ObjectStorageTests.deploy

    @Test func theKubernetesManifestValidatesAndItsPipelineIsValid() async throws {
        let manifest = Self.deploy.appendingPathComponent("kubernetes/thumbnails-job.yaml").path
        let result = try await Command.run("/usr/bin/env", ["kubernetes-validate", "--strict", "-k", "1.33.0", manifest])
        #expect(result.status == 0, "\(result.stdout)\(result.stderr)")
        #expect(result.stdout.components(separatedBy: "passed for resource").count - 1 == 3, "\(result.stdout)")
        // The exit codes as the README and the script say: 1 and 2 fail the index, the rest retry.
        let policy = try await Command.run("/usr/bin/env", ["python3", "-c", """
            import json, sys, yaml
            docs = list(yaml.safe_load_all(open(sys.argv[1])))
            job = next(d for d in docs if d["kind"] == "Job")
            spec = job["spec"]
            pod = spec["template"]["spec"]
            print(json.dumps({"rules": spec["podFailurePolicy"]["rules"], "mode": spec["completionMode"],
                              "completions": spec["completions"], "backoff": spec["backoffLimitPerIndex"],
                              "args": pod["containers"][0]["args"], "restart": pod["restartPolicy"],
                              "grace": pod["terminationGracePeriodSeconds"], "user": pod["securityContext"]["runAsUser"]}))
            open(sys.argv[2], "w").write(next(d for d in docs if d["metadata"]["name"] == "pipelinectl-pipeline")["data"]["thumbnails.yaml"])
            """, manifest, Fixtures.packageRoot.appendingPathComponent(".build/k8s-thumbnails.yaml").path])
        let facts = try #require(try JSONSerialization.jsonObject(with: Data(policy.stdout.utf8)) as? [String: Any], "\(policy.stderr)")
        let rules = try #require(facts["rules"] as? [[String: Any]])
        #expect(rules.count == 2)
        #expect(rules[0]["action"] as? String == "FailIndex")
        #expect(((rules[0]["onExitCodes"] as? [String: Any])?["values"] as? [Int]) == [1, 2])
        #expect(rules[1]["action"] as? String == "Ignore")
        #expect(facts["mode"] as? String == "Indexed" && facts["restart"] as? String == "Never")
        let args = try #require(facts["args"] as? [String])
        let shard = try #require(args.firstIndex(of: "--shard"))
        #expect(args[shard + 1] == "auto/\(facts["completions"] as? Int ?? -1)")  // N matches the Job's completions
        #expect(args.contains("--resume"))
        #expect((facts["grace"] as? Int ?? 0) > 25)  // longer than --stop-grace
        #expect(facts["user"] as? Int == 10001)  // the Dockerfile's user

        // The pipeline in the ConfigMap is valid with the settings the ConfigMap gives.
        var environment = ProcessInfo.processInfo.environment
        environment["CACHE_URL"] = "s3://my-pipelinectl-cache/data"
        environment["OUTPUT_URL"] = "s3://my-thumbnails/256"
        let validated = try await Command.run(ObjectStorageTests.binary, ["validate", ".build/k8s-thumbnails.yaml"],
                                              environment: environment, directory: Fixtures.packageRoot)
        #expect(validated.status == 0, "\(validated.stdout)\(validated.stderr)")
    }

    /// Every manifest in deploy/ names the image `make image` builds: pipelinectl, tagged with the
    /// version the binary reports (in a registry of the user's, for AWS Batch).
    @Test func theManifestsNameTheImageMakeImageBuilds() async throws {
        let printed = try await Command.run(ObjectStorageTests.binary, ["--version"])
        let version = try #require(printed.stdout.split(separator: "\n").first).dropFirst("pipelinectl ".count)
        let image = "pipelinectl:\(version)"
        for manifest in ["kubernetes/service.yaml", "kubernetes/thumbnails-job.yaml", "kubernetes/worker-sqs.yaml", "kubernetes/worker-postgres.yaml", "aws-batch/job-definition.json"] {
            let text = try String(contentsOf: Self.deploy.appendingPathComponent(manifest), encoding: .utf8)
            let named = text.split(separator: "\n").map { $0.trimmingCharacters(in: .whitespaces) }.filter { $0.hasPrefix("image:") || $0.hasPrefix("\"image\":") }
                .map { $0.split(separator: ":", maxSplits: 1)[1].trimmingCharacters(in: CharacterSet(charactersIn: " \",")) }
            #expect(!named.isEmpty, "\(manifest) names no image")
            for name in named { #expect(name == image || name.hasSuffix("/" + image), "\(manifest) names \(name), not \(image)") }
        }
    }

    @Test func theServiceManifestValidatesAndItsPresetIsValid() async throws {
        let manifest = Self.deploy.appendingPathComponent("kubernetes/service.yaml").path
        let result = try await Command.run("/usr/bin/env", ["kubernetes-validate", "--strict", "-k", "1.33.0", manifest])
        #expect(result.status == 0, "\(result.stdout)\(result.stderr)")
        #expect(result.stdout.components(separatedBy: "passed for resource").count - 1 == 5, "\(result.stdout)")
        let preset = Fixtures.packageRoot.appendingPathComponent(".build/k8s-serve-thumbnails.yaml").path
        let facts = try await Command.run("/usr/bin/env", ["python3", "-c", """
            import json, sys, yaml
            docs = list(yaml.safe_load_all(open(sys.argv[1])))
            pod = next(d for d in docs if d["kind"] == "Deployment")["spec"]["template"]["spec"]
            container = pod["containers"][0]
            open(sys.argv[2], "w").write(next(d for d in docs if d["kind"] == "ConfigMap")["data"]["thumbnails.yaml"])
            print(json.dumps({"args": container["args"], "grace": pod["terminationGracePeriodSeconds"],
                              "live": container["livenessProbe"]["httpGet"]["path"], "ready": container["readinessProbe"]["httpGet"]["path"],
                              "user": pod["securityContext"]["runAsUser"],
                              "cpu": [container["resources"]["requests"].get("cpu"), container["resources"]["limits"].get("cpu")]}))
            """, manifest, preset])
        let parsed = try #require(try JSONSerialization.jsonObject(with: Data(facts.stdout.utf8)) as? [String: Any], "\(facts.stderr)")
        let args = try #require(parsed["args"] as? [String])
        #expect(args.first == "serve" && parsed["live"] as? String == "/livez" && parsed["ready"] as? String == "/readyz")
        // The pod's grace covers the drain delay and the grace for requests in flight.
        func seconds(_ flag: String) -> Double { args.firstIndex(of: flag).flatMap { Units.parseDuration(args[$0 + 1]) } ?? 0 }
        #expect(Double(parsed["grace"] as? Int ?? 0) > seconds("--drain-delay") + seconds("--grace"))
        #expect(parsed["user"] as? Int == 10001)
        // A CPU limit (the service's jobs and workers default to it), the same as the request.
        let cpu = parsed["cpu"] as? [String] ?? []  // a missing limit is JSON null: no [String]
        #expect(cpu.count == 2 && cpu[0] == cpu[1], "requests and limits of cpu: \(String(describing: parsed["cpu"]))")
        let validated = try await Command.run(ObjectStorageTests.binary, ["validate", preset], directory: Fixtures.packageRoot)
        #expect(validated.status == 0, "\(validated.stdout)\(validated.stderr)")
    }

    @Test func theDockerfileLintsClean() async throws {
        let result = try await Command.run("/usr/bin/env", ["hadolint", "--failure-threshold", "info",
                                                            Self.deploy.appendingPathComponent("Dockerfile").path])
        #expect(result.status == 0, "\(result.stdout)\(result.stderr)")
        let text = try String(contentsOf: Self.deploy.appendingPathComponent("Dockerfile"), encoding: .utf8)
        #expect(text.contains("USER 10001"))
        #expect(text.components(separatedBy: "\nFROM ").count - 1 == 2)  // multi-stage
    }

    /// The Debian packages pipelinectl runs with, from deploy/runtime-packages.
    static func runtimePackages() throws -> [String] {
        try String(contentsOf: deploy.appendingPathComponent("runtime-packages"), encoding: .utf8)
            .split(separator: "\n").map { $0.trimmingCharacters(in: .whitespaces) }
            .filter { !$0.isEmpty && !$0.hasPrefix("#") }
    }

    /// deploy/runtime-packages names a package for every shared library the binary needs, and
    /// libheif, which the binary opens itself on the first HEIC or AVIF file; the Dockerfile's
    /// runtime stage installs that list, and its build stage the packages the Makefile builds with.
    /// (No Docker here: the lists are checked; `make image` builds from the same list.)
    @Test func theRuntimePackageListCoversEveryLibraryTheBinaryNeeds() async throws {
        let text = try String(contentsOf: Self.deploy.appendingPathComponent("Dockerfile"), encoding: .utf8)
        let stages = text.components(separatedBy: "\nFROM ")
        try #require(stages.count == 3)
        func words(_ stage: String) -> Set<String> {
            Set(stage.split { $0 == " " || $0 == "\n" || $0 == "\\" }.map(String.init))
        }
        let build = words(stages[1])
        let makefile = try String(contentsOf: Fixtures.packageRoot.appendingPathComponent("Makefile"), encoding: .utf8)
        let apt = try #require(makefile.split(separator: "\n").first { $0.hasPrefix("APT_PACKAGES = ") })
        let buildPackages = apt.dropFirst("APT_PACKAGES = ".count).split(separator: " ").map(String.init)
            .filter { $0.hasSuffix("-dev") || $0 == "pkg-config" }
        #expect(buildPackages.count >= 9)
        for package in buildPackages { #expect(build.contains(package), "the build stage lacks \(package)") }
        #expect(stages[2].contains("COPY deploy/runtime-packages /tmp/runtime-packages"))
        #expect(stages[2].contains("< /tmp/runtime-packages") || stages[2].contains("/tmp/runtime-packages | xargs apt-get install"))

        let runtime = Set(try Self.runtimePackages())
        let readelf = try await Command.run("/usr/bin/readelf", ["-d", ObjectStorageTests.binary])
        let needed = readelf.stdout.split(separator: "\n").filter { $0.contains("(NEEDED)") }
            .compactMap { line in line.split(separator: "[").last?.split(separator: "]").first.map(String.init) }
        // The Swift runtime is linked into the released binary (--static-swift-stdlib); the C and C++
        // runtimes come with every Debian root filesystem.
        let base: Set<String> = ["libc6", "libgcc-s1", "libstdc++6"]
        let libraries = needed.filter { !$0.hasPrefix("libswift") && !$0.hasPrefix("libFoundation") && !$0.hasPrefix("libdispatch")
            && !$0.hasPrefix("libBlocksRuntime") } + ["libheif.so.1"]
        #expect(libraries.contains("libMagickWand-6.Q16.so.6") && libraries.contains("libjpeg.so.62"))
        var owners: Set<String> = []
        for library in libraries {
            let owner = try await Command.run("/usr/bin/dpkg", ["-S", "*/" + library])
            let package = try #require(owner.stdout.split(separator: ":").first.map(String.init), "\(library): \(owner.stderr)")
            if base.contains(package) { continue }
            owners.insert(package)
            #expect(runtime.contains(package), "deploy/runtime-packages lacks \(package) (for \(library))")
        }
        // Nothing listed that no library needs, but the certificates libcurl checks servers against.
        #expect(runtime.subtracting(owners) == ["ca-certificates"])
    }

    @Test func theBatchJobDefinitionMatchesTheAPIAndOurExitCodes() async throws {
        let file = Self.deploy.appendingPathComponent("aws-batch/job-definition.json").path
        let result = try await Command.run("/usr/bin/env", ["python3", "-c", """
            import json, sys, botocore.session
            from botocore.validate import validate_parameters
            model = botocore.session.get_session().get_service_model("batch").operation_model("RegisterJobDefinition")
            definition = json.load(open(sys.argv[1]))
            validate_parameters(definition, model.input_shape)
            actions = {rule.get("onExitCode"): rule["action"] for rule in definition["retryStrategy"]["evaluateOnExit"]}
            print(json.dumps(actions))
            """, file])
        #expect(result.status == 0, "\(result.stderr)")
        let actions = try #require(try JSONSerialization.jsonObject(with: Data(result.stdout.utf8)) as? [String: String])
        #expect(actions["3"] == "RETRY" && actions["143"] == "RETRY" && actions["137"] == "RETRY")
        #expect(actions["*"] == "EXIT" && actions["1"] == nil && actions["2"] == nil)  // 1 and 2 fall to EXIT

        // Its command line is one pipelinectl accepts: with the example values and no credentials,
        // it gets as far as needing them.
        let definition = try #require(try JSONSerialization.jsonObject(with: Data(contentsOf: URL(fileURLWithPath: file))) as? [String: Any])
        let parameters = try #require(definition["parameters"] as? [String: String])
        let command = try #require((definition["containerProperties"] as? [String: Any])?["command"] as? [String])
        let arguments = command.map { $0.hasPrefix("Ref::") ? parameters[String($0.dropFirst(5))]! : $0 }
        var environment = ProcessInfo.processInfo.environment
        for name in ["AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"] { environment[name] = nil }
        environment["AWS_BATCH_JOB_ARRAY_INDEX"] = "3"
        let run = try await Command.run(ObjectStorageTests.binary, arguments, environment: environment, directory: Fixtures.packageRoot)
        #expect(run.status == 2, "\(run.stdout)\(run.stderr)")
        #expect(run.stderr.contains("S3 needs credentials"), "\(run.stderr)")
    }
}
