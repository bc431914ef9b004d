import Foundation
import PipelineKit

/// Outputs written to `s3://bucket/prefix`: one PUT per output, which S3 makes visible only when
/// whole, with `Content-Type` from the file extension and the `output:` options' `Cache-Control`
/// and metadata. With `if_absent`, `If-None-Match: *` keeps an object another machine already
/// wrote (see ``S3Client/put(_:_:contentType:headers:ifAbsent:)``).
struct S3Destination: OutputDestination {
    static let maker = DestinationMaker(scheme: "s3") { url, options in
        try S3Destination(url: url, options: options, environment: ProcessInfo.processInfo.environment)
    }

    let prefix: S3Location
    let client: S3Client
    let headers: [String: String]
    let ifAbsent: Bool

    init(url: String, options: PluginOptions, environment: [String: String]) throws {
        prefix = try S3Location(url)
        client = S3Client(settings: try S3Settings(options: options, environment: environment))
        var headers: [String: String] = [:]
        if let cacheControl = options.string("cache_control"), !cacheControl.isEmpty { headers["Cache-Control"] = cacheControl }
        for (name, value) in options.map("metadata") ?? [:] {
            guard !name.isEmpty, name.allSatisfy({ $0.isLetter || $0.isNumber || $0 == "-" || $0 == "_" }) else {
                throw PipelineError(.invalidOption, "metadata name '\(name)' may use letters, digits, '-' and '_' only")
            }
            headers["x-amz-meta-" + name.lowercased()] = value.description
        }
        self.headers = headers
        ifAbsent = options.bool("if_absent") ?? true
    }

    func object(_ relative: String) -> S3Location {
        let base = prefix.key.isEmpty || prefix.key.hasSuffix("/") ? prefix.key : prefix.key + "/"
        return S3Location(bucket: prefix.bucket, key: base + relative)
    }

    func location(_ relative: String) -> String { object(relative).url }

    func write(_ data: Data, to relative: String) async throws {
        try await client.put(object(relative), data, contentType: Self.contentType(relative), headers: headers, ifAbsent: ifAbsent)
    }

    func copy(_ from: String, to: String) async throws {
        guard let existing = try await client.get(object(from)) else {
            throw PipelineError(.notFound, "the output '\(location(from))' made for the same source earlier in this run is gone")
        }
        try await write(existing.data, to: to)
    }

    func existing(_ relatives: [String]) async throws -> Bool? {
        for relative in relatives where try await client.head(object(relative)) == nil { return false }
        return true
    }

    /// Lists one key of the bucket: wrong credentials, a missing bucket or an unreachable store
    /// are said before the run starts, once.
    func preflight() async -> PipelineError? {
        do {
            _ = try await client.list(bucket: prefix.bucket, prefix: "", after: nil, maxKeys: 1)
            return nil
        } catch let error as PipelineError {
            return error
        } catch {
            return PipelineError(.io, "\(error)")
        }
    }

    /// The MIME type of an output from its extension.
    static func contentType(_ name: String) -> String {
        let types = ["jpg": "image/jpeg", "jpeg": "image/jpeg", "png": "image/png", "webp": "image/webp", "avif": "image/avif",
                     "heic": "image/heic", "gif": "image/gif", "tif": "image/tiff", "tiff": "image/tiff", "json": "application/json"]
        return types[URL(fileURLWithPath: name).pathExtension.lowercased()] ?? "application/octet-stream"
    }
}

/// `s3`: reads `s3://bucket/key` sources from an S3-compatible store.
public struct S3Loader: DataLoading {
    public static let plugin = Plugin.loader(
        PluginSpec(
            name: "s3",
            summary: "Reads s3://bucket/key sources from S3 or an S3-compatible store (MinIO, R2, Ceph), signed with SigV4.",
            options: [
                .size("max_bytes", default: "50MB", min: "1B", doc: "Largest object accepted."),
                .int("max_concurrent", default: 16, range: 1...512, doc: "Requests running at once."),
                .duration("timeout", default: "60s", min: "1ms", max: "1d", doc: "Longest time for one request."),
                .int("retry_attempts", default: 4, range: 1...20, doc: "Attempts in all for 5xx, SlowDown and broken connections."),
            ] + PipelineFileSpec.objectStorage),
        schemes: ["s3"]
    ) { options in try S3Loader(options: options, environment: ProcessInfo.processInfo.environment) }

    /// The client, or why there is none (no credentials): every run makes each loader, and a run
    /// without s3:// sources must not need S3 credentials, so the problem is the item's.
    let client: Result<S3Client, PipelineError>
    public let maxConcurrentLoads: Int

    init(options: PluginOptions, environment: [String: String]) throws {
        do {
            client = .success(S3Client(settings: try S3Settings(options: options, environment: environment),
                                       maxBytes: options.bytes("max_bytes")!, timeout: options.seconds("timeout")!,
                                       attempts: options.int("retry_attempts")!))
        } catch let error as PipelineError {
            client = .failure(error)
        }
        maxConcurrentLoads = options.int("max_concurrent")!
    }

    public func cacheKey(for source: Source) -> String { source.text }

    public func load(_ source: Source) async throws -> LoadedData {
        let location = try S3Location(source.text)
        guard !location.key.isEmpty else { throw PipelineError(.invalidSource, "no object key in \(source.text)") }
        guard let object = try await client.get().get(location) else {
            throw PipelineError(.notFound, "\(source.text): no such object")
        }
        return LoadedData(data: object.data, contentType: object.contentType,
                          directives: CacheDirectives(httpHeaders: object.etag.map { ["etag": $0] } ?? [:]))
    }
}
