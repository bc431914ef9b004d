import Foundation
import PipelineKit

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
                .size("ranges_above", default: "16MB", min: "0B",
                      doc: "A video object larger than this is not fetched whole: after its first 64 KiB the GET stops, and the decoder fetches by range (signed GETs with If-Match its ETag) only the parts it needs. Never stored in the data cache."),
                .size("max_ranged_bytes", default: "64GB", min: "0B",
                      doc: "Largest object read by range (the decoder's max_video_read bounds what is read of it); 0B: never read by range."),
                .bool("traceparent", default: false,
                      doc: "With traces on, send each object GET's W3C `traceparent` to the store, unsigned (AWS S3 ignores it; a traced MinIO or a proxy in front of the store continues the trace). Off: trace ids stay in this process."),
            ] + S3Settings.options),
        schemes: ["s3"]
    ) { options in try S3Loader(options: options, environment: ProcessInfo.processInfo.environment) }

    /// A run builds the loader when its first s3:// source comes, so a run without one needs no
    /// S3 credentials; without them, every s3:// item fails saying so.
    let client: S3Client
    public let maxConcurrentLoads: Int

    init(options: PluginOptions, environment: [String: String]) throws {
        let most = options.bytes("max_ranged_bytes") ?? 0
        client = S3Client(settings: try S3Settings(options: options, environment: environment),
                          maxBytes: options.bytes("max_bytes")!, timeout: options.seconds("timeout")!,
                          attempts: options.int("retry_attempts")!,
                          ranges: most > 0 ? RangedHeadRule(above: options.bytes("ranges_above")!, maxSize: most) : nil,
                          propagatesTrace: options.bool("traceparent")!)
        maxConcurrentLoads = options.int("max_concurrent")!
    }

    public func cacheKey(for source: Source) -> String { source.text }

    public func load(_ source: Source) async throws -> LoadedData {
        let location = try S3Location(source.text)
        guard !location.key.isEmpty else { throw PipelineError(.invalidSource, "no object key in \(source.text)") }
        guard let object = try await client.get(location) else {
            throw PipelineError(.notFound, "\(source.text): no such object")
        }
        let directives = CacheDirectives(httpHeaders: object.etag.map { ["etag": $0] } ?? [:])
        if let size = object.rangedSize {
            return LoadedData(ranged: try client.rangedBody(location, object, size: size), head: object.data,
                              contentType: object.contentType, directives: directives)
        }
        return LoadedData(data: object.data, contentType: object.contentType, directives: directives)
    }
}
