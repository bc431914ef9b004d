import Foundation
import PipelineKit
import Synchronization

/// Files for tests: temporary directories, the package's root, headers made byte by byte. Images
/// made by ImageMagick are in TestImages (`Fixtures.image`, `jpeg`, `alphaPNG`), which engine
/// tests do without.
public enum Fixtures {
    /// Only a PNG's signature and IHDR chunk (with its CRC), claiming `width` x `height`: what a
    /// decompression bomb's header looks like, with no pixel data after it.
    public static func pngHeader(width: UInt32, height: UInt32) -> Data {
        var png = Data([0x89, 0x50, 0x4E, 0x47, 0x0D, 0x0A, 0x1A, 0x0A])
        var ihdr = Data("IHDR".utf8)
        for value in [width, height] { withUnsafeBytes(of: value.bigEndian) { ihdr.append(contentsOf: $0) } }
        ihdr.append(contentsOf: [8, 2, 0, 0, 0])
        withUnsafeBytes(of: UInt32(13).bigEndian) { png.append(contentsOf: $0) }
        png.append(ihdr)
        var crc: UInt32 = 0xFFFF_FFFF
        for byte in ihdr {
            crc ^= UInt32(byte)
            for _ in 0..<8 { crc = crc & 1 == 1 ? (crc >> 1) ^ 0xEDB8_8320 : crc >> 1 }
        }
        withUnsafeBytes(of: (~crc).bigEndian) { png.append(contentsOf: $0) }
        return png
    }

    /// A new empty temporary directory, inside this test process's own directory
    /// (`$TMPDIR/pipelinekit-tests-PID`), which is removed when the process exits.
    public static func temporaryDirectory(_ name: String = "pk") throws -> URL {
        let url = testRoot.appendingPathComponent("\(name)-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: url, withIntermediateDirectories: true)
        return url
    }

    /// Every test run wrote its fixtures, outputs and caches (tens of MB) to the temporary
    /// directory and left them there. Now they go under one directory per process, removed at exit;
    /// the directories of earlier processes that did not get to exit (killed) are removed here.
    static let testRoot: URL = {
        let base = FileManager.default.temporaryDirectory
        let prefix = "pipelinekit-tests-"
        for entry in (try? FileManager.default.contentsOfDirectory(atPath: base.path)) ?? [] where entry.hasPrefix(prefix) {
            guard let pid = Int32(entry.dropFirst(prefix.count)), kill(pid, 0) != 0, errno == ESRCH else { continue }
            try? FileManager.default.removeItem(at: base.appendingPathComponent(entry))
        }
        let root = base.appendingPathComponent("\(prefix)\(getpid())")
        try? FileManager.default.createDirectory(at: root, withIntermediateDirectories: true)
        atexit { try? FileManager.default.removeItem(at: Fixtures.testRoot) }
        return root
    }()

    /// The package's root directory (for the built binary and the example pipelines).
    public static let packageRoot: URL = {
        var url = URL(fileURLWithPath: #filePath)
        while url.path != "/" {
            url.deleteLastPathComponent()
            if FileManager.default.fileExists(atPath: url.appendingPathComponent("Package.swift").path) { return url }
        }
        return URL(fileURLWithPath: FileManager.default.currentDirectoryPath)
    }()
}

/// What `identify` (ImageMagick's command-line tool, independent of our wrappers) says of a file.
public struct Identified: Equatable, Sendable, CustomStringConvertible {
    public let format: String
    public let width: Int
    public let height: Int
    public var description: String { "\(format) \(width)x\(height)" }

    public init(format: String, width: Int, height: Int) {
        self.format = format
        self.width = width
        self.height = height
    }

    /// What `identify` says of `data` (written to a temporary file first).
    public static func data(_ data: Data) async throws -> Identified {
        let file = FileManager.default.temporaryDirectory.appendingPathComponent("identify-\(UUID().uuidString)")
        try data.write(to: file)
        defer { try? FileManager.default.removeItem(at: file) }
        return try await Self.file(file.path)
    }

    /// Runs `identify -format '%m %w %h'` on the first frame of `path`, on a thread of its own:
    /// blocking the cooperative pool would starve the loopback servers running in the same process.
    public static func file(_ path: String) async throws -> Identified {
        let result = try await Command.run("/usr/bin/identify", ["-format", "%m %w %h\n", path + "[0]"])
        let parts = result.stdout.split(whereSeparator: { $0 == " " || $0 == "\n" })
        guard result.status == 0, parts.count >= 3, let w = Int(parts[1]), let h = Int(parts[2]) else {
            throw CommandError(message: "identify failed on \(path): \(result.stderr)")
        }
        return Identified(format: String(parts[0]), width: w, height: h)
    }
}

public struct CommandError: Error, CustomStringConvertible {
    public let message: String
    public var description: String { message }
    public init(message: String) { self.message = message }
}

/// Runs a program and collects its output.
public enum Command {
    public struct Result: Sendable {
        public let status: Int32
        public let stdout: String
        public let stderr: String
    }

    /// Runs the program on a thread of its own, so waiting for it never holds a thread of Swift's
    /// cooperative pool (which the loopback server in the same process needs).
    public static func run(_ executable: String, _ arguments: [String], stdin: Data? = nil,
                           environment: [String: String]? = nil, directory: URL? = nil) async throws -> Result {
        try await withCheckedThrowingContinuation { continuation in
            let thread = Thread {
                continuation.resume(with: Swift.Result {
                    try runBlocking(executable, arguments, stdin: stdin, environment: environment, directory: directory)
                })
            }
            thread.start()
        }
    }

    /// A program started in the background (to signal it while it runs).
    public final class Running: @unchecked Sendable {
        public let process: Process
        let out = Pipe(), err = Pipe()
        init(_ process: Process) { self.process = process }

        /// Waits for the program to exit, on a thread of its own, and collects its output.
        public func wait() async throws -> Result {
            try await withCheckedThrowingContinuation { continuation in
                Thread {
                    let (outData, errData) = readBoth(self.out, self.err)
                    self.process.waitUntilExit()
                    continuation.resume(returning: Result(status: self.process.terminationStatus,
                                                          stdout: String(decoding: outData, as: UTF8.self),
                                                          stderr: String(decoding: errData, as: UTF8.self)))
                }.start()
            }
        }
    }

    /// Starts the program without waiting for it.
    public static func start(_ executable: String, _ arguments: [String], environment: [String: String]? = nil) throws -> Running {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: executable)
        process.arguments = arguments
        if let environment { process.environment = environment }
        process.currentDirectoryURL = Fixtures.packageRoot
        let running = Running(process)
        process.standardOutput = running.out
        process.standardError = running.err
        process.standardInput = FileHandle.nullDevice
        try process.runSerialized()
        return running
    }

    /// Runs the program and blocks the calling thread until it exits.
    public static func runBlocking(_ executable: String, _ arguments: [String], stdin: Data? = nil,
                                   environment: [String: String]? = nil, directory: URL? = nil) throws -> Result {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: executable)
        process.arguments = arguments
        if let environment { process.environment = environment }
        if let directory { process.currentDirectoryURL = directory }
        let out = Pipe(), err = Pipe(), input = Pipe()
        process.standardOutput = out
        process.standardError = err
        process.standardInput = input
        try process.runSerialized()
        if let stdin { input.fileHandleForWriting.write(stdin) }
        try input.fileHandleForWriting.close()
        let (outData, errData) = readBoth(out, err)
        process.waitUntilExit()
        return Result(status: process.terminationStatus, stdout: String(decoding: outData, as: UTF8.self),
                      stderr: String(decoding: errData, as: UTF8.self))
    }

