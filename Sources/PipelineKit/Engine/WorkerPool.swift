import DequeModule
import Foundation
import Synchronization

/// A fixed set of dedicated threads that run blocking work (ImageMagick, file I/O) off Swift's
/// cooperative thread pool, bridged to `async` callers.
public final class WorkerPool: Sendable {
    private let jobs = Mutex(Deque<@Sendable () -> Void>())
    private let wakeup = DispatchSemaphore(value: 0)
    /// Number of threads.
    public let threads: Int

    /// Starts `threads` threads named `name-N`. A pool lives as long as the process.
    public init(threads: Int, name: String) {
        self.threads = max(1, threads)
        for index in 0..<self.threads {
            let thread = Thread { [self] in self.loop() }
            thread.name = "\(name)-\(index)"
            thread.stackSize = 16 << 20
            thread.start()
        }
    }

    /// Blocking file and cache I/O shared by the engine and plugins (4 threads).
    public static let io = WorkerPool(threads: 4, name: "pipelinekit-io")

    private static let cpuPools = Mutex<[Int: WorkerPool]>([:])

    /// The process's CPU pool of `threads` threads, made once: runners share it, since threads
    /// live as long as the process.
    public static func cpu(threads: Int) -> WorkerPool {
        cpuPools.withLock { pools in
            if let pool = pools[threads] { return pool }
            let pool = WorkerPool(threads: threads, name: "pipelinekit-cpu")
            pools[threads] = pool
            return pool
        }
    }

    private func loop() {
        while true {
            wakeup.wait()
            let job = jobs.withLock { $0.popFirst() }
            job?()
        }
    }

    /// Queues `job` to run on one of the pool's threads.
    public func submit(_ job: @escaping @Sendable () -> Void) {
        jobs.withLock { $0.append(job) }
        wakeup.signal()
    }

    /// Runs `body` on one of the pool's threads and returns its result.
    public func run<T: Sendable>(_ body: @escaping @Sendable () throws -> T) async throws -> T {
        try await withCheckedThrowingContinuation { continuation in
            submit { continuation.resume(with: Result { try body() }) }
        }
    }
}
