import Foundation
import PipelineKit
import Synchronization

/// `tar`: a custom output destination. Every output of a run is appended to one tar archive,
/// `output.dir: tar://out/catalog.tar`, instead of being a file of its own: one file to copy to
/// a CDN's origin or an archive shelf.
///
/// Each entry is a POSIX (ustar) header, a PAX extended header that records the output's
/// fingerprint as the extended attribute `user.pipelinectl.fingerprint` (the one the local
/// destination sets; `tar --xattrs -x` restores it), and the bytes; the archive always ends with the two empty blocks tar expects, so
/// `tar -tvf` and `tar -xf` read it at any time. A later entry of the same name replaces an
/// earlier one on extraction (tar's own rule), which is how an output is "replaced". When the
/// archive exists, its entries are read first, so a second run keeps what is already there with
/// the same fingerprint. A run that is killed mid-entry leaves a short last entry; the next run
/// stops reading there and writes over it.
public final class TarArchive: OutputDestination {
    public static let plugin = Plugin.destination(
        PluginSpec(name: "tar", summary: "Appends every output to one tar archive (tar://path/to/archive.tar), with its fingerprint in a PAX header.",
                   options: [.int("mode", default: 0o644, range: 0...0o7777, doc: "The permissions recorded for each entry.")]),
        schemes: ["tar"],
        check: { options in _ = try TarArchive.path(options.string("dir") ?? "") }
    ) { options in try TarArchive(path: try TarArchive.path(options.string("dir") ?? ""), mode: options.int("mode")!) }

    struct Entry {
        let offset: UInt64
        let size: Int
        let fingerprint: OutputFingerprint?
    }
    struct State {
        var handle: FileHandle
        /// Where the next entry goes: the first of the two empty blocks that end the archive.
        var end: UInt64
        /// The newest entry of each name.
        var entries: [String: Entry]
    }

    let path: String
    let mode: Int
    private let state: Mutex<State>

    /// `tar://out/catalog.tar` -> `out/catalog.tar` (`tar:///abs/path.tar` for an absolute one).
    static func path(_ dir: String) throws -> String {
        guard dir.hasPrefix("tar://"), dir.count > 6 else {
            throw PipelineError(.invalidOption, "expected tar://PATH/TO/ARCHIVE.tar, got '\(dir)'")
        }
        return String(dir.dropFirst(6))
    }

    init(path: String, mode: Int) throws {
        self.path = path
        self.mode = mode
        let url = URL(fileURLWithPath: path)
        try FileManager.default.createDirectory(at: url.deletingLastPathComponent(), withIntermediateDirectories: true)
        if !FileManager.default.fileExists(atPath: path) { FileManager.default.createFile(atPath: path, contents: nil) }
        guard let handle = FileHandle(forUpdatingAtPath: path) else {
            throw PipelineError(.writeFailed, "cannot open the archive \(path) for writing")
        }
        let (entries, end) = try Self.index(handle)
        state = Mutex(State(handle: handle, end: end, entries: entries))
    }

    public func location(_ relative: String) -> String { "tar://\(path)#\(relative)" }

    public func write(_ output: OutputFile) async throws {
        let record = Self.entry(name: output.relative, data: output.data, mode: mode, fingerprint: output.fingerprint)
        try state.withLock { state in
            try state.handle.seek(toOffset: state.end)
            try state.handle.write(contentsOf: record + Data(count: 1024))  // the entry, then the archive's end
            try state.handle.synchronize()
            let dataOffset = state.end + UInt64(record.count - Self.padded(output.data.count))
            state.entries[output.relative] = Entry(offset: dataOffset, size: output.data.count, fingerprint: output.fingerprint)
            state.end += UInt64(record.count)
        }
    }

    public func stored(_ relative: String) async throws -> ExistingOutput? {
        state.withLock { $0.entries[relative] }.map { ExistingOutput(fingerprint: $0.fingerprint) }
    }

    public func read(_ relative: String) async throws -> Data? {
        try state.withLock { state in
            guard let entry = state.entries[relative] else { return nil }
            try state.handle.seek(toOffset: entry.offset)
            return try state.handle.read(upToCount: entry.size)
        }
    }

    // MARK: The tar format

