import CLinux
import Foundation
import PipelineKit

/// `local`: outputs in a directory on this machine. Each is written to a temporary file beside
/// its target, given its fingerprint as the extended attribute `user.pipelinectl.fingerprint`,
/// and renamed (or, when only a new file may be made, linked) into place: a reader never sees a
/// partial file, and a killed run leaves only `.…tmp` names that later runs ignore.
///
/// On a file system without extended attributes (tmpfs before Linux 6.6, some network file
/// systems) fingerprints cannot be recorded: an output already there counts as changed and is
/// written again, and `--resume` relies on the run record alone.
public struct LocalDirectory: OutputDestination {
    public static let plugin = Plugin.destination(
        PluginSpec(name: "local",
                   summary: "Writes outputs into a directory on this machine, each atomically (a temporary file renamed into place) with its fingerprint as an extended attribute.",
                   options: []),
        schemes: ["", "file"]
    ) { options in LocalDirectory(path: try LocalDirectory.path(options.string("dir") ?? "out")) }

    /// The extended attribute holding an output's fingerprint.
    static let attribute = "user.pipelinectl.fingerprint"

    public let path: String

    public init(path: String) { self.path = path }

    /// `dir` as a path: itself, or the path of a `file://` URL.
    static func path(_ dir: String) throws -> String {
        guard Source.urlScheme(of: dir) == "file" else { return dir }
        guard let url = URL(string: dir), url.host == nil || url.host == "" || url.host == "localhost", !url.path.isEmpty else {
            throw PipelineError(.invalidOption, "output.dir '\(dir)' is not a local file:// URL")
        }
        return url.path
    }

    public var localDirectory: String? { path }

    public func location(_ relative: String) -> String {
        path.hasSuffix("/") ? path + relative : path + "/" + relative
    }

    public func write(_ output: OutputFile) async throws {
        let target = location(output.relative)
        try await WorkerPool.io.run {
            let temp = try Self.temporary(output, beside: target)
            defer { unlink(temp) }
            guard rename(temp, target) == 0 else {
                throw PipelineError(.writeFailed, "renaming into \(target): \(String(cString: strerror(errno)))")
            }
        }
    }

    /// Makes the file only if there is none: the temporary file is hard-linked to the target name,
    /// which fails when a file is there, so two writers never replace each other's output.
    public func create(_ output: OutputFile) async throws -> ExistingOutput? {
        let target = location(output.relative)
        return try await WorkerPool.io.run { () throws -> ExistingOutput? in
            let temp = try Self.temporary(output, beside: target)
            defer { unlink(temp) }
            if link(temp, target) == 0 { return nil }
            let reason = errno
            if reason == EEXIST { return Self.existing(at: target) }
            // A file system without hard links: check, then rename (not atomic against a
            // second writer, which then writes the same bytes).
            guard reason == EPERM || reason == ENOTSUP || reason == EOPNOTSUPP else {
                throw PipelineError(.writeFailed, "linking into \(target): \(String(cString: strerror(reason)))")
            }
            if let there = Self.existing(at: target) { return there }
            guard rename(temp, target) == 0 else {
                throw PipelineError(.writeFailed, "renaming into \(target): \(String(cString: strerror(errno)))")
            }
            return nil
        }
    }

    public func stored(_ relative: String) async throws -> ExistingOutput? {
        let target = location(relative)
        return try await WorkerPool.io.run { Self.existing(at: target) }
    }

    public func read(_ relative: String) async throws -> Data? {
        let target = location(relative)
        return try await WorkerPool.io.run { FileManager.default.contents(atPath: target) }
    }

    public func list(under prefix: String) async throws -> [String] {
        let root = URL(fileURLWithPath: location(prefix))
        return try await WorkerPool.io.run {
            guard let walker = FileManager.default.enumerator(atPath: root.path) else {
                throw PipelineError(.notFound, "\(root.path): no such directory")
            }
            var found: [String] = []
            while let name = walker.nextObject() as? String {
                var isDirectory: ObjCBool = false
                let full = root.appendingPathComponent(name).path
                if FileManager.default.fileExists(atPath: full, isDirectory: &isDirectory), !isDirectory.boolValue,
                   !(name as NSString).lastPathComponent.hasPrefix(".") {
                    found.append(prefix + name)
                }
            }
            return found.sorted()
        }
    }

    /// What is at `path`: `nil` when nothing, else its recorded fingerprint if it has one.
    static func existing(at path: String) -> ExistingOutput? {
        var info = stat()
        guard stat(path, &info) == 0 else { return nil }
        var buffer = [UInt8](repeating: 0, count: 128)
        let count = getxattr(path, attribute, &buffer, buffer.count)
        guard count > 0 else { return ExistingOutput(fingerprint: nil) }
        return ExistingOutput(fingerprint: OutputFingerprint(stored: String(decoding: buffer[..<count], as: UTF8.self)))
    }

    /// Writes `output` to a new temporary file beside `target` (creating directories), with its
    /// fingerprint recorded where the file system allows; returns its path.
    static func temporary(_ output: OutputFile, beside target: String) throws -> String {
        let url = URL(fileURLWithPath: target)
        let dir = url.deletingLastPathComponent()
        do { try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true) } catch {
            throw PipelineError(.writeFailed, "cannot create \(dir.path): \(error.localizedDescription)")
        }
        let temp = dir.appendingPathComponent(".\(url.lastPathComponent).\(getpid())-\(UInt32.random(in: 0...UInt32.max)).tmp").path
        do { try output.data.write(to: URL(fileURLWithPath: temp)) } catch {
            unlink(temp)
            throw PipelineError(.writeFailed, "writing \(target): \(error.localizedDescription)")
        }
        let value = Array(output.fingerprint.description.utf8)
        _ = setxattr(temp, attribute, value, value.count, 0)  // unsupported: the output has no fingerprint
        return temp
    }
}
