import Foundation
@testable import PipelineKit
import Synchronization
import Testing
import TestSupport

@Suite struct MemoryBudgetTests {
    @Test func largeRequestsWaitForEachOtherWhileSmallOnesPass() async throws {
        let budget = MemoryBudget(bytes: 200)
        try await budget.acquire(150)
        let log = EventLog()
        let big = Task {
            try await budget.acquire(150)  // does not fit beside the first
            log.record("big")
            budget.release(150)
        }
        while budget.waiting == 0 { await Task.yield() }
        try await budget.acquire(40)  // fits beside the first: goes before the big one
        log.record("small")
        budget.release(40)
        #expect(log.events == ["small"])
        budget.release(150)
        try await big.value
        #expect(log.events == ["small", "big"])
        #expect(budget.available == 200)
    }

    @Test func aRequestLargerThanTheBudgetRunsAlone() async throws {
        let budget = MemoryBudget(bytes: 100)
        #expect(budget.clamped(1_000) == 100)
        try await budget.acquire(1_000)
        #expect(budget.available == 0)
        budget.release(1_000)
        #expect(budget.available == 100)
    }

    @Test func aCancelledWaiterLeavesHoldingNothing() async throws {
        let budget = MemoryBudget(bytes: 100)
        try await budget.acquire(100)
        let waiter = Task { try await budget.acquire(60) }
        while budget.waiting == 0 { await Task.yield() }
        waiter.cancel()
        await #expect(throws: CancellationError.self) { try await waiter.value }
        #expect(budget.waiting == 0)
        budget.release(100)
        #expect(budget.available == 100)  // the cancelled request took nothing
    }

    @Test func aCancelledSemaphoreWaiterLetsTheNextOneIn() async throws {
        let slots = AsyncSemaphore(permits: 1)
        try await slots.acquire()
        let first = Task { try await slots.acquire() }
        while slots.waiting < 1 { await Task.yield() }
        let second = Task { try await slots.acquire(); return "second" }
        while slots.waiting < 2 { await Task.yield() }
        first.cancel()
        await #expect(throws: CancellationError.self) { try await first.value }
        slots.release()
        #expect(try await second.value == "second")  // the permit went past the cancelled waiter
        slots.release()
        try await slots.acquire()  // and exactly one permit is left
        #expect(slots.waiting == 0)
    }

    @Test func anAlreadyCancelledTaskDoesNotWait() async throws {
        let slots = AsyncSemaphore(permits: 1)
        let task = Task {
            withUnsafeCurrentTask { $0?.cancel() }
            try await slots.acquire()
        }
        await #expect(throws: CancellationError.self) { try await task.value }
        try await slots.acquire()  // the permit is still there
    }
}
