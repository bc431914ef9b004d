import Foundation
import Synchronization

/// The destination of `pipelinectl serve`: outputs are kept in memory, to be sent as the body of
/// the response that asked for them, and are not written anywhere.
///
/// Requests that share one job (the same result asked for at once) read the same entry, so an
/// entry stays after it is read, and the least recently used ones go when the store holds more
/// than `capacity` bytes. It is a short-lived hand-over, not the result storage: results that
/// outlive the process are the data cache's (`store: processed`).
public final class ResponseStore: OutputDestination {
    private struct Entry {
        var file: OutputFile
        var used: UInt64
    }
    private struct State {
        var entries: [String: Entry] = [:]
        var bytes = 0
        var clock: UInt64 = 0
    }
    private let state = Mutex(State())
    /// The most bytes kept; at least the newest output is always kept whatever its size.
    public let capacity: Int

    public init(capacity: Int) { self.capacity = max(0, capacity) }

    public func location(_ relative: String) -> String { relative }

    public func write(_ output: OutputFile) async throws {
        state.withLock { state in
            state.clock += 1
            if let old = state.entries[output.relative] { state.bytes -= old.file.data.count }
            state.entries[output.relative] = Entry(file: output, used: state.clock)
            state.bytes += output.data.count
            while state.bytes > capacity, state.entries.count > 1,
                  let oldest = state.entries.min(by: { $0.value.used < $1.value.used }), oldest.key != output.relative {
                state.entries[oldest.key] = nil
                state.bytes -= oldest.value.file.data.count
            }
        }
    }

    public func stored(_ relative: String) async throws -> ExistingOutput? {
        state.withLock { $0.entries[relative].map { ExistingOutput(fingerprint: $0.file.fingerprint) } }
    }

    public func read(_ relative: String) async throws -> Data? { file(relative)?.data }

    /// The output at `relative` with its fingerprint, marked as just used; `nil` when there is none.
    public func file(_ relative: String) -> OutputFile? {
        state.withLock { state in
            guard var entry = state.entries[relative] else { return nil }
            state.clock += 1
            entry.used = state.clock
            state.entries[relative] = entry
            return entry.file
        }
    }
}
