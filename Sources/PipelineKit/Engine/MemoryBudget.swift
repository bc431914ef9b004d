import Synchronization

/// A budget of bytes for `async` code: a holder takes an amount and gives it back; waiters are
/// served in arrival order, but a waiter that does not fit lets later, smaller ones go first, so
/// one large request never idles the workers. A request larger than the whole budget is clamped
/// to it (it then runs alone).
public final class MemoryBudget: Sendable {
    private struct Waiter {
        let amount: Int
        let continuation: UnsafeContinuation<Void, Never>
    }
    private struct State: ~Copyable {
        var available: Int
        var waiters: [Waiter] = []
    }
    private let state: Mutex<State>
    /// The whole budget in bytes.
    public let total: Int

    public init(bytes: Int) {
        total = max(1, bytes)
        state = Mutex(State(available: max(1, bytes)))
    }

    /// The amount `acquire(_:)` really takes for a request of `bytes`.
    public func clamped(_ bytes: Int) -> Int { min(max(0, bytes), total) }

    /// Waits until `bytes` (clamped) fit, then takes them.
    public func acquire(_ bytes: Int) async {
        let amount = clamped(bytes)
        await withUnsafeContinuation { (continuation: UnsafeContinuation<Void, Never>) in
            let granted = state.withLock { state -> Bool in
                if amount <= state.available {
                    state.available -= amount
                    return true
                }
                state.waiters.append(Waiter(amount: amount, continuation: continuation))
                return false
            }
            if granted { continuation.resume() }
        }
    }

    /// Gives back `bytes` (as clamped when acquired) and wakes every waiter that now fits, oldest first.
    public func release(_ bytes: Int) {
        let amount = clamped(bytes)
        let ready = state.withLock { state -> [UnsafeContinuation<Void, Never>] in
            state.available += amount
            var woken: [UnsafeContinuation<Void, Never>] = []
            var index = 0
            while index < state.waiters.count {
                if state.waiters[index].amount <= state.available {
                    state.available -= state.waiters[index].amount
                    woken.append(state.waiters.remove(at: index).continuation)
                } else {
                    index += 1
                }
            }
            return woken
        }
        for continuation in ready { continuation.resume() }
    }

    /// Runs `body` holding `bytes` of the budget.
    public func withBudget<T: Sendable>(_ bytes: Int, _ body: () async throws -> T) async rethrows -> T {
        await acquire(bytes)
        defer { release(bytes) }
        return try await body()
    }

    /// Bytes not taken now.
    public var available: Int { state.withLock { $0.available } }
}
