import Synchronization

/// Runs work once for every caller that asks for the same key while it runs, as Nuke's `TaskPool`
/// does: the first caller starts it, later ones subscribe to its result.
///
/// Cancellation reaches the work: a subscriber whose task is cancelled (its item's time limit, a
/// stop) leaves at once with `CancellationError`, and when the last subscriber has left the work
/// itself is cancelled, so the load slot, the worker and the transfer it holds are given back.
/// Later callers for the key then start afresh. Once the work ends the key is forgotten (the run's
/// `FinishedSources` and the caches remember results).
///
/// A caller may leave a note (``run(_:note:_:)``): every caller the result reaches gets the notes
/// of all of them, so they can agree on what to do next together (the engine's callers note the
/// decode they need, and decode once for all).
public final class SharedWork<Value: Sendable>: Sendable {
    /// What every caller the work's result reached gets: the value, and each of those callers' notes.
    public typealias Shared = (value: Value, notes: [any Sendable])
    private final class Job: @unchecked Sendable {
        // Only touched under `SharedWork.state`'s lock.
        var subscribers: [UInt64: UnsafeContinuation<Shared, any Error>] = [:]
        var notes: [UInt64: any Sendable] = [:]
        var task: Task<Void, Never>?
    }
    private struct State: ~Copyable {
        var jobs: [String: Job] = [:]
        var nextID: UInt64 = 0
    }
    private let state = Mutex(State())

    public init() {}

    /// The result of `work` for `key`, and whether it was shared with an earlier caller.
    public func run(_ key: String, _ work: @escaping @Sendable () async throws -> Value) async throws -> (Value, shared: Bool) {
        let (result, shared) = try await run(key, note: nil, work)
        return (result.value, shared)
    }

    /// The result of `work` for `key` with the notes of every caller it reached (`note` among
    /// them, when given; callers that left before the end are not counted), and whether it was
    /// shared with an earlier caller.
    public func run(_ key: String, note: (any Sendable)?, _ work: @escaping @Sendable () async throws -> Value) async throws
        -> (Shared, shared: Bool) {
        let id = state.withLock { state in
            state.nextID += 1
            return state.nextID
        }
        let shared = Mutex(false)
        let value = try await withTaskCancellationHandler {
            try await withUnsafeThrowingContinuation { (continuation: UnsafeContinuation<Shared, any Error>) in
                let cancelled = state.withLock { state -> Bool in
                    if Task.isCancelled { return true }
                    if let job = state.jobs[key] {
                        job.subscribers[id] = continuation
                        if let note { job.notes[id] = note }
                        shared.withLock { $0 = true }
                        return false
                    }
                    let job = Job()
                    job.subscribers[id] = continuation
                    if let note { job.notes[id] = note }
                    state.jobs[key] = job
                    // Inherits the first caller's task-local values (its stage context).
                    job.task = Task { [self] in
                        let result = await Result(asyncCatching: work)
                        finish(key, job, result)
                    }
                    return false
                }
                if cancelled { continuation.resume(throwing: CancellationError()) }
            }
        } onCancel: {
            leave(key, id)
        }
        return (value, shared.withLock { $0 })
    }

    /// Callers waiting now, for every key.
    public var waiting: Int { state.withLock { $0.jobs.values.reduce(0) { $0 + $1.subscribers.count } } }

    /// Callers waiting for `key` now (0 when no work for it runs).
    public func subscribers(_ key: String) -> Int { state.withLock { $0.jobs[key]?.subscribers.count ?? 0 } }

    private func finish(_ key: String, _ job: Job, _ result: Result<Value, any Error>) {
        let (waiting, notes) = state.withLock { state -> ([UnsafeContinuation<Shared, any Error>], [any Sendable]) in
            if state.jobs[key] === job { state.jobs[key] = nil }
            defer { job.subscribers = [:]; job.notes = [:] }
            return (Array(job.subscribers.values), job.subscribers.keys.sorted().compactMap { job.notes[$0] })
        }
        let shared: Result<Shared, any Error> = result.map { (value: $0, notes: notes) }
        for continuation in waiting { continuation.resume(with: shared) }
    }

    private func leave(_ key: String, _ id: UInt64) {
        let (continuation, orphaned) = state.withLock { state -> (UnsafeContinuation<Shared, any Error>?, Task<Void, Never>?) in
            guard let job = state.jobs[key], let continuation = job.subscribers.removeValue(forKey: id) else { return (nil, nil) }
            job.notes[id] = nil
            guard job.subscribers.isEmpty else { return (continuation, nil) }
            state.jobs[key] = nil
            return (continuation, job.task)
        }
        continuation?.resume(throwing: CancellationError())
        orphaned?.cancel()
    }
}

extension Result where Failure == any Error {
    /// The result of an async throwing body.
    init(asyncCatching body: () async throws -> Success) async {
        do { self = .success(try await body()) } catch { self = .failure(error) }
    }
}
