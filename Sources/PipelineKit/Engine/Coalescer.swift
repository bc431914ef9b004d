import Synchronization

/// Makes concurrent requests for the same key share one piece of work.
///
/// The first caller for a key starts the work; callers that arrive while it runs wait for the same
/// result. Once it finishes the key is forgotten (later callers rely on the caches).
final class Coalescer<Value: Sendable>: Sendable {
    private let tasks = Mutex<[String: Task<Value, any Error>]>([:])

    /// The result of `work` for `key`, and whether it was shared with an earlier caller.
    func run(_ key: String, _ work: @escaping @Sendable () async throws -> Value) async throws -> (Value, shared: Bool) {
        let (task, isNew) = tasks.withLock { tasks -> (Task<Value, any Error>, Bool) in
            if let existing = tasks[key] { return (existing, false) }
            let task = Task { try await work() }
            tasks[key] = task
            return (task, true)
        }
        let result = await task.result
        if isNew { _ = tasks.withLock { $0.removeValue(forKey: key) } }
        return (try result.get(), !isNew)
    }
}
