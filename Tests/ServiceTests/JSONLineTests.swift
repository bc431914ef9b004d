import Foundation
@testable import PipelineCtl
@testable import PipelineHummingbird
@testable import PipelineService
import Testing

/// The service's problem bodies and access-log lines are written without JSONSerialization: they
/// must still be JSON that any parser reads back to the same values, whatever the text holds.
@Suite struct JSONLineTests {
    @Test func everyValueReadsBackAndKeysAreSorted() throws {
        let awkward = "quote \" backslash \\ slash / newline \n tab \t bell \u{07} nul \u{00} é 日本 🙂"
        var line = JSONLine()
        line.add("z", awkward)
        line.add("a", 429)
        line.add("m", 12.5)
        line.add("k", -3)
        let text = line.text
        #expect(text.hasPrefix("{\"a\":429,\"k\":-3,\"m\":12.5,\"z\":"), "\(text)")
        #expect(!text.contains("\n"), "a raw line break would split an access-log line: \(text)")
        let object = try #require(try JSONSerialization.jsonObject(with: line.data) as? [String: Any])
        #expect(object["z"] as? String == awkward)
        #expect(object["a"] as? Int == 429 && object["k"] as? Int == -3 && object["m"] as? Double == 12.5)
    }

    @Test func problemBodiesAreProblemJSON() throws {
        let answer = ServeAnswer.problem(404, kind: "not_found", "no pipeline \"x/y\"")
        let object = try #require(try JSONSerialization.jsonObject(with: answer.body) as? [String: Any])
        #expect(object["type"] as? String == "https://pipelinectl.dev/problems/not_found")
        #expect(object["title"] as? String == "not_found" && object["status"] as? Int == 404)
        #expect(object["detail"] as? String == "no pipeline \"x/y\"")
    }
}