    /// Reads both pipes to their end at the same time, so that neither fills up and blocks the child.
    static func readBoth(_ out: Pipe, _ err: Pipe) -> (Data, Data) {
        let errData = Mutex(Data())
        let finished = DispatchSemaphore(value: 0)
        Thread {
            let data = err.fileHandleForReading.readDataToEndOfFile()
            errData.withLock { $0 = data }
            finished.signal()
        }.start()
        let outData = out.fileHandleForReading.readDataToEndOfFile()
        finished.wait()
        return (outData, errData.withLock { $0 })
    }
}

extension Sequence {
    /// `map` with an async transform, in order.
    public func asyncMap<T>(_ transform: (Element) async throws -> T) async rethrows -> [T] {
        var out: [T] = []
        for element in self { out.append(try await transform(element)) }
        return out
    }
}

/// Run reports as tests read them.
public enum Reports {
    /// The JSON report at `url` as a dictionary, its `items` in list order (a report lists them in
    /// the order they finished, each with its line number in `index`).
    public static func read(_ url: URL) throws -> [String: Any] {
        var report = try JSONSerialization.jsonObject(with: Data(contentsOf: url)) as? [String: Any] ?? [:]
        if let items = report["items"] as? [[String: Any]] {
            report["items"] = items.sorted { ($0["index"] as? Int ?? 0) < ($1["index"] as? Int ?? 0) }
        }
        return report
    }
}

/// One process started at a time by the tests' helpers.
private let spawning = NSLock()

extension Process {
    /// `run()`, with no other helper's process starting at the same moment: Foundation's
    /// `Process.run` crashed once in CI (a bad pointer in a copy inside it) while three suites of
    /// one test process started programs at once. Starting takes milliseconds; waiting is not
    /// serialized.
    public func runSerialized() throws {
        spawning.lock()
        defer { spawning.unlock() }
        try run()
    }
}
