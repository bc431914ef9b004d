import Foundation

/// The data cache slot: keeps the bytes a loader produced, by key, across runs.
///
/// A data cache must never return an entry that was not completely written, and never return
/// bytes that differ from what was stored (it checks and drops damaged entries instead).
public protocol DataCaching: Sendable {
    /// The stored bytes for `key`, or `nil` when there are none (or they were damaged).
    func data(for key: String) async -> LoadedData?

    /// Stores `data` for `key`. Failing to store is not an error for the item; it is logged.
    func store(_ data: LoadedData, for key: String) async throws
}
