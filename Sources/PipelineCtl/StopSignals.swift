import Foundation
import PipelineKit
import Synchronization

/// Ctrl-C and SIGTERM during a run: the first asks the run to stop gracefully (no new item starts,
/// items in flight finish, the summary and report are written, the exit code is 128 + the signal);
/// items still in flight after the grace period are cancelled, so that the report is written
/// before a batch engine's SIGKILL; a second signal exits at once. Outputs are never half-written
/// either way: each is renamed into place only when complete.
///
/// The handlers are installed with `sigaction` before `init` returns, and only write the signal's
/// number to a pipe that a thread of this type reads. (A dispatch signal source was registered
/// asynchronously, after the signal had been set to be ignored: a SIGTERM sent in between, which a
/// loaded machine made likely, was dropped, and the run went on to its end.)
final class StopSignals: Sendable {
    private final class FirstSignal: Sendable { let number = Mutex<Int32?>(nil) }
    private let state = FirstSignal()
    private let pipe: StopSignalPipe

    /// `onStop`: also told at the first signal (a queue stops receiving).
    init(runner: PipelineRunner, grace: Double, onStop: (@Sendable () -> Void)? = nil) {
        let state = self.state
        pipe = StopSignalPipe.install { number in
            let again = state.number.withLock { seen -> Bool in
                if seen != nil { return true }
                seen = number
                return false
            }
            if again { Foundation.exit(128 + number) }
            FileHandle.standardError.write(Data(
                "\nstopping: no new items; finishing those in flight for up to \(Units.formatDuration(grace)) (signal again to quit now)\n".utf8))
            onStop?()
            runner.stop()
            DispatchQueue.global().asyncAfter(deadline: .now() + grace) { runner.abort() }
        }
    }

    /// The first signal received, if any.
    var received: Int32? { state.number.withLock { $0 } }

    /// Gives SIGINT and SIGTERM their default actions back and ends the reading thread.
    func cancel() { pipe.cancel() }
}

/// SIGINT and SIGTERM delivered to `handle` on a thread of their own: the handlers, installed
/// with `sigaction` before ``install(_:)`` returns, only write the signal's number to a pipe.
final class StopSignalPipe: Sendable {
    private let stopped = Mutex(false)
    private let fds: (read: Int32, write: Int32)

    private init(_ fds: (Int32, Int32)) { self.fds = fds }

    static func install(_ handle: @escaping @Sendable (Int32) -> Void) -> StopSignalPipe {
        var fds: [Int32] = [-1, -1]
        _ = fds.withUnsafeMutableBufferPointer { Foundation.pipe($0.baseAddress!) }
        let made = StopSignalPipe((fds[0], fds[1]))
        signalPipeWriteFD = fds[1]
        for number in [SIGINT, SIGTERM] {
            var action = sigaction()
            action.__sigaction_handler.sa_handler = stopSignalHandler
            sigemptyset(&action.sa_mask)
            action.sa_flags = SA_RESTART
            sigaction(number, &action, nil)
        }
        let thread = Thread {
            var byte: UInt8 = 0
            while read(made.fds.read, &byte, 1) == 1 {
                if made.stopped.withLock({ $0 }) { return }
                handle(Int32(byte))
            }
        }
        thread.name = "pk-signals"
        thread.start()
        return made
    }

    /// Gives SIGINT and SIGTERM their default actions back and ends the reading thread.
    func cancel() {
        signal(SIGINT, SIG_DFL)
        signal(SIGTERM, SIG_DFL)
        stopped.withLock { $0 = true }
        var byte: UInt8 = 0
        _ = write(fds.write, &byte, 1)
    }
}

/// The pipe the signal handler writes to (read by a ``StopSignalPipe`` thread): set before the
/// handlers are installed, read only by them.
nonisolated(unsafe) private var signalPipeWriteFD: Int32 = -1

/// Only async-signal-safe work: one `write` of the signal's number.
private let stopSignalHandler: @convention(c) (Int32) -> Void = { number in
    var byte = UInt8(truncatingIfNeeded: number)
    _ = write(signalPipeWriteFD, &byte, 1)
}
