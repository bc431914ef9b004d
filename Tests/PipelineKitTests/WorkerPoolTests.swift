import Foundation
@testable import PipelineKit
import Synchronization
import Testing
import TestSupport

/// The worker threads: a job's captures (an image to encode, the bytes to decode) are released
/// as soon as the job has run, not kept by the queue.
@Suite struct WorkerPoolTests {
    @Test func aJobsCapturesAreReleasedOnceItHasRun() async throws {
        let pool = WorkerPool(threads: 2, name: "worker-pool-test")
        let live = LiveCount()
        for _ in 0..<20 {
            let witness = live.token()
            let ran = try await pool.run { _ = witness; return true }
            #expect(ran)
        }
        // The queue's own copy goes when the job is popped; the worker's when the job returns.
        let give = ContinuousClock.now + .seconds(5)
        while live.value > 0, ContinuousClock.now < give {
            try await Task.sleep(for: .milliseconds(10))
        }
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
}
