import Foundation
import Synchronization

/// Which stage an item is in, for reporting where a time limit struck.
final class StageTracker: Sendable {
    private let current = Mutex(StageName.load)
    func enter(_ stage: StageName) { current.withLock { $0 = stage } }
    var stage: StageName { current.withLock { $0 } }
}

/// An item's time limit, counting the item's own work and not its waits for a shared resource (a
/// load slot, a CPU worker, decode memory): while the item waits, the clock is paused.
///
/// The timer is one dispatch timer source per item, cancelled as soon as the item is settled. A
/// wait only moves the deadline later, so waits leave the timer alone: when it goes off, it strikes
/// only if the item is running and its own time is used up, and is otherwise set again for the time
/// left (or, during a wait, when the wait ends). Re-arming at every wait woke dispatch's overcommit
/// threads (which run the timers' queue) about nine times a request under `serve` (corpus JPEG, 2
/// connections: 14,528 switches in 1,639 requests); now about four (6,755 in 1,681). (A task
/// sleeping in `Task.sleep` stays scheduled until its deadline even when cancelled: with the
/// default 5-minute limit every item of a long list kept one alive, and memory grew with the list.)
public final class ItemClock: Sendable {
    private struct State: Sendable {
        var used: Duration = .zero
        var runningSince: Duration?
        var pauses = 0
        var settled = false
        var timer: (any ClockTimer)?
        /// Which arming the current timer belongs to (an older timer's event is ignored).
        var generation = 0
        var onExpire: (@Sendable () -> Void)?
    }
    private let state = Mutex(State())
    private let timers: any TimerSource
    /// The whole limit.
    public let limit: Duration

    /// A limit of `limit`, counted by `timers` (the machine's monotonic clock unless a test drives one).
    init(limit: Duration, timers: any TimerSource = DispatchTimers.shared) {
        self.limit = limit
        self.timers = timers
    }

    /// Time left before the limit strikes, not counting waits to come.
    public var remaining: Duration { state.withLock { left($0) } }

    /// Starts counting; `onExpire` runs once if the limit strikes before ``settle()``.
    func start(onExpire: @escaping @Sendable () -> Void) {
        state.withLock { state in
            state.onExpire = onExpire
            if state.pauses == 0 {
                state.runningSince = timers.now
                arm(&state)
            }
        }
    }

    /// Ends the race: true for the first caller only (the item's end, or the limit); the timer is
    /// cancelled either way.
    func settle() -> Bool {
        let (first, timer) = state.withLock { state in
            defer { state.settled = true; state.timer = nil; state.onExpire = nil }
            return (!state.settled, state.timer)
        }
        timer?.cancel()
        return first
    }

    /// Marks the start of a wait for a shared resource; the clock stops until the returned
    /// ``Wait`` ends. Waits may overlap (the clock runs again when the last ends). The timer is
    /// left as it is (see the type's comment).
    public func beginWait() -> Wait {
        state.withLock { state in
            state.pauses += 1
            guard state.pauses == 1, let since = state.runningSince else { return }
            state.used += timers.now - since
            state.runningSince = nil
        }
        return Wait(self)
    }

    private func endWait() {
        state.withLock { state in
            state.pauses -= 1
            guard state.pauses == 0, !state.settled, state.onExpire != nil else { return }
            state.runningSince = timers.now
            // A timer still set goes off no later than the deadline, which the wait moved later.
            if state.timer == nil { arm(&state) }
        }
    }

    /// Time left of the limit, counting the running stretch if one is under way.
    private func left(_ state: State) -> Duration {
        let running = state.runningSince.map { timers.now - $0 } ?? .zero
        return max(.zero, limit - state.used - running)
    }

    /// Sets the timer (made once per item) to go off when the time left runs out.
    private func arm(_ state: inout State) {
        let left = left(state)
        if let timer = state.timer {
            timer.schedule(after: left)
            return
        }
        state.generation += 1
        let generation = state.generation
        state.timer = timers.timer(after: left) { [weak self] in self?.fire(generation) }
    }

