import Foundation
import Logging

/// What a stage may want to know about the item it is working on: the source, its cache key, the
/// run's logger, and the item's deadline.
///
/// Read it with ``current`` from inside any stage: loaders and caches (async) and decoders,
/// processors and encoders (on the engine's CPU workers) alike. Cancellation is Swift's own: an
/// async stage checks `Task.isCancelled` or lets `Task.sleep` throw. `nil` outside a run.
public struct StageContext: Sendable {
    /// The line of the list being processed.
    public let source: Source
    /// The key its data is cached and coalesced under.
    public let cacheKey: String
    /// The run's logger (`--log-level`); log with `source` in the metadata.
    public let logger: Logger
    /// The item's time limit, if it has one. It counts the item's own work: waits for a load slot,
    /// a worker or decode memory pause it.
    public let clock: ItemClock?

    public init(source: Source, cacheKey: String, logger: Logger, clock: ItemClock? = nil) {
        self.source = source
        self.cacheKey = cacheKey
        self.logger = logger
        self.clock = clock
    }

    /// When the item's time limit runs out if it waits for nothing more, if it has one.
    public var deadline: ContinuousClock.Instant? { clock.map { ContinuousClock.now + $0.remaining } }

    @TaskLocal static var taskValue: StageContext?
    private static let threadKey = "pipelinekit.stage-context"

    /// The context of the item the calling stage works on, or `nil` outside a run.
    public static var current: StageContext? {
        if let value = taskValue { return value }
        return (Thread.current.threadDictionary[threadKey] as? Box)?.value
    }

    /// Runs `body` (on a worker thread) with `context` as ``current``.
    static func withThreadValue<T>(_ context: StageContext?, _ body: () throws -> T) rethrows -> T {
        guard let context else { return try body() }
        let dictionary = Thread.current.threadDictionary
        dictionary[threadKey] = Box(context)
        defer { dictionary.removeObject(forKey: threadKey) }
        return try body()
    }

    private final class Box: NSObject {
        let value: StageContext
        init(_ value: StageContext) { self.value = value }
    }
}
