import Foundation
import PipelineKit
import Synchronization

/// A URL list kept in a bucket (`pipelinectl run P s3://bucket/urls.txt`), read in ranged GETs of
/// `chunkSize` bytes, so that a list of any length streams with constant memory, as a file does.
/// Credentials and endpoint come from the AWS environment variables.
public final class S3List: RemoteList {
    let location: S3Location
    let client: S3Client
    let chunkSize: Int
    /// The list's size, once asked.
    private let size = Mutex<Int?>(nil)

    /// The list at `url` (`s3://bucket/key`), reached with the AWS settings in `environment`.
    public static func sourceList(_ url: String, environment: [String: String] = ProcessInfo.processInfo.environment,
                                  chunkSize: Int = 8 << 20) throws -> SourceList {
        let location = try S3Location(url)
        guard !location.key.isEmpty else { throw PipelineError(.invalidSource, "no object key in the URL list \(url)") }
        let settings = try S3Settings(options: PluginOptions(), environment: environment)
        return SourceList(url: url, remote: S3List(location: location, client: S3Client(settings: settings), chunkSize: chunkSize))
    }

    /// `s3`: lists at `s3://bucket/key`.
    public static let plugin = Plugin.list(
        PluginSpec(name: "s3",
                   summary: "Reads sources from an object in S3 or an S3-compatible store, streamed in ranged GETs of 8 MiB (credentials and endpoint from the AWS environment).",
                   options: []),
        schemes: ["s3"]
    ) { options in try sourceList(options.string("url") ?? "") }

    init(location: S3Location, client: S3Client, chunkSize: Int) {
        self.location = location
        self.client = client
        self.chunkSize = chunkSize
    }

    public func check() async throws { _ = try await totalSize() }

    public func read(from offset: Int) async throws -> [UInt8] {
        let total = try await totalSize()
        guard offset < total else { return [] }
        guard let data = try await client.get(location, offset: offset, length: min(chunkSize, total - offset)) else {
            throw PipelineError(.notFound, "the URL list \(location.url) was deleted while it was read")
        }
        guard !data.isEmpty else { throw PipelineError(.truncated, "the URL list \(location.url) ended at byte \(offset) of \(total)") }
        return [UInt8](data)
    }

    /// The list's size, asked once (HEAD).
    func totalSize() async throws -> Int {
        if let known = size.withLock({ $0 }) { return known }
        guard let object = try await client.head(location) else {
            throw PipelineError(.notFound, "the URL list \(location.url) does not exist")
        }
        guard let total = object.size else { throw PipelineError(.io, "the store gave no size for the URL list \(location.url)") }
        size.withLock { $0 = total }
        return total
    }
}
