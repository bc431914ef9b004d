import Foundation
import PipelineKit

/// `s3`: outputs written to `s3://bucket/prefix` in S3 or an S3-compatible store. One PUT per
/// output, which the store makes visible only when whole, with `Content-Type` from the file
/// extension, the `output:` options' `Cache-Control` and metadata, and the output's fingerprint
/// as the object metadata `pipelinectl-fingerprint`. Where only a new object may be made, the
/// PUT carries `If-None-Match: *`; a store without conditional writes (HTTP 501) is asked with
/// HEAD first.
struct S3Destination: OutputDestination {
    static let plugin = Plugin.destination(
        PluginSpec(
            name: "s3",
            summary: "Writes outputs to s3://bucket/prefix in S3 or an S3-compatible store (MinIO, R2, Ceph), one PUT each, with the output's fingerprint as object metadata.",
            options: [
                .string("cache_control", doc: "The objects' Cache-Control header.")
                    .example("\"public, max-age=31536000, immutable\""),
                .map("metadata", doc: "User metadata on every object (x-amz-meta-NAME).")
                    .example("{ pipeline: thumbnails }"),
            ] + S3Settings.options),
        schemes: ["s3"],
        check: { options in
            _ = try S3Location(options.string("dir") ?? "")
            _ = try S3Destination.headers(options)
        }
    ) { options in try S3Destination(options: options, environment: ProcessInfo.processInfo.environment) }

    /// The metadata key (after `x-amz-meta-`) holding an output's fingerprint.
    static let fingerprintKey = "pipelinectl-fingerprint"

    let prefix: S3Location
    let client: S3Client
    let headers: [String: String]

    init(options: PluginOptions, environment: [String: String]) throws {
        prefix = try S3Location(options.string("dir") ?? "")
        client = S3Client(settings: try S3Settings(options: options, environment: environment))
        headers = try Self.headers(options)
    }

    /// The headers every PUT carries: `Cache-Control` and the user's metadata. Throws for a
    /// metadata name S3 would refuse or that pipelinectl uses itself.
    static func headers(_ options: PluginOptions) throws -> [String: String] {
        var headers: [String: String] = [:]
        if let cacheControl = options.string("cache_control"), !cacheControl.isEmpty { headers["Cache-Control"] = cacheControl }
        for (name, value) in options.map("metadata") ?? [:] {
            guard !name.isEmpty, name.allSatisfy({ $0.isLetter || $0.isNumber || $0 == "-" || $0 == "_" }) else {
                throw PipelineError(.invalidOption, "metadata name '\(name)' may use letters, digits, '-' and '_' only")
            }
            guard name.lowercased() != fingerprintKey else {
                throw PipelineError(.invalidOption, "metadata name '\(name)' is the one pipelinectl records fingerprints under")
            }
            headers["x-amz-meta-" + name.lowercased()] = value.description
        }
        return headers
    }

    func object(_ relative: String) -> S3Location {
        let base = prefix.key.isEmpty || prefix.key.hasSuffix("/") ? prefix.key : prefix.key + "/"
        return S3Location(bucket: prefix.bucket, key: base + relative)
    }

    func location(_ relative: String) -> String { object(relative).url }

    /// The object's HTTP URL as the store is addressed (path or virtual-host style); it opens in a
    /// browser when the object is public.
    func browserURL(_ relative: String) -> String? { client.address(object(relative), query: []).url }

    func presignedURL(_ relative: String, expires seconds: Int) -> String? {
        client.presignedURL(object(relative), expires: seconds)
    }

    func list(under relativePrefix: String) async throws -> [String] {
        let start = object(relativePrefix).key
        let base = object("").key
        var keys: [String] = [], token: String?
        repeat {
            let page = try await client.list(bucket: prefix.bucket, prefix: start, after: token)
            keys += page.keys.map { String($0.key.dropFirst(base.count)) }
            token = page.next
        } while token != nil
        return keys
    }

    func headers(for output: OutputFile) -> [String: String] {
        var all = headers
        all["x-amz-meta-" + Self.fingerprintKey] = output.fingerprint.description
        return all
    }

    func write(_ output: OutputFile) async throws {
        try await client.put(object(output.relative), output.data, contentType: output.contentType, headers: headers(for: output))
    }

    func create(_ output: OutputFile) async throws -> ExistingOutput? {
        let target = object(output.relative)
        switch try await client.put(target, output.data, contentType: output.contentType, headers: headers(for: output), ifAbsent: true) {
        case .written: return nil
        case .alreadyThere:
            // Another writer's object: what made it. Gone again by now (deleted): write ours.
            if let there = try await stored(output.relative) { return there }
            try await write(output)
            return nil
        case .notSupported:
            if let there = try await stored(output.relative) { return there }
            try await write(output)
            return nil
        }
    }

    func stored(_ relative: String) async throws -> ExistingOutput? {
        guard let head = try await client.head(object(relative)) else { return nil }
        return ExistingOutput(fingerprint: head.metadata[Self.fingerprintKey].flatMap { OutputFingerprint(stored: $0) })
    }

    func read(_ relative: String) async throws -> Data? { try await client.get(object(relative))?.data }

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
}
