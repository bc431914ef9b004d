import Foundation
@testable import PipelineKit
import Synchronization
import Testing

@Suite struct MemoryBudgetTests {
    @Test func largeRequestsWaitForEachOtherWhileSmallOnesPass() async throws {
        let budget = MemoryBudget(bytes: 200)
        await budget.acquire(150)
        let order = Mutex<[String]>([])
        let big = Task {
            await budget.acquire(150)  // does not fit beside the first
            order.withLock { $0.append("big") }
            budget.release(150)
        }
        // Give the big request time to queue, then a small one that fits goes first.
        for _ in 0..<200 where budget.available == 50 { await Task.yield() }
        try await Task.sleep(for: .milliseconds(20))
        await budget.acquire(40)
        order.withLock { $0.append("small") }
        budget.release(40)
        #expect(order.withLock { $0 } == ["small"])
        budget.release(150)
        await big.value
        #expect(order.withLock { $0 } == ["small", "big"])
        #expect(budget.available == 200)
    }

    @Test func aRequestLargerThanTheBudgetRunsAlone() async {
        let budget = MemoryBudget(bytes: 100)
        #expect(budget.clamped(1_000) == 100)
        await budget.acquire(1_000)
        #expect(budget.available == 0)
        budget.release(1_000)
        #expect(budget.available == 100)
    }
}
