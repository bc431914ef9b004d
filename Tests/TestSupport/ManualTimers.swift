import PipelineKit
import Synchronization

/// A clock a test moves by hand, with timers that go off when it passes their deadline, for code
/// that takes a ``TimerSource`` (an item's time limit): a test of time limits then waits on no real
/// time, and a loaded machine cannot make it pass or fail. Handlers run on the caller of
/// ``advance(by:)``, in deadline order, after the clock has moved.
package final class ManualTimers: TimerSource, Sendable {
    private struct Pending {
        /// When it goes off; `nil` once it went off (until moved again).
        var deadline: Duration?
        var handler: @Sendable () -> Void
    }
    private struct State {
        var now: Duration = .seconds(1000)
        var timers: [Int: Pending] = [:]
        var nextID = 0
    }
    private let state = Mutex(State())

    package init() {}

    package var now: Duration { state.withLock { $0.now } }

    /// Timers set and not yet gone off or cancelled.
    package var pending: Int { state.withLock { $0.timers.values.filter { $0.deadline != nil }.count } }

    package func timer(after delay: Duration, _ handler: @escaping @Sendable () -> Void) -> any ClockTimer {
        let id = state.withLock { state in
            state.nextID += 1
            state.timers[state.nextID] = Pending(deadline: state.now + delay, handler: handler)
            return state.nextID
        }
        return Timer(owner: self, id: id)
    }

    /// Moves the clock on by `duration`, calling each timer whose deadline it passes (a handler
    /// that sets a timer within the same span sees it go off in this call too).
    package func advance(by duration: Duration) {
        let end = state.withLock { $0.now + duration }
        while true {
            let due = state.withLock { state -> (@Sendable () -> Void)? in
                let armed = state.timers.compactMap { id, timer in timer.deadline.map { (id, $0, timer.handler) } }
                guard let (id, deadline, handler) = armed.min(by: { $0.1 < $1.1 }), deadline <= end else {
                    state.now = end
                    return nil
                }
                state.now = max(state.now, deadline)
                state.timers[id]!.deadline = nil
                return handler
            }
            guard let due else { return }
            due()
        }
    }

    private struct Timer: ClockTimer {
        let owner: ManualTimers
        let id: Int
        func schedule(after delay: Duration) {
            owner.state.withLock { state in
                // Moved after it went off, it goes off again, as a dispatch timer does.
                if state.timers[id] != nil { state.timers[id]!.deadline = state.now + delay }
            }
        }
        func cancel() { owner.state.withLock { $0.timers[id] = nil } }
    }
}

/// A flag a handler sets and a test reads.
package final class LiveFlag: Sendable {
    private let value = Atomic(false)
    package init() {}
    package func set() { value.store(true, ordering: .releasing) }
    package var isSet: Bool { value.load(ordering: .acquiring) }
}
