import Foundation
@testable import PipelineKit
import Testing

/// `on_failure`'s parts: which failures it applies to, how alternatives are written, what is refused.
@Suite struct FailurePolicyTests {
    func options(_ values: [String: OptionValue]) -> PluginOptions { PluginOptions(values) }

    @Test func appliesToItsKindsAndStatuses() throws {
        let policy = try FailurePolicy(options: options([
            "kinds": .list([.string("not_found"), .string("http_status:404"), .string("http_status:410")]),
            "alternatives": .list([.string("{url}.orig")]),
        ]))
        #expect(policy.applies(to: PipelineError(.notFound, "no such file")))
        #expect(policy.applies(to: PipelineError(.httpStatus, "HTTP 404 Not Found")))
        #expect(policy.applies(to: PipelineError(.httpStatus, "HTTP 410 Gone")))
        #expect(!policy.applies(to: PipelineError(.httpStatus, "HTTP 500 Internal Server Error")))
        #expect(!policy.applies(to: PipelineError(.timeout, "the item did not finish")))
        // The defaults: the source's own problems, never time limits or write failures.
        let defaults = try FailurePolicy(options: options(["alternatives": .list([.string("{url}")])]))
        #expect(defaults.applies(to: PipelineError(.httpStatus, "HTTP 503 Service Unavailable")))
        #expect(defaults.applies(to: PipelineError(.decodeFailed, "JPEG: Premature end of JPEG file")))
        #expect(!defaults.applies(to: PipelineError(.timeout, "slow")) && !defaults.applies(to: PipelineError(.writeFailed, "disk full")))
    }

    @Test func alternativesAreRenderedFromTheSource() {
        let url = "https://img.example.com/photos/2026/cat.jpg?w=1"
        #expect(FailurePolicy.render("{url}.orig", source: url) == url + ".orig")
        #expect(FailurePolicy.render("https://backup.example.com{path}{query}", source: url) == "https://backup.example.com/photos/2026/cat.jpg?w=1")
        #expect(FailurePolicy.render("{scheme}://{host}{dir}/{stem}.png", source: url) == "https://img.example.com/photos/2026/cat.png")
        #expect(FailurePolicy.render("/mnt/originals/{name}", source: "photos/cat.webp") == "/mnt/originals/cat.webp")
    }

    @Test func badPoliciesAreRefusedWithTheReason() {
        #expect(throws: PipelineError(.invalidOption, "on_failure needs 'alternatives', a 'fallback', or both")) {
            try FailurePolicy.check(options([:]))
        }
        #expect(throws: PipelineError(.invalidOption, "on_failure: '{file}' in '{file}.orig' is not one of {url} {scheme} {host} {path} {query} {name} {stem} {ext} {dir}")) {
            try FailurePolicy.check(options(["alternatives": .list([.string("{file}.orig")])]))
        }
        #expect(throws: PipelineError(.invalidOption, "on_failure: 'timeout:404': only http_status takes a status (such as http_status:404)")) {
            try FailurePolicy.check(options(["kinds": .list([.string("timeout:404")]), "alternatives": .list([.string("{url}")])]))
        }
        #expect(throws: PipelineError(.invalidOption, "on_failure: the fallback '/nonexistent/p.png' cannot be read")) {
            _ = try FailurePolicy(options: options(["fallback": .string("/nonexistent/p.png")]))
        }
    }
}
