import Foundation
import PipelineKit
import Synchronization

/// A report in parts (`pipelinectl work --report DIR/work.jsonl --report-rotate 100MB|1h`): each
/// part is a whole report of the format's own (a run line, its items, a summary line of its
/// items), named `STEM-YYYYMMDDTHHMMSSZ-RUN-NNNN.EXT` after the time it began, the run's id and its
/// number, so that parts of several workers never collide and sort by time. A part is closed when it reaches the
/// size, or the age, and then handed to `closed` (which uploads a part of an `s3://` report and
/// removes the local file). `pipelinectl report` reads any number of parts as one.
final class RotatingReport: ReportWriting, Sendable {
    let directory: String
    let stem: String
    let ext: String
    let format: String
    let maxBytes: Int?
    let maxSeconds: Double?
    /// Called with a closed part's local path and file name, off the items' path.
    let closed: (@Sendable (String, String) async -> Void)?

    struct Part {
        let writer: any ReportWriting
        let path: String
        let name: String
        let started: ContinuousClock.Instant
        var summary = RunSummary()
        var statistics = RunStatistics.Builder()
    }

    struct State {
        var header: RunHeader?
        var part: Part?
        var handoffs: [Task<Void, Never>] = []
        var timer: Task<Void, Never>?
        var parts = 0
    }

    private let state = Mutex(State())

    /// `path` names the first part's directory, stem and extension (`out/work.jsonl`).
    init(path: String, format: String, maxBytes: Int?, maxSeconds: Double?, closed: (@Sendable (String, String) async -> Void)? = nil) {
        let url = URL(fileURLWithPath: path)
        directory = url.deletingLastPathComponent().path
        ext = url.pathExtension.isEmpty ? format : url.pathExtension
        stem = url.pathExtension.isEmpty ? url.lastPathComponent : url.deletingPathExtension().lastPathComponent
        self.format = format
        self.maxBytes = maxBytes
        self.maxSeconds = maxSeconds
        self.closed = closed
    }

    /// Parses `--report-rotate`: a size (`100MB`) or a duration (`1h`).
    static func parse(_ text: String) -> (bytes: Int?, seconds: Double?)? {
        if let seconds = Units.parseDuration(text), seconds > 0, text.last?.isLetter == true, !text.uppercased().hasSuffix("B") {
            return (nil, max(1, seconds))
        }
        if let bytes = Units.parseSize(text), bytes > 0 { return (Int(bytes), nil) }
        return nil
    }

    func begin(_ run: RunHeader) throws {
        try state.withLock { state in
            state.header = run
            state.part = try open(run, number: 1)
            state.parts = 1
        }
        if let maxSeconds {
            // An idle worker's part is closed on time too, not only when the next item comes.
            let timer = Task { [weak self] in
                while !Task.isCancelled {
                    try? await Task.sleep(for: .seconds(min(60, max(1, maxSeconds / 10))))
                    guard let self else { return }
                    try? self.state.withLock { state in try self.rotateIfDue(&state) }
                }
            }
            state.withLock { $0.timer = timer }
        }
    }

    func item(_ item: ItemResult) throws {
        try state.withLock { state in
            try rotateIfDue(&state)
            guard var part = state.part else { throw PipelineError(.io, "the report is already finished") }
            try part.writer.item(item)
            part.summary.add(item)
            part.statistics.add(item)
            state.part = part
        }
    }

    func finish(summary: RunSummary, statistics: RunStatistics) throws {
        try state.withLock { state in
            state.timer?.cancel()
            if let part = state.part { try close(part, in: &state) }
            state.part = nil
        }
    }

    /// Waits until every closed part is handed off (uploaded, for an s3:// report).
    func handedOff() async {
        let handoffs = state.withLock { $0.handoffs }
        for task in handoffs { await task.value }
    }

    /// Closes the current part and opens the next when the current one is big or old enough.
    private func rotateIfDue(_ state: inout State) throws {
        guard let part = state.part, let header = state.header, part.summary.total > 0 else { return }
        var due = false
        if let maxSeconds, ContinuousClock.now - part.started >= .seconds(maxSeconds) { due = true }
        if let maxBytes, let size = (try? FileManager.default.attributesOfItem(atPath: part.path)[.size]) as? Int, size >= maxBytes { due = true }
        guard due else { return }
        try close(part, in: &state)
        state.parts += 1
        state.part = try open(header, number: state.parts)
    }

    private func open(_ header: RunHeader, number: Int) throws -> Part {
        var header = header
        header.part = number
        let formatter = DateFormatter()
        formatter.locale = Locale(identifier: "en_US_POSIX")
        formatter.timeZone = TimeZone(identifier: "UTC")
        formatter.dateFormat = "yyyyMMdd'T'HHmmss'Z'"
        // The part's number makes its name unique even when parts close within a second (a
        // part uploaded to a store is gone from here: its name cannot be checked locally).
        let name = "\(stem)-\(formatter.string(from: Date()))-\(header.id.prefix(8))-\(String(format: "%04d", number)).\(ext)"
        let path = URL(fileURLWithPath: directory).appendingPathComponent(name).path
        let writer = try PipelineCtl.registry.makeReport(format, path: path)
        try writer.begin(header)
        return Part(writer: writer, path: path, name: name, started: .now)
    }

    private func close(_ part: Part, in state: inout State) throws {
        try part.writer.finish(summary: part.summary, statistics: part.statistics.statistics)
        if let closed {
            let path = part.path, name = part.name
            state.handoffs.append(Task { await closed(path, name) })
        }
    }
}
