import CLinux
import DequeModule
import Foundation
import Synchronization

/// A fixed set of dedicated threads that run blocking work (ImageMagick, file I/O) off Swift's
/// cooperative thread pool, bridged to `async` callers.
///
/// A job still queued when its caller is cancelled is taken off the queue and never runs; a job
/// already running is finished (a thread inside a C call cannot be stopped), and its caller gets
/// its result.
public final class WorkerPool: Sendable {
    private struct Job {
        let id: UInt64
        let priority: Int
        /// How many later jobs have been put ahead of this one.
        var overtaken = 0
        /// A thread's help with a shared job (``shareIdleThreads``), not work of its own.
        var helps = false
        let body: @Sendable () -> Void
    }
    /// How many later jobs may be put ahead of a waiting job: priority reorders the queue (at most
    /// the items in flight, about 20), it never starves a job for the length of a list. 8 was
    /// too few: the large JPEGs at the end of a list could no longer pass the small ones, and the
    /// corpus's JPEGs went from 1.8 to 1.6 cores busy.
    static let maxOvertaken = 64
    private struct Queue: ~Copyable {
        var jobs = Deque<Job>()
        var nextID: UInt64 = 0
        /// Threads running a job now.
        var running = 0
        /// Jobs shared out in parts (``shareIdleThreads``) that may still have parts to take.
        var shares: [Share] = []
    }

    /// One job's parts, taken by whichever thread claims each first.
    final class Share: Sendable {
        let parts: Int
        let body: @Sendable (Int) -> Void
        let next = Atomic<Int>(0)
        /// Threads other than the owner inside ``work()``.
        let helpers = DispatchGroup()

        init(parts: Int, body: @escaping @Sendable (Int) -> Void) {
            self.parts = parts
            self.body = body
        }

        var hasParts: Bool { next.load(ordering: .relaxed) < parts }

        /// Takes parts until none is left, or until `leave()` says so (asked before each).
        func work(leavingWhen leave: () -> Bool = { false }) {
            while !leave() {
                let part = next.wrappingAdd(1, ordering: .relaxed).oldValue
                guard part < parts else { return }
                body(part)
            }
        }

        /// Takes parts on a thread other than the owner's, counted so the owner waits for it, until
        /// none is left or a job of `pool`'s own waits: then the helper leaves the rest to the owner
        /// and the job starts at once, not after every part (a request's decode no longer waits
        /// for the rest of another's; the cores stay as busy).
        func help(leavingFor pool: WorkerPool) {
            helpers.enter()
            work { pool.hasWaitingJobs }
            helpers.leave()
        }
    }
    private let queue = Mutex(Queue())
    private let wakeup = DispatchSemaphore(value: 0)
    /// Number of threads.
    public let threads: Int

    /// Starts `threads` threads named `name-N` (what `top -H` and `/proc` show: at most 15
    /// characters in all). A pool lives as long as the process. `pinned`: each thread is kept on
    /// a CPU of its own, thread N on the process's N-th CPU (see ``cpu(threads:)``).
    public init(threads: Int, name: String, pinned: Bool = false) {
        self.threads = max(1, threads)
        for index in 0..<self.threads {
            let threadName = "\(name)-\(index)"
            let thread = Thread { [self] in
                // The kernel's name for the thread (top -H, /proc), set by the thread itself.
                pk_thread_set_name(threadName)
                if pinned { _ = pk_thread_pin_to_allowed(Int32(index)) }  // refused: the thread floats, as unpinned
                // Pools live as long as the process: an unretained reference is safe.
                pthread_setspecific(Self.currentKey, Unmanaged.passUnretained(self).toOpaque())
                self.loop()
            }
            thread.name = threadName
            thread.stackSize = 16 << 20
            thread.start()
        }
    }

    /// Blocking file and cache I/O shared by the engine and plugins (4 threads).
    public static let io = WorkerPool(threads: 4, name: "pk-io")

    private static let cpuPools = Mutex<[Int: WorkerPool]>([:])

