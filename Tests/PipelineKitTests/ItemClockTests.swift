import Foundation
import Logging
@testable import PipelineKit
import Synchronization
import Testing
import TestSupport

/// The per-item time limit: it strikes and cancels the work, it stops while the item waits for a
/// shared resource, and a settled item leaves no timer behind.
@Suite struct ItemClockTests {
    struct TimedOut: Error {}

    @Test func theLimitStrikesAndCancelsTheWork() async throws {
        let loader = ScriptedLoader()
        loader.script("hung", .hold(Data()))
        await #expect(throws: TimedOut.self) {
            try await withItemClock(0.2, timeout: { TimedOut() }) { _ in
                try await loader.load(Source(text: "scripted://hung", index: 1))
            }
        }
        // The held load saw its cancellation: the work did not go on after the limit.
        #expect(await loader.log.wait(for: "cancelled hung"))
    }

    @Test func workThatFinishesInTimeReturnsItsResult() async throws {
        let value = try await withItemClock(60, timeout: { TimedOut() }) { _ in 42 }
        #expect(value == 42)
    }

    @Test func theClockStandsStillWhileTheItemWaits() async throws {
        let clock = ItemClock(limit: .seconds(60))
        clock.start {}
        let wait = clock.beginWait()
        let during = clock.remaining
        for _ in 0..<1000 { await Task.yield() }
        #expect(clock.remaining == during)  // not a nanosecond counted while waiting
        let nested = clock.beginWait()
        wait.end()
        #expect(clock.remaining == during)  // still waiting for the second resource
        nested.end()
        nested.end()  // ending twice counts once
        for _ in 0..<1000 { await Task.yield() }
        #expect(clock.remaining < during)
        #expect(clock.settle())
        #expect(!clock.settle())
    }

    /// Any worker pool's queue is a shared resource: file I/O queued behind other runs' I/O
    /// does not use the item's time (a 4x4 output once timed out queued on the I/O threads).
    @Test func theClockStandsStillWhileAJobWaitsForAPoolThread() async throws {
        let pool = WorkerPool(threads: 1, name: "clock-pool-test")
        let started = DispatchSemaphore(value: 0), busy = DispatchSemaphore(value: 0)
        pool.submit { started.signal(); busy.wait() }  // the pool's one thread is taken
        started.wait()
        let clock = ItemClock(limit: .seconds(60))
        clock.start {}
        let context = StageContext(source: Source(text: "a.png", index: 1), cacheKey: "a",
                                   logger: Logger(label: "test"), clock: clock)
        let job = Task {
            try await StageContext.$taskValue.withValue(context) { try await pool.run { 7 } }
        }
        while pool.queued == 0 { await Task.yield() }
        let during = clock.remaining
        for _ in 0..<1000 { await Task.yield() }
        #expect(clock.remaining == during)  // queued: not a nanosecond counted
        busy.signal()
        #expect(try await job.value == 7)
        for _ in 0..<1000 { await Task.yield() }
        #expect(clock.remaining < during)  // running again once the job had its thread
        #expect(clock.settle())
    }

    /// The timer is set once per item and not moved by each wait: when it goes off during a wait,
    /// or after a wait before the time left has run out, it is set again. A wait longer than the
    /// whole limit must not strike. (The clock is driven directly: between `start` and
    /// `beginWait` only two statements are counted, however busy the machine.)
    @Test func aWaitLongerThanTheLimitIsNotCounted() async throws {
        let clock = ItemClock(limit: .seconds(2))
        let (expiries, expire) = AsyncStream<Void>.makeStream()
        clock.start { expire.yield() }
        let wait = clock.beginWait()  // the timer set by start goes off during this wait
        try await Task.sleep(for: .milliseconds(2500))
        wait.end()
        #expect(clock.settle())  // the item ends first: the wait was not counted
        expire.finish()
        var iterator = expiries.makeAsyncIterator()
        #expect(await iterator.next() == nil)
    }

    @Test func theLimitStrikesAfterAWaitForTheTimeLeft() async throws {
        let clock = ItemClock(limit: .seconds(1))
        let (expiries, expire) = AsyncStream<ContinuousClock.Instant>.makeStream()
        let start = ContinuousClock.now
        clock.start { expire.yield(ContinuousClock.now) }
        let wait = clock.beginWait()
        try await Task.sleep(for: .milliseconds(1500))
        wait.end()
        var iterator = expiries.makeAsyncIterator()
        let struck = try #require(await iterator.next())
        // Not before the limit plus the wait (a lower bound: a busy machine only adds to it).
        #expect(struck - start >= .milliseconds(2500))
        #expect(!clock.settle())  // the limit won the race
    }

    @Test func cancellingTheCallerCancelsTheWork() async throws {
        let loader = ScriptedLoader()
        loader.script("hung", .hold(Data()))
        let item = Task {
            try await withItemClock(60, timeout: { TimedOut() }) { _ in
                try await loader.load(Source(text: "scripted://hung", index: 1))
            }
        }
        await loader.log.wait(for: "started hung")
        item.cancel()
        #expect(await loader.log.wait(for: "cancelled hung"))
        await #expect(throws: CancellationError.self) { try await item.value }
    }

    /// One timer per item: with a 5-minute limit and hundreds of items a second, a timer kept alive
    /// after its item finished held memory for 5 minutes each. Settling cancels the timer and drops
    /// the expiry closure (and what it captured) at once.
    @Test func aFinishedItemReleasesItsTimerAtOnce() async throws {
        let live = LiveCount()
        for _ in 0..<500 {
            let witness = live.token()
            _ = try await withItemClock(300, timeout: { _ = witness; return TimedOut() }) { _ in 1 }
        }
        // Settling drops the expiry closure at once: none of this test's 500 is alive.
        #expect(live.value == 0)
    }

    @Test func anItemThatFinishesAsTheLimitStrikesEndsOnce() async throws {
        // Both sides race for the continuation; resuming it twice would crash the process.
        for round in 0..<200 {
            _ = try? await withItemClock(0.001, timeout: { TimedOut() }) { _ in
                for _ in 0..<(round % 40) { await Task.yield() }
                return 1
            }
        }
    }
}
