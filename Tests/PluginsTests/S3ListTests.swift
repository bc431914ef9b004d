import Foundation
import PipelineKit
@testable import Plugins
import Testing
import TestImages

/// A URL list in a bucket, read in ranged GETs against a real S3-compatible server (moto).
@Suite(.serialized) struct S3ListTests {
    @Test func aListInABucketReadsAsTheSameFileWouldInAnyChunkSize() async throws {
        let moto = try await MotoServer.start(buckets: ["lists"])
        defer { moto.stop() }
        let dir = try Fixtures.temporaryDirectory("s3-list")
        var text = "\u{FEFF}# thumbnails of the week\r\n"
        for i in 0..<500 { text += (i % 50 == 0 ? "\n  # part \(i / 50)\n" : "") + "https://img.test/\(i)/photo-é\(i).jpg\r\n" }
        text += "https://img.test/last.jpg"  // no final newline
        let file = dir.appendingPathComponent("urls.txt")
        try text.write(to: file, atomically: true, encoding: .utf8)
        let put = try await Command.run("/usr/bin/env", ["python3", "-c", """
            import boto3, sys
            s3 = boto3.client("s3", endpoint_url=sys.argv[1], region_name="us-east-1",
                              aws_access_key_id=sys.argv[2], aws_secret_access_key=sys.argv[3])
            s3.upload_file(sys.argv[4], "lists", "weekly/urls.txt")
            """, moto.endpoint, moto.accessKey, moto.secretKey, file.path])
        try #require(put.status == 0, "\(put.stderr)")
        var expected: [String] = []
        for try await source in SourceList(path: file.path) { expected.append("\(source.index) \(source.text)") }
        #expect(expected.count == 501)
        // Chunks that split lines, a multi-byte character and CRLF pairs, and one chunk for all.
        for chunk in [61, 1000, 1 << 20] {
            let list = try S3List.sourceList("s3://lists/weekly/urls.txt", environment: moto.environment, chunkSize: chunk)
            try await list.remote!.check()
            var seen: [String] = []
            for try await source in list { seen.append("\(source.index) \(source.text)") }
            #expect(seen == expected, "chunk \(chunk)")
        }
        // A missing list, and refused credentials, are said with the list's name.
        let missing = try S3List.sourceList("s3://lists/weekly/nope.txt", environment: moto.environment)
        await #expect(throws: PipelineError(.notFound, "the URL list s3://lists/weekly/nope.txt does not exist")) {
            try await missing.remote!.check()
        }
        var wrong = moto.environment
        wrong["AWS_SECRET_ACCESS_KEY"] = "wrong"
        let refused = try S3List.sourceList("s3://lists/weekly/urls.txt", environment: wrong)
        do {
            try await refused.remote!.check()
            Issue.record("a wrong secret was accepted")
        } catch let error as PipelineError {
            #expect(error.kind == .auth)
        }
        #expect(throws: PipelineError.self) { try S3List.sourceList("s3://lists", environment: moto.environment) }
    }
}
