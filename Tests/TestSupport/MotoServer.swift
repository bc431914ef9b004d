import Foundation

/// A real S3-compatible server on loopback for tests: moto (PyPI `moto[server]`, installed by
/// `make test`) in the mode that checks every signature, started by `moto-server.py`, which fixes
/// moto's canonical query string (a `/` in a query value, as in a listing's prefix, is `%2F` in
/// SigV4; moto 5 signs it decoded and refuses botocore's own requests). The test starts it and stops it; the
/// buckets asked for exist, and `credentials` is a key the server accepts.
public final class MotoServer: @unchecked Sendable {
    public let port: UInt16
    public let accessKey: String
    public let secretKey: String
    private let process: Process

    /// `http://127.0.0.1:PORT`.
    public var endpoint: String { "http://127.0.0.1:\(port)" }

    /// The environment a pipelinectl process needs to reach it (AWS conventions), added to this one's.
    public var environment: [String: String] {
        var environment = ProcessInfo.processInfo.environment
        environment["AWS_ENDPOINT_URL"] = endpoint
        environment["AWS_ACCESS_KEY_ID"] = accessKey
        environment["AWS_SECRET_ACCESS_KEY"] = secretKey
        environment["AWS_REGION"] = "us-east-1"
        return environment
    }

    private init(port: UInt16, accessKey: String, secretKey: String, process: Process) {
        self.port = port
        self.accessKey = accessKey
        self.secretKey = secretKey
        self.process = process
    }

    public static func start(buckets: [String]) async throws -> MotoServer {
        var environment = ProcessInfo.processInfo.environment
        environment["INITIAL_NO_AUTH_ACTION_COUNT"] = "4"
        // moto's recorder (a test may start it: what the store was sent) writes here, not into
        // the working directory.
        environment["MOTO_RECORDER_FILEPATH"] = try Fixtures.temporaryDirectory("moto").appendingPathComponent("recording.jsonl").path
        // Port 0: the server binds a port the kernel picks and prints it once it listens. (Choosing a
        // free port here and handing it over let two servers started at once get the same one, and
        // polling the port until it answered could connect a socket to itself.)
        let (process, port, errors) = try await startPythonServer("moto-server.py", ["-H", "127.0.0.1", "-p", "0"], environment: environment,
                                                                 port: { UInt16($0) }, missing: "moto_server did not start (is moto[server] installed? make test installs it)")
        let setup = Fixtures.packageRoot.appendingPathComponent("Tests/TestSupport/moto-setup.py").path
        let result = try await Command.run("/usr/bin/env", ["python3", setup, "http://127.0.0.1:\(port)"] + buckets)
        guard result.status == 0, let json = try? JSONSerialization.jsonObject(with: Data(result.stdout.utf8)) as? [String: String],
              let key = json["access_key"], let secret = json["secret_key"] else {
            if process.isRunning { kill(process.processIdentifier, SIGKILL) }
            let said = errors.lines.withLock { $0.suffix(20).joined(separator: "\n") }
            throw CommandError(message: "moto setup failed: \(result.stderr)\nthe server said: \(said)")
        }
        return MotoServer(port: port, accessKey: key, secretKey: secret, process: process)
    }

    /// Runs a boto3 snippet against this server with `sqs`, `s3` and `sns` clients bound (and `base64`,
    /// `json`, `urllib.parse` imported); `args` holds `arguments`. Its stdout, trimmed.
    public func boto(_ snippet: String, _ arguments: [String] = []) async throws -> String {
        let script = """
            import base64, boto3, json, sys, urllib.parse
            kw = dict(endpoint_url=sys.argv[1], region_name="us-east-1", aws_access_key_id=sys.argv[2], aws_secret_access_key=sys.argv[3])
            sqs, s3, sns = boto3.client("sqs", **kw), boto3.client("s3", **kw), boto3.client("sns", **kw)
            args = sys.argv[4:]
            """ + "\n" + snippet
        let result = try await Command.run("/usr/bin/env", ["python3", "-c", script, endpoint, accessKey, secretKey] + arguments)
        guard result.status == 0 else { throw CommandError(message: result.stderr) }
        return result.stdout.trimmingCharacters(in: .whitespacesAndNewlines)
    }

    /// Kills the server (moto's threads waiting on kept-alive connections can hold off SIGTERM).
    public func stop() {
        if process.isRunning { kill(process.processIdentifier, SIGKILL) }
        process.waitUntilExit()
    }

    deinit { if process.isRunning { kill(process.processIdentifier, SIGKILL) } }

    public static func freePort() throws -> UInt16 {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        defer { close(fd) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        guard bound == 0 else { throw CommandError(message: "no free port on loopback") }
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        _ = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &length) }
        }
        return UInt16(bigEndian: address.sin_port)
    }
}

/// Starts `Tests/TestSupport/SCRIPT` with python3 and waits (up to 2 minutes: python imports
/// slowly on a loaded machine) for the line `port` reads the port from: the process, its port,
/// and what it said on standard error. Throws `missing` with that when it never says.
func startPythonServer(_ script: String, _ arguments: [String], environment: [String: String]? = nil,
                       port: @escaping @Sendable (String) -> UInt16?, missing: String) async throws
    -> (Process, UInt16, ServiceProcess.Lines) {
    let process = Process()
    process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
    process.arguments = ["python3", Fixtures.packageRoot.appendingPathComponent("Tests/TestSupport/\(script)").path] + arguments
    if let environment { process.environment = environment }
    let out = Pipe(), err = Pipe()
    process.standardOutput = out
    process.standardError = err
    process.standardInput = FileHandle.nullDevice
    try process.runSerialized()
    let output = ServiceProcess.Lines(), errors = ServiceProcess.Lines()
    ServiceProcess.readLines(out, into: output)
    ServiceProcess.readLines(err, into: errors)
    _ = await output.log.wait(atMost: 120) { lines in lines.contains { port($0) != nil || $0 == "<eof>" } }
    guard let found = output.lines.withLock({ $0.lazy.compactMap(port).first }) else {
        if process.isRunning { kill(process.processIdentifier, SIGKILL) }
        let said = errors.lines.withLock { $0.suffix(20).joined(separator: "\n") }
        throw CommandError(message: "\(missing): \(said)")
    }
    return (process, found, errors)
}
