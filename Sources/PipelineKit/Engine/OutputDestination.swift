import Foundation

/// Where a run's outputs go. The engine names outputs by paths relative to the destination and
/// hands every write to it: this is the one place a new destination (object storage) plugs in.
/// A destination must make each output appear whole or not at all.
protocol OutputDestination: Sendable {
    /// How reports show the output at `relative` (a path, or a URL).
    func location(_ relative: String) -> String
    /// Writes `data` as the output at `relative`, atomically.
    func write(_ data: Data, to relative: String) async throws
    /// Makes the output at `to` a copy of the one already written at `from` (a duplicate source
    /// named differently); throws when `from` is gone.
    func copy(_ from: String, to: String) async throws
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
