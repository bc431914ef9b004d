import Foundation

/// A real nginx (Debian's, installed by `make test`) on a loopback port serving a directory as
/// static files: ranges, ETag and Last-Modified as any web server gives them. Its access log
/// records each response's body bytes as nginx counted them sent (`$body_bytes_sent`, also for a
/// transfer the client stopped).
public final class NginxServer: @unchecked Sendable {
    public let port: UInt16
    private let process: Process
    private let directory: URL

    public static var isInstalled: Bool { FileManager.default.isExecutableFile(atPath: "/usr/sbin/nginx") }

    private init(port: UInt16, process: Process, directory: URL) {
        self.port = port
        self.process = process
        self.directory = directory
    }

    /// Starts nginx serving `root` in the foreground (one process, as this user), and waits
    /// until it accepts connections.
    public static func start(root: URL) async throws -> NginxServer {
        let directory = try Fixtures.temporaryDirectory("nginx")
        let port = try TestServer.unusedPort()
        let config = directory.appendingPathComponent("nginx.conf")
        let temp = directory.path
        try """
            daemon off;
            master_process off;
            worker_processes 1;
            error_log \(temp)/error.log;
            pid \(temp)/nginx.pid;
            events { worker_connections 256; }
            http {
              log_format counted '$request_uri $status $body_bytes_sent "$http_range"';
              access_log \(temp)/access.log counted;
              types { video/mp4 mp4; video/quicktime mov; }
              client_body_temp_path \(temp); proxy_temp_path \(temp); fastcgi_temp_path \(temp);
              uwsgi_temp_path \(temp); scgi_temp_path \(temp);
              server { listen 127.0.0.1:\(port); root \(root.path); }
            }
            """.write(to: config, atomically: true, encoding: .utf8)
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/sbin/nginx")
        process.arguments = ["-c", config.path, "-p", temp]
        process.standardOutput = FileHandle.nullDevice
        process.standardError = FileHandle.nullDevice
        try process.runSerialized()
        let server = NginxServer(port: port, process: process, directory: directory)
        for _ in 0..<1200 {
            if (try? await RawHTTP.get(port: port, target: "/nginx-ready")) != nil { return server }
            guard process.isRunning else { break }
            try await Task.sleep(for: .milliseconds(100))
        }
        let log = (try? String(contentsOf: directory.appendingPathComponent("error.log"), encoding: .utf8)) ?? ""
        server.stop()
        throw CommandError(message: "nginx did not answer on \(port): \(log.suffix(2000))")
    }

    /// `http://127.0.0.1:PORT/path`.
    public func url(_ path: String) -> String { "http://127.0.0.1:\(port)\(path.hasPrefix("/") ? "" : "/")\(path)" }

    /// One line of the access log: the path, the status, the body bytes sent and the Range asked.
    public struct Logged: Sendable {
        public let path: String
        public let status: Int
        public let bytes: Int
        public let range: String?
    }

    /// Every response so far (nginx writes a line when a response ends).
    public func log() throws -> [Logged] {
        let text = try String(contentsOf: directory.appendingPathComponent("access.log"), encoding: .utf8)
        return text.split(separator: "\n").compactMap { line in
            let fields = line.split(separator: " ", maxSplits: 3)
            guard fields.count == 4, let status = Int(fields[1]), let bytes = Int(fields[2]) else { return nil }
            let range = fields[3].trimmingCharacters(in: CharacterSet(charactersIn: "\""))
            return Logged(path: String(fields[0]), status: status, bytes: bytes, range: range == "-" ? nil : range)
        }
    }

    /// Kills it (nginx without its master process does not stop on SIGTERM).
    public func stop() {
        if process.isRunning { kill(process.processIdentifier, SIGKILL) }
        process.waitUntilExit()
        try? FileManager.default.removeItem(at: directory)
    }

    deinit { if process.isRunning { kill(process.processIdentifier, SIGKILL) } }
}