    private func fire(_ generation: Int) {
        let expire = state.withLock { state -> (@Sendable () -> Void)? in
            guard state.generation == generation, state.timer != nil, !state.settled else { return nil }
            if state.pauses > 0 {
                // Waiting: the clock stands still; the wait's end sets the timer for what is left.
                state.timer?.cancel()
                state.timer = nil
                return nil
            }
            if left(state) > .zero {
                arm(&state)  // the item waited since the timer was set: not its time yet
                return nil
            }
            state.settled = true
            state.timer?.cancel()
            state.timer = nil
            defer { state.onExpire = nil }
            return state.onExpire
        }
        expire?()
    }

    /// One wait for a shared resource; ``end()`` restarts the clock (once, however often called).
    public final class Wait: Sendable {
        private let clock: ItemClock
        private let ended = Atomic(false)
        init(_ clock: ItemClock) { self.clock = clock }
        public func end() {
            if !ended.exchange(true, ordering: .acquiringAndReleasing) { clock.endWait() }
        }
    }
}

/// Runs `operation` under a time limit of `seconds` (counted by an ``ItemClock`` that waits pause),
/// and returns its result, or throws `timeout()` as soon as the limit strikes, without waiting for
/// the operation: it is cancelled, which ends its waits and gives back what it held. (A plugin
/// blocked inside a C call keeps its worker thread until it returns; the run goes on without it.)
/// Cancelling the calling task cancels the operation too.
func withItemClock<T: Sendable>(_ seconds: Double?, timers: any TimerSource = DispatchTimers.shared,
                                timeout: @escaping @Sendable () -> any Error,
                                _ operation: @escaping @Sendable (ItemClock?) async throws -> T) async throws -> T {
    guard let seconds else { return try await operation(nil) }
    let clock = ItemClock(limit: .milliseconds(Int64((seconds * 1000).rounded())), timers: timers)
    let work = Mutex<Task<Void, Never>?>(nil)
    return try await withTaskCancellationHandler {
        try await withCheckedThrowingContinuation { continuation in
            let task = Task {
                let result = await Result(asyncCatching: { try await operation(clock) })
                if clock.settle() { continuation.resume(with: result) }
            }
            work.withLock { $0 = task }
            clock.start {
                task.cancel()
                continuation.resume(throwing: timeout())
            }
        }
    } onCancel: {
        work.withLock { $0 }?.cancel()
    }
}

/// Where item clocks read the time and set their timers: the machine's monotonic clock with
/// dispatch timers (``DispatchTimers``), or, in tests, a clock the test moves by hand, so that a
/// test of time limits waits on no real time.
package protocol TimerSource: Sendable {
    /// The time now, from an origin of the source's choosing (only differences mean anything).
    var now: Duration { get }
    /// A timer that calls `handler` once, `delay` from now, unless cancelled or moved first.
    func timer(after delay: Duration, _ handler: @escaping @Sendable () -> Void) -> any ClockTimer
}

/// A timer of a ``TimerSource``.
package protocol ClockTimer: Sendable {
    /// Moves the timer to go off `delay` from now (again, if it went off already).
    func schedule(after delay: Duration)
    /// Stops the timer for good: its handler is not called after this returns.
    func cancel()
}

/// The machine's monotonic clock and one dispatch timer source per timer, their handlers on one
/// serial queue (they only resume a continuation).
package struct DispatchTimers: TimerSource {
    package static let shared = DispatchTimers()
    static let queue = DispatchQueue(label: "pipelinectl.item-clocks")
    private static let origin = ContinuousClock.now

    package var now: Duration { ContinuousClock.now - Self.origin }

    package func timer(after delay: Duration, _ handler: @escaping @Sendable () -> Void) -> any ClockTimer {
        let source = DispatchSource.makeTimerSource(queue: Self.queue)
        source.setEventHandler(handler: handler)
        let timer = Timer(source: source)
        timer.schedule(after: delay)
        source.resume()
        return timer
    }

    private struct Timer: ClockTimer, @unchecked Sendable {  // a dispatch source is thread-safe
        let source: any DispatchSourceTimer
        func schedule(after delay: Duration) {
            let (seconds, attoseconds) = delay.components
            source.schedule(deadline: .now() + .nanoseconds(Int(seconds) * 1_000_000_000 + Int(attoseconds / 1_000_000_000)))
        }
        func cancel() { source.cancel() }
    }
}
