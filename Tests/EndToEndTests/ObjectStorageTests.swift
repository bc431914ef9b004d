import Foundation
import PipelineKit
import Testing
import TestImages

/// Sources, outputs and resume against a real S3-compatible server (moto) that checks every
/// signature, through the pipelinectl binary, with the AWS environment variables users set.
@Suite(.serialized) struct ObjectStorageTests {
    static let binary = CLITests.binary

    func run(_ arguments: [String], _ environment: [String: String]) async throws -> Command.Result {
        try await Command.run(Self.binary, arguments, environment: environment, directory: Fixtures.packageRoot)
    }

    /// Every object under `prefix` of `bucket` as boto3 sees it: key -> [content_type, cache_control, metadata, size, format].
    func objects(_ moto: MotoServer, _ bucket: String) async throws -> [String: [String: String]] {
        let script = """
            import boto3, json, sys, subprocess
            s3 = boto3.client("s3", endpoint_url=sys.argv[1], region_name="us-east-1",
                              aws_access_key_id=sys.argv[2], aws_secret_access_key=sys.argv[3])
            out = {}
            for item in s3.list_objects_v2(Bucket=sys.argv[4]).get("Contents", []):
                got = s3.get_object(Bucket=sys.argv[4], Key=item["Key"])
                body = got["Body"].read()
                fmt = subprocess.run(["identify", "-format", "%m %wx%h", "-"], input=body, capture_output=True).stdout.decode()
                out[item["Key"]] = {"type": got.get("ContentType", ""), "cache": got.get("CacheControl", ""),
                                    "meta": json.dumps(got.get("Metadata", {}), sort_keys=True), "image": fmt,
                                    "size": str(len(body))}
            print(json.dumps(out))
            """
        let result = try await Command.run("/usr/bin/env", ["python3", "-c", script, moto.endpoint, moto.accessKey, moto.secretKey, bucket])
        guard result.status == 0 else { throw CommandError(message: result.stderr) }
        return try JSONSerialization.jsonObject(with: Data(result.stdout.utf8)) as? [String: [String: String]] ?? [:]
    }

