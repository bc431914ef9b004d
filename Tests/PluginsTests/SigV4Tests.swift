import Foundation
@testable import Plugins
import Testing
import TestImages

/// Our SigV4 signer against botocore's, byte for byte (vectors made by Fixtures/sigv4/make-vectors.py).
@Suite struct SigV4Tests {
    struct Vectors: Decodable {
        let botocore: String
        let vectors: [Vector]
        let presigned: [Presigned]
    }
    struct Presigned: Decodable, CustomTestStringConvertible {
        let name, url, region, access_key, secret_key, time, expected: String
        let expires: Int
        let session_token: String?
        var testDescription: String { name }
    }
    struct Vector: Decodable, CustomTestStringConvertible {
        let name, method, url, region, access_key, secret_key, time, body_hex: String
        let headers: [String: String]
        let session_token: String?
        let expected: [String: String]
        var testDescription: String { name }
    }

    static let vectors: [Vector] = {
        let file = Fixtures.packageRoot.appendingPathComponent("Tests/PluginsTests/Fixtures/sigv4/vectors.json")
        return (try? JSONDecoder().decode(Vectors.self, from: Data(contentsOf: file)).vectors) ?? []
    }()

    static let presigned: [Presigned] = {
        let file = Fixtures.packageRoot.appendingPathComponent("Tests/PluginsTests/Fixtures/sigv4/vectors.json")
        return (try? JSONDecoder().decode(Vectors.self, from: Data(contentsOf: file)).presigned) ?? []
    }()

    @Test func thereAreVectors() {
        #expect(Self.vectors.count >= 8)
        #expect(Self.presigned.count >= 3)
    }

    /// Presigned URLs (query-string authentication), the whole URL byte for byte against botocore's
    /// S3SigV4QueryAuth. moto answers 500 to any presigned URL when it checks signatures, so these
    /// vectors are what holds the links `report --html --presign` makes.
    @Test(arguments: presigned)
    func presignedURLsMatchBotocore(_ vector: Presigned) throws {
        let url = try #require(URLComponents(string: vector.url))
        let host = url.host! + (url.port.map { ":\($0)" } ?? "")
        let formatter = DateFormatter()
        formatter.dateFormat = "yyyyMMdd'T'HHmmss'Z'"
        formatter.timeZone = TimeZone(identifier: "UTC")
        let date = try #require(formatter.date(from: vector.time))
        let query = SigV4.presign(method: "GET", host: host, path: url.percentEncodedPath,
                                  credentials: S3Credentials(accessKey: vector.access_key, secretKey: vector.secret_key,
                                                             sessionToken: vector.session_token),
                                  region: vector.region, date: date, expires: vector.expires)
        let made = vector.url + "?" + query.map { SigV4.encode($0.0) + "=" + SigV4.encode($0.1) }.joined(separator: "&")
        #expect(made == vector.expected)
    }

    @Test(arguments: vectors)
    func matchesBotocore(_ vector: Vector) throws {
        let url = try #require(URLComponents(string: vector.url))
        let host = url.host! + (url.port.map { ":\($0)" } ?? "")
        let query = (url.queryItems ?? []).map { ($0.name, $0.value ?? "") }
        var body = Data()
        var hex = vector.body_hex[...]
        while !hex.isEmpty { body.append(UInt8(hex.prefix(2), radix: 16)!); hex = hex.dropFirst(2) }
        let formatter = DateFormatter()
        formatter.dateFormat = "yyyyMMdd'T'HHmmss'Z'"
        formatter.timeZone = TimeZone(identifier: "UTC")
        let date = try #require(formatter.date(from: vector.time))
        let signed = SigV4.sign(method: vector.method, host: host, path: url.percentEncodedPath, query: query,
                                headers: vector.headers, payloadHash: SigV4.payloadHash(body),
                                credentials: S3Credentials(accessKey: vector.access_key, secretKey: vector.secret_key,
                                                           sessionToken: vector.session_token),
                                region: vector.region, date: date)
        #expect(signed == vector.expected)
    }

    @Test func keysAreEncodedAsS3Expects() {
        #expect(SigV4.encode("dir one/ünicøde+plus.jpg", keepSlash: true) == "dir%20one/%C3%BCnic%C3%B8de%2Bplus.jpg")
        #expect(SigV4.encode("a+b==") == "a%2Bb%3D%3D")
    }
}
