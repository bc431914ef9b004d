import Foundation

/// The stage of a pipeline in which something happened.
///
/// Stages appear in failed items (`"stage": "load"`) and in timings.
public enum StageName: String, Sendable, Codable, CaseIterable {
    case load, decode, process, encode, output
}

/// A kind of failure that a script can count: `http_status`, `timeout`, `too_large`, ...
///
/// Kinds are open: a plugin may define its own with `ErrorKind("my_kind")`. Use lower snake case.
public struct ErrorKind: RawRepresentable, Hashable, Sendable, Codable, CustomStringConvertible,
    ExpressibleByStringLiteral
{
    public let rawValue: String
    public init(rawValue: String) { self.rawValue = rawValue }
    public init(_ rawValue: String) { self.rawValue = rawValue }
    public init(stringLiteral value: String) { self.rawValue = value }
    public var description: String { rawValue }

    /// The server answered with a status outside 2xx.
    public static let httpStatus: ErrorKind = "http_status"
    /// The transfer, or a stage, took longer than allowed.
    public static let timeout: ErrorKind = "timeout"
    /// The input is larger than a configured limit (bytes, pixels or frames).
    public static let tooLarge: ErrorKind = "too_large"
    /// A local file or path does not exist.
    public static let notFound: ErrorKind = "not_found"
    /// The host name could not be resolved.
    public static let dns: ErrorKind = "dns"
    /// No connection could be made.
    public static let connect: ErrorKind = "connect"
    /// The TLS handshake or certificate check failed.
    public static let tls: ErrorKind = "tls"
    /// More redirects than allowed.
    public static let tooManyRedirects: ErrorKind = "too_many_redirects"
    /// A URL, or a redirect, used a protocol other than http or https.
    public static let blockedProtocol: ErrorKind = "blocked_protocol"
    /// The address connected to is in a refused range (loopback, link-local, ...).
    public static let blockedAddress: ErrorKind = "blocked_address"
    /// The source, or a redirect from it, is outside what the pipeline allows (`serve.sources`).
    public static let sourceNotAllowed: ErrorKind = "source_not_allowed"
    /// The connection failed in another way (reset before any byte, protocol error, ...).
    public static let network: ErrorKind = "network"
    /// The bytes are not an image (an HTML page, text, ...).
    public static let notAnImage: ErrorKind = "not_an_image"
    /// The bytes are an image in a format that is not allowed or not supported.
    public static let unsupportedFormat: ErrorKind = "unsupported_format"
    /// The image could not be decoded (truncated, corrupt).
    public static let decodeFailed: ErrorKind = "decode_failed"
    /// A processor failed.
    public static let processFailed: ErrorKind = "process_failed"
    /// The encoder failed.
    public static let encodeFailed: ErrorKind = "encode_failed"
    /// The output could not be written.
    public static let writeFailed: ErrorKind = "write_failed"
    /// The item's outputs are stored but its "ready" event is not delivered yet (a queue keeps
    /// the message and delivers the item again).
    public static let eventPending: ErrorKind = "event_pending"
    /// Two different sources would be written to the same output path.
    public static let outputCollision: ErrorKind = "output_collision"
    /// The body ended before the length the server announced.
    public static let truncated: ErrorKind = "truncated"
    /// The source is not a URL or path this run can load.
    public static let invalidSource: ErrorKind = "invalid_source"
    /// The item was cancelled (the run was interrupted).
    public static let cancelled: ErrorKind = "cancelled"
    /// Reading or writing a local file failed.
    public static let io: ErrorKind = "io"
    /// A store (S3) refused our credentials: retrying will not help until they are fixed.
    public static let auth: ErrorKind = "auth"

    /// Every kind an item of a run can fail with, as the report and metrics name them; the
    /// failures guide lists each (a test checks it).
    public static let itemKinds: [ErrorKind] = [
        .httpStatus, .timeout, .tooLarge, .notFound, .dns, .connect, .tls, .tooManyRedirects, .blockedProtocol,
        .blockedAddress, .sourceNotAllowed, .network, .notAnImage, .unsupportedFormat, .decodeFailed, .processFailed, .encodeFailed,
        .writeFailed, .outputCollision, .truncated, .invalidSource, .cancelled, .io, .auth,
    ]

    // Configuration: what a plugin's factory or the pipeline file refuses (validation errors).

    /// A plugin refuses an option's value, or a combination of options.
    public static let invalidOption: ErrorKind = "invalid_option"
    /// An output name template cannot be used (unknown placeholder, unsafe path).
    public static let invalidTemplate: ErrorKind = "invalid_template"
    /// A plugin was asked to make a stage of another slot.
    public static let wrongSlot: ErrorKind = "wrong_slot"
    /// Two plugins of one slot share a name.
    public static let duplicatePlugin: ErrorKind = "duplicate_plugin"
}

/// A classified failure of one item: which kind, and what exactly happened.
///
/// Stages throw `PipelineError`; the engine adds the stage it was thrown in. Any other error thrown
/// by a stage is wrapped with a kind that fits the stage (`decode_failed` for a decoder, ...).
public struct PipelineError: Error, Sendable, CustomStringConvertible, Equatable {
    /// What kind of failure, for counting.
    public var kind: ErrorKind
    /// A human-readable detail: the status code, ImageMagick's reason, the limit exceeded.
    public var message: String
    /// The stage that failed; set by the engine when the stage did not.
    public var stage: StageName?
    /// The plugin that failed; set by the engine.
    public var plugin: String?

    public init(_ kind: ErrorKind, _ message: String, stage: StageName? = nil, plugin: String? = nil) {
        self.kind = kind
        self.message = message
        self.stage = stage
        self.plugin = plugin
    }

    public var description: String {
        if let stage { return "\(stage.rawValue): \(kind.rawValue): \(message)" }
        return "\(kind.rawValue): \(message)"
    }
}
