@testable import PipelineCtl
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
        let admission = RequestAdmission(jobs: 2, queue: 8, queueWait: 0.5)
        let (entered, refusal) = Self.fill(admission)
        #expect(entered == 10 && refusal == .full, "\(entered) \(refusal)")
    }

    @Test func slowJobsShortenTheQueueToTheExpectedWait() throws {
        let admission = RequestAdmission(jobs: 2, queue: 8, queueWait: 0.5)
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
        // Readiness says so (503) while the next request would be refused.
        #expect(admission.isSaturated)
        // A place given back lets exactly one more in.
        admission.leave()
        #expect(!admission.isSaturated)
        #expect(admission.tryEnter() == .entered)
        #expect(admission.tryEnter() != .entered)
    }

    @Test func quickJobsLeaveTheCountAsTheBound() {
        let admission = RequestAdmission(jobs: 2, queue: 8, queueWait: 0.5)
        admission.recordJob(seconds: 0.02)
        let (entered, refusal) = Self.fill(admission)
        #expect(entered == 10 && refusal == .full, "\(entered) \(refusal)")
    }

    @Test func requestsThatRunAtOnceAreNeverRefusedForTheWait() {
        let admission = RequestAdmission(jobs: 3, queue: 8, queueWait: 0.5)
        admission.recordJob(seconds: 30)
        let (entered, refusal) = Self.fill(admission)
        guard case .tooSlow = refusal else {
            Issue.record("refused as \(refusal), not for its wait")
            return
        }
        #expect(entered == 3, "\(entered)")
    }

    @Test func theEstimateFollowsRecentJobs() {
        let admission = RequestAdmission(jobs: 1, queue: 100, queueWait: 1)
        for _ in 0..<50 { admission.recordJob(seconds: 0.01) }
        #expect(abs(admission.jobSeconds - 0.01) < 1e-9)
        // The mix turns slow: within a few tens of jobs the estimate is there too.
        for _ in 0..<30 { admission.recordJob(seconds: 0.5) }
        #expect(admission.jobSeconds > 0.49 && admission.jobSeconds <= 0.5, "\(admission.jobSeconds)")
    }

    @Test func zeroQueueWaitLeavesOnlyTheCount() {
        let admission = RequestAdmission(jobs: 2, queue: 8, queueWait: 0)
        admission.recordJob(seconds: 10)
        let (entered, refusal) = Self.fill(admission)
        #expect(entered == 10 && refusal == .full, "\(entered) \(refusal)")
    }
}
