import Foundation

/// The last stage of validation: facts about this machine that a run would hit. Directories a
/// run writes to must exist and be writable, or be creatable; files it reads must be readable.
/// (Whether this ImageMagick can write an encoder's format is checked by the encoder's factory.)
public enum MachineCheck {
    /// - Parameter severity: errors (a run on this machine would fail), or warnings (`validate`:
    ///   the file may be meant for another host).
    public static func diagnostics(for pipeline: Pipeline, severity: Diagnostic.Severity = .error) -> [Diagnostic] {
        var found: [Diagnostic] = []
        func report(_ at: SourcePosition?, _ message: String) {
            let at = at ?? SourcePosition(line: 1, column: 1)
            found.append(Diagnostic(severity, file: pipeline.file, line: at.line, column: at.column,
                                    message: severity == .warning ? message + " on this machine" : message))
        }
        if Source.urlScheme(of: pipeline.output.dir) == nil, let problem = writableDirectoryProblem(pipeline.output.dir) {
            report(pipeline.output.dirPosition, "output.dir: the directory '\(pipeline.output.dir)' \(problem)")
        }
        let stages = [pipeline.loader, pipeline.dataCache, pipeline.decoder, pipeline.imageCache].compactMap { $0 }
            + pipeline.variants.flatMap { $0.processors + [$0.encoder] }
        for stage in stages {
            for option in stage.plugin.spec.options where option.access != .any {
                guard let path = stage.options.string(option.name) else { continue }
                let at = stage.optionPositions[option.name] ?? stage.position
                let key = (stage.keyPath.map { $0 + "." } ?? "") + option.name
                switch option.access {
                case .writableDirectory:
                    if let problem = writableDirectoryProblem(path) { report(at, "\(key): the directory '\(path)' \(problem)") }
                case .readableFile:
                    if !FileManager.default.isReadableFile(atPath: path) { report(at, "\(key): the file '\(path)' cannot be read") }
                case .any:
                    break
                }
            }
        }
        return found
    }

    /// Why `path` cannot be used as a directory to write in, or `nil` when it can.
    public static func writableDirectoryProblem(_ path: String) -> String? {
        let absolute = path.hasPrefix("/") ? path : FileManager.default.currentDirectoryPath + "/" + path
        var candidate = URL(fileURLWithPath: absolute).standardizedFileURL
        var isDirectory: ObjCBool = false
        var exists = FileManager.default.fileExists(atPath: candidate.path, isDirectory: &isDirectory)
        if exists {
            if !isDirectory.boolValue { return "is a file, not a directory" }
            return access(candidate.path, W_OK | X_OK) == 0 ? nil : "is not writable"
        }
        // Creatable: the nearest existing ancestor must be a writable directory.
        while !exists, candidate.path != "/" {
            candidate.deleteLastPathComponent()
            exists = FileManager.default.fileExists(atPath: candidate.path, isDirectory: &isDirectory)
        }
        if !isDirectory.boolValue { return "cannot be created: '\(candidate.path)' is a file" }
        return access(candidate.path, W_OK | X_OK) == 0 ? nil : "cannot be created: '\(candidate.path)' is not writable"
    }
}
