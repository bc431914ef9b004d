import Foundation
import Synchronization

/// A JSONL report written as the run goes: a `run` line, one `item` line per item as it finishes,
/// and a `summary` line at the end. Each line is written whole with one `write`, so a run that is
/// killed leaves a report of every item that finished (``RunReport/read(_:)`` reads it).
public final class ReportStream: Sendable {
    private let handle: Mutex<FileHandle>
    private let encoder: JSONEncoder = {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        return encoder
    }()

    /// Creates (or truncates) `path` and writes the `run` line.
    public init(path: String, pipeline: String) throws {
        let url = URL(fileURLWithPath: path)
        try FileManager.default.createDirectory(at: url.deletingLastPathComponent(), withIntermediateDirectories: true)
        guard FileManager.default.createFile(atPath: path, contents: nil), let handle = try? FileHandle(forWritingTo: url) else {
            throw PipelineError(.io, "cannot write the report to \(path)")
        }
        self.handle = Mutex(handle)
        try line(Tagged(type: "run", body: RunLine(pipeline: pipeline, reportVersion: RunReport.currentVersion)))
    }

    /// Appends one finished item.
    public func item(_ item: ItemResult) throws { try line(Tagged(type: "item", body: item)) }

    /// Appends the summary and closes the file.
    public func finish(_ summary: RunSummary) throws {
        try line(Tagged(type: "summary", body: summary))
        try handle.withLock { try $0.close() }
    }

    private func line<T: Encodable>(_ value: T) throws {
        var data = try encoder.encode(value)
        data.append(0x0A)
        try handle.withLock { try $0.write(contentsOf: data) }
    }

    struct RunLine: Encodable {
        let pipeline: String
        let reportVersion: Int
        enum CodingKeys: String, CodingKey { case pipeline, reportVersion = "report_version" }
    }

    /// `body`'s fields plus `"type"`.
    struct Tagged<Body: Encodable>: Encodable {
        let type: String
        let body: Body
        enum Key: String, CodingKey { case type }
        func encode(to encoder: any Encoder) throws {
            try body.encode(to: encoder)
            var c = encoder.container(keyedBy: Key.self)
            try c.encode(type, forKey: .type)
        }
    }
}
