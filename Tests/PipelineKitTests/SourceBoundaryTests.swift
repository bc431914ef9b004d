import Foundation
@testable import PipelineKit
import Testing

/// `SourceBoundary`: the one decision of whether a source may be served, on what a loader will
/// open. Every escape the service was found open to has its case here; the service's own tests
/// (ServeTests) send the same through HTTP.
@Suite struct SourceBoundaryTests {
    /// A served directory with a file, a subdirectory, and links inside it: one to a file outside,
    /// one to a directory outside, one dangling to a missing file outside, one to a file inside.
    struct Tree {
        let root: URL
        let served: URL
        let outside: URL

        init() throws {
            root = FileManager.default.temporaryDirectory.appendingPathComponent("boundary-\(UUID().uuidString)")
            served = root.appendingPathComponent("served")
            outside = root.appendingPathComponent("outside")
            let fm = FileManager.default
            try fm.createDirectory(at: served.appendingPathComponent("sub"), withIntermediateDirectories: true)
            try fm.createDirectory(at: outside, withIntermediateDirectories: true)
            try Data("inside".utf8).write(to: served.appendingPathComponent("a.jpg"))
            try Data("inside".utf8).write(to: served.appendingPathComponent("sub/b.jpg"))
            try Data("secret".utf8).write(to: outside.appendingPathComponent("secret.jpg"))
            try fm.createSymbolicLink(atPath: served.appendingPathComponent("out.jpg").path, withDestinationPath: outside.appendingPathComponent("secret.jpg").path)
            try fm.createSymbolicLink(atPath: served.appendingPathComponent("outdir").path, withDestinationPath: outside.path)
            try fm.createSymbolicLink(atPath: served.appendingPathComponent("gone.jpg").path, withDestinationPath: outside.appendingPathComponent("missing.jpg").path)
            try fm.createSymbolicLink(atPath: served.appendingPathComponent("in.jpg").path, withDestinationPath: served.appendingPathComponent("sub/b.jpg").path)
        }

        var boundary: SourceBoundary { SourceBoundary([served.path + "/", "https://img.example.com/public/", "http://127.0.0.1:"]) }
    }

    @Test func localPathsInsideAreAdmittedAndMissingOnesInsideToo() throws {
        let tree = try Tree()
        defer { try? FileManager.default.removeItem(at: tree.root) }
        let b = tree.boundary
        for source in ["a.jpg", "sub/b.jpg", "in.jpg", "missing.jpg", "sub/missing.jpg", "sub/../a.jpg", "./a.jpg"] {
            #expect(b.refusal(for: tree.served.path + "/" + source) == nil, "\(source)")
        }
        #expect(b.refusal(for: "file://" + tree.served.path + "/a.jpg") == nil)
        #expect(b.refusal(for: "file://localhost" + tree.served.path + "/a.jpg") == nil)
    }

    /// Every way out answers the same refusal, whether the file outside exists or not.
    @Test func everyEscapeFromALocalRootIsRefusedTheSameWayWhetherTheFileExistsOrNot() throws {
        let tree = try Tree()
        defer { try? FileManager.default.removeItem(at: tree.root) }
        let b = tree.boundary
        let served = tree.served.path
        let escapes = [
            "/etc/shadow", "/etc/missing-file", served + "/../outside/secret.jpg", served + "/../outside/missing.jpg",
            served + "/sub/../../outside/secret.jpg",
            // A `..` after a link leaves from where the link points, as the kernel resolves it.
            served + "/outdir/../outside/secret.jpg", served + "/outdir/../served/../outside/secret.jpg",
            // Single- and double-encoded dots, encoded slashes, as a file:// URL decodes them again.
            "file://" + served + "/%2e%2e/outside/secret.jpg", "file://" + served + "/%252e%252e/outside/secret.jpg",
            "file://" + served + "/..%2foutside%2fsecret.jpg", "file://" + served + "/%2E%2E/%2E%2E/%2E%2E/etc/shadow",
            "file://" + served + "/%252e%252e/%252e%252e/%252e%252e/%252e%252e/etc/shadow",
            "file://" + served + "/..%5coutside", "file://" + served + "/a.jpg%00.png",
            // Links inside the root that lead out: to a file, through a directory, dangling.
            served + "/out.jpg", served + "/outdir/secret.jpg", served + "/outdir/missing.jpg", served + "/gone.jpg",
            // A sibling that shares the root's name as a prefix.
            served + "-private/a.jpg",
            // Relative paths, and file:// URLs naming another host.
            "a.jpg", "file://other" + served + "/a.jpg",
        ]
        var messages: Set<String> = []
        for source in escapes {
            let refusal = b.refusal(for: source)
            #expect(refusal != nil, "\(source) was admitted")
            messages.insert(refusal ?? "")
        }
        // What a refusal says never depends on whether the file outside exists.
        let pairs = [("/etc/shadow", "/etc/missing-file"), (served + "/../outside/secret.jpg", served + "/../outside/missing.jpg"),
                     (served + "/out.jpg", served + "/gone.jpg"), (served + "/outdir/secret.jpg", served + "/outdir/missing.jpg")]
        for (exists, missing) in pairs {
            #expect(b.refusal(for: exists) == b.refusal(for: missing), "\(exists) / \(missing)")
        }
    }