    /// The process's CPU pool of `threads` threads, made once: runners share it, since threads
    /// live as long as the process.
    ///
    /// With one thread per CPU the process may use (the default of `run`, `serve` and `work`),
    /// each thread is pinned to a CPU of its own. Left to the kernel, two busy workers were often
    /// queued on one CPU while the other ran the short work that feeds them (HTTP, fetches, the
    /// engine's steps) or idled: the kernel does not move a waiting thread to a CPU that idles
    /// only briefly, so the second worker waited for the next tick, 4 ms at 250 Hz. `perf sched`
    /// under `serve` at 2 connections: 48 such waits in 5 s, 31 of them over 3.5 ms; pinned,
    /// none, and each source's p99 over its own median fell from 1.57-1.84 to 1.41-1.63
    /// (bench/NOTEBOOK.md#pinned). Fewer or more threads than CPUs (`--workers`, a CPU quota
    /// the kernel's mask does not show) are left to the kernel.
    public static func cpu(threads: Int) -> WorkerPool {
        cpuPools.withLock { pools in
            if let pool = pools[threads] { return pool }
            let pool = WorkerPool(threads: threads, name: "pk-cpu", pinned: pinsCPUPool(threads: threads))
            pools[threads] = pool
            return pool
        }
    }

    /// Whether a CPU pool of `threads` threads is pinned: one thread per CPU the process may use.
    static func pinsCPUPool(threads: Int) -> Bool { threads > 1 && threads == Int(pk_allowed_cpus()) }

    private func loop() {
        while true {
            wakeup.wait()
            let job = queue.withLock { queue -> Job? in
                let job = queue.jobs.popFirst()
                if job != nil { queue.running += 1 }
                return job
            }
            guard let job else { continue }
            job.body()
            queue.withLock { $0.running -= 1 }
            joinShares()
        }
    }

    /// With nothing queued, helps with a shared job that still has parts (a thread that became
    /// free after the job was shared out).
    private func joinShares() {
        while let share = queue.withLock({ queue -> Share? in
            guard queue.jobs.isEmpty, let share = queue.shares.first(where: \.hasParts) else { return nil }
            queue.running += 1
            return share
        }) {
            share.help(leavingFor: self)
            queue.withLock { $0.running -= 1 }
        }
    }

    /// The key of the thread-specific pointer to the pool a thread belongs to.
    private static let currentKey: pthread_key_t = {
        var key = pthread_key_t()
        pthread_key_create(&key, nil)
        return key
    }()

    /// The pool the calling thread belongs to, or `nil` on any other thread.
    public static var current: WorkerPool? {
        pthread_getspecific(currentKey).map { Unmanaged<WorkerPool>.fromOpaque($0).takeUnretainedValue() }
    }

    /// Threads of the calling thread's pool that are idle now (none of its jobs running on them and
    /// none waiting), 0 on a thread of no pool: whether ``shareIdleThreads(parts:_:)`` called now
    /// would find help. For work that pays only when it is shared.
    public static var idleThreads: Int {
        guard let pool = current else { return 0 }
        return pool.queue.withLock { $0.jobs.isEmpty ? pool.threads - $0.running : 0 }
    }

    /// Runs `body(0)`, `body(1)`, ... `body(parts - 1)` and returns when every part is done: the
    /// calling thread takes the parts in order, and threads of its pool that are idle (no job
    /// running and none waiting) take parts too, so one large job uses the cores a run leaves free
    /// (a lone huge image at the end of a list). On a thread of no pool, or with no thread idle,
    /// the caller does every part itself. A helper that has not started by the time the caller
    /// has taken the last part is withdrawn: the caller never waits for a thread busy elsewhere.
    public static func shareIdleThreads(parts: Int, _ body: @escaping @Sendable (Int) -> Void) {
        let share = Share(parts: parts, body: body)
        guard parts > 1, let pool = current else { return share.work() }
        // Threads idle now are woken to help; threads that finish their job later join while
        // parts are left (``joinShares()``).
        let idle = pool.queue.withLock { queue in
            queue.shares.append(share)
            return queue.jobs.isEmpty ? pool.threads - queue.running : 0
        }
        var helpers: [UInt64] = []
        for _ in 0..<min(idle, parts - 1) { helpers.append(pool.submit(priority: Int.max, helping: true) { share.help(leavingFor: pool) }) }
        share.work()
        pool.queue.withLock { $0.shares.removeAll { $0 === share } }
        for id in helpers { _ = pool.withdraw(id) }
        share.helpers.wait()
    }

