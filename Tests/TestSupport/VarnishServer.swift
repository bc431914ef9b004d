import Foundation

/// A real Varnish 7 (Debian's `varnish` with `varnish-modules`, installed by `make test`) on a
/// loopback port, running deploy/varnish/pipelinectl.vcl with its backend pointed at a port of
/// the test's and `extraVCL` appended (VCL runs subroutines of the same name in order).
public final class VarnishServer: @unchecked Sendable {
    public let port: UInt16
    /// The manager's process id (Varnish runs as a daemon: started as a child of this process,
    /// it closes every inherited descriptor, Foundation's exit watch among them, and the next
    /// Process of the test would never be seen to exit).
    private let pid: pid_t
    private let directory: URL

    public static var isInstalled: Bool {
        FileManager.default.fileExists(atPath: "/usr/sbin/varnishd")
            && FileManager.default.fileExists(atPath: "/usr/lib/x86_64-linux-gnu/varnish/vmods/libvmod_xkey.so")
    }

    private init(port: UInt16, pid: pid_t, directory: URL) {
        self.port = port
        self.pid = pid
        self.directory = directory
    }

    /// Starts Varnish on `port` in front of `backend`, and waits until it accepts connections.
    public static func start(port: UInt16, backend: UInt16, extraVCL: String = "") async throws -> VarnishServer {
        let directory = try Fixtures.temporaryDirectory("varnish")
        let deployed = try String(contentsOf: Fixtures.packageRoot.appendingPathComponent("deploy/varnish/pipelinectl.vcl"), encoding: .utf8)
        let vcl = directory.appendingPathComponent("test.vcl")
        try (deployed.replacingOccurrences(of: ".port = \"8080\";", with: ".port = \"\(backend)\";") + "\n" + extraVCL)
            .write(to: vcl, atomically: true, encoding: .utf8)
        // Varnish 7.1 puts why a child failed to take its VCL or start its acceptor in syslog
        // only ("CLI result = 300" on stdout, seen once in CI with the cores busy): a start that
        // fails that way is tried again, with a fresh working directory, up to three times.
        var failures: [String] = []
        var started: pid_t?
        for attempt in 1...3 where started == nil {
            let pidFile = directory.appendingPathComponent("varnishd-\(attempt).pid")
            let result = try await Command.run("/usr/sbin/varnishd", [
                "-a", "127.0.0.1:\(port)", "-T", "none", "-f", vcl.path, "-n", directory.appendingPathComponent("n\(attempt)").path,
                "-P", pidFile.path, "-s", "malloc,64m", "-p", "default_grace=0", "-p", "default_keep=0", "-i", "test",
            ])
            if result.status == 0, let text = try? String(contentsOf: pidFile, encoding: .utf8),
               let pid = pid_t(text.trimmingCharacters(in: .whitespacesAndNewlines)) {
                started = pid
            } else {
                failures.append("attempt \(attempt): exit \(result.status): \(result.stdout.suffix(1000)) \(result.stderr.suffix(2000))")
            }
        }
        guard let pid = started else {
            throw CommandError(message: "varnishd did not start on \(port): \(failures.joined(separator: "; "))")
        }
        let server = VarnishServer(port: port, pid: pid, directory: directory)
        // It listens once its child runs: up to 2 minutes on a loaded machine.
        for _ in 0..<1200 {
            if (try? await RawHTTP.get(port: port, target: "/varnish-ready")) != nil { return server }
            try await Task.sleep(for: .milliseconds(100))
        }
        server.stop()
        throw CommandError(message: "varnishd did not answer on \(port)")
    }

    /// Kills the manager and its child.
    public func stop() {
        let children = (try? FileManager.default.contentsOfDirectory(atPath: "/proc"))?.compactMap { entry -> pid_t? in
            guard let child = pid_t(entry), let stat = try? String(contentsOfFile: "/proc/\(entry)/stat", encoding: .utf8),
                  let close = stat.lastIndex(of: ")") else { return nil }
            let fields = stat[stat.index(after: close)...].split(separator: " ")
            return fields.count > 1 && pid_t(fields[1]) == pid ? child : nil
        } ?? []
        kill(pid, SIGKILL)
        for child in children { kill(child, SIGKILL) }
        try? FileManager.default.removeItem(at: directory)
    }

    deinit { kill(pid, SIGKILL) }
}
