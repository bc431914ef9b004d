import Foundation
import Synchronization

/// `pipelinectl serve` running in a process of its own on a free loopback port: started, waited
/// for until it prints the address it listens on, signalled, and waited for to exit.
public final class ServiceProcess: Sendable {
    public let port: UInt16
    private let process: Process.Box
    private let output: Lines
    private let errors: Lines

    final class Lines: Sendable {
        let lines = Mutex<[String]>([])
        let log = EventLog()
        func add(_ line: String) {
            lines.withLock { $0.append(line) }
            log.record(line)
        }
    }

    /// Starts `binary serve ARGUMENTS --listen 127.0.0.1:0` (or another subcommand that listens,
    /// `work`) and waits until it listens (or exits).
    /// `openFiles` starts it under that soft and hard limit on open files (`prlimit`, which
    /// execs the binary in its own process).
    public static func start(_ binary: String, _ arguments: [String], environment: [String: String] = [:],
                             subcommand: String = "serve", openFiles: (soft: Int, hard: Int)? = nil) async throws -> ServiceProcess {
        let process = Process()
        let command = [subcommand] + arguments + ["--listen", "127.0.0.1:0"]
        if let openFiles {
            process.executableURL = URL(fileURLWithPath: "/usr/bin/prlimit")
            process.arguments = ["--nofile=\(openFiles.soft):\(openFiles.hard)", binary] + command
        } else {
            process.executableURL = URL(fileURLWithPath: binary)
            process.arguments = command
        }
        process.environment = ProcessInfo.processInfo.environment.merging(environment) { $1 }
        process.currentDirectoryURL = Fixtures.packageRoot
        let out = Pipe(), err = Pipe()
        process.standardOutput = out
        process.standardError = err
        process.standardInput = FileHandle.nullDevice
        let output = Lines(), errors = Lines()
        try process.runSerialized()
        readLines(out, into: output)
        readLines(err, into: errors)
        _ = await output.log.wait(atMost: 300) { lines in lines.contains { $0.hasPrefix("listening on ") || $0 == "<eof>" } }
        let line = output.lines.withLock { $0.first { $0.hasPrefix("listening on ") } }
        guard let line, let port = line.split(separator: " ")[2].split(separator: ":").last.flatMap({ UInt16($0) }) else {
            process.waitUntilExit()
            throw ServiceError.didNotStart(errors.lines.withLock { $0.joined(separator: "\n") })
        }
        return ServiceProcess(port: port, process: Process.Box(process), output: output, errors: errors)
    }

    /// Reads `pipe` on a thread of its own until its end, line by line into `lines`, then `<eof>`.
    static func readLines(_ pipe: Pipe, into lines: Lines) {
        Thread {
            var pending = Data()
            while true {
                let chunk = pipe.fileHandleForReading.availableData
                if chunk.isEmpty { break }
                pending += chunk
                while let newline = pending.firstIndex(of: 10) {
                    lines.add(String(decoding: pending[pending.startIndex..<newline], as: UTF8.self))
                    pending = Data(pending[(newline + 1)...])
                }
            }
            lines.add("<eof>")
        }.start()
    }

    private init(port: UInt16, process: Process.Box, output: Lines, errors: Lines) {
        self.port = port
        self.process = process
        self.output = output
        self.errors = errors
    }

    public enum ServiceError: Error { case didNotStart(String) }

    /// Standard output's lines so far (the access log), and standard error's.
    public var accessLog: [String] { output.lines.withLock { $0.filter { $0.hasPrefix("{") } } }
    /// The line it printed when it began to listen.
    public var listeningLine: String? { output.lines.withLock { $0.first { $0.hasPrefix("listening on ") } } }
    public var stderr: String { errors.lines.withLock { $0.joined(separator: "\n") } }

    public func signal(_ number: Int32) { kill(process.value.processIdentifier, number) }

    /// The process id.
    public var pid: Int32 { process.value.processIdentifier }

    /// Each thread's kernel name and nice value, from /proc.
    public func threads() -> [(name: String, nice: Int)] {
        let dir = "/proc/\(pid)/task"
        return ((try? FileManager.default.contentsOfDirectory(atPath: dir)) ?? []).compactMap { tid in
            guard let stat = try? String(contentsOfFile: "\(dir)/\(tid)/stat", encoding: .utf8),
                  let open = stat.firstIndex(of: "("), let close = stat.lastIndex(of: ")") else { return nil }
            // After "pid (comm) ": state is field 3, nice field 19.
            let fields = stat[stat.index(close, offsetBy: 2)...].split(separator: " ")
            guard fields.count > 16, let nice = Int(fields[16]) else { return nil }
            return (String(stat[stat.index(after: open)..<close]), nice)
        }
    }

    /// Waits for the process to exit; its status.
    public func wait() async -> Int32 {
        await withCheckedContinuation { continuation in
            Thread {
                self.process.value.waitUntilExit()
                continuation.resume(returning: self.process.value.terminationStatus)
            }.start()
        }
    }

    /// Ends the service (SIGKILL) if it still runs.
    public func stop() {
        if process.value.isRunning { kill(process.value.processIdentifier, SIGKILL) }
    }

    /// `GET target` on the service.
    public func get(_ target: String, headers: [String: String] = [:], method: String = "GET") async throws -> RawHTTP.Response {
        try await RawHTTP.get(port: port, target: target, headers: headers, method: method)
    }
}

extension Process {
    final class Box: @unchecked Sendable {
        let value: Process
        init(_ value: Process) { self.value = value }
    }
}

