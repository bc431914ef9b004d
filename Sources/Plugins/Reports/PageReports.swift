import Foundation
import PipelineKit
import Synchronization

/// The items of a run as a report receives them, kept until it finishes, for the reports that
/// are written whole from every item (a page, a summary).
final class CollectedRun: Sendable {
    private let state = Mutex<(header: RunHeader?, items: [ItemResult])>((nil, []))

    func begin(_ run: RunHeader) { state.withLock { $0.header = run } }
    func add(_ item: ItemResult) { state.withLock { $0.items.append(item) } }

    /// The whole run, as `pipelinectl report` reads one back.
    func report(_ summary: RunSummary) -> RunReport {
        state.withLock { state in
            RunReport(pipeline: state.header?.pipeline ?? "", summary: summary, items: state.items, run: state.header)
        }
    }
}

/// `html`: the contact sheet of the run, as `pipelinectl report --html` draws it: one tile per
/// item (its first output, or the failure's kind and message), filters by status and kind.
/// Local outputs are linked relative to the page, stored ones by their HTTP URL.
public final class HTMLReport: ReportWriting {
    public static let plugin = Plugin.report(
        PluginSpec(name: "html",
                   summary: "A self-contained HTML contact sheet: the summary, then a tile per item (its output, or why it failed), with filters; written whole when the run ends.",
                   options: [])
    ) { options in try HTMLReport(path: options.string("path") ?? "report.html") }

    let file: ReportFile
    let run = CollectedRun()

    init(path: String) throws { file = try ReportFile(path: path, atomic: true) }

    public func begin(_ run: RunHeader) throws { self.run.begin(run) }
    public func item(_ item: ItemResult) throws { run.add(item) }

    public func finish(summary: RunSummary, statistics: RunStatistics) throws {
        let report = run.report(summary)
        let cwd = URL(fileURLWithPath: FileManager.default.currentDirectoryPath)
        let page = file.path.hasPrefix("/") ? URL(fileURLWithPath: file.path) : cwd.appendingPathComponent(file.path)
        let links = try ContactSheet.links(report.items, headers: Array(repeating: report.run, count: report.items.count), page: page, cwd: cwd)
        try file.write(ContactSheet.html(report, links: links))
        try file.close()
    }
}

/// `text`: the summary `pipelinectl run` prints at the end (counts, rate, bytes, stage times,
/// cache figures, failures by kind with examples), as a text file.
public final class TextReport: ReportWriting {
    public static let plugin = Plugin.report(
        PluginSpec(name: "text",
                   summary: "The run's summary as run prints it (counts, rate, bytes, stage times, cache, failures by kind), written when the run ends.",
                   options: [])
    ) { options in try TextReport(path: options.string("path") ?? "report.txt") }

    let file: ReportFile
    private let header = Mutex<RunHeader?>(nil)
    private let failures = Mutex(FailureDigest())

    init(path: String) throws { file = try ReportFile(path: path, atomic: true) }

    public func begin(_ run: RunHeader) throws { header.withLock { $0 = run } }
    public func item(_ item: ItemResult) throws { failures.withLock { $0.add(item) } }

    public func finish(summary: RunSummary, statistics: RunStatistics) throws {
        let text = SummaryText.render(pipeline: header.withLock { $0?.pipeline } ?? "", summary: summary, statistics: statistics,
                                      failures: failures.withLock { $0 }, outputDirectory: header.withLock { $0?.output })
        try file.write(text + "\n")
        try file.close()
    }
}
