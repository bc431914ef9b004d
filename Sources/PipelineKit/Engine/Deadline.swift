import Foundation
import Synchronization

/// Which stage an item is in, for reporting where a time limit struck.
final class StageTracker: Sendable {
    private let current = Mutex(StageName.load)
    func enter(_ stage: StageName) { current.withLock { $0 = stage } }
    var stage: StageName { current.withLock { $0 } }
}

/// Runs `operation` and returns its result, or throws `timeout()` once `seconds` have passed,
/// without waiting for the operation: it is cancelled and left to end on its own. (A plugin blocked
/// inside a C call keeps its worker thread until it returns; the run goes on without it.)
func withDeadline<T: Sendable>(_ seconds: Double?, timeout: @escaping @Sendable () -> any Error,
                               _ operation: @escaping @Sendable () async throws -> T) async throws -> T {
    guard let seconds else { return try await operation() }
    let race = DeadlineRace()
    return try await withCheckedThrowingContinuation { continuation in
        let work = Task {
            let result: Result<T, any Error>
            do { result = .success(try await operation()) } catch { result = .failure(error) }
            if race.claim() {
                race.timer.withLock { $0?.cancel() }
                continuation.resume(with: result)
            }
        }
        let timer = Task {
            try? await Task.sleep(for: .seconds(seconds))
            guard !Task.isCancelled, race.claim() else { return }
            work.cancel()
            continuation.resume(throwing: timeout())
        }
        race.timer.withLock { $0 = timer }
    }
}

/// Who finished first: the work or the timer.
private final class DeadlineRace: Sendable {
    let settled = Mutex(false)
    let timer = Mutex<Task<Void, Never>?>(nil)
    /// True for the first caller only.
    func claim() -> Bool { settled.withLock { done in defer { done = true }; return !done } }
}
