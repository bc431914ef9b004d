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
///
/// The timer is a dispatch timer source, cancelled as soon as the work finishes. (A task sleeping
/// in `Task.sleep` stays scheduled until its deadline even when cancelled: with the default 5-minute
/// item limit, every item of a long list kept one alive for 5 minutes, and peak memory grew with
/// the list.)
func withDeadline<T: Sendable>(_ seconds: Double?, timeout: @escaping @Sendable () -> any Error,
                               _ operation: @escaping @Sendable () async throws -> T) async throws -> T {
    guard let seconds else { return try await operation() }
    let race = DeadlineRace()
    return try await withCheckedThrowingContinuation { continuation in
        let work = Task {
            let result: Result<T, any Error>
            do { result = .success(try await operation()) } catch { result = .failure(error) }
            if race.claim() { continuation.resume(with: result) }
        }
        let timer = DispatchSource.makeTimerSource(queue: DeadlineRace.queue)
        timer.setEventHandler {
            guard race.claim() else { return }
            work.cancel()
            continuation.resume(throwing: timeout())
        }
        timer.setCancelHandler { DeadlineRace.armed.subtract(1, ordering: .relaxed) }
        timer.schedule(deadline: .now() + seconds)
        DeadlineRace.armed.add(1, ordering: .relaxed)
        race.arm(timer)
    }
}

/// Who finished first, the work or the timer; and the timer, cancelled once either has.
final class DeadlineRace: Sendable {
    /// Timer sources armed and not yet torn down by dispatch (finished items must leave none).
    static let armed = Atomic<Int>(0)
    static var armedCount: Int { armed.load(ordering: .relaxed) }
    /// One serial queue for every timer's handler: the handlers only resume a continuation.
    static let queue = DispatchQueue(label: "pipelinectl.deadlines")

    private struct State: @unchecked Sendable {  // the timer is only touched under the lock
        var settled = false
        var timer: (any DispatchSourceTimer)?
    }
    private let state = Mutex(State())

    /// Starts `timer`, or cancels it at once when the race is already settled.
    func arm(_ timer: any DispatchSourceTimer) {
        timer.resume()
        let settled = state.withLock { state in
            if !state.settled { state.timer = timer }
            return state.settled
        }
        if settled { timer.cancel() }
    }

    /// True for the first caller only; the timer is cancelled either way it ends.
    func claim() -> Bool {
        let (first, timer) = state.withLock { state in
            defer { state.settled = true; state.timer = nil }
            return (!state.settled, state.timer)
        }
        timer?.cancel()
        return first
    }
}
