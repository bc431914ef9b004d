import Foundation

/// The list slot: where a run's sources come from, one item at a time: a file of URLs and paths,
/// standard input, an object in a bucket, or a queue.
///
/// A list is a plugin (``Plugin/list(_:schemes:check:make:)``) chosen by the scheme of what
/// `pipelinectl run PIPELINE LIST` names (none for a path or `-`, `s3` for `s3://bucket/key`).
/// It is opened once, before the run starts, so that a list that cannot be read is said then.
/// A list that hands out work to be acknowledged (a queue) does so in ``settle(_:as:)``, which
/// the engine calls when an item is finished: after its outputs are stored.
public protocol SourceListing: Sendable {
    /// The list as messages and reports name it: a path, `-`, a URL.
    var name: String { get }
    /// The directory relative paths in the list resolve against.
    var baseDirectory: String { get }
    /// Whether sources may be read ahead in batches (a file); `false` for sources that come when
    /// they come (standard input, a queue), each started as soon as it arrives.
    var readsAhead: Bool { get }
    /// Checks that the list can be read (it exists, the store accepts the credentials); throws a
    /// ``PipelineError`` naming the list when not. Default: nothing to check before opening.
    func check() async throws
    /// Opens the list to read it once, from the start; throws naming the list when it cannot.
    func open() async throws -> any SourceCursor
    /// Called when the item made from `source` is finished, with its result: its outputs are
    /// stored, or it failed. A queue acknowledges or releases the item here. Default: nothing.
    func settle(_ source: Source, as result: ItemResult) async
    /// Asks a list that waits for sources (a queue) to end soon: its cursor returns `nil` once
    /// what it is waiting for now has come (a stop by signal). Default: nothing.
    func stopReading()
    /// Called once when the run is over, every started item settled: a queue hands back what it
    /// received but never started. Default: nothing.
    func runEnded() async
}

extension SourceListing {
    public func check() async throws {}
    public func settle(_ source: Source, as result: ItemResult) async {}
    public func stopReading() {}
    public func runEnded() async {}
}

/// An open list: its sources in order, each once; `nil` at the end. Read by one task at a time.
public protocol SourceCursor: AnyObject, Sendable {
    func next() async throws -> Source?
}

/// An open list as an `AsyncSequence`, for ``PipelineRunner/run(_:settle:onItem:)``.
public struct SourceCursorSequence: AsyncSequence, Sendable {
    public typealias Element = Source
    public let cursor: any SourceCursor
    /// Whether reading ahead in batches pays (``SourceListing/readsAhead``).
    public let readsAhead: Bool

    public init(_ cursor: any SourceCursor, readsAhead: Bool) {
        self.cursor = cursor
        self.readsAhead = readsAhead
    }

    public func makeAsyncIterator() -> Iterator { Iterator(cursor: cursor) }

    public struct Iterator: AsyncIteratorProtocol {
        let cursor: any SourceCursor
        public mutating func next() async throws -> Source? { try await cursor.next() }
    }
}
