import Foundation
import Synchronization

/// Which outputs a pipeline has completely written into an output directory: the record that lets a
/// run that was stopped, even by SIGKILL, be resumed.
///
/// One append-only file per pipeline fingerprint, `OUTPUT/.pipelinectl/done-FINGERPRINT.txt`, one
/// output path (relative to the output directory) per line, appended only after the output was
/// renamed into place. A line cut short by a kill is ignored; an output written but not yet recorded
/// is simply made again. A different fingerprint (any change that changes outputs) starts afresh.
final class CompletionManifest: Sendable {
    let path: String
    private let recorded: Mutex<Set<String>>
    private let handle: Mutex<FileHandle?>
    private let resuming: Bool

    init(outputDirectory: String, fingerprint: String, load: Bool) {
        let dir = (outputDirectory as NSString).appendingPathComponent(".pipelinectl")
        path = (dir as NSString).appendingPathComponent("done-\(fingerprint.prefix(16)).txt")
        var set: Set<String> = []
        if load, let text = try? String(contentsOfFile: path, encoding: .utf8) {
            // Only whole lines: a kill can leave the last one without its newline.
            let lines = text.split(separator: "\n", omittingEmptySubsequences: false)
            for line in lines.dropLast() where !line.isEmpty { set.insert(String(line)) }
        }
        recorded = Mutex(set)
        handle = Mutex(nil)
        resuming = load
    }

    /// Whether every one of `outputs` (relative paths) was recorded and still exists.
    func isComplete(_ outputs: [String], in outputDirectory: String) -> Bool {
        let known = recorded.withLock { set in outputs.allSatisfy { set.contains($0) } }
        return known && outputs.allSatisfy {
            FileManager.default.fileExists(atPath: (outputDirectory as NSString).appendingPathComponent($0))
        }
    }

    /// Records `outputs` (relative paths) as completely written.
    func record(_ outputs: [String]) throws {
        let lines = Data(outputs.map { $0 + "\n" }.joined().utf8)
        try handle.withLock { handle in
            if handle == nil {
                try FileManager.default.createDirectory(atPath: (path as NSString).deletingLastPathComponent,
                                                        withIntermediateDirectories: true)
                if !FileManager.default.fileExists(atPath: path) { FileManager.default.createFile(atPath: path, contents: nil) }
                let opened = try FileHandle(forWritingTo: URL(fileURLWithPath: path))
                try opened.seekToEnd()
                handle = opened
            }
            try handle!.write(contentsOf: lines)
        }
        // Kept in memory only for --resume lookups; otherwise a long run would grow with its list.
        if resuming { recorded.withLock { set in for output in outputs { set.insert(output) } } }
    }
}
