import Foundation
@testable import PipelineKit
import Synchronization
import Testing
import TestSupport

/// The worker threads: a job's captures are released as soon as it has run, and a job whose caller
/// is cancelled while it waits in the queue never runs.
@Suite struct WorkerPoolTests {
    @Test func aJobsCapturesAreReleasedOnceItHasRun() async throws {
        let pool = WorkerPool(threads: 1, name: "worker-pool-test")
        let live = LiveCount()
        for _ in 0..<20 {
            let witness = live.token()
            let ran = try await pool.run { _ = witness; return true }
            #expect(ran)
        }
        // The worker drops a job before it takes the next: after one more job, all 20 are gone.
        _ = try await pool.run { true }
        _ = try await pool.run { true }
        #expect(live.value == 0)
    }

    @Test func jobsRunFirstInFirstOutOnOneThread() async throws {
        let pool = WorkerPool(threads: 1, name: "worker-pool-order")
        let order = Mutex<[Int]>([])
        let blocker = DispatchSemaphore(value: 0)
        pool.submit { blocker.wait() }
        for index in 0..<100 { pool.submit { order.withLock { $0.append(index) } } }
        blocker.signal()
        #expect(try await pool.run { order.withLock { $0 } } == Array(0..<100))
    }

    @Test func aQueuedJobWhoseCallerIsCancelledNeverRuns() async throws {
        let pool = WorkerPool(threads: 1, name: "worker-pool-cancel")
        let blocker = DispatchSemaphore(value: 0), started = DispatchSemaphore(value: 0)
        let ran = Atomic(false)
        pool.submit { started.signal(); blocker.wait() }
        // The thread holds the blocker (until then the blocker itself is what is queued).
        await withCheckedContinuation { continuation in Thread { started.wait(); continuation.resume() }.start() }
        let caller = Task { try await pool.run { ran.store(true, ordering: .relaxed) } }
        while pool.queued < 1 { await Task.yield() }
        caller.cancel()
        await #expect(throws: CancellationError.self) { try await caller.value }
        #expect(pool.queued == 0)  // withdrawn at once, while the thread is still busy
        blocker.signal()
        _ = try await pool.run { true }
        let didRun = ran.load(ordering: .relaxed)
        #expect(!didRun)
    }
}

@Suite struct WorkerPoolPriorityTests {
    /// The order a one-thread pool runs jobs queued behind a held job (on a thread of its own:
    /// the waits would block a cooperative thread).
    static func order(_ jobs: [(String, Int)]) async -> [String] {
        await withCheckedContinuation { (continuation: CheckedContinuation<[String], Never>) in
            Thread {
                let pool = WorkerPool(threads: 1, name: "priority-test")
                let gate = DispatchSemaphore(value: 0), started = DispatchSemaphore(value: 0), done = DispatchSemaphore(value: 0)
                let order = Mutex<[String]>([])
                pool.submit { started.signal(); gate.wait() }
                started.wait()
                for (name, priority) in jobs {
                    pool.submit(priority: priority) { order.withLock { $0.append(name) }; done.signal() }
                }
                gate.signal()
                for _ in jobs { done.wait() }
                continuation.resume(returning: order.withLock { $0 })
            }.start()
        }
    }

    @Test func waitingJobsStartByPriorityThenInOrder() async {
        let order = await Self.order([("small", 10), ("large", 500), ("finishing", JobPriority.finishing), ("medium", 100),
                                      ("large2", 500), ("plain", 0)])
        #expect(order == ["finishing", "large", "large2", "medium", "small", "plain"])
    }
}

extension WorkerPoolPriorityTests {
    @Test func noWaitingJobIsOvertakenMoreThanMaxOvertakenTimes() async {
        // A small decode, then a stream of larger ones: the small one runs after at most 64 of them.
        let jobs = [("small", 1)] + (1...100).map { ("large\($0)", 100 + $0) }
        let order = await Self.order(jobs)
        let position = order.firstIndex(of: "small")!
        #expect(position == WorkerPool.maxOvertaken, "\(order)")
    }

    /// One job's parts: off any pool every part runs on the caller; on a pool with an idle thread
    /// the idle thread takes parts at the same time (part 0 waits until another part has started
    /// elsewhere: done by one thread, it would wait out its minute and the test fails).
    /// A pinned pool keeps each thread on a CPU of its own; an unpinned one leaves every thread
    /// every CPU. A CPU pool is pinned when it has one thread per CPU the process may use.
    @Test func aPinnedPoolKeepsEachThreadOnACPUOfItsOwn() async throws {
        let cpus = Self.allowedCPUs()
        #expect(cpus.count >= 1)
        #expect(WorkerPool.pinsCPUPool(threads: cpus.count) == (cpus.count > 1))
        #expect(!WorkerPool.pinsCPUPool(threads: cpus.count + 1))
        for pinned in [true, false] {
            let pool = WorkerPool(threads: cpus.count, name: "pool-pinned", pinned: pinned)
            // Every thread holds a job until all have started, so each job runs on its own thread.
            let arrived = Arrivals()
            let each = await withTaskGroup(of: [Int].self) { group in
                for _ in 0..<cpus.count {
                    group.addTask {
                        (try? await pool.run { () -> [Int] in
                            let mine = Self.allowedCPUs()
                            arrived.count.add(1, ordering: .relaxed)
                            while arrived.count.load(ordering: .relaxed) < cpus.count { usleep(1000) }
                            return mine
                        }) ?? []
                    }
                }
                return await group.reduce(into: [[Int]]()) { $0.append($1) }
            }
            if pinned {
                #expect(each.allSatisfy { $0.count == 1 }, "\(each)")
                #expect(Set(each.flatMap { $0 }) == Set(cpus), "\(each)")
            } else {
                #expect(each.allSatisfy { $0 == cpus }, "\(each)")
            }
        }
    }

