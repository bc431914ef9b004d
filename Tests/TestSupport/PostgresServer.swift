import Foundation

/// A PostgreSQL server from Debian's packages (installed by `make test`), started for a test on a
/// free loopback port in a new data directory, and stopped (its directory removed) by `stop()`.
///
/// initdb refuses to run as root: as root, the server runs as the system user `pipelinectl-pg`,
/// created here when missing. Host connections need the password (`url` carries it), so a wrong
/// one is refused as it would be in production.
public final class PostgresServer: @unchecked Sendable {
    public let port: UInt16
    public let directory: URL
    public static let password = "pipelinectl-test-secret"
    let binaries: String
    let user: String?

    /// `postgres://postgres:PASSWORD@127.0.0.1:PORT/postgres` (with `query` appended, e.g. `?table=jobs`).
    public func url(_ query: String = "") -> String { "postgres://postgres:\(Self.password)@127.0.0.1:\(port)/postgres\(query)" }

    /// The directory of initdb, pg_ctl and postgres, or `nil` when PostgreSQL is not installed.
    public static var installedBinaries: String? {
        let root = "/usr/lib/postgresql"
        let names = (try? FileManager.default.contentsOfDirectory(atPath: root)) ?? []
        let versions = names.compactMap { Int($0) }.sorted()
        guard let version = versions.last else { return nil }
        let bin = "\(root)/\(version)/bin"
        return FileManager.default.fileExists(atPath: "\(bin)/initdb") ? bin : nil
    }

    public static func start() async throws -> PostgresServer {
        guard let binaries = installedBinaries else { throw CommandError(message: "PostgreSQL is not installed (make test-deps installs postgresql-15)") }
        let user: String? = getuid() == 0 ? "pipelinectl-pg" : nil
        if let user, try await Command.run("/usr/bin/id", ["-u", user]).status != 0 {
            _ = try await Command.run("/usr/sbin/useradd", ["--system", "--no-create-home", "--shell", "/usr/sbin/nologin", user])
            guard try await Command.run("/usr/bin/id", ["-u", user]).status == 0 else {
                throw CommandError(message: "cannot create the user \(user) to run PostgreSQL as")
            }
        }
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("pipelinectl-pg-\(UUID().uuidString.prefix(8))")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        try Data("\(password)\n".utf8).write(to: directory.appendingPathComponent("password"))
        if let user { _ = try await Command.run("/bin/chown", ["-R", user, directory.path]) }
        var server = PostgresServer(port: try MotoServer.freePort(), directory: directory, binaries: binaries, user: user)
        let initdb = try await server.asUser("\(binaries)/initdb", [
            "-D", directory.appendingPathComponent("data").path, "-U", "postgres", "-E", "UTF8", "--no-sync",
            "--auth-local=trust", "--auth-host=scram-sha-256", "--pwfile=\(directory.appendingPathComponent("password").path)",
        ])
        guard initdb.status == 0 else { throw CommandError(message: "initdb failed: \(initdb.stderr)") }
        // -w: pg_ctl returns once the server accepts connections. The server it leaves running
        // must hold no pipe of this process (or of a test running beside it), or whoever reads
        // that pipe waits for the server to stop: its output goes to a file, and every inherited
        // descriptor past 2 is closed before pg_ctl starts.
        // PostgreSQL cannot be given port 0: a port free a moment ago may be taken by the time it
        // binds (by another test's server or a client's own end), so a port in use means another.
        for attempt in 1...5 {
            let logFile = directory.appendingPathComponent("log")
            try? FileManager.default.removeItem(at: logFile)
            let started = try await server.detached("\(binaries)/pg_ctl", [
                "-D", directory.appendingPathComponent("data").path, "-l", logFile.path, "-w", "-t", "300",
                "-o", "-p \(server.port) -k \(directory.path) -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=100", "start",
            ])
            if started == 0 { break }
            let log = (try? String(contentsOf: logFile, encoding: .utf8)) ?? ""
            let output = (try? String(contentsOf: directory.appendingPathComponent("pg_ctl.out"), encoding: .utf8)) ?? ""
            guard log.contains("could not bind"), attempt < 5 else {
                throw CommandError(message: "PostgreSQL did not start: \(output) \(log)")
            }
            server = PostgresServer(port: try MotoServer.freePort(), directory: directory, binaries: binaries, user: user)
        }
        return server
    }

    private init(port: UInt16, directory: URL, binaries: String, user: String?) {
        self.port = port
        self.directory = directory
        self.binaries = binaries
        self.user = user
    }

    func asUser(_ program: String, _ arguments: [String]) async throws -> Command.Result {
        if let user { return try await Command.run("/usr/sbin/runuser", ["-u", user, "--", program] + arguments) }
        return try await Command.run(program, arguments)
    }

    /// Runs `program` as the server's user with no descriptor but 0-2, its output in pg_ctl.out; its exit status.
    func detached(_ program: String, _ arguments: [String]) async throws -> Int32 {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: user == nil ? "/usr/bin/python3" : "/usr/sbin/runuser")
        let exec = ["/usr/bin/python3", "-c", "import os, sys; os.closerange(3, 65536); os.execv(sys.argv[1], sys.argv[1:])", program] + arguments
        process.arguments = user.map { ["-u", $0, "--"] + exec } ?? Array(exec.dropFirst())
        let log = directory.appendingPathComponent("pg_ctl.out")
        _ = FileManager.default.createFile(atPath: log.path, contents: nil)
        if let user { _ = try await Command.run("/bin/chown", [user, log.path]) }
        let handle = try FileHandle(forWritingTo: log)
        process.standardOutput = handle
        process.standardError = handle
        process.standardInput = FileHandle.nullDevice
        try process.runSerialized()
        try? handle.close()
        return await withCheckedContinuation { continuation in
            Thread {
                process.waitUntilExit()
                continuation.resume(returning: process.terminationStatus)
            }.start()
        }
    }

    /// Runs SQL through psql over the Unix socket; its output, rows as `a|b` lines.
    public func sql(_ statement: String) async throws -> String {
        let result = try await asUser("/usr/bin/psql", ["-h", directory.path, "-p", String(port), "-U", "postgres", "-d", "postgres",
                                                        "-v", "ON_ERROR_STOP=1", "-At", "-c", statement])
        guard result.status == 0 else { throw CommandError(message: "psql: \(result.stderr)") }
        return result.stdout.trimmingCharacters(in: .whitespacesAndNewlines)
    }

    /// Stops the server at once and removes its directory.
    public func stop() async {
        _ = try? await asUser("\(binaries)/pg_ctl", ["-D", directory.appendingPathComponent("data").path, "-m", "immediate", "-w", "stop"])
        try? FileManager.default.removeItem(at: directory)
    }
}
