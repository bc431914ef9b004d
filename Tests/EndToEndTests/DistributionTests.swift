import Foundation
import Testing
import TestImages

/// Where `make image` and `make deb` put what they built (PIPELINECTL_DIST), made absolute.
private let distDirectory = ProcessInfo.processInfo.environment["PIPELINECTL_DIST"].map {
    $0.hasPrefix("/") ? $0 : Fixtures.packageRoot.appendingPathComponent($0).path
}

/// What `make image` and `make deb` build, used as a user would: the OCI image unpacked and run as
/// its config says (its user, its working directory, its environment) in its own root filesystem
/// with no network; the .deb installed with apt into a fresh Debian 12 root filesystem and run
/// there. `make test-dist` builds both into dist/ and runs this suite with PIPELINECTL_DIST set to
/// that directory; `make test` skips it (it needs the release build, root and the Debian mirror).
@Suite(.enabled(if: distDirectory != nil, "run by make test-dist, after make image and make deb"), .serialized)
struct DistributionTests {
    static let dist = distDirectory

    /// The version the sources say, from the test build's own binary.
    static func version() async throws -> String {
        let printed = try await Command.run(CLITests.binary, ["--version"])
        let first = try #require(printed.stdout.split(separator: "\n").first)
        return String(first.dropFirst("pipelinectl ".count))
    }

    /// The Debian mirror apt uses here, for mmdebstrap.
    static func mirror() -> String {
        let sources = (try? String(contentsOfFile: "/etc/apt/sources.list.d/debian.sources", encoding: .utf8)) ?? ""
        let uri = sources.split(separator: "\n").first { $0.hasPrefix("URIs:") }
        return uri.map { $0.dropFirst("URIs:".count).trimmingCharacters(in: .whitespaces) } ?? "http://deb.debian.org/debian"
    }

    /// The bundled samples (and their list, with `list`), as `make run` uses them, in `directory`,
    /// owned by `owner`.
    static func samples(into directory: URL, owner: Int, list: Bool = true) async throws {
        let made = try await Command.run("/usr/bin/env", ["bash", Fixtures.packageRoot.appendingPathComponent("examples/make-samples.sh").path,
                                                          directory.appendingPathComponent("images").path])
        try #require(made.status == 0, "make-samples.sh: \(made.stderr)")
        if list {
            try FileManager.default.copyItem(at: Fixtures.packageRoot.appendingPathComponent("examples/urls.txt"),
                                             to: directory.appendingPathComponent("urls.txt"))
        }
        let chown = try await Command.run("/bin/chown", ["-R", "\(owner):\(owner)", directory.path])
        try #require(chown.status == 0, "\(chown.stderr)")
    }

    /// Runs `arguments` in `root` as `uid`, from `directory`, with only `environment`, in new network,
    /// PID and mount namespaces: no network at all, a /proc of its own, the root filesystem as `/`.
    static func runInside(root: URL, uid: Int, gid: Int, directory: String, environment: [String], _ arguments: [String]) async throws -> Command.Result {
        try await Command.run("/usr/bin/env", ["-i"] + environment + [
            "unshare", "--net", "--pid", "--fork", "--mount-proc", "--root=\(root.path)", "--wd=\(directory)",
            "--setuid=\(uid)", "--setgid=\(gid)",
        ] + arguments)
    }

    /// Checks a report of the main job over the seven samples and the thumbnails it names.
    static func checkMainJob(report: URL, outputs: URL, version: String) async throws {
        let text = try String(contentsOf: report, encoding: .utf8)
        let json = try #require(try JSONSerialization.jsonObject(with: Data(text.utf8)) as? [String: Any])
        let run = try #require(json["run"] as? [String: Any])
        #expect(run["version"] as? String == version)
        #expect((run["revision"] as? String)?.isEmpty == false)
        let items = try #require(json["items"] as? [[String: Any]])
        #expect(items.count == 7)
        #expect(items.allSatisfy { $0["status"] as? String == "ok" }, "\(text)")
        let thumbnails = try FileManager.default.contentsOfDirectory(atPath: outputs.path).filter { $0.hasSuffix(".jpg") }
        #expect(thumbnails.count == 7)
        for name in thumbnails {
            let thumbnail = try await Identified.file(outputs.appendingPathComponent(name).path)
            #expect(thumbnail.format == "JPEG" && max(thumbnail.width, thumbnail.height) <= 256, "\(name): \(thumbnail)")
        }
    }

