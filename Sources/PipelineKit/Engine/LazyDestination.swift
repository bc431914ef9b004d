import Foundation
import Synchronization

/// A destination built when an output is first stored in it, not when the runner is made: app
/// code and the service that take outputs as values never need a pipeline's `output:` (an S3
/// bucket's credentials, say), and a pipeline they load must not fail for it. Made only where
/// ``RunOptions/buildsDestinationOnUse`` says; a failure to build is thrown by the first store.
final class LazyDestination: OutputDestination {
    private let make: @Sendable () throws -> any OutputDestination
    private let built = Mutex<Result<any OutputDestination, any Error>?>(nil)
    /// The `output.dir` text, for locations before the destination exists.
    private let directory: String

    init(directory: String, make: @escaping @Sendable () throws -> any OutputDestination) {
        self.directory = directory
        self.make = make
    }

    func destination() throws -> any OutputDestination {
        try built.withLock { built in
            if let built { return try built.get() }
            let made = Result { try make() }
            built = made
            return try made.get()
        }
    }

    func location(_ relative: String) -> String {
        (try? destination())?.location(relative) ?? (directory as NSString).appendingPathComponent(relative)
    }
    func write(_ output: OutputFile) async throws { try await destination().write(output) }
    func create(_ output: OutputFile) async throws -> ExistingOutput? { try await destination().create(output) }
    func stored(_ relative: String) async throws -> ExistingOutput? { try await destination().stored(relative) }
    func read(_ relative: String) async throws -> Data? { try await destination().read(relative) }
    func preflight() async -> PipelineError? {
        do { return try await destination().preflight() } catch {
            return error as? PipelineError ?? PipelineError(.invalidOption, "\(error)")
        }
    }
    /// A plain path is a local directory whether or not it was built yet (the run record needs
    /// to know at once).
    var localDirectory: String? { Source.urlScheme(of: directory) == nil ? ((try? destination())?.localDirectory ?? directory) : nil }
    func browserURL(_ relative: String) -> String? { (try? destination())?.browserURL(relative) }
    func presignedURL(_ relative: String, expires seconds: Int) -> String? { (try? destination())?.presignedURL(relative, expires: seconds) }
    func list(under prefix: String) async throws -> [String] { try await destination().list(under: prefix) }
}
