import Foundation
import Synchronization

/// A token bucket: at most `rate` acquisitions a second on average, with bursts of up to `burst`.
/// Waiting suspends the task; it never blocks a thread.
public final class RateLimiter: Sendable {
    private struct State: ~Copyable {
        var tokens: Double
        var last: ContinuousClock.Instant
    }
    public let rate: Double
    public let burst: Double
    private let state: Mutex<State>

    public init(rate: Double, burst: Int) {
        self.rate = rate
        self.burst = Double(max(1, burst))
        state = Mutex(State(tokens: Double(max(1, burst)), last: .now))
    }

    /// Waits until a token is free and takes it.
    public func acquire() async throws {
        let wait = state.withLock { state -> Double in
            let now = ContinuousClock.now
            let elapsed = now - state.last
            state.tokens = min(burst, state.tokens + (Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18) * rate)
            state.last = now
            state.tokens -= 1  // may go negative: later callers queue behind this one
            return state.tokens >= 0 ? 0 : -state.tokens / rate
        }
        if wait > 0 { try await Task.sleep(for: .seconds(wait)) }
    }
}
