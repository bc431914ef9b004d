import ArgumentParser
import PipelineKit

struct PluginsCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "plugins",
        abstract: "List the registered plugins, or describe one.",
        discussion: helpText("""
            With no subcommand, lists them: `pipelinectl plugins [--json | --markdown]` is `pipelinectl
            plugins list` (see `pipelinectl plugins list --help`).

            Examples:
              pipelinectl plugins
              pipelinectl plugins --markdown > docs/plugins.md
              pipelinectl plugins describe resize
            """),
        subcommands: [List.self, Describe.self],
        defaultSubcommand: List.self)

    struct List: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "list",
            abstract: "List the registered plugins by slot.",
            discussion: helpText("""
                Examples:
                  pipelinectl plugins
                  pipelinectl plugins --json
                  pipelinectl plugins --markdown > docs/plugins.md
                """))

        @Flag(help: "Print every plugin with its options as JSON.")
        var json = false

        @Flag(help: "Print the full reference (every option, type, default and range) as Markdown.")
        var markdown = false

        func run() async throws {
            let registry = PipelineCtl.registry
            if markdown {
                print(PluginReference.markdown(registry), terminator: "")
                return
            }
            if json {
                print(try PipelineSchema.render(PipelineSchema.pluginList(registry)))
                return
            }
            for slot in Slot.allCases {
                let plugins = registry.plugins(in: slot)
                guard !plugins.isEmpty else { continue }
                print("\(slot.rawValue):")
                let width = plugins.map(\.spec.name.count).max() ?? 0
                for plugin in plugins {
                    print("  \(plugin.spec.name.padding(toLength: width, withPad: " ", startingAt: 0))  \(plugin.spec.summary)")
                }
            }
        }
    }

    struct Describe: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "describe",
            abstract: "Describe a plugin, or a section of the pipeline file: every option with type, default and range.",
            discussion: helpText("""
                The sections are output, variants, metadata, on_failure, serve and params.

                Examples:
                  pipelinectl plugins describe resize
                  pipelinectl plugins describe output
                """))

        @Argument(help: "The plugin's name, or a section of the pipeline file (output, variants, metadata, ...).")
        var name: String

        static let sections = ["output", "variants", "metadata", "on_failure", "serve", "params"]

        func run() async throws {
            let registry = PipelineCtl.registry
            let slots = registry.slots(of: name)
            if slots.isEmpty, let section = PluginReference.describeSection(name, registry: registry) {
                print(section)
                return
            }
            guard !slots.isEmpty else {
                let all = Slot.allCases.flatMap { registry.plugins(in: $0).map(\.spec.name) } + Self.sections
                printError("error: no plugin or pipeline file section named '\(name)'" + Suggest.hint(for: name, in: Array(Set(all)).sorted()))
                throw Exit.invalid
            }
            for slot in slots {
                let plugin = registry.plugin(name, in: slot)!
                print(PluginReference.describe(plugin))
            }
        }
    }
}
