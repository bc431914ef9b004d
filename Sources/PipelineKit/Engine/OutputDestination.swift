import Foundation

/// Where a run's outputs go. The engine names outputs by paths relative to the destination and
/// hands every write to it: this is the one place a new destination (object storage) plugs in.
/// A destination must make each output appear whole or not at all.
public protocol OutputDestination: Sendable {
    /// How reports show the output at `relative` (a path, or a URL).
    func location(_ relative: String) -> String
    /// Writes `data` as the output at `relative`, atomically.
    func write(_ data: Data, to relative: String) async throws
    /// Makes the output at `to` a copy of the one already written at `from` (a duplicate source
    /// named differently); throws when `from` is gone.
    func copy(_ from: String, to: String) async throws
    /// `nil` for a local directory, where `--resume` reads the run's own record of completed
    /// outputs. Otherwise whether every output at `relatives` already exists (asked of the store,
    /// for example with HEAD), which is how `--resume` skips an item.
    func existing(_ relatives: [String]) async throws -> Bool?
    /// Checks, before the run, that outputs can be written (credentials, bucket); a message when not.
    func preflight() async -> PipelineError?
}

extension OutputDestination {
    public func existing(_ relatives: [String]) async throws -> Bool? { nil }
    public func preflight() async -> PipelineError? { nil }
}

/// Makes the destination for output directories written as URLs of one scheme (`s3://bucket/prefix`).
public struct DestinationMaker: Sendable {
    public let scheme: String
    /// From the output URL and every `output:` option.
    public let make: @Sendable (_ url: String, _ options: PluginOptions) throws -> any OutputDestination

    public init(scheme: String, make: @escaping @Sendable (_ url: String, _ options: PluginOptions) throws -> any OutputDestination) {
        self.scheme = scheme
        self.make = make
    }

    /// The scheme of an output directory written as a URL (`s3` for `s3://b/p`), `nil` for a path.
    public static func scheme(of directory: String) -> String? {
        guard let range = directory.range(of: "://") else { return nil }
        let scheme = directory[..<range.lowerBound]
        guard !scheme.isEmpty, scheme.allSatisfy({ $0.isLetter || $0.isNumber }) else { return nil }
        return scheme.lowercased()
    }
}

/// A local directory: each output written to a temporary file, synced and renamed into place.
struct LocalDirectory: OutputDestination {
    let path: String

    func location(_ relative: String) -> String {
        path.hasSuffix("/") ? path + relative : path + "/" + relative
    }

    func write(_ data: Data, to relative: String) async throws {
        let target = location(relative)
        try await WorkerPool.io.run { try AtomicFile.write(data, to: target) }
    }

    func copy(_ from: String, to: String) async throws {
        let (source, target) = (location(from), location(to))
        try await WorkerPool.io.run {
            guard let data = FileManager.default.contents(atPath: source) else {
                throw PipelineError(.notFound, "the output '\(source)' made for the same source earlier in this run is gone")
            }
            try AtomicFile.write(data, to: target)
        }
    }
}
