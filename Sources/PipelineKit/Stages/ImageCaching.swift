import Foundation

/// The image cache slot: keeps decoded or partly processed images in memory during a run.
///
/// Keys are the source's cache key plus the identifiers of the processors applied so far, so
/// duplicate sources reuse the decoded image instead of decoding again. Must be thread-safe.
public protocol ImageCaching: Sendable {
    func image(for key: String) -> PipelineImage?
    func store(_ image: PipelineImage, for key: String)
    /// Images dropped so far to stay within limits, when the cache counts them (for the summary).
    var evictionCount: Int? { get }
}

extension ImageCaching {
    public var evictionCount: Int? { nil }
}