    static func padded(_ count: Int) -> Int { (count + 511) / 512 * 512 }

    /// A PAX header carrying the fingerprint, then the ustar header and the data, padded to blocks.
    static func entry(name: String, data: Data, mode: Int, fingerprint: OutputFingerprint) -> Data {
        let record = "SCHILY.xattr.user.pipelinectl.fingerprint=\(fingerprint)\n"
        var length = record.utf8.count + 3
        while "\(length) \(record)".utf8.count != length { length = "\(length) \(record)".utf8.count }
        let pax = Data("\(length) \(record)".utf8)
        var out = header(name: "PaxHeaders/" + String(name.suffix(80)), size: pax.count, mode: 0o644, type: "x")
        out += pax + Data(count: padded(pax.count) - pax.count)
        out += header(name: name, size: data.count, mode: mode, type: "0")
        out += data + Data(count: padded(data.count) - data.count)
        return out
    }

    /// A 512-byte ustar header (long names go into `prefix`, split at a slash).
    static func header(name: String, size: Int, mode: Int, type: Character) -> Data {
        var block = [UInt8](repeating: 0, count: 512)
        func put(_ text: String, at offset: Int, length: Int) {
            for (i, byte) in text.utf8.prefix(length).enumerated() { block[offset + i] = byte }
        }
        func octal(_ value: Int, at offset: Int, length: Int) {
            put(String(String(value, radix: 8).suffix(length - 1)).leftPadded(to: length - 1), at: offset, length: length - 1)
        }
        var (prefix, short) = ("", name)
        if name.utf8.count > 100, let slash = name.lastIndex(of: "/") {
            prefix = String(name[..<slash])
            short = String(name[name.index(after: slash)...])
        }
        put(short, at: 0, length: 100)
        octal(mode, at: 100, length: 8)
        octal(0, at: 108, length: 8)
        octal(0, at: 116, length: 8)
        octal(size, at: 124, length: 12)
        octal(Int(Date().timeIntervalSince1970), at: 136, length: 12)
        put(String(type), at: 156, length: 1)
        put("ustar", at: 257, length: 6)
        put("00", at: 263, length: 2)
        put(prefix, at: 345, length: 155)
        for i in 148..<156 { block[i] = 0x20 }
        octal(block.reduce(0) { $0 + Int($1) }, at: 148, length: 7)
        return Data(block)
    }

    /// The entries of an existing archive, and where the next one goes: its first empty block, or
    /// the start of a last entry cut short.
    static func index(_ handle: FileHandle) throws -> ([String: Entry], UInt64) {
        var entries: [String: Entry] = [:]
        var offset: UInt64 = 0
        var fingerprint: OutputFingerprint?
        let size = try handle.seekToEnd()
        while offset + 512 <= size {
            try handle.seek(toOffset: offset)
            guard let block = try handle.read(upToCount: 512), block.count == 512, block.contains(where: { $0 != 0 }) else { break }
            let field = { (start: Int, length: Int) in
                String(decoding: block[start..<(start + length)].prefix { $0 != 0 }, as: UTF8.self)
            }
            guard let length = Int(field(124, 12).trimmingCharacters(in: .whitespaces), radix: 8),
                  offset + 512 + UInt64(padded(length)) <= size else { break }
            let prefix = field(345, 155), name = prefix.isEmpty ? field(0, 100) : prefix + "/" + field(0, 100)
            if field(156, 1) == "x" {
                let body = try handle.read(upToCount: length) ?? Data()
                let text = String(decoding: body, as: UTF8.self)
                fingerprint = text.split(separator: "\n").compactMap { line -> OutputFingerprint? in
                    guard let range = line.range(of: "SCHILY.xattr.user.pipelinectl.fingerprint=") else { return nil }
                    return OutputFingerprint(stored: String(line[range.upperBound...]))
                }.first
            } else {
                entries[name] = Entry(offset: offset + 512, size: length, fingerprint: fingerprint)
                fingerprint = nil
            }
            offset += 512 + UInt64(padded(length))
        }
        return (entries, offset)
    }
}

private extension String {
    func leftPadded(to length: Int) -> String { String(repeating: "0", count: max(0, length - count)) + self }
}
