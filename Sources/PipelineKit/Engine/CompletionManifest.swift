import Foundation
import Synchronization

/// Which outputs a pipeline has completely written into an output directory: the record that lets a
/// run that was stopped, even by SIGKILL, be resumed.
///
/// One append-only file per pipeline fingerprint (and shard), `OUTPUT/.pipelinectl/done-FINGERPRINT[-shard-K-of-N].txt`, one
/// output path (relative to the output directory) per line, appended only after the output was
/// renamed into place. When the written file's name differs from the planned one (an encoder that
/// picks the extension from the image), the line is `PLANNED<TAB>WRITTEN`. A line cut short by a kill is ignored; an output written but not yet recorded
/// is simply made again. A different fingerprint (any change that changes outputs) starts afresh.
final class CompletionManifest: Sendable {
    let path: String
    /// Planned path -> written path.
    private let recorded: Mutex<[String: String]>
    private let handle: Mutex<FileHandle?>
    private let resuming: Bool
    private let enabled: Bool

    /// - Parameter suffix: added to the file's name (a shard's `-shard-K-of-N`), so that shards
    ///   writing into one directory each keep their own record.
    /// - Parameter enabled: `false` for destinations that answer for themselves (object storage):
    ///   nothing is read or written.
    /// - Parameter recordDirectory: where the record is kept (`--state-dir`); `nil`:
    ///   `OUTPUT/.pipelinectl`.
    init(outputDirectory: String, fingerprint: String, recordDirectory: String? = nil, suffix: String = "", load: Bool,
         enabled: Bool = true) {
        self.enabled = enabled
        let dir = recordDirectory ?? (outputDirectory as NSString).appendingPathComponent(".pipelinectl")
        path = (dir as NSString).appendingPathComponent("done-\(fingerprint.prefix(16))\(suffix).txt")
        var set: [String: String] = [:]
        if load, enabled, let text = try? String(contentsOfFile: path, encoding: .utf8) {
            // Only whole lines: a kill can leave the last one without its newline.
            let lines = text.split(separator: "\n", omittingEmptySubsequences: false)
            for line in lines.dropLast() where !line.isEmpty {
                let parts = line.split(separator: "\t", maxSplits: 1).map(String.init)
                set[parts[0]] = parts.count == 2 ? parts[1] : parts[0]
            }
        }
        recorded = Mutex(set)
        handle = Mutex(nil)
        resuming = load
    }

    /// The written paths of `outputs` (planned relative paths) when every one was recorded and its
    /// file still exists; `nil` otherwise.
    func completed(_ outputs: [String], in outputDirectory: String) -> [String]? {
        let written = recorded.withLock { set in outputs.compactMap { set[$0] } }
        guard written.count == outputs.count, written.allSatisfy({
            FileManager.default.fileExists(atPath: (outputDirectory as NSString).appendingPathComponent($0))
        }) else { return nil }
        return written
    }

    /// Records `outputs` (planned relative paths) as completely written, at `written` (the same
    /// paths unless an encoder chose the extension).
    func record(_ outputs: [String], as written: [String]) throws {
        guard enabled else { return }
        let lines = Data(zip(outputs, written).map { $0 == $1 ? $0 + "\n" : $0 + "\t" + $1 + "\n" }.joined().utf8)
        try handle.withLock { handle in
            if handle == nil {
                try FileManager.default.createDirectory(atPath: (path as NSString).deletingLastPathComponent,
                                                        withIntermediateDirectories: true)
                if !FileManager.default.fileExists(atPath: path) { _ = FileManager.default.createFile(atPath: path, contents: nil) }
                let opened = try FileHandle(forWritingTo: URL(fileURLWithPath: path))
                try opened.seekToEnd()
                handle = opened
            }
            try handle!.write(contentsOf: lines)
        }
        // Kept in memory only for --resume lookups; otherwise a long run would grow with its list.
        if resuming { recorded.withLock { set in for (planned, path) in zip(outputs, written) { set[planned] = path } } }
    }
}
