import DequeModule
import Synchronization

/// A counting semaphore for `async` code: at most `permits` holders at once, waiters served first
/// come, first served. Waiting suspends the task; it never blocks a thread.
public final class AsyncSemaphore: Sendable {
    private struct State: ~Copyable {
        var permits: Int
        var waiters = Deque<UnsafeContinuation<Void, Never>>()
    }
    private let state: Mutex<State>
    /// Which waiter a released permit goes to.
    public let order: LoadOrder

    public init(permits: Int, order: LoadOrder = .fifo) {
        state = Mutex(State(permits: max(1, permits)))
        self.order = order
    }

    /// Waits for a permit.
    public func acquire() async {
        await withUnsafeContinuation { (continuation: UnsafeContinuation<Void, Never>) in
            let granted = state.withLock { state -> Bool in
                if state.permits > 0 {
                    state.permits -= 1
                    return true
                }
                state.waiters.append(continuation)
                return false
            }
            if granted { continuation.resume() }
        }
    }

    /// Returns a permit, waking the longest waiter if there is one.
    public func release() {
        let next = state.withLock { state -> UnsafeContinuation<Void, Never>? in
            if let waiter = order == .lifo ? state.waiters.popLast() : state.waiters.popFirst() { return waiter }
            state.permits += 1
            return nil
        }
        next?.resume()
    }

    /// Runs `body` holding a permit.
    public func withPermit<T: Sendable>(_ body: () async throws -> T) async rethrows -> T {
        await acquire()
        defer { release() }
        return try await body()
    }
}
