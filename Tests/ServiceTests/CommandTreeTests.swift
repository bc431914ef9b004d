import ArgumentParser
@testable import PipelineCtl
import Testing

/// Every command names itself. Without a name, swift-argument-parser derives one from the type
/// (`String(describing:)` of the metatype) for every subcommand each time it matches the command
/// line, and each derivation asks the Swift runtime three protocol-conformance questions that
/// scan every conformance in the binary the first time: about 6 ms of a lone huge image's serial
/// start (bench/NOTEBOOK.md#serial-start).
@Suite struct CommandTreeTests {
    @Test func everyCommandHasAnExplicitName() {
        var unnamed: [String] = []
        func walk(_ command: any ParsableCommand.Type, path: String) {
            let name = command.configuration.commandName
            if name == nil { unnamed.append("\(path) \(command)") }
            for sub in command.configuration.subcommands { walk(sub, path: path + " " + (name ?? "?")) }
        }
        walk(RootCommand.self, path: "")
        #expect(unnamed.isEmpty, "\(unnamed)")
    }
}
