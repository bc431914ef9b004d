import Foundation
import Synchronization

/// Which requests the service takes on, and for how long one may wait for a job place.
///
/// `jobs` run at once and `queue` more may wait; past both a request is refused at once (429),
/// never queued without bound. A request that would wait is also refused at once when the wait
/// it can expect is past `queueWait`: overload that lasts is refused early, at little cost. One
/// that is admitted waits for its place at most `queueWait` (then 429): a page's burst of new
/// images waits its turn instead of being turned away.
///
/// Places are shared between clients (the peer address, or the address a trusted proxy names):
/// a freed job place goes to the waiting client with the fewest jobs running (``FairJobs``),
/// and the last `reserve` queue places are kept for clients that hold less than half of all
/// places, so one client with many connections cannot take every place from the others. The
/// expected wait is the client's own: its requests waiting, times the clients waiting, not
/// everything queued ahead.
package final class RequestAdmission: Sendable {
    package let jobs: Int
    package let queue: Int
    /// Longest wait for a place, expected or actual, in seconds; 0 for no such limit.
    package let queueWait: Double
    /// Queue places kept for clients below half of all places.
    package let reserve: Int
    private let admitted = Mutex<[String: Int]>([:])
    private let total = Atomic(0)
    private let places: FairJobs
    /// Recent jobs' mean time in seconds (0 until one finished).
    private let recent = Mutex(0.0)
    /// Weight of the newest job in ``jobSeconds``: about the last ten jobs count.
    package static let smoothing = 0.2

    /// What ``tryEnter(client:)`` decided.
    package enum Entry: Equatable, Sendable {
        /// A place is taken: give it back with ``leave(client:)``.
        case entered
        /// Every job and queue place is taken.
        case full
        /// The places left are kept for other clients: this one holds its share.
        case share
        /// The request would wait about this many seconds, past `queueWait`.
        case tooSlow(expectedWait: Double)
    }

    package init(jobs: Int, queue: Int, queueWait: Double = 0, reserve: Int? = nil) {
        self.jobs = max(1, jobs)
        self.queue = max(0, queue)
        self.queueWait = max(0, queueWait)
        self.reserve = min(self.queue, reserve ?? max(2, self.queue / 8))
        places = FairJobs(places: self.jobs)
    }

    /// Takes a place (running or waiting) for `client` unless every place is taken, the rest
    /// are kept for others, or its wait would be too long.
    package func tryEnter(client: String = "") -> Entry {
        let limit = jobs + queue
        let waitingClients = places.waitingClients
        let ownRunning = places.running(client)
        return admitted.withLock { admitted -> Entry in
            let now = total.load(ordering: .relaxed)
            guard now < limit else { return .full }
            let own = admitted[client] ?? 0
            if now >= limit - reserve, own * 2 >= limit { return .share }
            if now >= jobs, queueWait > 0 {
                let others = waitingClients.subtracting([client]).count
                let wait = expectedWait(ownWaiting: max(0, own - ownRunning), clientsWaiting: others + 1, waitingTotal: max(0, now - jobs))
                if wait > queueWait { return .tooSlow(expectedWait: wait) }
            }
            admitted[client] = own + 1
            total.add(1, ordering: .relaxed)
            return .entered
        }
    }

    /// The wait of a client's request entering now, served in turn with the other waiting
    /// clients: its own requests ahead and itself, times the clients taking turns, each turn a
    /// job's time over the jobs, and never more turns than every waiting request's. For a single
    /// client that is the whole queue ahead, plus the running ones counted as one more round (an
    /// overestimate by half a job, on the safe side).
    package func expectedWait(ownWaiting: Int, clientsWaiting: Int, waitingTotal: Int) -> Double {
        let turns = min(waitingTotal + 1, (ownWaiting + 1) * max(1, clientsWaiting))
        return Double(turns) * jobSeconds / Double(jobs)
    }

    package func leave(client: String = "") {
        admitted.withLock { admitted in
            let left = (admitted[client] ?? 1) - 1
            admitted[client] = left > 0 ? left : nil
            total.subtract(1, ordering: .relaxed)
        }
    }

    /// Waits for a job place, at most `queueWait` (without limit when it is 0).
    package func waitForJob(client: String = "") async -> FairJobs.Outcome {
        await places.acquire(client, within: queueWait > 0 ? queueWait : 365 * 86_400)
    }

    package func finishJob(client: String = "") { places.release(client) }

    /// Counts a finished job's time (from its place to its answer) into ``jobSeconds``.
    package func recordJob(seconds: Double) {
        guard seconds.isFinite, seconds >= 0 else { return }
        recent.withLock { mean in
            mean = mean == 0 ? seconds : mean + Self.smoothing * (seconds - mean)
        }
    }

    /// Recent jobs' mean time in seconds; 0 before the first.
    package var jobSeconds: Double { recent.withLock { $0 } }

    /// Requests admitted now (running and waiting).
    package var inFlight: Int { total.load(ordering: .relaxed) }
}