    @Test func theImageRunsTheMainJobAsItsUserWithNoNetwork() async throws {
        try #require(getuid() == 0, "unpacking an image with its owners and entering namespaces needs root")
        let dist = try #require(Self.dist)
        let version = try await Self.version()
        let work = try Fixtures.temporaryDirectory("image")
        defer { try? FileManager.default.removeItem(at: work) }
        let bundle = work.appendingPathComponent("bundle")
        let unpacked = try await Command.run("/usr/bin/umoci", ["unpack", "--image", "\(dist)/oci:\(version)", bundle.path])
        try #require(unpacked.status == 0, "umoci unpack \(dist)/oci:\(version): \(unpacked.stderr)")

        // The runtime config umoci derives from the image config: what a container engine would run.
        let config = try #require(try JSONSerialization.jsonObject(with: Data(contentsOf: bundle.appendingPathComponent("config.json"))) as? [String: Any])
        let process = try #require(config["process"] as? [String: Any])
        let args = try #require(process["args"] as? [String])
        let user = try #require(process["user"] as? [String: Any])
        let uid = try #require(user["uid"] as? Int), gid = try #require(user["gid"] as? Int)
        let cwd = try #require(process["cwd"] as? String)
        let env = try #require(process["env"] as? [String])
        #expect(args == ["/usr/bin/pipelinectl", "--help"])
        #expect(uid == 10001 && gid == 10001 && cwd == "/work")

        // Its labels name the version and the revision its binary reports.
        let inspected = try await Command.run("/usr/bin/skopeo", ["inspect", "oci:\(dist)/oci:\(version)"])
        let labels = try #require((try JSONSerialization.jsonObject(with: Data(inspected.stdout.utf8)) as? [String: Any])?["Labels"] as? [String: String], "\(inspected.stderr)")
        let root = bundle.appendingPathComponent("rootfs")
        let printed = try await Self.runInside(root: root, uid: uid, gid: gid, directory: cwd, environment: env, [args[0], "--version"])
        try #require(printed.status == 0, "pipelinectl --version in the image: \(printed.stderr)")
        #expect(printed.stdout.hasPrefix("pipelinectl \(version)\n"))
        #expect(labels["org.opencontainers.image.version"] == version)
        let revision = try #require(labels["org.opencontainers.image.revision"])
        #expect(printed.stdout.contains("revision       \(revision)\n"))
        // libheif, opened on the first HEIC or AVIF file, is there too.
        #expect(printed.stdout.contains("libheif        1."), "\(printed.stdout)")

        // Runtime libraries only: no shell, no compiler, no headers, no manuals.
        for absent in ["bin/sh", "usr/bin/bash", "usr/bin/swift", "usr/bin/cc", "usr/include", "usr/share/man"] {
            #expect(!FileManager.default.fileExists(atPath: root.appendingPathComponent(absent).path), "the image has /\(absent)")
        }
        #expect(FileManager.default.fileExists(atPath: root.appendingPathComponent("etc/ssl/certs/ca-certificates.crt").path))

        // The main job, as `docker run -v ./examples:/work/examples pipelinectl:VERSION run thumbnails
        // examples/urls.txt` would run it.
        let examples = root.appendingPathComponent("work/examples")
        try FileManager.default.createDirectory(at: examples, withIntermediateDirectories: true)
        try await Self.samples(into: examples, owner: uid)
        let ran = try await Self.runInside(root: root, uid: uid, gid: gid, directory: cwd, environment: env,
                                           [args[0], "run", "thumbnails", "examples/urls.txt", "--report", "out/report.json"])
        #expect(ran.status == 0, "\(ran.stdout)\n\(ran.stderr)")
        try await Self.checkMainJob(report: root.appendingPathComponent("work/out/report.json"),
                                    outputs: root.appendingPathComponent("work/out/thumbnails"), version: version)
    }

