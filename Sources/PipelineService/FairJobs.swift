import Foundation
import Synchronization

/// The service's job places, shared fairly between clients, each wait bounded by time.
///
/// A freed place goes to the waiting client with the fewest jobs running now; among equals, to
/// the one granted a place longest ago (so clients take turns even with one place), then to the
/// request that has waited longest: a client with 64 connections gets no more places than one
/// with two while both wait. A wait ends when a place is granted, when its time is up, or when its
/// task is cancelled (the client went away); a place granted at the moment the wait ended is
/// kept, never lost.
package final class FairJobs: Sendable {
    /// How a wait ended.
    package enum Outcome: Equatable, Sendable {
        case granted
        case timedOut
        case cancelled
    }

    fileprivate struct Waiter {
        let id: UInt64
        let client: String
        let continuation: CheckedContinuation<Bool, Never>
    }

    fileprivate struct State {
        var free: Int
        var running: [String: Int] = [:]
        /// When each client was last granted a place (a count of grants); kept for clients with
        /// a job running or waiting, and a bounded number of others.
        var lastGranted: [String: UInt64] = [:]
        var grants: UInt64 = 0
        /// In arrival order.
        var waiters: [Waiter] = []
        /// Waits numbered but not yet registered as waiters.
        var unregistered: Set<UInt64> = []
        /// Of those, the ones cancelled before they were registered.
        var cancelledEarly: Set<UInt64> = []
        var nextID: UInt64 = 0
    }

    package let places: Int
    private let state: Mutex<State>
    /// Clients remembered for their turn beyond those running or waiting.
    package static let remembered = 4096

    package init(places: Int) {
        self.places = max(1, places)
        state = Mutex(State(free: max(1, places)))
    }

    /// Jobs running now for `client`.
    package func running(_ client: String) -> Int { state.withLock { $0.running[client] ?? 0 } }

    /// Requests waiting for a place now.
    package var waiting: Int { state.withLock { $0.waiters.count } }

    /// Waits up to `seconds` for a place for `client`. A granted place is given back with
    /// ``release(_:)``.
    package func acquire(_ client: String, within seconds: Double) async -> Outcome {
        let id: UInt64? = state.withLock { state in
            if state.free > 0, state.waiters.isEmpty {
                state.free -= 1
                state.grant(client)
                return nil
            }
            state.nextID += 1
            state.unregistered.insert(state.nextID)
            return state.nextID
        }
        guard let id else { return .granted }
        return await withTaskGroup(of: Outcome?.self) { group in
            group.addTask { await self.wait(id, client) ? .granted : .cancelled }
            group.addTask {
                try? await Task.sleep(for: .seconds(seconds))
                return nil
            }
            // Whichever ends first, the other is cancelled and heard out: a place granted at the
            // moment the time ran out (or the client left) is the caller's to give back.
            let first = await group.next()!
            group.cancelAll()
            let second = await group.next()!
            if first == .granted || second == .granted { return .granted }
            return Task.isCancelled ? .cancelled : .timedOut
        }
    }

    /// Gives back a place of `client`'s, to the waiting client with the fewest jobs running.
    package func release(_ client: String) {
        let next: Waiter? = state.withLock { state in
            let left = (state.running[client] ?? 1) - 1
            state.running[client] = left > 0 ? left : nil
            guard !state.waiters.isEmpty else {
                state.free += 1
                return nil
            }
            func rank(_ waiter: Waiter) -> (Int, UInt64) {
                (state.running[waiter.client] ?? 0, state.lastGranted[waiter.client] ?? 0)
            }
            var chosen = 0
            for (index, waiter) in state.waiters.enumerated().dropFirst() where rank(waiter) < rank(state.waiters[chosen]) {
                chosen = index
            }
            let waiter = state.waiters.remove(at: chosen)
            state.grant(waiter.client)
            return waiter
        }
        next?.continuation.resume(returning: true)
    }

    /// Registers waiter `id` and returns true once it is granted a place, false when its task is
    /// cancelled first.
    private func wait(_ id: UInt64, _ client: String) async -> Bool {
        await withTaskCancellationHandler {
            await withCheckedContinuation { (continuation: CheckedContinuation<Bool, Never>) in
                let resumeNow: Bool? = state.withLock { state in
                    state.unregistered.remove(id)
                    if state.cancelledEarly.remove(id) != nil { return false }
                    if state.free > 0, state.waiters.isEmpty {  // freed meanwhile
                        state.free -= 1
                        state.grant(client)
                        return true
                    }
                    state.waiters.append(Waiter(id: id, client: client, continuation: continuation))
                    return nil
                }
                if let resumeNow { continuation.resume(returning: resumeNow) }
            }
        } onCancel: {
            let removed: Waiter? = state.withLock { state in
                guard let index = state.waiters.firstIndex(where: { $0.id == id }) else {
                    // Not registered yet: it will see this. Already granted: nothing to do.
                    if state.unregistered.contains(id) { state.cancelledEarly.insert(id) }
                    return nil
                }
                return state.waiters.remove(at: index)
            }
            removed?.continuation.resume(returning: false)
        }
    }
}

extension FairJobs.State {
    /// `client` takes a place: one more running, and its turn noted.
    fileprivate mutating func grant(_ client: String) {
        running[client, default: 0] += 1
        grants += 1
        lastGranted[client] = grants
        if lastGranted.count > FairJobs.remembered {
            // Forget the clients with nothing running or waiting, oldest turns first.
            let active = Set(running.keys).union(waiters.map(\.client))
            let idle = lastGranted.filter { !active.contains($0.key) }.sorted { $0.value < $1.value }
            for (old, _) in idle.prefix(lastGranted.count - FairJobs.remembered / 2) { lastGranted[old] = nil }
        }
    }
}

extension FairJobs {
    /// Clients with a request waiting now.
    package var waitingClients: Set<String> { state.withLock { Set($0.waiters.map(\.client)) } }
}
