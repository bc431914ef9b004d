import Foundation

/// Where an item's encoded outputs go: the sink of the engine's last step.
///
/// The engine makes each output once and hands it to one sink. `run` and `work` store with the
/// pipeline's `output:` destination; the service and app code take the outputs back as values
/// (``ImageOutput``); an app that wants only what the pipeline found asks for facts.
public enum OutputDelivery: String, Sendable, Hashable, CaseIterable {
    /// Stored by the pipeline's `output:` destination (a directory, a bucket), as `run` does.
    case store
    /// Returned as values (``ProcessedItem/outputs``); nothing is written.
    case values
    /// Neither encoded nor stored: the image's facts only (``ProcessedItem/facts``).
    case factsOnly = "facts_only"
}

/// One encoded output, as a value: its bytes (or a spooled file for a very large one), its media
/// type, the name the pipeline gives it, its dimensions and what made it.
public struct ImageOutput: Sendable {
    /// Where the bytes are.
    public enum Body: Sendable {
        /// In memory.
        case data(Data)
        /// In a temporary file, removed when the last copy of this value is gone
        /// (``RunOptions/spoolThreshold``).
        case file(SpooledFile)
    }

    /// The variant's name, in a pipeline with `variants:`.
    public let variant: String?
    /// The name the pipeline's `output.name` gives it, relative to its destination
    /// (`thumbs/cat-1f3c9a20.jpg`), with the extension the encoder chose.
    public let name: String
    public let body: Body
    /// `image/jpeg`, `image/webp`, ...
    public let mediaType: String
    /// The file extension of its format (`jpg`, `webp`, `avif`).
    public let fileExtension: String
    /// Its dimensions in pixels.
    public let size: PixelSize
    /// Its size in bytes.
    public let byteCount: Int
    /// What made these bytes: equal fingerprints, equal bytes. The service's `ETag`.
    public let fingerprint: OutputFingerprint
    /// What the encoder chose (``EncodedImage/facts``), such as the quality an `auto` encoder picked.
    public let encoding: ImageFacts

    public init(variant: String?, name: String, body: Body, mediaType: String, fileExtension: String, size: PixelSize,
                byteCount: Int, fingerprint: OutputFingerprint, encoding: ImageFacts = [:]) {
        self.variant = variant
        self.name = name
        self.body = body
        self.mediaType = mediaType
        self.fileExtension = fileExtension
        self.size = size
        self.byteCount = byteCount
        self.fingerprint = fingerprint
        self.encoding = encoding
    }

    /// The bytes: the body itself, or the spooled file read whole.
    public func data() throws -> Data {
        switch body {
        case .data(let data): return data
        case .file(let file): return try Data(contentsOf: URL(fileURLWithPath: file.path))
        }
    }
}

/// A temporary file holding one output, removed when the last reference to it goes.
public final class SpooledFile: Sendable {
    /// The file's absolute path.
    public let path: String
    /// Its size in bytes.
    public let byteCount: Int

    /// Takes ownership of the file at `path` (`byteCount` bytes): it is removed when this object goes.
    public init(owning path: String, byteCount: Int) {
        self.path = path
        self.byteCount = byteCount
    }

    /// Writes `data` to a new file in `directory`, readable only by this user.
    static func spool(_ data: Data, in directory: String) throws -> SpooledFile {
        let path = (directory as NSString).appendingPathComponent("pipelinekit-output-\(UUID().uuidString)")
        guard FileManager.default.createFile(atPath: path, contents: data, attributes: [.posixPermissions: 0o600]) else {
            throw PipelineError(.writeFailed, "cannot spool a \(Units.formatSize(data.count)) output to \(directory)", stage: .output)
        }
        return SpooledFile(owning: path, byteCount: data.count)
    }

    deinit { unlink(path) }
}

/// What processing one source made: its report (the same ``ItemResult`` a run reports) and, when
/// the outputs were asked for as values, the outputs themselves.
public struct ProcessedItem: Sendable {
    /// How the item ended, as a run reports it: status, timings, caches, facts, the error.
    public var result: ItemResult
    /// The encoded outputs, by variant, when asked for as values (``OutputDelivery/values``);
    /// empty otherwise.
    public var outputs: [ImageOutput]

    public init(result: ItemResult, outputs: [ImageOutput] = []) {
        self.result = result
        self.outputs = outputs
    }

    /// What the pipeline's analysing stages found (dimensions, colour, hashes, ...).
    public var facts: ImageFacts { result.facts }
}
