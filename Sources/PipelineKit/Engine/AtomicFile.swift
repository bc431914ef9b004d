import Foundation

/// Writing files so that no reader ever sees a partial one: write a temporary file beside the
/// target, then rename it into place.
public enum AtomicFile {
    /// Writes `data` to `path`, creating parent directories. The temporary name starts with `.`
    /// and ends with `.tmp`, so a killed process leaves only names a later run ignores.
    public static func write(_ data: Data, to path: String) throws {
        let url = URL(fileURLWithPath: path)
        let dir = url.deletingLastPathComponent()
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
        let temp = dir.appendingPathComponent(".\(url.lastPathComponent).\(getpid())-\(UInt32.random(in: 0...UInt32.max)).tmp")
        do {
            try data.write(to: temp, options: [])
            guard rename(temp.path, path) == 0 else {
                throw PipelineError(.writeFailed, "renaming into \(path): \(String(cString: strerror(errno)))")
            }
        } catch {
            try? FileManager.default.removeItem(at: temp)
            throw error
        }
    }
}