    /// `make install` puts the binary, the man page and the completions under a prefix (make
    /// test-dist ran `make install DESTDIR=dist/stage PREFIX=/opt/pipelinectl` before this suite:
    /// a build inside a running test would wait on SwiftPM's lock), each usable: bash loads the
    /// completion, man renders the page without a warning; `make uninstall` takes them away again.
    @Test func makeInstallPutsTheBinaryItsManualAndCompletionsUnderAPrefix() async throws {
        let dist = try #require(Self.dist)
        let stage = URL(fileURLWithPath: dist).appendingPathComponent("stage")
        let root = stage.appendingPathComponent("opt/pipelinectl")
        let version = try await Command.run(root.appendingPathComponent("bin/pipelinectl").path, ["--version"])
        #expect(version.stdout.hasPrefix("pipelinectl \(try await Self.version())\n"))
        let completion = root.appendingPathComponent("share/bash-completion/completions/pipelinectl").path
        let bash = try await Command.run("/bin/bash", ["-c", "source '\(completion)' && complete -p pipelinectl"])
        #expect(bash.status == 0 && bash.stdout.contains("pipelinectl"), "\(bash.stdout)\(bash.stderr)")
        for path in ["share/zsh/site-functions/_pipelinectl", "share/fish/vendor_completions.d/pipelinectl.fish"] {
            #expect(FileManager.default.fileExists(atPath: root.appendingPathComponent(path).path), "no \(path)")
        }
        let manual = try await Command.run("/usr/bin/man", ["--warnings", "-l", root.appendingPathComponent("share/man/man1/pipelinectl.1.gz").path],
                                           environment: ["MANWIDTH": "100", "PATH": "/usr/bin:/bin", "LC_ALL": "C.UTF-8"])
        #expect(manual.status == 0 && manual.stderr.isEmpty, "\(manual.stderr)")
        #expect(manual.stdout.contains("pipelinectl run") && manual.stdout.contains("--version"))
        let removed = try await Command.run("/usr/bin/make", ["-s", "uninstall", "DESTDIR=\(stage.path)", "PREFIX=/opt/pipelinectl"],
                                            directory: Fixtures.packageRoot)
        #expect(removed.status == 0, "\(removed.stderr)")
        let left = FileManager.default.enumerator(atPath: root.path)?.compactMap { $0 as? String }
            .filter { !((try? FileManager.default.attributesOfItem(atPath: root.appendingPathComponent($0).path)[.type] as? FileAttributeType) == .typeDirectory) }
        #expect(left == [], "\(left ?? [])")
    }

    /// The archive for `docker load` carries the name the deploy/ manifests use (as Docker spells
    /// it in full: an unqualified name is Docker Hub's library).
    @Test func theDockerArchiveIsNamedAsTheManifestsSay() async throws {
        let dist = try #require(Self.dist)
        let version = try await Self.version()
        let listed = try await Command.run("/bin/tar", ["-xOf", "\(dist)/pipelinectl-\(version).docker.tar", "manifest.json"])
        try #require(listed.status == 0, "\(listed.stderr)")
        let manifest = try #require(try JSONSerialization.jsonObject(with: Data(listed.stdout.utf8)) as? [[String: Any]])
        #expect(manifest.count == 1)
        #expect(manifest.first?["RepoTags"] as? [String] == ["docker.io/library/pipelinectl:\(version)"])
    }

