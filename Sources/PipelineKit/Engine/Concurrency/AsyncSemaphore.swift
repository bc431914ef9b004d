/// A counting semaphore for `async` code: at most `permits` holders at once, waiters served first
/// come, first served (or, with `order: .lifo`, newest first). Waiting suspends the task; it never
/// blocks a thread, and it ends, holding nothing, when the waiting task is cancelled.
public final class AsyncSemaphore: Sendable {
    private let admission: Admission
    /// Which waiter a released permit goes to.
    public let order: LoadOrder

    public init(permits: Int, order: LoadOrder = .fifo) {
        admission = Admission(units: max(1, permits), newestFirst: order == .lifo)
        self.order = order
    }

    /// Waits for a permit. Throws `CancellationError` when the task is cancelled before one comes.
    public func acquire() async throws { try await admission.acquire(1) }

    /// Returns a permit, waking the next waiter if there is one.
    public func release() { admission.release(1) }

    /// Runs `body` holding a permit.
    public func withPermit<T: Sendable>(_ body: () async throws -> T) async throws -> T {
        try await acquire()
        defer { release() }
        return try await body()
    }

    /// Tasks waiting for a permit now.
    public var waiting: Int { admission.waiting }
}
