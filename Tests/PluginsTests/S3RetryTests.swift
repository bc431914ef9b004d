import FlyingFox
import Foundation
import PipelineKit
@testable import Plugins
import Synchronization
import Testing
import TestImages

/// How the S3 client answers a store under load or refusing: `SlowDown` and 5xx are retried with
/// backoff, refused credentials are not retried at all. The store is the loopback test server
/// answering as S3 does (moto cannot be told to throttle); signatures are checked by the moto tests.
@Suite struct S3RetryTests {
    func loader(_ server: TestServer, attempts: Int = 4) throws -> S3Loader {
        var options = S3Loader.plugin.defaultOptions.values
        options["retry_attempts"] = .int(attempts)
        return try S3Loader(options: PluginOptions(options), environment: [
            "AWS_ENDPOINT_URL": server.url(""), "AWS_ACCESS_KEY_ID": "AKID", "AWS_SECRET_ACCESS_KEY": "secret",
        ])
    }

    static func error(_ code: String, _ message: String) -> Data {
        Data("<?xml version=\"1.0\" encoding=\"UTF-8\"?><Error><Code>\(code)</Code><Message>\(message)</Message></Error>".utf8)
    }

    @Test func slowDownAndServerErrorsAreRetriedUntilTheObjectComes() async throws {
        let server = try await TestServer.start()
        let answers = Mutex([503, 500])
        server.route("/photos/a.jpg") { _ in
            let status = answers.withLock { $0.isEmpty ? 200 : $0.removeFirst() }
            switch status {
            case 503: return HTTPResponse(statusCode: .serviceUnavailable, body: Self.error("SlowDown", "Please reduce your request rate."))
            case 500: return HTTPResponse(statusCode: .internalServerError, body: Self.error("InternalError", "We encountered an internal error."))
            default: return HTTPResponse(statusCode: .ok, headers: [.contentType: "image/jpeg"], body: Data("JPEGBYTES".utf8))
            }
        }
        let loaded = try await loader(server).load(Source(text: "s3://photos/a.jpg", index: 1))
        #expect(loaded.data == Data("JPEGBYTES".utf8))
        #expect(server.requests("/photos/a.jpg") == 3)
        await server.stop()
    }

    @Test func refusedCredentialsAreNotRetried() async throws {
        let server = try await TestServer.start()
        server.route("/photos/a.jpg") { _ in
            HTTPResponse(statusCode: .forbidden, body: Self.error("SignatureDoesNotMatch", "The request signature we calculated does not match."))
        }
        await #expect(throws: PipelineError(.auth, "GET s3://photos/a.jpg: the store refused the credentials (SignatureDoesNotMatch); check AWS_SECRET_ACCESS_KEY")) {
            try await loader(server).load(Source(text: "s3://photos/a.jpg", index: 1))
        }
        #expect(server.requests("/photos/a.jpg") == 1)
        await server.stop()
    }

    @Test func aStoreThatKeepsFailingGivesUpAfterItsAttempts() async throws {
        let server = try await TestServer.start()
        server.route("/photos/a.jpg") { _ in
            HTTPResponse(statusCode: .serviceUnavailable, body: Self.error("SlowDown", "Please reduce your request rate."))
        }
        do {
            _ = try await loader(server, attempts: 3).load(Source(text: "s3://photos/a.jpg", index: 1))
            Issue.record("a store answering 503 forever was read")
        } catch let error as PipelineError {
            #expect(error.kind == .httpStatus)
            #expect(error.message == "GET s3://photos/a.jpg: HTTP 503 SlowDown: Please reduce your request rate.", "\(error.message)")
        }
        #expect(server.requests("/photos/a.jpg") == 3)
        await server.stop()
    }
}
