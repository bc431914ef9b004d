import Synchronization

/// Units of one resource (load slots, bytes of decode memory) handed to `async` callers: a caller
/// takes an amount and gives it back; waiters are woken in arrival order (or newest first), and a
/// waiter that does not fit lets later, smaller ones go first. Waiting suspends the task, never a
/// thread, and ends when the waiting task is cancelled, holding nothing.
///
/// ``AsyncSemaphore`` and ``MemoryBudget`` are this with a unit of one slot and of one byte.
final class Admission: Sendable {
    private struct Waiter {
        let id: UInt64
        let amount: Int
        let continuation: UnsafeContinuation<Void, any Error>
    }
    private struct State: ~Copyable {
        var available: Int
        var waiters: [Waiter] = []
        var nextID: UInt64 = 0
    }
    private let state: Mutex<State>
    private let newestFirst: Bool

    init(units: Int, newestFirst: Bool = false) {
        state = Mutex(State(available: units))
        self.newestFirst = newestFirst
    }

    /// Waits until `amount` units are free, then takes them; throws `CancellationError` when the
    /// task is cancelled first (before or while waiting).
    func acquire(_ amount: Int) async throws {
        let id = state.withLock { state in
            state.nextID += 1
            return state.nextID
        }
        try await withTaskCancellationHandler {
            try await withUnsafeThrowingContinuation { (continuation: UnsafeContinuation<Void, any Error>) in
                let granted: Bool? = state.withLock { state in
                    if Task.isCancelled { return nil }
                    if amount <= state.available {
                        state.available -= amount
                        return true
                    }
                    state.waiters.append(Waiter(id: id, amount: amount, continuation: continuation))
                    return false
                }
                switch granted {
                case nil: continuation.resume(throwing: CancellationError())
                case true?: continuation.resume()
                case false?: break
                }
            }
        } onCancel: {
            let waiter = state.withLock { state -> Waiter? in
                guard let index = state.waiters.firstIndex(where: { $0.id == id }) else { return nil }
                return state.waiters.remove(at: index)
            }
            waiter?.continuation.resume(throwing: CancellationError())
        }
    }

    /// Gives back `amount` units and wakes every waiter that now fits, in order.
    func release(_ amount: Int) {
        let ready = state.withLock { state -> [Waiter] in
            state.available += amount
            var woken: [Waiter] = []
            var order = Array(state.waiters.indices)
            if newestFirst { order.reverse() }
            var taken = Set<Int>()
            for index in order where state.waiters[index].amount <= state.available {
                state.available -= state.waiters[index].amount
                taken.insert(index)
                woken.append(state.waiters[index])
                if state.available == 0 { break }
            }
            if !taken.isEmpty {
                state.waiters = state.waiters.enumerated().filter { !taken.contains($0.offset) }.map(\.element)
            }
            return woken
        }
        for waiter in ready { waiter.continuation.resume() }
    }

    /// Units free now.
    var available: Int { state.withLock { $0.available } }
    /// Tasks waiting now.
    var waiting: Int { state.withLock { $0.waiters.count } }
}

/// Something that happens once (a run's abort, a client's leaving): ``wait()`` returns when it has
/// happened, or when the waiting task is cancelled.
public final class OneTimeSignal: Sendable {
    private struct State {
        var fired = false
        var nextID = 0
        var waiters: [Int: CheckedContinuation<Void, Never>] = [:]
    }
    private let state = Mutex(State())

    /// A signal not fired yet.
    public init() {}

    /// Wakes every waiter, now and later.
    public func fire() {
        let waiters = state.withLock { state -> [CheckedContinuation<Void, Never>] in
            state.fired = true
            defer { state.waiters = [:] }
            return Array(state.waiters.values)
        }
        for waiter in waiters { waiter.resume() }
    }

    /// Returns when ``fire()`` was called, or at once when the task is cancelled.
    public func wait() async {
        let id = state.withLock { state in
            state.nextID += 1
            return state.nextID
        }
        await withTaskCancellationHandler {
            await withCheckedContinuation { continuation in
                let now = state.withLock { state -> Bool in
                    if state.fired || Task.isCancelled { return true }
                    state.waiters[id] = continuation
                    return false
                }
                if now { continuation.resume() }
            }
        } onCancel: {
            state.withLock { $0.waiters.removeValue(forKey: id) }?.resume()
        }
    }
}
