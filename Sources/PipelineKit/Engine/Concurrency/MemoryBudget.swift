/// A budget of bytes for `async` code: a holder takes an amount and gives it back; waiters are
/// served in arrival order, but a waiter that does not fit lets later, smaller ones go first, so
/// one large request never idles the workers. A request larger than the whole budget is clamped
/// to it (it then runs alone). A waiting task that is cancelled stops waiting and holds nothing.
public final class MemoryBudget: Sendable {
    private let admission: Admission
    /// The whole budget in bytes.
    public let total: Int

    public init(bytes: Int) {
        total = max(1, bytes)
        admission = Admission(units: total)
    }

    /// The amount `acquire(_:)` really takes for a request of `bytes`.
    public func clamped(_ bytes: Int) -> Int { min(max(0, bytes), total) }

    /// Waits until `bytes` (clamped) fit, then takes them. Throws `CancellationError` when the task
    /// is cancelled first.
    public func acquire(_ bytes: Int) async throws { try await admission.acquire(clamped(bytes)) }

    /// Gives back `bytes` (as clamped when acquired) and wakes every waiter that now fits, oldest first.
    public func release(_ bytes: Int) { admission.release(clamped(bytes)) }

    /// Runs `body` holding `bytes` of the budget.
    public func withBudget<T: Sendable>(_ bytes: Int, _ body: () async throws -> T) async throws -> T {
        try await acquire(bytes)
        defer { release(bytes) }
        return try await body()
    }

    /// Bytes not taken now.
    public var available: Int { admission.available }
    /// Tasks waiting for room now.
    public var waiting: Int { admission.waiting }
}
