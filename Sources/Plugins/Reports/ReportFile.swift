import Foundation
import PipelineKit
import Synchronization

/// A report file written piece by piece, each piece with one `write`: to `path` itself (a JSONL
/// report, readable while it grows), or to a temporary file beside it that is renamed into place
/// when the report is complete (a JSON document, never seen half-written).
final class ReportFile: Sendable {
    let path: String
    private let writing: String
    private let handle: Mutex<FileHandle?>
    static let encoder: JSONEncoder = {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        return encoder
    }()

    init(path: String, atomic: Bool) throws {
        self.path = path
        let url = URL(fileURLWithPath: path)
        writing = atomic ? url.deletingLastPathComponent()
            .appendingPathComponent(".\(url.lastPathComponent).\(getpid())-\(UInt32.random(in: 0...UInt32.max)).tmp").path : path
        do { try FileManager.default.createDirectory(at: url.deletingLastPathComponent(), withIntermediateDirectories: true) } catch {
            throw PipelineError(.io, "cannot write the report to \(path): \(error.localizedDescription)")
        }
        guard FileManager.default.createFile(atPath: writing, contents: nil),
              let handle = FileHandle(forWritingAtPath: writing) else {
            throw PipelineError(.io, "cannot write the report to \(path): \(String(cString: strerror(errno)))")
        }
        self.handle = Mutex(handle)
    }

    func write(_ data: Data) throws {
        try handle.withLock { handle in
            guard let handle else { throw PipelineError(.io, "the report \(path) is already finished") }
            do { try handle.write(contentsOf: data) } catch {
                throw PipelineError(.io, "writing the report \(path): \(error.localizedDescription)")
            }
        }
    }

    func write(_ text: String) throws { try write(Data(text.utf8)) }

    /// Closes the file, and renames it into place when it was written aside.
    func close() throws {
        try handle.withLock { handle in
            try handle?.synchronize()
            try handle?.close()
            handle = nil
        }
        if writing != path, rename(writing, path) != 0 {
            throw PipelineError(.io, "renaming the report into \(path): \(String(cString: strerror(errno)))")
        }
    }

    static func json<T: Encodable>(_ value: T) throws -> String {
        String(decoding: try encoder.encode(value), as: UTF8.self)
    }
}

/// `json`: the report as one JSON document (`report_version`, `run`, `items`, `summary`, `stats`),
/// streamed to a temporary file as items finish and renamed into place at the end.
public final class JSONReport: ReportWriting {
    public static let plugin = Plugin.report(
        PluginSpec(name: "json",
                   summary: "One JSON document: the run, every item as it finished (one per line), the summary and stage figures; written aside and renamed into place when the run ends.",
                   options: [])
    ) { options in try JSONReport(path: options.string("path") ?? "report.json") }

    let file: ReportFile
    private let started = Mutex(false)

    init(path: String) throws { file = try ReportFile(path: path, atomic: true) }

    public func begin(_ run: RunHeader) throws {
        try file.write("{\"report_version\":\(RunReport.currentVersion),\"pipeline\":\(try ReportFile.json(run.pipeline)),"
            + "\"run\":\(try ReportFile.json(run)),\"items\":[")
    }

    public func item(_ item: ItemResult) throws {
        let first = started.withLock { started -> Bool in
            let first = !started
            started = true
            return first
        }
        try file.write((first ? "\n" : ",\n") + (try ReportFile.json(item)))
    }

    public func finish(summary: RunSummary, statistics: RunStatistics) throws {
        try file.write("\n],\"summary\":\(try ReportFile.json(summary)),\"stats\":\(try ReportFile.json(statistics))}\n")
        try file.close()
    }
}

/// `jsonl`: one JSON object per line, each with a `type`: `run` first, `item` as each finishes,
/// `summary` last. Written in place, so a run that is killed leaves every line so far.
public struct JSONLinesReport: ReportWriting {
    public static let plugin = Plugin.report(
        PluginSpec(name: "jsonl",
                   summary: "JSON Lines written as items finish: a run line, one line per item, a summary line; a killed run leaves every line written so far.",
                   options: [])
    ) { options in try JSONLinesReport(path: options.string("path") ?? "report.jsonl") }

    let file: ReportFile

    init(path: String) throws { file = try ReportFile(path: path, atomic: false) }

    public func begin(_ run: RunHeader) throws {
        try file.write(try ReportFile.json(Tagged(type: "run", body: RunLine(run: run))) + "\n")
    }

    public func item(_ item: ItemResult) throws {
        try file.write(try ReportFile.json(Tagged(type: "item", body: item)) + "\n")
    }

    public func finish(summary: RunSummary, statistics: RunStatistics) throws {
        try file.write(try ReportFile.json(Tagged(type: "summary", body: summary)) + "\n")
        try file.close()
    }

    /// The run line: the pipeline's name, the format version and the run's header.
    struct RunLine: Encodable {
        let run: RunHeader
        func encode(to encoder: any Encoder) throws {
            var c = encoder.container(keyedBy: Key.self)
            try c.encode(run.pipeline, forKey: .pipeline)
            try c.encode(RunReport.currentVersion, forKey: .reportVersion)
            try c.encode(run, forKey: .run)
        }
        enum Key: String, CodingKey { case pipeline, reportVersion = "report_version", run }
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