    @Test func urlsAreComparedByTheirPartsAfterDotSegmentsAreRemoved() {
        let b = SourceBoundary(["https://img.example.com/public/", "http://127.0.0.1:", "s3://uploads/in/"])
        let admitted = [
            "https://img.example.com/public/a.jpg", "https://IMG.example.com/public/a.jpg", "https://img.example.com:443/public/a.jpg",
            "https://img.example.com/public/x/../a.jpg", "https://img.example.com/public/a.jpg?w=1&sig=%2F",
            "http://127.0.0.1:8080/a.jpg", "http://127.0.0.1:9/x/y.png", "s3://uploads/in/a.jpg", "https://img.example.com./public/a.jpg",
        ]
        for source in admitted { #expect(b.refusal(for: source) == nil, "\(source): \(b.refusal(for: source) ?? "")") }
        let refused = [
            "https://img.example.com/public/../private/x.jpg", "https://img.example.com/public/./../private/x.jpg",
            "https://img.example.com/public/%2e%2e/private/x.jpg", "https://img.example.com/public/%252e%252e/private/x.jpg",
            "https://img.example.com/public/..%2fprivate/x.jpg", "https://img.example.com/public\\..\\private\\x.jpg",
            "https://img.example.com/publicity/a.jpg", "https://img.example.com.evil.example/public/a.jpg",
            "https://img.example.com@evil.example/public/a.jpg", "https://img.example.com:8443/public/a.jpg",
            "http://img.example.com/public/a.jpg", "http://127.0.0.2:8080/a.jpg", "http://localhost:8080/a.jpg",
            "http://[::1]:8080/a.jpg", "s3://uploads/in/../out/a.jpg", "s3://uploads/out/a.jpg", "s3://uploads2/in/a.jpg",
            "ftp://img.example.com/public/a.jpg", "data:image/png;base64,AAAA", "gopher://127.0.0.1:70/",
        ]
        for source in refused { #expect(b.refusal(for: source) != nil, "\(source) was admitted") }
    }

    @Test func redirectsAreCheckedAsSourcesAre() {
        let b = SourceBoundary(["http://127.0.0.1:8080/img/"])
        #expect(b.admitsRedirect(to: "http://127.0.0.1:8080/img/b.jpg"))
        for target in ["http://127.0.0.1:8081/img/b.jpg", "http://localhost:8080/img/b.jpg", "http://[::1]:8080/img/b.jpg",
                       "http://127.0.0.1:8080/other/b.jpg", "http://127.0.0.1:8080/img/../other/b.jpg", "file:///etc/shadow",
                       "https://127.0.0.1:8080/img/b.jpg", "http://evil.example/img/b.jpg"] {
            #expect(!b.admitsRedirect(to: target), "\(target)")
        }
        // No prefix listed: every http(s) hop is left to the loader's own guards.
        #expect(SourceBoundary([]).admitsRedirect(to: "http://evil.example/a.jpg"))
    }

    @Test func withoutADirectoryListedNoLocalPathIsServed() {
        for b in [SourceBoundary([]), SourceBoundary(["https://img.example.com/"])] {
            #expect(b.refusal(for: "/etc/passwd") != nil)
            #expect(b.refusal(for: "file:///etc/passwd") != nil)
        }
        #expect(SourceBoundary([]).refusal(for: "https://anything.example/a.jpg") == nil)
    }

    @Test func theOpenedFileIsCheckedOnItsResolvedPath() throws {
        let tree = try Tree()
        defer { try? FileManager.default.removeItem(at: tree.root) }
        let b = tree.boundary
        let resolvedServed = SourceBoundary.realpath(tree.served.path)!
        #expect(b.admitsOpened(path: resolvedServed + "/a.jpg"))
        #expect(!b.admitsOpened(path: SourceBoundary.realpath(tree.outside.path)! + "/secret.jpg"))
        #expect(!b.admitsOpened(path: resolvedServed + "-private/a.jpg"))
    }

    @Test func dotSegmentsAreRemovedAsRFC3986Says() {
        let cases = [("/a/b/c/./../../g", "/a/g"), ("/mid/content=5/../6", "/mid/6"), ("/../a", "/a"), ("/a/..", "/"),
                     ("/a/.", "/a/"), ("/a//b/../c", "/a//c"), ("/", "/"), ("/a/b/", "/a/b/")]
        for (path, expected) in cases { #expect(SourceBoundary.removingDotSegments(path) == expected, "\(path)") }
    }
}
