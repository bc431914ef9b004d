@testable import PipelineCtl
@testable import PipelineHummingbird
@testable import PipelineService
import Synchronization
import Testing

/// `serve` admits a request to wait for a job only while its expected wait (the requests ahead of
/// it times the recent job time, over the jobs) is within `--queue-wait`, and never past
/// `--queue` places: slow answers (big PNGs) must not queue for seconds behind each other.
@Suite struct RequestAdmissionTests {
    /// Enters until the first refusal; how many entered and why the next one was refused.
    static func fill(_ admission: RequestAdmission) -> (entered: Int, refusal: RequestAdmission.Entry) {
        var entered = 0
        while true {
            let entry = admission.tryEnter()
            guard entry == .entered else { return (entered, entry) }
            entered += 1
        }
    }

    @Test func theCountBoundsTheQueueUntilAJobHasBeenTimed() {
        let admission = RequestAdmission(jobs: 2, queue: 8, queueWait: 0.5, reserve: 0)
        let (entered, refusal) = Self.fill(admission)
        #expect(entered == 10 && refusal == .full, "\(entered) \(refusal)")
    }

    @Test func slowJobsShortenTheQueueToTheExpectedWait() throws {
        let admission = RequestAdmission(jobs: 2, queue: 8, queueWait: 0.5, reserve: 0)
        admission.recordJob(seconds: 0.2)
        // Ahead of the k-th request (k >= jobs, 0-based): k - jobs + 1 jobs' worth of work on 2 jobs.
        // 0.1, 0.2, 0.3, 0.4, 0.5 s for k = 2...6; k = 7 would wait 0.6 s.
        let (entered, refusal) = Self.fill(admission)
        #expect(entered == 7, "\(entered)")
        guard case .tooSlow(let wait) = refusal else {
            Issue.record("refused as \(refusal), not for its wait")
            return
        }
        #expect(abs(wait - 0.6) < 1e-9, "\(wait)")
        // A place given back lets exactly one more in.
        admission.leave()
        #expect(admission.tryEnter() == .entered)
        #expect(admission.tryEnter() != .entered)
    }

    @Test func quickJobsLeaveTheCountAsTheBound() {
        let admission = RequestAdmission(jobs: 2, queue: 8, queueWait: 0.5, reserve: 0)
        admission.recordJob(seconds: 0.02)
        let (entered, refusal) = Self.fill(admission)
        #expect(entered == 10 && refusal == .full, "\(entered) \(refusal)")
    }

    @Test func requestsThatRunAtOnceAreNeverRefusedForTheWait() {
        let admission = RequestAdmission(jobs: 3, queue: 8, queueWait: 0.5, reserve: 0)
        admission.recordJob(seconds: 30)
        let (entered, refusal) = Self.fill(admission)
        guard case .tooSlow = refusal else {
            Issue.record("refused as \(refusal), not for its wait")
            return
        }
        #expect(entered == 3, "\(entered)")
    }

    @Test func theEstimateFollowsRecentJobs() {
        let admission = RequestAdmission(jobs: 1, queue: 100, queueWait: 1, reserve: 0)
        for _ in 0..<50 { admission.recordJob(seconds: 0.01) }
        #expect(abs(admission.jobSeconds - 0.01) < 1e-9)
        // The mix turns slow: within a few tens of jobs the estimate is there too.
        for _ in 0..<30 { admission.recordJob(seconds: 0.5) }
        #expect(admission.jobSeconds > 0.49 && admission.jobSeconds <= 0.5, "\(admission.jobSeconds)")
    }

    @Test func zeroQueueWaitLeavesOnlyTheCount() {
        let admission = RequestAdmission(jobs: 2, queue: 8, queueWait: 0, reserve: 0)
        admission.recordJob(seconds: 10)
        let (entered, refusal) = Self.fill(admission)
        #expect(entered == 10 && refusal == .full, "\(entered) \(refusal)")
    }

    /// The last queue places are kept for clients below half of all places: a client with many
    /// connections fills the rest, and another still gets in.
    @Test func theLastPlacesAreKeptForOtherClients() {
        let admission = RequestAdmission(jobs: 2, queue: 8, queueWait: 0, reserve: 2)
        var greedy = 0
        while admission.tryEnter(client: "a") == .entered { greedy += 1 }
        #expect(greedy == 8)
        #expect(admission.tryEnter(client: "a") == .share)
        #expect(admission.tryEnter(client: "b") == .entered)
        #expect(admission.tryEnter(client: "b") == .entered)
        #expect(admission.tryEnter(client: "b") == .full)
    }

    /// A client's expected wait counts turns with the other waiting clients, not everything
    /// queued ahead: a second client is not refused for the first one's queue.
    @Test func theExpectedWaitIsTheClientsOwn() async {
        let admission = RequestAdmission(jobs: 1, queue: 100, queueWait: 2.5, reserve: 0)
        admission.recordJob(seconds: 1)
        // Client a: one running (it holds the place), then waiting ones up to its wait of 2.5 s.
        #expect(admission.tryEnter(client: "a") == .entered)
        #expect(await admission.waitForJob(client: "a") == .granted)
        var waiters: [Task<FairJobs.Outcome, Never>] = []
        while admission.tryEnter(client: "a") == .entered {
            waiters.append(Task { await admission.waitForJob(client: "a") })
        }
        #expect(waiters.count == 2, "\(waiters.count)")  // 1 s and 2 s; a third would wait 3 s
        // b has nothing waiting: its turn comes after one of a's, whatever a has queued.
        #expect(admission.tryEnter(client: "b") == .entered)
        for waiter in waiters { waiter.cancel() }
        for waiter in waiters { #expect(await waiter.value == .cancelled) }
    }
}

/// Job places between clients: the fewest running first, waits bounded, cancellations clean.
@Suite struct FairJobsTests {
    final class Order: Sendable { let names = Mutex<[String]>([]) }

