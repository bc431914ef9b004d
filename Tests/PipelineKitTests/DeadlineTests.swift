import Foundation
@testable import PipelineKit
import Synchronization
import Testing
import TestSupport

/// The per-item time limit: the limit strikes, and a finished item leaves nothing behind.
@Suite struct DeadlineTests {
    struct TimedOut: Error {}

    @Test func theLimitStrikesWithoutWaitingForTheWork() async throws {
        let started = ContinuousClock.now
        await #expect(throws: TimedOut.self) {
            try await withDeadline(0.2, timeout: { TimedOut() }) {
                try? await Task.sleep(for: .seconds(30))
                return 1
            }
        }
        #expect(ContinuousClock.now - started < .seconds(10))
    }

    @Test func workThatFinishesInTimeReturnsItsResult() async throws {
        let value = try await withDeadline(60, timeout: { TimedOut() }) { 42 }
        #expect(value == 42)
    }

    /// One timer per item: with a 5-minute limit and hundreds of items a second, a timer kept alive
    /// after its item finished held memory for 5 minutes each (the RSS of long lists grew with them).
    /// Dispatch runs a timer's cancel handler once it has torn the source down; the count is of
    /// timers whose handler has not run. Other suites may run items meanwhile, hence the slack.
    @Test func aFinishedItemReleasesItsTimerAtOnce() async throws {
        let live = LiveCount()
        for _ in 0..<500 {
            let witness = live.token()
            _ = try await withDeadline(300, timeout: { _ = witness; return TimedOut() }) { 1 }
        }
        // The teardown is asynchronous: give it a moment, not five minutes.
        let give = ContinuousClock.now + .seconds(5)
        while DeadlineRace.armedCount > 50, ContinuousClock.now < give {
            try await Task.sleep(for: .milliseconds(20))
        }
        #expect(DeadlineRace.armedCount <= 50)
        #expect(live.value <= 50)
    }

    @Test func anItemThatFinishesAsTheLimitStrikesEndsOnce() async throws {
        // Both sides race for the continuation; resuming it twice would crash the process.
        for _ in 0..<200 {
            _ = try? await withDeadline(0.001, timeout: { TimedOut() }) {
                try? await Task.sleep(for: .microseconds(Int.random(in: 0...2000)))
                return 1
            }
        }
    }
}