    final class Arrivals: Sendable { let count = Atomic(0) }

    /// The CPUs the calling thread may run on, from /proc.
    static func allowedCPUs() -> [Int] {
        let status = (try? String(contentsOfFile: "/proc/thread-self/status", encoding: .utf8)) ?? ""
        let line = status.split(separator: "\n").first { $0.hasPrefix("Cpus_allowed_list:") } ?? ""
        return line.dropFirst("Cpus_allowed_list:".count).split(separator: ",").flatMap { range -> [Int] in
            let ends = range.trimmingCharacters(in: .whitespaces).split(separator: "-").compactMap { Int($0) }
            return ends.count == 2 ? Array(ends[0]...ends[1]) : ends
        }
    }

    @Test func partsAreSharedWithAnIdleThreadOfThePool() async throws {
        let callerOnly = Mutex<Set<UInt64>>([])
        WorkerPool.shareIdleThreads(parts: 4) { _ in _ = callerOnly.withLock { $0.insert(Self.threadID()) } }
        #expect(callerOnly.withLock { $0 } == [Self.threadID()])

        let pool = WorkerPool(threads: 2, name: "pool-share")
        let threads = Mutex<Set<UInt64>>([])
        let second = DispatchSemaphore(value: 0)
        let together = try await pool.run { () -> Bool in
            let met = Atomic(false)
            WorkerPool.shareIdleThreads(parts: 2) { part in
                _ = threads.withLock { $0.insert(Self.threadID()) }
                if part == 0 { met.store(second.wait(timeout: .now() + 60) == .success, ordering: .relaxed) } else { second.signal() }
            }
            return met.load(ordering: .relaxed)
        }
        #expect(together)
        #expect(threads.withLock { $0.count } == 2)
    }

    /// With every other thread of the pool busy, the caller does every part itself and returns
    /// without waiting for the busy thread.
    @Test func aBusyPoolLeavesEveryPartToTheCaller() async throws {
        let pool = WorkerPool(threads: 2, name: "pool-busy")
        let blocker = DispatchSemaphore(value: 0), started = DispatchSemaphore(value: 0)
        pool.submit { started.signal(); blocker.wait() }
        await withCheckedContinuation { continuation in Thread { started.wait(); continuation.resume() }.start() }
        let parts = try await pool.run { () -> Set<UInt64> in
            let seen = Mutex<Set<UInt64>>([])
            WorkerPool.shareIdleThreads(parts: 4) { _ in _ = seen.withLock { $0.insert(Self.threadID()) } }
            return seen.withLock { $0 }
        }
        #expect(parts.count == 1)
        blocker.signal()
    }

    /// A helper leaves a shared job as soon as a job of its pool waits: the job starts before the
    /// part left (which whichever thread is free next takes). The owner's first part holds until the helper is in one,
    /// queues a job, and waits for it to run; the helper's first part returns once the job is
    /// queued. (Roles by thread: either may take part 0.)
    @Test func aHelperLeavesASharedJobForAJobThatWaits() async throws {
        let pool = WorkerPool(threads: 2, name: "pool-leave")
        let events = Mutex<[String]>([])
        let owner = Mutex<UInt64>(0), held = Mutex<Set<UInt64>>([])
        let helperIn = DispatchSemaphore(value: 0), queued = DispatchSemaphore(value: 0), ran = DispatchSemaphore(value: 0)
        try await pool.run {
            owner.withLock { $0 = Self.threadID() }
            WorkerPool.shareIdleThreads(parts: 3) { _ in
                let thread = Self.threadID()
                let first = held.withLock { $0.insert(thread).inserted }
                if first, thread == owner.withLock({ $0 }) {
                    _ = helperIn.wait(timeout: .now() + 60)
                    pool.submit {
                        events.withLock { $0.append("job") }
                        ran.signal()
                    }
                    queued.signal()
                    _ = ran.wait(timeout: .now() + 60)
                } else if first {
                    helperIn.signal()
                    _ = queued.wait(timeout: .now() + 60)
                } else {
                    events.withLock { $0.append("part") }
                }
            }
        }
        #expect(events.withLock { $0 } == ["job", "part"])
    }

    /// A thread busy when the job was shared out joins it once its own job ends: part 0 lets the
    /// busy thread finish, then waits until part 1 has started elsewhere.
    @Test func aThreadThatFinishesLaterJoinsASharedJob() async throws {
        let pool = WorkerPool(threads: 2, name: "pool-join")
        let blocker = DispatchSemaphore(value: 0), started = DispatchSemaphore(value: 0), second = DispatchSemaphore(value: 0)
        pool.submit { started.signal(); blocker.wait() }
        await withCheckedContinuation { continuation in Thread { started.wait(); continuation.resume() }.start() }
        let threads = Mutex<Set<UInt64>>([])
        let together = try await pool.run { () -> Bool in
            let met = Atomic(false)
            WorkerPool.shareIdleThreads(parts: 2) { part in
                _ = threads.withLock { $0.insert(Self.threadID()) }
                if part == 0 {
                    blocker.signal()  // the other thread's job ends now
                    met.store(second.wait(timeout: .now() + 60) == .success, ordering: .relaxed)
                } else {
                    second.signal()
                }
            }
            return met.load(ordering: .relaxed)
        }
        #expect(together)
        #expect(threads.withLock { $0.count } == 2)
    }

    static func threadID() -> UInt64 { UInt64(pthread_self()) }
}