    /// Waits (by yielding, not by a clock) until `count` requests wait.
    static func waitForWaiters(_ jobs: FairJobs, _ count: Int) async {
        while jobs.waiting < count { await Task.yield() }
    }

    @Test func aFreedPlaceGoesToTheClientWithFewestRunning() async {
        let jobs = FairJobs(places: 2)
        #expect(await jobs.acquire("a", within: 60) == .granted)
        #expect(await jobs.acquire("a", within: 60) == .granted)
        let order = Order()
        let a3 = Task { let o = await jobs.acquire("a", within: 60); order.names.withLock { $0.append("a3") }; return o }
        await Self.waitForWaiters(jobs, 1)
        let a4 = Task { let o = await jobs.acquire("a", within: 60); order.names.withLock { $0.append("a4") }; return o }
        await Self.waitForWaiters(jobs, 2)
        let b1 = Task { let o = await jobs.acquire("b", within: 60); order.names.withLock { $0.append("b1") }; return o }
        await Self.waitForWaiters(jobs, 3)
        // a runs one after this release, b none: b's request goes first, though it came last.
        jobs.release("a")
        #expect(await b1.value == .granted)
        jobs.release("a")
        #expect(await a3.value == .granted)
        jobs.release("b")
        #expect(await a4.value == .granted)
        #expect(order.names.withLock { $0 } == ["b1", "a3", "a4"])
    }

    /// With one place, clients take turns: each freed place goes to the client granted one
    /// longest ago, not to the request that came first.
    @Test func withOnePlaceClientsTakeTurns() async {
        let jobs = FairJobs(places: 1)
        #expect(await jobs.acquire("a", within: 60) == .granted)
        let order = Order()
        var tasks: [Task<FairJobs.Outcome, Never>] = []
        for (index, name) in ["a2", "a3", "b1", "b2"].enumerated() {
            tasks.append(Task {
                let o = await jobs.acquire(String(name.prefix(1)), within: 60)
                order.names.withLock { $0.append(name) }
                return o
            })
            await Self.waitForWaiters(jobs, index + 1)
        }
        for (index, holder) in ["a", "b", "a", "b"].enumerated() {
            jobs.release(holder)
            while order.names.withLock({ $0.count }) < index + 1 { await Task.yield() }
        }
        for task in tasks { #expect(await task.value == .granted) }
        #expect(order.names.withLock { $0 } == ["b1", "a2", "b2", "a3"])
    }

    @Test func aWaitEndsWhenItsTimeIsUpAndThePlaceIsNotLost() async {
        let jobs = FairJobs(places: 1)
        #expect(await jobs.acquire("a", within: 60) == .granted)
        #expect(await jobs.acquire("b", within: 0.05) == .timedOut)
        #expect(jobs.waiting == 0)
        jobs.release("a")
        #expect(await jobs.acquire("b", within: 0.05) == .granted)
    }

    @Test func aCancelledWaitLeavesNoTrace() async {
        let jobs = FairJobs(places: 1)
        #expect(await jobs.acquire("a", within: 60) == .granted)
        let waiter = Task { await jobs.acquire("b", within: 60) }
        await Self.waitForWaiters(jobs, 1)
        waiter.cancel()
        #expect(await waiter.value == .cancelled)
        #expect(jobs.waiting == 0)
        // Cancelled before it could even register: no trace either.
        let early = Task {
            withUnsafeCurrentTask { $0?.cancel() }
            return await jobs.acquire("c", within: 60)
        }
        #expect(await early.value == .cancelled)
        jobs.release("a")
        #expect(await jobs.acquire("d", within: 0.05) == .granted)
    }
}

/// Who a request comes from: X-Forwarded-For counts only from a trusted proxy, or a client could
/// pick its own share by sending it.
@Suite struct ClientAddressTests {
    @Test func forwardedForIsReadOnlyFromTrustedProxies() {
        #expect(ClientAddress.of(peer: "10.0.0.9", forwardedFor: ["1.2.3.4"], trusting: []) == "10.0.0.9")
        #expect(ClientAddress.of(peer: "10.0.0.9", forwardedFor: ["1.2.3.4"], trusting: ["10.0.0.9"]) == "1.2.3.4")
        #expect(ClientAddress.of(peer: "10.0.0.9", forwardedFor: ["6.6.6.6, 1.2.3.4, 10.0.0.8"], trusting: ["10.0.0.9", "10.0.0.8"]) == "1.2.3.4")
        #expect(ClientAddress.of(peer: "10.0.0.9", forwardedFor: ["6.6.6.6", "1.2.3.4"], trusting: ["10.0.0.9"]) == "1.2.3.4")
        #expect(ClientAddress.of(peer: "10.0.0.9", forwardedFor: [], trusting: ["10.0.0.9"]) == "10.0.0.9")
        #expect(ClientAddress.of(peer: nil, forwardedFor: ["1.2.3.4"], trusting: []) == "")
    }
}