    @Test func sourcesAndOutputsInABucketWithResumeByHead() async throws {
        let moto = try await MotoServer.start(buckets: ["sources", "thumbs"])
        defer { moto.stop() }
        let dir = try Fixtures.temporaryDirectory("s3")
        // Upload: local sample images written to s3://sources/ by a pipeline (our PUT).
        let upload = dir.appendingPathComponent("upload.yaml")
        try """
            encoder: png
            output:
              dir: s3://sources/originals
              name: "{stem}.{ext}"
            """.write(to: upload, atomically: true, encoding: .utf8)
        var locals: [String] = []
        for (i, spec) in ["plasma:", "gradient:navy-gold", "plasma:red-blue", "xc:teal"].enumerated() {
            let file = dir.appendingPathComponent("image\(i).jpg")
            try Fixtures.image(spec, width: 300 + 10 * i, height: 200).write(to: file)
            locals.append(file.path)
        }
        let localList = dir.appendingPathComponent("local.txt")
        try locals.joined(separator: "\n").write(to: localList, atomically: true, encoding: .utf8)
        let uploaded = try await run(["run", upload.path, localList.path, "--progress", "none"], moto.environment)
        #expect(uploaded.status == 0, "\(uploaded.stdout)\(uploaded.stderr)")
        let originals = try await objects(moto, "sources")
        #expect(originals.count == 4)
        #expect(originals.values.allSatisfy { $0["type"] == "image/png" && $0["image"]?.hasPrefix("PNG ") == true })

        // Thumbnails: s3:// sources in the list, outputs to another bucket with headers and metadata.
        let list = dir.appendingPathComponent("urls.txt")
        try originals.keys.sorted().map { "s3://sources/\($0)" }.joined(separator: "\n")
            .write(to: list, atomically: true, encoding: .utf8)
        let thumbs = dir.appendingPathComponent("thumbs.yaml")
        try """
            processors:
              - resize: { width: 64, height: 64 }
            encoder: { jpeg: { quality: 80 } }
            output:
              dir: s3://thumbs/t
              name: "{stem}-64.{ext}"
              cache_control: "public, max-age=31536000, immutable"
              metadata: { pipeline: thumbs }
            """.write(to: thumbs, atomically: true, encoding: .utf8)
        let report = dir.appendingPathComponent("run.json").path
        let made = try await run(["run", thumbs.path, list.path, "--report", report, "--progress", "none"], moto.environment)
        #expect(made.status == 0, "\(made.stdout)\(made.stderr)")
        let written = try await objects(moto, "thumbs")
        #expect(written.count == originals.count)
        for (key, facts) in written {
            #expect(key.hasPrefix("t/") && key.hasSuffix("-64.jpg"), "\(key)")
            #expect(facts["type"] == "image/jpeg")
            #expect(facts["cache"] == "public, max-age=31536000, immutable")
            // The user's metadata, and the fingerprint of what made the object.
            #expect(facts["meta"]?.range(of: #"^\{"pipeline": "thumbs", "pipelinectl-fingerprint": "[0-9a-f]{32}\.v[0-9a-f]{32}"\}$"#,
                                         options: .regularExpression) != nil, "\(facts)")
            #expect(facts["image"]?.hasPrefix("JPEG ") == true, "\(facts)")
        }
        let saved: [String: Any]? = try Reports.read(URL(fileURLWithPath: report))
        let items = saved?["items"] as? [[String: Any]] ?? []
        #expect(items.allSatisfy { (($0["outputs"] as? [String])?.first ?? "").hasPrefix("s3://thumbs/t/") })

        // Resume: every output is found by HEAD, nothing is made again.
        let again = try await run(["run", thumbs.path, list.path, "--resume", "--progress", "none"], moto.environment)
        #expect(again.stdout.contains("\(originals.count) items: 0 ok, 0 failed, \(originals.count) skipped"), "\(again.stdout)\(again.stderr)")

        // Without --resume every output is offered with If-None-Match: *: an object already there
        // (412) with the same fingerprint is kept, and the report says so.
        let rewritten = try await run(["run", thumbs.path, list.path, "--progress", "none"], moto.environment)
        #expect(rewritten.status == 0, "\(rewritten.stdout)\(rewritten.stderr)")
        #expect(rewritten.stdout.contains("\(originals.count) items: 0 ok, \(originals.count) kept, 0 failed"), "\(rewritten.stdout)")
        #expect(try await objects(moto, "thumbs").count == originals.count)

        // A missing object is the item's failure, named; the others are not affected.
        try (originals.keys.sorted().map { "s3://sources/\($0)" } + ["s3://sources/originals/nope.png"]).joined(separator: "\n")
            .write(to: list, atomically: true, encoding: .utf8)
        let missing = try await run(["run", thumbs.path, list.path, "--resume", "--progress", "none"], moto.environment)
        #expect(missing.status == 1)
        #expect(missing.stdout.contains("not_found 1"), "\(missing.stdout)")
        #expect(missing.stdout.contains("s3://sources/originals/nope.png: no such object"), "\(missing.stdout)")
    }

    /// The issue's case: outputs in a bucket, then the encoder's quality changed from 85 to 40.
    /// The second run must replace the three objects (their fingerprint differs), say `written`,
    /// and count the new bytes; a third, unchanged run keeps them and says `kept`. With
    /// `existing: keep`, a changed pipeline leaves the objects, reports them stale and exits 1.
    @Test func changedPipelinesReplaceTheirObjectsAndIdenticalOnesKeepThem() async throws {
        let moto = try await MotoServer.start(buckets: ["web"])
        defer { moto.stop() }
        let dir = try Fixtures.temporaryDirectory("s3-stale")
        let (list, _) = try Fixtures.imageList(in: dir, ["plasma:", "gradient:navy-gold", "plasma:red-blue"])
        let pipeline = dir.appendingPathComponent("web.yaml")
        func configure(quality: Int, existing: String? = nil) throws {
            try """
                processors:
                  - resize: { width: 300 }
                encoder: { jpeg: { quality: \(quality) } }
                output:
                  dir: s3://web/web
                  name: "{stem}.{ext}"
                \(existing.map { "  existing: \($0)" } ?? "")
                """.write(to: pipeline, atomically: true, encoding: .utf8)
        }
        func sizes() async throws -> [String: Int] {
            try await objects(moto, "web").mapValues { Int($0["size"] ?? "") ?? -1 }
        }
        func report(_ name: String) throws -> [[String: Any]] {
            let saved: [String: Any]? = try Reports.read(dir.appendingPathComponent(name))
            return saved?["items"] as? [[String: Any]] ?? []
        }
        try configure(quality: 85)
        let first = try await run(["run", pipeline.path, list.path, "--report", dir.appendingPathComponent("1.json").path,
                                   "--progress", "none"], moto.environment)
        #expect(first.status == 0, "\(first.stdout)\(first.stderr)")
        let before = try await sizes()
        #expect(before.count == 3)

        try configure(quality: 40)
        let second = try await run(["run", pipeline.path, list.path, "--report", dir.appendingPathComponent("2.json").path,
                                    "--progress", "none"], moto.environment)
        #expect(second.status == 0, "\(second.stdout)\(second.stderr)")
        #expect(second.stdout.contains("3 items: 3 ok, 0 failed"), "\(second.stdout)")
        let after = try await sizes()
        for (key, size) in after { #expect(size < before[key]!, "\(key): \(size) bytes at quality 40, \(before[key]!) at 85") }
        let items = try report("2.json")
        #expect(items.allSatisfy { $0["status"] as? String == "ok" && $0["kept"] == nil })
        #expect(items.map { $0["bytes_out"] as? Int ?? 0 }.reduce(0, +) == after.values.reduce(0, +))

        let third = try await run(["run", pipeline.path, list.path, "--report", dir.appendingPathComponent("3.json").path,
                                   "--progress", "none"], moto.environment)
        #expect(third.status == 0 && third.stdout.contains("3 items: 0 ok, 3 kept, 0 failed"), "\(third.stdout)\(third.stderr)")
        #expect(third.stdout.contains("outputs: 0 written, 3 kept (already there with the same fingerprint)"), "\(third.stdout)")
        #expect(try report("3.json").allSatisfy { $0["status"] as? String == "kept" && ($0["kept"] as? [String])?.count == 1
            && $0["bytes_out"] as? Int == 0 })
        #expect(try await sizes() == after)

        try configure(quality: 85, existing: "keep")
        let kept = try await run(["run", pipeline.path, list.path, "--report", dir.appendingPathComponent("4.json").path,
                                  "--progress", "none"], moto.environment)
        #expect(kept.status == 1, "\(kept.stdout)\(kept.stderr)")
        #expect(kept.stdout.contains("3 items: 0 ok, 3 kept, 0 failed") && kept.stdout.contains("3 outputs were already there with another fingerprint"),
                "\(kept.stdout)")
        #expect(try report("4.json").allSatisfy { $0["status"] as? String == "kept" && ($0["stale"] as? [String])?.count == 1 })
        #expect(try await sizes() == after)
    }

    /// Reports kept in a bucket are read back by key or by prefix, with the store's own reason when
    /// they cannot be; the contact sheet links objects by their URL as the run addressed the
    /// store, or by presigned URLs that a plain HTTP client can fetch.
    @Test func reportsInABucketAndContactSheetsOfObjects() async throws {
        let moto = try await MotoServer.start(buckets: ["web", "reports"])
        defer { moto.stop() }
        let dir = try Fixtures.temporaryDirectory("s3-reports")
        var sources: [String] = []
        for i in 0..<3 {
            let file = dir.appendingPathComponent("photo \(i).png")
            try Fixtures.image("plasma:", width: 200, height: 100, format: "PNG").write(to: file)
            sources.append(file.path)
        }
        let list = dir.appendingPathComponent("urls.txt")
        try sources.joined(separator: "\n").write(to: list, atomically: true, encoding: .utf8)
        let pipeline = dir.appendingPathComponent("web.yaml")
        try "encoder: jpeg\noutput:\n  dir: s3://web/thumbs\n  name: \"big pics/{stem}.{ext}\"\n".write(to: pipeline, atomically: true, encoding: .utf8)
        let made = try await run(["run", pipeline.path, list.path, "--report", "s3://reports/runs/run.json", "--progress", "none"], moto.environment)
        #expect(made.status == 0, "\(made.stdout)\(made.stderr)")

        for name in ["s3://reports/runs/run.json", "s3://reports/runs/"] {
            let read = try await run(["report", name], moto.environment)
            #expect(read.status == 0 && read.stdout.contains("web: 3 items: 3 ok"), "\(name): \(read.stdout)\(read.stderr)")
        }
        let missing = try await run(["report", "s3://reports/runs/nope.json"], moto.environment)
        #expect(missing.status == 2 && missing.stderr.contains("error: cannot read the report 's3://reports/runs/nope.json': no such object"),
                "\(missing.stderr)")
        let noBucket = try await run(["report", "s3://nosuchbucket/run.json"], moto.environment)
        #expect(noBucket.status == 2 && noBucket.stderr.contains("error: cannot read the report 's3://nosuchbucket/run.json': GET s3://nosuchbucket/run.json: HTTP 404 NoSuchBucket"),
                "\(noBucket.stderr)")

        // Links by URL, path-style as the run addressed moto, the key's space percent-encoded.
        let sheet = dir.appendingPathComponent("sheet.html")
        let plain = try await run(["report", "s3://reports/runs/run.json", "--html", sheet.path], moto.environment)
        #expect(plain.status == 0, "\(plain.stderr)")
        let html = try String(contentsOf: sheet, encoding: .utf8)
        #expect(html.contains("src=\"\(moto.endpoint)/web/thumbs/big%20pics/photo_0.jpg\""), "\(html.prefix(200))")
        #expect(!html.contains("s3:/"))

        // Presigned, for a private bucket: each link carries its signature, made with the run's
        // credentials for an hour (the signature itself is held against botocore's in SigV4Tests:
        // moto answers 500 to any presigned URL when it checks signatures).
        let presigned = try await run(["report", "s3://reports/runs/run.json", "--html", sheet.path, "--presign", "1h"], moto.environment)
        #expect(presigned.status == 0, "\(presigned.stderr)")
        let page = try String(contentsOf: sheet, encoding: .utf8)
        let links = page.matches(of: /src="([^"]+)"/).map { String($0.1).replacingOccurrences(of: "&amp;", with: "&") }
        #expect(links.count == 3)
        for link in links {
            #expect(link.hasPrefix("\(moto.endpoint)/web/thumbs/big%20pics/photo_"), "\(link)")
            #expect(link.contains("X-Amz-Credential=\(moto.accessKey)%2F") && link.contains("X-Amz-Expires=3600&"), "\(link)")
            #expect(link.range(of: "X-Amz-Signature=[0-9a-f]{64}$", options: .regularExpression) != nil, "\(link)")
        }
    }

    @Test func aWrongSecretIsAClearAuthErrorBeforeAnythingRuns() async throws {
        let moto = try await MotoServer.start(buckets: ["thumbs"])
        defer { moto.stop() }
        let dir = try Fixtures.temporaryDirectory("s3-auth")
        let pipeline = dir.appendingPathComponent("p.yaml")
        try "encoder: png\noutput:\n  dir: s3://thumbs/x\n".write(to: pipeline, atomically: true, encoding: .utf8)
        var environment = moto.environment
        environment["AWS_SECRET_ACCESS_KEY"] = "wrong"
        let start = ContinuousClock.now
        let result = try await run(["run", pipeline.path, "-", "--progress", "none"], environment)
        #expect(result.status == 2)  // never retry
        #expect(result.stderr.contains("cannot write outputs to s3://thumbs/x: GET s3://thumbs/: the store refused the credentials (SignatureDoesNotMatch); check AWS_SECRET_ACCESS_KEY"), "\(result.stderr)")
        #expect(ContinuousClock.now - start < .seconds(20))  // refused once, not retried with backoff

        // Sources: the same refusal is each item's `auth` failure.
        environment["AWS_SECRET_ACCESS_KEY"] = moto.secretKey
        let list = dir.appendingPathComponent("urls.txt")
        try "s3://thumbs/a.png\n".write(to: list, atomically: true, encoding: .utf8)
        environment["AWS_ACCESS_KEY_ID"] = "AKIDNOSUCHKEY"
        let local = dir.appendingPathComponent("local.yaml")
        try "encoder: png\noutput:\n  dir: \(dir.path)/out\n".write(to: local, atomically: true, encoding: .utf8)
        let sources = try await run(["run", local.path, list.path, "--progress", "none"], environment)
        #expect(sources.status == 1)
        #expect(sources.stdout.contains("auth 1"), "\(sources.stdout)")

        // No credentials at all: the item says what to set.
        for name in ["AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"] { environment[name] = nil }
        let unset = try await run(["run", local.path, list.path, "--progress", "none"], environment)
        #expect(unset.status == 1)
        #expect(unset.stdout.contains("invalid_option: loader 's3': S3 needs credentials: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY"), "\(unset.stdout)")
    }
}

