import Foundation
import Testing
import TestImages

/// The sessions docs/work.md offers to paste into a shell ("Try it on one machine") run here as
/// written, but for the lines marked `# once` (installs that `make test-deps` has done): moto's S3
/// and SQS, and a PostgreSQL started in a temporary directory. Each must end with exit 0 and show
/// what the docs say it shows.
@Suite(.serialized, .timeLimit(.minutes(10))) struct DocsRecipeTests {
    static let page = Fixtures.packageRoot.appendingPathComponent("docs/work.md")

    /// The shell block after `<!-- recipe: NAME -->`, less its `# once` lines.
    static func recipe(_ name: String) throws -> String {
        let text = try String(contentsOf: page, encoding: .utf8)
        guard let marker = text.range(of: "<!-- recipe: \(name) -->"),
              let open = text.range(of: "```sh\n", range: marker.upperBound..<text.endIndex),
              let close = text.range(of: "\n```", range: open.upperBound..<text.endIndex) else {
            throw CommandError(message: "docs/work.md has no recipe '\(name)'")
        }
        return text[open.upperBound..<close.lowerBound].split(separator: "\n", omittingEmptySubsequences: false)
            .filter { !$0.contains("# once") }.joined(separator: "\n")
    }

    /// A directory that stands for the repository's root, as the recipes expect it: its
    /// `pipelines`, and `.build/release/pipelinectl` (the test build's binary). The recipes write
    /// what they make (caches, outputs) there, not into the repository.
    static func root(owner: String? = nil) async throws -> URL {
        let root = try Fixtures.temporaryDirectory("recipe-root")
        try FileManager.default.createSymbolicLink(at: root.appendingPathComponent("pipelines"),
                                                   withDestinationURL: Fixtures.packageRoot.appendingPathComponent("pipelines"))
        try FileManager.default.createDirectory(at: root.appendingPathComponent(".build"), withIntermediateDirectories: true)
        try FileManager.default.createSymbolicLink(at: root.appendingPathComponent(".build/release"),
                                                   withDestinationURL: URL(fileURLWithPath: CLITests.binary).deletingLastPathComponent())
        if let owner { _ = try await Command.run("/bin/chown", ["-R", owner, root.path]) }
        return root
    }

    /// `bash -e -c SCRIPT` as a shell a person opens: signals unblocked (this process blocks most,
    /// and children inherit the mask: the recipe's `trap 'kill ...' EXIT` could not stop its
    /// server), and no descriptor of this process past 2 (Foundation's Process waits until every
    /// holder of one of them has exited: a server left running would hold the test forever).
    static func shell(_ script: String) -> [String] {
        ["/usr/bin/python3", "-c",
         "import os, signal, sys; signal.pthread_sigmask(signal.SIG_SETMASK, []); os.closerange(3, 65536); os.execv(sys.argv[1], sys.argv[1:])",
         "/bin/bash", "-e", "-c", script]
    }

    @Test func theS3AndSQSSessionWithMotoRunsAsWritten() async throws {
        let script = try Self.recipe("sqs-moto")
        let root = try await Self.root()
        var environment = ProcessInfo.processInfo.environment
        environment["PORT"] = String(try MotoServer.freePort())
        for key in environment.keys where key.hasPrefix("AWS_") { environment[key] = nil }
        let shell = Self.shell(script)
        let run = try await Command.run(shell[0], Array(shell.dropFirst()), environment: environment, directory: root)
        #expect(run.status == 0, "\(run.stdout)\(run.stderr)")
        let listed = run.stdout.split(separator: "\n").filter { $0.hasSuffix(".jpg") && !$0.contains("://") }
        #expect(listed.count == 2 && listed.contains { $0.contains("photo-") } && listed.contains { $0.contains("poster-") },
                "\(run.stdout)")
        #expect(run.stdout.contains("uploads: 3 items: 2 ok, 1 failed"), "\(run.stdout)")
        #expect(run.stdout.split(separator: "\n").last == "not_an_image", "\(run.stdout)")
    }

    /// As a user of its own: initdb refuses root.
    @Test func thePostgresSessionInATemporaryDirectoryRunsAsWritten() async throws {
        let script = try Self.recipe("postgres-tmp")
        let user = "pipelinectl-pg"
        if try await Command.run("/usr/bin/id", ["-u", user]).status != 0 {
            _ = try await Command.run("/usr/sbin/useradd", ["--system", "--no-create-home", "--shell", "/usr/sbin/nologin", user])
        }
        let root = try await Self.root(owner: getuid() == 0 ? user : nil)
        let port = try MotoServer.freePort()
        let command = getuid() == 0 ? ["/usr/sbin/runuser", "-u", user, "--", "env", "PGPORT=\(port)", "HOME=\(root.path)",
                                       "PATH=\(ProcessInfo.processInfo.environment["PATH"] ?? "/usr/bin:/bin")"] + Self.shell(script)
            : ["/usr/bin/env", "PGPORT=\(port)"] + Self.shell(script)
        let run = try await Command.run(command[0], Array(command.dropFirst()), directory: root)
        #expect(run.status == 0, "\(run.stdout)\(run.stderr)")
        let listed = run.stdout.split(separator: "\n").filter { $0.hasSuffix(".jpg") }
        #expect(listed.count == 2 && listed.contains { $0.hasPrefix("photo-") } && listed.contains { $0.hasPrefix("poster-") },
                "\(run.stdout)")
        #expect(run.stdout.contains("queued   0") && run.stdout.contains("failed   0"), "\(run.stdout)")
        #expect(run.stdout.contains("thumbnails: 2 items: 2 ok, 0 failed") && run.stdout.contains("duplicates: 1"), "\(run.stdout)")
    }
}
