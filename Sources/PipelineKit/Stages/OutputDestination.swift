import Foundation

/// The destination slot: where a run's outputs go (a local directory, a bucket, the body of an
/// HTTP response, a tar archive).
///
/// A destination is a plugin like any other stage (``Plugin/destination(_:schemes:check:make:)``),
/// chosen by the scheme of `output.dir` (none for a local path, `s3` for `s3://bucket/prefix`)
/// and made from the `output:` options. The engine names each output by a path relative to the
/// destination and decides what happens to an output that is already there (`output.existing`);
/// the destination only stores, reads back and describes. It must make each output appear whole
/// or not at all, and record the output's ``OutputFingerprint`` with it.
public protocol OutputDestination: Sendable {
    /// How reports show the output at `relative` (a path, or a URL such as `s3://bucket/key`).
    func location(_ relative: String) -> String

    /// Stores `output` at its path, atomically, replacing whatever is there.
    func write(_ output: OutputFile) async throws

    /// Stores `output` only if nothing is at its path yet (`If-None-Match: *`, a link that refuses
    /// to replace); returns `nil` when it was stored, or what is already there. The default asks
    /// ``stored(_:)`` first, then writes: not atomic, but never replaces.
    func create(_ output: OutputFile) async throws -> ExistingOutput?

    /// What is stored at `relative` (its fingerprint when one was recorded), or `nil` when nothing is.
    func stored(_ relative: String) async throws -> ExistingOutput?

    /// The bytes of the output at `relative`, or `nil` when there is none (to copy an output made
    /// for a duplicate source under another name).
    func read(_ relative: String) async throws -> Data?

    /// Checks, before the run, that outputs can be written (credentials, bucket, permissions); a
    /// message when not.
    func preflight() async -> PipelineError?

    /// The directory on this machine the outputs are in, when they are: the engine keeps the
    /// record `--resume` reads there. `nil` (the default) for anything else.
    var localDirectory: String? { get }

    /// An address a browser can open for the output at `relative` (the object's HTTP URL), when
    /// there is one other than a file path; reports and contact sheets link it. Default `nil`.
    func browserURL(_ relative: String) -> String?

    /// A URL that lets anyone holding it read the output at `relative` for `seconds`, where the
    /// destination can make one (a presigned S3 URL). Default `nil`.
    func presignedURL(_ relative: String, expires seconds: Int) -> String?

    /// The paths, relative to the destination, of every output under `prefix` (a relative path
    /// ending in `/`, or empty for all). The default says the destination cannot list.
    func list(under prefix: String) async throws -> [String]
}

extension OutputDestination {
    public func create(_ output: OutputFile) async throws -> ExistingOutput? {
        if let existing = try await stored(output.relative) { return existing }
        try await write(output)
        return nil
    }
    public func preflight() async -> PipelineError? { nil }
    public var localDirectory: String? { nil }
    public func browserURL(_ relative: String) -> String? { nil }
    public func presignedURL(_ relative: String, expires seconds: Int) -> String? { nil }
    public func list(under prefix: String) async throws -> [String] {
        throw PipelineError(.invalidOption, "\(location(prefix)): this destination cannot list what it holds")
    }
}

/// One output to store: its bytes, its name relative to the destination, and what made it.
public struct OutputFile: Sendable {
    /// The output's path relative to the destination (`thumbs/a-1f3c9a20.jpg`).
    public let relative: String
    public let data: Data
    /// What made these bytes; stored with them (an extended attribute, object metadata).
    public let fingerprint: OutputFingerprint
    /// The MIME type, from the extension (`image/webp`).
    public var contentType: String { OutputFile.contentType(relative) }

    public init(relative: String, data: Data, fingerprint: OutputFingerprint) {
        self.relative = relative
        self.data = data
        self.fingerprint = fingerprint
    }

    /// The MIME type of a file name from its extension; `application/octet-stream` when unknown.
    public static func contentType(_ name: String) -> String {
        let types = ["jpg": "image/jpeg", "jpeg": "image/jpeg", "png": "image/png", "webp": "image/webp", "avif": "image/avif", "jxl": "image/jxl",
                     "heic": "image/heic", "gif": "image/gif", "tif": "image/tiff", "tiff": "image/tiff", "json": "application/json"]
        let ext = name.split(separator: ".").last.map { String($0).lowercased() } ?? ""
        return types[ext] ?? "application/octet-stream"
    }
}

/// An output already stored at a path.
public struct ExistingOutput: Sendable, Equatable {
    /// What made it, as recorded with it; `nil` when nothing was recorded (written by another
    /// tool or an older pipelinectl, or a file system without extended attributes).
    public let fingerprint: OutputFingerprint?

    public init(fingerprint: OutputFingerprint?) { self.fingerprint = fingerprint }
}

/// What made an output: its recipe (the decoder, every processor, the encoder and the metadata
/// policy, with their options: everything that decides the bytes) and the source it was made
/// from (its validator, such as an ETag or a file's size and time, or the digest of its bytes).
///
/// Two outputs with equal fingerprints have the same bytes. An output already at a path is kept
/// only when its fingerprint equals the one this run would write; `--resume` compares recipes
/// (it does not load sources again).
public struct OutputFingerprint: Sendable, Hashable, CustomStringConvertible {
    /// 32 hex digits identifying the recipe.
    public let recipe: String
    /// 33 characters identifying the source: `v` and 32 hex digits of its validator, `d` and 32
    /// of its bytes' digest when it has no validator, or `f` for the `on_failure` fallback image.
    public let source: String

    public init(recipe: String, source: String) {
        self.recipe = recipe
        self.source = source
    }

    /// The stored form, `RECIPE.SOURCE` (object metadata, an extended attribute).
    public var description: String { recipe + "." + source }

    /// Reads the stored form; `nil` when it is not one.
    public init?(stored text: String) {
        let parts = text.split(separator: ".")
        guard parts.count == 2, parts[0].count == 32, parts[1].count == 33,
              parts[0].allSatisfy(\.isHexDigit), parts[1].dropFirst().allSatisfy(\.isHexDigit) else { return nil }
        recipe = String(parts[0])
        source = String(parts[1])
    }

    /// The recipe part for a chain's identifier (decoder, processors, encoder, metadata policy).
    public static func recipe(_ identifier: String) -> String { String(Hashing.sha256Hex(identifier).prefix(32)) }

    /// The source part for loaded bytes: their validator when the loader gave one, else their digest
    /// (`digest`, the hex SHA-256 of the bytes, when already known).
    public static func source(_ data: LoadedData, digest: String? = nil) -> String {
        if let validator = data.directives.etag ?? data.directives.lastModified {
            return "v" + Hashing.sha256Hex("validator:" + validator).prefix(32)
        }
        return "d" + (digest ?? data.bodyDigest()).prefix(32)
    }

    /// The source part for the `on_failure` fallback image (its bytes' digest).
    public static func fallback(_ data: Data) -> String { "f" + Hashing.sha256Hex(data).prefix(32) }
}

/// What `output.existing` does with an output that is already at its path.
public enum ExistingOutputs: String, Sendable, CaseIterable {
    /// Kept when its fingerprint is the one this run would write; otherwise replaced (the default).
    case replaceIfChanged = "replace_if_changed"
    /// Never replaced; an output whose fingerprint differs is reported stale and the run exits 1.
    case keep
    /// Always replaced.
    case replace
}

/// What happened to one output.
public enum OutputState: String, Sendable, Codable {
    /// Written by this run.
    case written
    /// Already there with the fingerprint this run would write: left as it was.
    case kept
    /// Already there with another fingerprint (or none), and kept because `existing: keep`.
    case stale
}