extension ObjectStorageTests {
    /// Runs a boto3 snippet against `moto` with `s3` bound to a client; returns its stdout.
    func boto(_ moto: MotoServer, _ snippet: String, _ arguments: [String] = []) async throws -> String {
        let script = """
            import boto3, sys
            s3 = boto3.client("s3", endpoint_url=sys.argv[1], region_name="us-east-1",
                              aws_access_key_id=sys.argv[2], aws_secret_access_key=sys.argv[3])
            args = sys.argv[4:]
            """ + "\n" + snippet
        let result = try await Command.run("/usr/bin/env", ["python3", "-c", script, moto.endpoint, moto.accessKey, moto.secretKey] + arguments)
        guard result.status == 0 else { throw CommandError(message: result.stderr) }
        return result.stdout
    }

    /// Keys in `bucket`, sorted.
    func keys(_ moto: MotoServer, _ bucket: String) async throws -> [String] {
        try await boto(moto, """
            for page in s3.get_paginator("list_objects_v2").paginate(Bucket=args[0]):
                for item in page.get("Contents", []): print(item["Key"])
            """, [bucket]).split(separator: "\n").map(String.init).sorted()
    }

    @Test func aDataCacheInABucketIsSharedCheckedAndPruned() async throws {
        let moto = try await MotoServer.start(buckets: ["cache"])
        defer { moto.stop() }
        let server = try await TestServer.start()
        let dir = try Fixtures.temporaryDirectory("s3-cache")
        var urls: [String] = []
        for i in 0..<6 {
            server.serve("/c\(i).jpg", try Fixtures.image("plasma:", width: 220 + i, height: 160))
            urls.append(server.url("/c\(i).jpg"))
        }
        let list = dir.appendingPathComponent("urls.txt")
        try urls.joined(separator: "\n").write(to: list, atomically: true, encoding: .utf8)
        let pipeline = dir.appendingPathComponent("cached.yaml")
        try """
            loader:
              http: { allow_loopback: true, retry_attempts: 1 }
            data_cache:
              s3: { url: "s3://cache/pk/data" }
            processors:
              - resize: { width: 64 }
            encoder: png
            output:
              dir: ${OUT:-\(dir.path)/none}
              name: "{stem}.{ext}"
            """.write(to: pipeline, atomically: true, encoding: .utf8)
        func run(_ machine: String) async throws -> Command.Result {
            var environment = moto.environment
            environment["OUT"] = dir.appendingPathComponent(machine).path
            return try await self.run(["run", pipeline.path, list.path, "--progress", "none"], environment)
        }

        // The first machine fills the cache; the second reads every source from it.
        let first = try await run("a")
        #expect(first.status == 0, "\(first.stdout)\(first.stderr)")
        let entries = try await keys(moto, "cache")
        try #require(entries.count == 6)
        #expect(entries.allSatisfy { $0.wholeMatch(of: /pk\/data\/[0-9a-f]{2}\/[0-9a-f]{64}/) != nil }, "\(entries)")
        let second = try await run("b")
        #expect(second.status == 0, "\(second.stdout)\(second.stderr)")
        #expect(second.stdout.contains("cache: data 6 hit"), "\(second.stdout)")
        for i in 0..<6 { #expect(server.requests("/c\(i).jpg") == 1) }

        // A damaged entry is never served: its item loads from the source again and the entry is
        // written whole again; the output is the same.
        _ = try await boto(moto, "s3.put_object(Bucket='cache', Key=args[0], Body=b'PKDC' + b'\\x00' * 40)", [entries[0]])
        let third = try await run("c")
        #expect(third.status == 0, "\(third.stdout)\(third.stderr)")
        #expect(third.stdout.contains("cache: data 5 hit, 1 miss"), "\(third.stdout)")
        #expect((0..<6).map { server.requests("/c\($0).jpg") }.reduce(0, +) == 7)
        for i in 0..<6 {
            let a = try Data(contentsOf: dir.appendingPathComponent("a/c\(i).png"))
            #expect(a == (try Data(contentsOf: dir.appendingPathComponent("c/c\(i).png"))))
        }
        #expect(try await run("d").stdout.contains("cache: data 6 hit"))

        // Maintenance: stats over the bucket, prune by age; objects that are not entries are left alone.
        _ = try await boto(moto, "s3.put_object(Bucket='cache', Key='pk/data/README', Body=b'not an entry')")
        let stats = try await self.run(["cache", "stats", pipeline.path], moto.environment)
        #expect(stats.status == 0, "\(stats.stderr)")
        #expect(stats.stdout.contains("cache:    s3://cache/pk/data"), "\(stats.stdout)")
        #expect(stats.stdout.contains("entries:  6"), "\(stats.stdout)")
        let kept = try await self.run(["cache", "prune", pipeline.path], moto.environment)
        #expect(kept.stdout.contains("pruned 0 entries"), "\(kept.stdout)\(kept.stderr)")
        let pruned = try await self.run(["cache", "prune", pipeline.path, "--older-than", "0s"], moto.environment)
        #expect(pruned.status == 0, "\(pruned.stderr)")
        #expect(pruned.stdout.contains("pruned 6 entries"), "\(pruned.stdout)")
        #expect(try await keys(moto, "cache") == ["pk/data/README"])
        #expect(try await run("e").stdout.contains("cache: data 0 hit, 6 miss"))
        // Purge finds a source's entries by the key in each entry's header.
        let purged = try await self.run(["cache", "purge", pipeline.path, urls[0]], moto.environment)
        #expect(purged.status == 0 && purged.stdout.contains("purged 1 entry"), "\(purged.stdout)\(purged.stderr)")
        #expect(try await keys(moto, "cache").count == 6)  // the other five, and the README
        let cleared = try await self.run(["cache", "clear", pipeline.path], moto.environment)
        #expect(cleared.stdout.contains("cleared 5 entries"), "\(cleared.stdout)\(cleared.stderr)")
        #expect(try await keys(moto, "cache") == ["pk/data/README"])
        await server.stop()
    }

    @Test func aDataCacheWithRefusedCredentialsStopsTheRunBeforeItStarts() async throws {
        let moto = try await MotoServer.start(buckets: ["cache"])
        defer { moto.stop() }
        let dir = try Fixtures.temporaryDirectory("s3-cache-auth")
        let pipeline = dir.appendingPathComponent("p.yaml")
        try """
            data_cache: { s3: { url: "s3://cache/x" } }
            encoder: png
            output: { dir: \(dir.path)/out }
            """.write(to: pipeline, atomically: true, encoding: .utf8)
        var environment = moto.environment
        environment["AWS_SECRET_ACCESS_KEY"] = "wrong"
        let result = try await run(["run", pipeline.path, "-", "--progress", "none"], environment)
        #expect(result.status == 2)
        #expect(result.stderr.contains("the data cache s3://cache/x cannot be used: GET s3://cache/: the store refused the credentials (SignatureDoesNotMatch)"), "\(result.stderr)")
        // A bucket that does not exist is said the same way, naming the bucket.
        let missing = dir.appendingPathComponent("q.yaml")
        try String(contentsOf: pipeline, encoding: .utf8).replacingOccurrences(of: "s3://cache/x", with: "s3://nosuchbucket/x")
            .write(to: missing, atomically: true, encoding: .utf8)
        let absent = try await run(["run", missing.path, "-", "--progress", "none"], moto.environment)
        #expect(absent.status == 2)
        #expect(absent.stderr.contains("s3://nosuchbucket/"), "\(absent.stderr)")
        #expect(absent.stderr.contains("NoSuchBucket"), "\(absent.stderr)")
        // No credentials at all: valid as a pipeline, stopped before the run with what to set.
        for name in ["AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"] { environment[name] = nil }
        #expect(try await run(["validate", pipeline.path], environment).status == 0)
        let unset = try await run(["run", pipeline.path, "-", "--progress", "none"], environment)
        #expect(unset.status == 2)
        #expect(unset.stderr.contains("the data cache s3://cache/x cannot be used: S3 needs credentials"), "\(unset.stderr)")
    }
}

extension ObjectStorageTests {
    /// Three shard processes at once, as three machines: the list, the outputs and the reports in
    /// the bucket; the union of outputs is what one process makes, byte for byte.
    /// An S3 key is literal: `in/../out/x.jpg` is its own object, not `out/x.jpg` (libcurl would
    /// remove the dot segments from the request's path and read another object, or fail the
    /// signature made for the key as named).
    @Test func aKeyWithDotSegmentsIsReadAsNamed() async throws {
        let moto = try await MotoServer.start(buckets: ["dots", "thumbs"])
        defer { moto.stop() }
        let dir = try Fixtures.temporaryDirectory("s3-dots")
        let red = dir.appendingPathComponent("red.png"), blue = dir.appendingPathComponent("blue.png")
        try Fixtures.image("xc:#e00000", width: 64, height: 64, format: "PNG").write(to: red)
        try Fixtures.image("xc:#0000e0", width: 64, height: 64, format: "PNG").write(to: blue)
        _ = try await boto(moto, "s3.put_object(Bucket='dots', Key='in/../out/x.png', Body=open(args[0], 'rb').read()); "
                           + "s3.put_object(Bucket='dots', Key='out/x.png', Body=open(args[1], 'rb').read())", [red.path, blue.path])
        let pipeline = dir.appendingPathComponent("p.yaml")
        try """
            encoder: png
            output: { dir: \(dir.path)/out, name: "made.{ext}" }
            """.write(to: pipeline, atomically: true, encoding: .utf8)
        let list = dir.appendingPathComponent("list.txt")
        try "s3://dots/in/../out/x.png\n".write(to: list, atomically: true, encoding: .utf8)
        let result = try await run(["run", pipeline.path, list.path, "--progress", "none"], moto.environment)
        #expect(result.status == 0, "\(result.stdout)\(result.stderr)")
        let pixel = try await Command.run("/usr/bin/convert", [dir.appendingPathComponent("out/made.png").path, "-format", "%[fx:int(255*p{1,1}.r)]", "info:"])
        #expect(Int(pixel.stdout) ?? 0 > 200, "the object read is not in/../out/x.png (red): \(pixel.stdout) \(pixel.stderr)")
    }

