import Dispatch
import Foundation
import PipelineKit
import Synchronization

/// Ctrl-C and SIGTERM during a run: the first asks the run to stop gracefully (no new item starts,
/// items in flight finish, the summary and report are written, the exit code is 128 + the signal);
/// items still in flight after the grace period are cancelled, so that the report is written
/// before a batch engine's SIGKILL; a second signal exits at once. Outputs are never half-written
/// either way: each is renamed into place only when complete.
// `sources` is set once in init; DispatchSource methods are thread-safe.
final class StopSignals: @unchecked Sendable {
    private let sources: [any DispatchSourceSignal]
    private let state = SignalState()

    private final class SignalState: Sendable {
        let first = Mutex<Int32?>(nil)
    }

    init(runner: PipelineRunner, grace: Double) {
        var made: [any DispatchSourceSignal] = []
        let state = self.state
        for number in [SIGINT, SIGTERM] {
            signal(number, SIG_IGN)
            let source = DispatchSource.makeSignalSource(signal: number, queue: .global())
            source.setEventHandler {
                let again = state.first.withLock { seen -> Bool in
                    if seen != nil { return true }
                    seen = number
                    return false
                }
                if again { Foundation.exit(128 + number) }
                FileHandle.standardError.write(Data(
                    "\nstopping: no new items; finishing those in flight for up to \(Units.formatDuration(grace)) (signal again to quit now)\n".utf8))
                runner.stop()
                DispatchQueue.global().asyncAfter(deadline: .now() + grace) { runner.abort() }
            }
            source.resume()
            made.append(source)
        }
        sources = made
    }

    /// The first signal received, if any.
    var received: Int32? { state.first.withLock { $0 } }

    func cancel() {
        for source in sources { source.cancel() }
        signal(SIGINT, SIG_DFL)
        signal(SIGTERM, SIG_DFL)
    }
}
