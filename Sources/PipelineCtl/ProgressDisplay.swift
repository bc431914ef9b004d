import Foundation
import PipelineKit
import Synchronization

/// How progress is shown while a run goes.
enum ProgressMode: String, CaseIterable {
    /// A live line on a terminal, nothing otherwise.
    case auto
    /// A plain line every few seconds (for CI logs).
    case plain
    case none
}

/// The live progress of a run on stderr: items done of total, rate, ETA, bytes in, failures and
/// cache hit rate. On a terminal one line is redrawn in place; `plain` prints a line every 5 s.
final class ProgressDisplay: Sendable {
    private struct State {
        var done = 0
        var failed = 0
        var bytesIn = 0
        /// Data cache, image cache: hits and lookups.
        var cacheHits = [0, 0]
        var cacheLookups = [0, 0]
        var duplicates = 0
        var shared = 0
        var total: Int?
        var drawn = false
    }
    private let state = Mutex(State())
    private let start = ContinuousClock.now
    private let live: Bool
    private let ticker = Mutex<Task<Void, Never>?>(nil)

    /// `nil` when nothing should be shown for `mode` (for example stderr is not a terminal).
    init?(mode: ProgressMode, list: String) {
        switch mode {
        case .none: return nil
        case .auto:
            guard isatty(2) == 1 else { return nil }
            live = true
        case .plain:
            live = false
        }
        if list != "-" { countLines(list) }
        let interval: Duration = live ? .milliseconds(250) : .seconds(5)
        let task = Task { [weak self] in
            while !Task.isCancelled {
                try? await Task.sleep(for: interval)
                guard let self, !Task.isCancelled else { return }
                self.draw()
            }
        }
        ticker.withLock { $0 = task }
    }

    /// Counts the items of the list in the background (cheaply: bytes, not lines of Swift strings).
    private func countLines(_ path: String) {
        WorkerPool.io.submit { [weak self] in
            guard let handle = FileHandle(forReadingAtPath: path) else { return }
            defer { try? handle.close() }
            var count = 0, atLineStart = true, skipping = false
            while let chunk = try? handle.read(upToCount: 1 << 20), !chunk.isEmpty {
                for byte in chunk {
                    if byte == 0x0A { atLineStart = true; skipping = false; continue }
                    if skipping || byte == 0x20 || byte == 0x09 || byte == 0x0D { continue }
                    if atLineStart {
                        atLineStart = false
                        if byte == 0x23 { skipping = true } else { count += 1; skipping = true }
                    }
                }
            }
            self?.state.withLock { $0.total = count }
        }
    }

    /// Counts one finished item.
    func record(_ item: ItemResult) {
        state.withLock { s in
            s.done += 1
            if item.duplicate {
                s.duplicates += 1
                return
            }
            if item.status == .failed { s.failed += 1 }
            if item.shared { s.shared += 1 }
            s.bytesIn += item.bytesIn
            // Lookups of the caches the pipeline has (`off`: none, or not asked: shared work).
            for (index, outcome) in [item.cacheData, item.cacheImage].enumerated() where outcome != .off {
                s.cacheLookups[index] += 1
                if outcome != .miss { s.cacheHits[index] += 1 }
            }
        }
    }

    /// Stops drawing and clears the live line.
    func finish() {
        ticker.withLock { $0?.cancel() }
        let drawn = state.withLock { $0.drawn }
        if live && drawn { FileHandle.standardError.write(Data("\r\u{1B}[K".utf8)) }
    }

    private func draw() {
        let s = state.withLock { s -> State in s.drawn = true; return s }
        let elapsed = Double((ContinuousClock.now - start).components.seconds) + Double((ContinuousClock.now - start).components.attoseconds) / 1e18
        let rate = elapsed > 0 ? Double(s.done) / elapsed : 0
        var parts: [String] = []
        if let total = s.total, total > 0 {
            let percent = Double(s.done) / Double(total) * 100
            parts.append("\(s.done)/\(total) (\(String(format: "%.1f", percent))%)")
            if rate > 0, s.done < total { parts.append("ETA " + Self.duration(Double(total - s.done) / rate)) }
        } else {
            parts.append("\(s.done) items")
        }
        parts.append(String(format: "%.1f items/s", rate))
        parts.append("in " + SummaryText.bytes(s.bytesIn))
        parts.append("failed \(s.failed)")
        if s.duplicates > 0 { parts.append("duplicates \(s.duplicates)") }
        if s.shared > 0 { parts.append("shared \(s.shared)") }
        for (index, name) in ["data cache", "image cache"].enumerated() where s.cacheLookups[index] > 0 {
            parts.append("\(name) \(Int(Double(s.cacheHits[index]) / Double(s.cacheLookups[index]) * 100))% hit")
        }
        let line = parts.joined(separator: "  ")
        FileHandle.standardError.write(Data((live ? "\r\u{1B}[K" + line : line + "\n").utf8))
    }

    static func duration(_ seconds: Double) -> String {
        let s = Int(seconds.rounded())
        if s >= 3600 { return "\(s / 3600)h\(String(format: "%02d", (s % 3600) / 60))m" }
        if s >= 60 { return "\(s / 60)m\(String(format: "%02d", s % 60))s" }
        return "\(s)s"
    }
}
