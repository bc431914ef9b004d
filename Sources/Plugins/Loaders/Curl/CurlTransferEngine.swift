import CLinux
import CCurl
import Foundation
import PipelineKit
import Synchronization

/// libcurl's multi interface driven by one dedicated thread, bridged to Swift concurrency.
///
/// Transfers are queued from any task; the thread adds them to the multi handle, drives every
/// transfer with `curl_multi_perform` / `curl_multi_poll`, and resumes each caller when its transfer
/// ends. Connections are reused across transfers; HTTP/2 is used where a server offers it.
final class CurlTransferEngine: @unchecked Sendable {
    // `multi` is used by the engine thread only, except for curl_multi_wakeup, which is thread-safe.
    private struct Shared: ~Copyable {
        var incoming: [CurlTransfer] = []
        var progress: [ObjectIdentifier: TransferProgress] = [:]
        /// Serial numbers of transfers whose task was cancelled (kept until matched).
        var cancelled: Set<UInt64> = []
    }

    private static let globalInit: Void = { curl_global_init(Int(CURL_GLOBAL_ALL)) }()

    private let multi: UnsafeMutableRawPointer
    private let shared = Mutex(Shared())
    private let name: String
    private let started = Mutex(false)

    /// An engine whose thread starts with its first transfer: a client that never sends starts
    /// nothing. `maxPerHost` caps connections to one host (0: no cap).
    init(name: String, maxPerHost: Int) {
        _ = CurlTransferEngine.globalInit
        multi = curl_multi_init()!
        if maxPerHost > 0 { _ = pk_multi_setopt_long(multi, CURLMOPT_MAX_HOST_CONNECTIONS, maxPerHost) }
        self.name = name
    }

    /// Starts the thread that drives the transfers, once.
    private func start() {
        let first = started.withLock { started -> Bool in
            defer { started = true }
            return !started
        }
        guard first else { return }
        let thread = Thread { [self, name] in
            pk_thread_set_name(name)  // what top -H and /proc show
            self.loop()
        }
        thread.name = name
        thread.start()
    }

    /// Runs one transfer to completion.
    /// Runs one transfer to completion. Cancelling the calling task stops the transfer and
    /// throws a `cancelled` failure.
    func perform(_ transfer: CurlTransfer) async throws -> TransferResponse {
        start()
        let serial = transfer.serial
        return try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { continuation in
                transfer.continuation = continuation
                shared.withLock { $0.incoming.append(transfer) }
                curl_multi_wakeup(multi)
            }
        } onCancel: {
            _ = shared.withLock { $0.cancelled.insert(serial) }
            curl_multi_wakeup(multi)
        }
    }

    /// Runs one transfer to completion, blocking the calling thread (a decoder reading a body by
    /// range from inside a C library's read callback). Never call it from a Swift concurrency
    /// thread.
    func performWaiting(_ transfer: CurlTransfer) -> Result<TransferResponse, any Error> {
        start()
        let done = DispatchSemaphore(value: 0)
        let outcome = Mutex<Result<TransferResponse, any Error>?>(nil)
        transfer.finished = { result in
            outcome.withLock { $0 = result }
            done.signal()
        }
        shared.withLock { $0.incoming.append(transfer) }
        curl_multi_wakeup(multi)
        done.wait()
        return outcome.withLock { $0! }
    }

    /// Transfers in flight with their bytes so far.
    func progress() -> [TransferProgress] {
        shared.withLock { Array($0.progress.values) }.sorted { $0.url < $1.url }
    }

    /// Ends a cancelled transfer without running it further. Its progress entry is gone before
    /// its caller resumes.
    private func stop(_ transfer: CurlTransfer) {
        shared.withLock {
            $0.cancelled.remove(transfer.serial)
            $0.progress[ObjectIdentifier(transfer)] = nil
        }
        transfer.continuation?.resume(throwing: TransferFailure(
            error: PipelineError(.cancelled, "cancelled"), status: 0, partial: Data(), validator: nil,
            retryAfter: nil, retryable: false))
        transfer.continuation = nil
    }

    private func loop() {
        var active: [UnsafeMutableRawPointer: CurlTransfer] = [:]
        var running: Int32 = 0
        while true {
            let (incoming, cancelled) = shared.withLock { shared -> ([CurlTransfer], Set<UInt64>) in
                defer { shared.incoming.removeAll() }
                return (shared.incoming, shared.cancelled)
            }
            for transfer in incoming where cancelled.contains(transfer.serial) {
                stop(transfer)
            }
            for (easy, transfer) in active where cancelled.contains(transfer.serial) {
                curl_multi_remove_handle(multi, easy)
                active.removeValue(forKey: easy)
                stop(transfer)
            }
            for transfer in incoming where !cancelled.contains(transfer.serial) {
                transfer.configure()
                active[transfer.handle] = transfer
                curl_multi_add_handle(multi, transfer.handle)
            }
            curl_multi_perform(multi, &running)
            var left: Int32 = 0
            while let message = curl_multi_info_read(multi, &left) {
                guard message.pointee.msg == CURLMSG_DONE, let easy = message.pointee.easy_handle else { continue }
                let code = message.pointee.data.result
                curl_multi_remove_handle(multi, easy)
                if let transfer = active.removeValue(forKey: easy) {
                    _ = shared.withLock { $0.progress.removeValue(forKey: ObjectIdentifier(transfer)) }
                    let result = transfer.finish(code)
                    transfer.continuation?.resume(with: result)
                    transfer.continuation = nil
                    transfer.finished?(result)
                    transfer.finished = nil
                }
            }
            let snapshot = active.values.map { transfer -> (ObjectIdentifier, TransferProgress) in
                let before = transfer.resume?.offset ?? 0
                return (ObjectIdentifier(transfer),
                        TransferProgress(url: transfer.url, received: before + transfer.body.count,
                                         expected: transfer.contentLength.map { before + $0 }))
            }
            shared.withLock { $0.progress = Dictionary(uniqueKeysWithValues: snapshot) }
            curl_multi_poll(multi, nil, 0, active.isEmpty ? 10_000 : 100, nil)
        }
    }
}