    @Test func aListInABucketDrivesShardedRuns() async throws {
        let moto = try await MotoServer.start(buckets: ["lists", "thumbs"])
        defer { moto.stop() }
        let server = try await TestServer.start()
        let dir = try Fixtures.temporaryDirectory("s3-list-run")
        var urls: [String] = []
        for i in 0..<12 {
            server.serve("/l\(i).jpg", try Fixtures.image("plasma:", width: 100 + i, height: 80))
            urls.append(server.url("/l\(i).jpg"))
        }
        _ = try await boto(moto, "s3.put_object(Bucket='lists', Key='runs/urls.txt', Body=args[0].encode())",
                           [urls.joined(separator: "\n")])
        let pipeline = dir.appendingPathComponent("p.yaml")
        try """
            loader:
              http: { allow_loopback: true, retry_attempts: 1 }
            processors:
              - resize: { width: 32 }
            encoder: png
            output:
              dir: s3://thumbs/sharded
              name: "{index}.{ext}"
            """.write(to: pipeline, atomically: true, encoding: .utf8)
        func shard(_ k: Int) async throws -> Command.Result {
            try await run(["run", pipeline.path, "s3://lists/runs/urls.txt", "--shard", "\(k)/3", "--progress", "none",
                           "--report", "s3://lists/reports/run.json"], moto.environment)
        }
        async let first = shard(0), second = shard(1), third = shard(2)
        var made = 0
        for result in try await [first, second, third] {
            #expect(result.status == 0, "\(result.stdout)\(result.stderr)")
            let pattern = try Regex(#"(\d+) items: "#)
            made += try #require(result.stdout.firstMatch(of: pattern).flatMap { Int($0.output[1].substring ?? "") })
        }
        #expect(made == 12)
        for i in 0..<12 { #expect(server.requests("/l\(i).jpg") == 1) }
        let single = try await run(["run", pipeline.path, "s3://lists/runs/urls.txt", "-o", "s3://thumbs/single", "--progress", "none"],
                                   moto.environment)
        #expect(single.status == 0, "\(single.stdout)\(single.stderr)")
        let sharded = try await digests(moto, "thumbs", "sharded/")
        #expect(Set(sharded.keys) == Set((1...12).map { "\($0).png" }))
        #expect(sharded == (try await digests(moto, "thumbs", "single/")))
        // Each shard's report was put in the bucket; downloaded, they merge into one.
        #expect(try await keys(moto, "lists") == (0..<3).map { "reports/run-shard-\($0)-of-3.json" } + ["runs/urls.txt"])
        var reports: [String] = []
        for k in 0..<3 {
            let local = dir.appendingPathComponent("run-\(k).json").path
            _ = try await boto(moto, "s3.download_file('lists', args[0], args[1])", ["reports/run-shard-\(k)-of-3.json", local])
            reports.append(local)
        }
        let merged = try await run(["report"] + reports, moto.environment)
        #expect(merged.stdout.contains("12 items: 12 ok, 0 failed, 0 skipped"), "\(merged.stdout)\(merged.stderr)")

        // A report that cannot be put is said before anything runs, as an output directory is.
        let noBucket = try await run(["run", pipeline.path, "s3://lists/runs/urls.txt", "--report", "s3://nosuchbucket/run.json",
                                      "--progress", "none"], moto.environment)
        #expect(noBucket.status == 2)
        #expect(noBucket.stderr.contains("error: cannot write the report to s3://nosuchbucket/run.json: GET s3://nosuchbucket/: HTTP 404 NoSuchBucket"),
                "\(noBucket.stderr)")
        for (report, message) in [("s3://lists", "--report 's3://lists' names no object (write s3://bucket/reports/run.json)"),
                                  ("s3://lists/reports/", "--report 's3://lists/reports/' names no object"),
                                  ("gs://lists/run.json", "--report gs://lists/run.json: no output destination for gs:// URLs")] {
            let bad = try await run(["run", pipeline.path, "s3://lists/runs/urls.txt", "--report", report, "--progress", "none"],
                                    moto.environment)
            #expect(bad.status == 2 && bad.stderr.contains(message), "\(report): \(bad.stderr)")
        }
        #expect((0..<12).allSatisfy { server.requests("/l\($0).jpg") == 2 })  // none of the refused runs loaded anything

        let missing = try await run(["run", pipeline.path, "s3://lists/runs/nope.txt", "--progress", "none"], moto.environment)
        #expect(missing.status == 2)
        #expect(missing.stderr.contains("error: the URL list s3://lists/runs/nope.txt does not exist"), "\(missing.stderr)")
        let scheme = try await run(["run", pipeline.path, "gs://lists/urls.txt", "--progress", "none"], moto.environment)
        #expect(scheme.status == 2)
        #expect(scheme.stderr.contains("cannot read a URL list from gs:// URLs ('gs://lists/urls.txt')"), "\(scheme.stderr)")
        await server.stop()
    }
}