/// A minimal HTTP/1.1 client over a socket, on a thread of its own: the target is sent exactly as
/// given (no normalisation of `..` or `//`), and a request can be abandoned mid-way.
public enum RawHTTP {
    public struct Response: Sendable {
        public let status: Int
        /// Lower-cased names.
        public let headers: [String: String]
        public let body: Data
        public var text: String { String(decoding: body, as: UTF8.self) }
    }

    public enum Failure: Error {
        case connect(Int32)
        /// The connection ended before a whole response head; `bytes` of it had come. With 0 the
        /// server never answered: a connection still in the listen queue when a draining server
        /// closed its socket (a load balancer retries those).
        case closed(bytes: Int)
    }

    public static func get(port: UInt16, target: String, headers: [String: String] = [:], method: String = "GET") async throws -> Response {
        try await withCheckedThrowingContinuation { continuation in
            Thread { continuation.resume(with: Result { try getBlocking(port: port, target: target, headers: headers, method: method) }) }.start()
        }
    }

    /// Opens a connection and sends the request head; the caller reads or closes. `keepAlive`: the
    /// server keeps reading the connection, so it sees the client close it.
    public static func send(port: UInt16, target: String, headers: [String: String] = [:], keepAlive: Bool = false,
                            method: String = "GET") throws -> Int32 {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = port.bigEndian
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        let connected = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        guard connected == 0 else {
            let code = errno
            close(fd)
            throw Failure.connect(code)
        }
        var head = "\(method) \(target) HTTP/1.1\r\nHost: 127.0.0.1:\(port)\r\n" + (keepAlive ? "" : "Connection: close\r\n")
        for (name, value) in headers { head += "\(name): \(value)\r\n" }
        head += "\r\n"
        _ = head.utf8CString.withUnsafeBufferPointer { Foundation.send(fd, $0.baseAddress!, $0.count - 1, Int32(MSG_NOSIGNAL)) }
        return fd
    }

    /// Sends `targets` one after another on one kept-alive connection, each once the answer
    /// before it has come whole (by its Content-Length), and returns the answers read before the
    /// server closed the connection: fewer than `targets` when it closed after one of them.
    public static func getKeptAlive(port: UInt16, targets: [String]) async throws -> [Response] {
        try await withCheckedThrowingContinuation { continuation in
            Thread { continuation.resume(with: Result { try getKeptAliveBlocking(port: port, targets: targets) }) }.start()
        }
    }

    static func getKeptAliveBlocking(port: UInt16, targets: [String]) throws -> [Response] {
        guard let first = targets.first else { return [] }
        let fd = try send(port: port, target: first, keepAlive: true)
        defer { close(fd) }
        var responses: [Response] = []
        var data = Data()
        var buffer = [UInt8](repeating: 0, count: 65536)
        while responses.count < targets.count {
            // One whole answer: its head, then Content-Length bytes.
            var answer: Response?
            while answer == nil {
                if let end = data.range(of: Data("\r\n\r\n".utf8)) {
                    let head = String(decoding: data[..<end.lowerBound], as: UTF8.self).components(separatedBy: "\r\n")
                    var fields: [String: String] = [:]
                    for line in head.dropFirst() {
                        guard let colon = line.firstIndex(of: ":") else { continue }
                        fields[line[..<colon].lowercased()] = line[line.index(after: colon)...].trimmingCharacters(in: .whitespaces)
                    }
                    let length = Int(fields["content-length"] ?? "0") ?? 0
                    if data.count - (end.upperBound - data.startIndex) >= length {
                        let status = head.first?.split(separator: " ").dropFirst().first.flatMap { Int($0) } ?? 0
                        answer = Response(status: status, headers: fields, body: Data(data[end.upperBound..<(end.upperBound + length)]))
                        data = Data(data[(end.upperBound + length)...])
                        break
                    }
                }
                let n = recv(fd, &buffer, buffer.count, 0)
                if n <= 0 { return responses }
                data.append(contentsOf: buffer[0..<n])
            }
            responses.append(answer!)
            guard responses.count < targets.count else { break }
            var head = "GET \(targets[responses.count]) HTTP/1.1\r\nHost: 127.0.0.1:\(port)\r\n\r\n"
            let sent = head.withUTF8 { Foundation.send(fd, $0.baseAddress!, $0.count, Int32(MSG_NOSIGNAL)) }
            if sent <= 0 { return responses }
        }
        return responses
    }

    public static func getBlocking(port: UInt16, target: String, headers: [String: String] = [:], method: String = "GET") throws -> Response {
        let fd = try send(port: port, target: target, headers: headers, method: method)
        defer { close(fd) }
        var data = Data()
        var buffer = [UInt8](repeating: 0, count: 65536)
        while true {
            let n = recv(fd, &buffer, buffer.count, 0)
            if n <= 0 { break }
            data.append(contentsOf: buffer[0..<n])
        }
        guard let end = data.range(of: Data("\r\n\r\n".utf8)) else { throw Failure.closed(bytes: data.count) }
        let head = String(decoding: data[..<end.lowerBound], as: UTF8.self).components(separatedBy: "\r\n")
        guard let status = head.first?.split(separator: " ").dropFirst().first.flatMap({ Int($0) }) else { throw Failure.closed(bytes: data.count) }
        var fields: [String: String] = [:]
        for line in head.dropFirst() {
            guard let colon = line.firstIndex(of: ":") else { continue }
            fields[line[..<colon].lowercased()] = line[line.index(after: colon)...].trimmingCharacters(in: .whitespaces)
        }
        return Response(status: status, headers: fields, body: Data(data[end.upperBound...]))
    }
}