    /// Queues `job` to run on one of the pool's threads; returns its number, for ``withdraw(_:)``.
    /// Jobs of higher `priority` run first, jobs of equal priority in the order they came; but no
    /// waiting job is overtaken more than `maxOvertaken` times.
    @discardableResult
    public func submit(priority: Int = 0, _ job: @escaping @Sendable () -> Void) -> UInt64 {
        submit(priority: priority, helping: false, job)
    }

    private func submit(priority: Int, helping: Bool, _ job: @escaping @Sendable () -> Void) -> UInt64 {
        let id = queue.withLock { queue in
            queue.nextID += 1
            let entry = Job(id: queue.nextID, priority: priority, helps: helping, body: job)
            // From the back: most jobs go last, and the queue is short (bounded by items in flight).
            var index = queue.jobs.count
            while index > 0, queue.jobs[index - 1].priority < priority, queue.jobs[index - 1].overtaken < Self.maxOvertaken {
                index -= 1
            }
            for later in index..<queue.jobs.count { queue.jobs[later].overtaken += 1 }
            queue.jobs.insert(entry, at: index)
            return queue.nextID
        }
        wakeup.signal()
        return id
    }

    /// Takes job `id` off the queue if no thread has started it; returns whether it did.
    @discardableResult
    public func withdraw(_ id: UInt64) -> Bool {
        queue.withLock { queue in
            guard let index = queue.jobs.firstIndex(where: { $0.id == id }) else { return false }
            queue.jobs.remove(at: index)
            return true
        }
    }

    /// Whether a job other than help with a shared job waits to start.
    private var hasWaitingJobs: Bool { queue.withLock { $0.jobs.contains { !$0.helps } } }

    /// Jobs queued and not started.
    public var queued: Int { queue.withLock { $0.jobs.count } }

    /// Runs `body` on one of the pool's threads and returns its result; `priority` as in
    /// ``submit(priority:_:)``. Cancelling the calling task while the job waits in the queue
    /// withdraws it and throws `CancellationError`.
    ///
    /// Called for an item (``StageContext/current`` has a clock), the item's time limit stands
    /// still while the job waits for a thread: a wait for a shared resource is not the item's own
    /// time. (A 4x4 output once ran out of a 20 s limit queued behind other runs' file I/O.)
    public func run<T: Sendable>(priority: Int = 0, _ body: @escaping @Sendable () throws -> T) async throws -> T {
        let wait = StageContext.current?.clock?.beginWait()
        defer { wait?.end() }
        // The queued job's number and its caller, so that a cancel can withdraw it and answer.
        let ticket = Mutex<(id: UInt64, continuation: UnsafeContinuation<T, any Error>)?>(nil)
        return try await withTaskCancellationHandler {
            try await withUnsafeThrowingContinuation { (continuation: UnsafeContinuation<T, any Error>) in
                let cancelled = ticket.withLock { ticket -> Bool in
                    if Task.isCancelled { return true }
                    let id = submit(priority: priority) {
                        wait?.end()
                        continuation.resume(with: Result { try body() })
                    }
                    ticket = (id, continuation)
                    return false
                }
                if cancelled { continuation.resume(throwing: CancellationError()) }
            }
        } onCancel: {
            let withdrawn = ticket.withLock { ticket -> UnsafeContinuation<T, any Error>? in
                guard let (id, continuation) = ticket, withdraw(id) else { return nil }
                ticket = nil
                return continuation
            }
            withdrawn?.resume(throwing: CancellationError())
        }
    }
}

/// The order waiting CPU jobs start in. Finishing work (encoding, for items already decoded) goes
/// first, so memory held by decoded images is released soon; among decodes, the largest input
/// first (longest processing time first): at the end of a run only small items are left, so one
/// large item does not keep a single worker busy while the other idles.
enum JobPriority {
    static let finishing = Int.max
    /// A decode's priority: its compressed size, which tracks its time (entropy decoding and the
    /// pixels it holds both grow with it) closely enough to order a short queue.
    static func decode(_ data: LoadedData) -> Int { min(data.byteCount, Int.max - 1) }
}
