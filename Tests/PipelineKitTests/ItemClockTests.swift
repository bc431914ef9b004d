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
    /// whole limit must not strike. (The clock is one the test moves: no real time passes.)
    @Test func aWaitLongerThanTheLimitIsNotCounted() {
        let timers = ManualTimers()
        let clock = ItemClock(limit: .seconds(2), timers: timers)
        let struck = LiveFlag()
        clock.start { struck.set() }
        let wait = clock.beginWait()
        timers.advance(by: .milliseconds(2500))  // the timer set by start goes off during the wait
        #expect(!struck.isSet)
        #expect(clock.remaining == .seconds(2))
        wait.end()
        timers.advance(by: .milliseconds(1999))
        #expect(!struck.isSet)
        #expect(clock.settle())  // the item ends first: the wait was not counted
        #expect(timers.pending == 0, "the settled item's timer is cancelled")
    }

    @Test func theLimitStrikesAfterAWaitForTheTimeLeft() {
        let timers = ManualTimers()
        let clock = ItemClock(limit: .seconds(1), timers: timers)
        let struckAt = Mutex<Duration?>(nil)
        let start = timers.now
        clock.start { struckAt.withLock { $0 = timers.now } }
        timers.advance(by: .milliseconds(300))  // 0.3 s of the item's own time
        let wait = clock.beginWait()
        timers.advance(by: .milliseconds(1500))  // the timer goes off during the wait: not counted
        #expect(struckAt.withLock { $0 } == nil)
        wait.end()
        timers.advance(by: .milliseconds(699))
        #expect(struckAt.withLock { $0 } == nil, "0.999 s of its own time: not yet")
        timers.advance(by: .milliseconds(1))
        // The limit plus the wait, to the millisecond: no more, no less.
        #expect(struckAt.withLock { $0 }.map { $0 - start } == .milliseconds(2500))
        #expect(!clock.settle())  // the limit won the race
    }

    /// The same race on the machine's own clock, as items run: the timer goes off while the item
    /// still has time (it waited meanwhile) and is set again for what is left.
    @Test func aTimerThatGoesOffEarlyIsSetAgainForTheTimeLeft() {
        let timers = ManualTimers()
        let clock = ItemClock(limit: .seconds(1), timers: timers)
        let struck = LiveFlag()
        clock.start { struck.set() }
        let wait = clock.beginWait()
        timers.advance(by: .milliseconds(400))
        wait.end()  // the timer was left as it was: due at 1 s, with 0.4 s of waiting since
        timers.advance(by: .milliseconds(600))  // it goes off, finds 0.4 s left, and is set again
        #expect(!struck.isSet && timers.pending == 1)
        timers.advance(by: .milliseconds(400))
        #expect(struck.isSet)
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