    @Test func thePackageInstallsWithAptIntoAFreshDebianAndRunsTheExamples() async throws {
        try #require(getuid() == 0, "mmdebstrap's root mode and entering namespaces need root")
        let dist = try #require(Self.dist)
        let version = try await Self.version()
        let architecture = try await Command.run("/usr/bin/dpkg", ["--print-architecture"]).stdout.trimmingCharacters(in: .whitespacesAndNewlines)
        let deb = "\(dist)/pipelinectl_\(version)_\(architecture).deb"

        // Depends: every package of the one runtime list, with dpkg-shlibdeps' versions.
        let depends = try await Command.run("/usr/bin/dpkg-deb", ["--field", deb, "Depends"])
        try #require(depends.status == 0, "\(depends.stderr)")
        let dependencies = Set(depends.stdout.split(separator: ",").compactMap {
            $0.trimmingCharacters(in: .whitespacesAndNewlines).split(separator: " ").first.map(String.init)
        })
        for package in try DeployFileTests.runtimePackages() {
            #expect(dependencies.contains(package), "Depends lacks \(package): \(depends.stdout)")
        }
        let contents = try await Command.run("/usr/bin/dpkg-deb", ["--contents", deb])
        for path in ["./usr/bin/pipelinectl", "./usr/share/man/man1/pipelinectl.1.gz",
                     "./usr/share/bash-completion/completions/pipelinectl", "./usr/share/zsh/vendor-completions/_pipelinectl",
                     "./usr/share/fish/vendor_completions.d/pipelinectl.fish", "./usr/share/doc/pipelinectl/copyright",
                     "./usr/share/doc/pipelinectl/examples/pipelines/thumbnails.yaml", "./usr/share/doc/pipelinectl/examples/urls.txt"] {
            #expect(contents.stdout.contains(" \(path)\n"), "the package lacks \(path)")
        }
        let lintian = try await Command.run("/usr/bin/lintian", ["--fail-on", "error,warning", deb])
        #expect(lintian.status == 0, "lintian: \(lintian.stdout)\(lintian.stderr)")

        // A fresh Debian 12 root filesystem with apt, and the package installed by apt, which
        // fetches its dependencies from the mirror.
        let work = try Fixtures.temporaryDirectory("deb")
        defer { try? FileManager.default.removeItem(at: work) }
        let root = work.appendingPathComponent("root")
        let hook = "cp '\(deb)' \"$1/tmp/pipelinectl.deb\" && chroot \"$1\" env DEBIAN_FRONTEND=noninteractive "
            + "apt-get install -y --no-install-recommends /tmp/pipelinectl.deb"
        let built = try await Command.run("/usr/bin/mmdebstrap", ["--quiet", "--variant=apt", "--customize-hook=\(hook)",
                                                                  "bookworm", root.path, Self.mirror()])
        try #require(built.status == 0, "mmdebstrap: \(built.stdout)\(built.stderr)")
        let status = try await Command.run("/usr/bin/dpkg-query", ["--admindir=\(root.path)/var/lib/dpkg", "-W", "-f=${Status} ${Version}", "pipelinectl"])
        #expect(status.stdout == "install ok installed \(version)", "\(status.stdout)\(status.stderr)")

        // The examples as the README says to use them: copied from the package's documentation,
        // the samples made, run by an ordinary user with no network.
        let home = root.appendingPathComponent("home/user")
        try FileManager.default.createDirectory(at: home, withIntermediateDirectories: true)
        let copied = try await Command.run("/bin/cp", ["-r", root.appendingPathComponent("usr/share/doc/pipelinectl/examples").path, home.path])
        try #require(copied.status == 0, "\(copied.stderr)")
        let examples = home.appendingPathComponent("examples")
        try await Self.samples(into: examples, owner: 65534, list: false)
        let ran = try await Self.runInside(root: root, uid: 65534, gid: 65534, directory: "/home/user/examples",
                                           environment: ["PATH=/usr/bin:/bin", "HOME=/home/user"],
                                           ["pipelinectl", "run", "thumbnails", "urls.txt", "--report", "out/report.json"])
        #expect(ran.status == 0, "\(ran.stdout)\n\(ran.stderr)")
        try await Self.checkMainJob(report: examples.appendingPathComponent("out/report.json"),
                                    outputs: examples.appendingPathComponent("out/thumbnails"), version: version)
    }
}
