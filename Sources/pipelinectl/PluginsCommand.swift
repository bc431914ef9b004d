import ArgumentParser
import PipelineKit

struct PluginsCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "plugins",
        abstract: "List the registered plugins by slot.",
        discussion: """
            Examples:
              pipelinectl plugins
              pipelinectl plugins --markdown > docs/plugins.md
            """)

    @Flag(help: "Print the full reference (every option, type, default and range) as Markdown.")
    var markdown = false

    func run() async throws {
        let registry = PipelineCtl.registry
        if markdown {
            print(PluginReference.markdown(registry), terminator: "")
            return
        }
        for slot in Slot.allCases {
            let plugins = registry.plugins(in: slot)
            guard !plugins.isEmpty else { continue }
            print("\(slot.rawValue):")
            let width = plugins.map(\.spec.name.count).max() ?? 0
            for plugin in plugins {
                let name = plugin.spec.name.padding(toLength: width, withPad: " ", startingAt: 0)
                print("  \(name)  \(plugin.spec.summary)")
            }
        }
    }
}
