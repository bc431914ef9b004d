import ArgumentParser
import Foundation
import PipelineKit

struct CacheCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "cache",
        abstract: "Inspect and maintain a pipeline's data cache.",
        discussion: helpText("""
            Works on the directory named by the pipeline's data_cache (after ${VAR} interpolation).
            Safe while a run uses the same cache: entries are replaced atomically.

            Examples:
              pipelinectl cache stats thumbnails
              pipelinectl cache prune thumbnails
              pipelinectl cache rm thumbnails https://example.com/a.jpg
              pipelinectl cache purge thumbnails https://example.com/a.jpg
              pipelinectl cache clear thumbnails
            """),
        subcommands: [Stats.self, Prune.self, Clear.self, Remove.self, Purge.self])

    struct Target: ParsableArguments {
        @Argument(help: "The pipeline file, or its name in pipelines/.")
        var pipeline: String

        /// The pipeline's runner (for its keys) and its data cache with maintenance; `loaded`: the
        /// pipeline when the command has read it already (it is not read twice).
        func open(_ loaded: Pipeline? = nil) throws -> (PipelineRunner, any DataCaching, any DataCacheMaintenance) {
            guard let pipeline = loaded ?? loadPipeline(pipeline) else { throw Exit.invalid }
            let runner: PipelineRunner
            do { runner = try PipelineRunner(pipeline: pipeline, registry: PipelineCtl.registry) } catch {
                printError("error: \(pipeline.file): \((error as? PipelineError)?.message ?? "\(error)")")
                throw Exit.invalid
            }
            guard let cache = runner.dataCacheStage else {
                printError("error: \(pipeline.file) has no data_cache")
                throw Exit.invalid
            }
            guard let maintained = cache as? any DataCacheMaintenance else {
                printError("error: the data cache of \(pipeline.file) does not support maintenance")
                throw Exit.invalid
            }
            return (runner, cache, maintained)
        }
    }

    struct Stats: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "stats",
            abstract: "Entries, bytes, oldest and newest entry, and the last run's hit rate.")
        @OptionGroup var target: Target
        @Flag(help: "Print JSON.") var json = false

        func run() async throws {
            let (_, _, cache) = try target.open()
            let stats = try await cache.statistics()
            if json {
                let encoder = JSONEncoder()
                encoder.outputFormatting = [.prettyPrinted, .sortedKeys, .withoutEscapingSlashes]
                encoder.dateEncodingStrategy = .iso8601
                print(String(decoding: try encoder.encode(stats), as: UTF8.self))
                return
            }
            let iso = ISO8601DateFormatter()
            print("cache:    \(stats.path)")
            if let originals = stats.originals, let outputs = stats.outputs {
                print("entries:  \(stats.entries) (\(originals) loaded, \(outputs) encoded outputs)")
            } else {
                print("entries:  \(stats.entries)")
            }
            if stats.sizeLimit > 0 {
                let share = Int((Double(stats.bytes) / Double(stats.sizeLimit) * 100).rounded())
                print("bytes:    \(SummaryText.bytes(stats.bytes)) of \(SummaryText.bytes(stats.sizeLimit)) (\(share)%)")
            } else {
                print("bytes:    \(SummaryText.bytes(stats.bytes)) (no size limit: expired by age)")
            }
            if let oldest = stats.oldest, let newest = stats.newest {
                print("oldest:   \(iso.string(from: oldest))")
                print("newest:   \(iso.string(from: newest))")
            }
            if let last = stats.lastRun {
                let c = last.counts
                let rate = c.hitRate.map { "\(Int(($0 * 100).rounded()))%" } ?? "-"
                print("last run: \(iso.string(from: last.finishedAt)): \(c.hit) hit, \(c.processedHit) processed hit, "
                      + "\(c.revalidated) revalidated, \(c.miss) miss (hit rate \(rate))")
            } else {
                print("last run: not recorded")
            }
        }
    }

    struct Prune: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "prune",
            abstract: "Delete expired and damaged entries now, then apply the size limit.",
            discussion: helpText("""
                A shared s3 cache keeps no size limit: prune deletes its entries not written for the
                cache's prune_after (or --older-than). Bucket lifecycle rules do the same without a command.
                """))
        @OptionGroup var target: Target
        @Option(name: .customLong("older-than"), help: ArgumentHelp(
            "Also delete entries unused (s3: not written) for this long, e.g. 30d, 12h, 0s.", valueName: "duration"))
        var olderThan: String?

        func run() async throws {
            var seconds: Double?
            if let olderThan {
                guard let value = Units.parseDuration(olderThan) else {
                    printError("error: --older-than '\(olderThan)' is not a duration (e.g. 30d, 12h, 90s)")
                    throw Exit.invalid
                }
                seconds = value
            }
            let (_, _, cache) = try target.open()
            let (entries, bytes) = try await cache.prune(olderThan: seconds)
            print("pruned \(entries) entries, \(SummaryText.bytes(bytes))")
        }
    }

    struct Clear: AsyncParsableCommand {
        static let configuration = CommandConfiguration(commandName: "clear", abstract: "Delete every entry.")
        @OptionGroup var target: Target

        func run() async throws {
            let (_, _, cache) = try target.open()
            print("cleared \(try await cache.clear()) entries")
        }
    }

    struct Remove: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "rm",
            abstract: "Delete the entries of one or more sources (their loaded bytes and this pipeline's outputs).")
        @OptionGroup var target: Target
        @Argument(help: "Sources as written in a URL list.") var sources: [String]

        func run() async throws {
            let (runner, cache, _) = try target.open()
            guard !sources.isEmpty else {
                printError("error: name at least one source to remove")
                throw Exit.invalid
            }
            var missing = 0
            for source in sources {
                var removed = 0
                for key in runner.dataCacheKeys(for: source) where await cache.remove(key) { removed += 1 }
                print("\(source): removed \(removed) entr\(removed == 1 ? "y" : "ies")")
                if removed == 0 { missing += 1 }
            }
            if missing > 0 { throw Exit.itemsFailed }
        }
    }

    struct Purge: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "purge",
            abstract: "Delete every stored result of one or more sources, here and at the CDNs the pipeline's purge: names.",
            discussion: helpText("""
                For a pipeline that `pipelinectl serve` serves: `rm` deletes the outputs of the
                pipeline as written, `purge` also those made with request parameters. It reads every
                entry's header (a shared s3 cache: a ranged GET per object).

                Then each purger of the pipeline's `purge:` list (varnish, cloudfront, cloudflare,
                fastly) is asked to drop the sources' answers: by their cache tags, or by the signed
                URL of each variant at each declared width (cloudfront, cloudflare by url), for
                which the signing keys are needed (PIPELINECTL_KEYS or --keys-file). A source that
                was never served is "nothing to purge" (exit 0); a purger that refuses or cannot be
                reached exits 3, naming it and the status.

                Examples:
                  pipelinectl cache purge thumbnails https://example.com/a.jpg
                  pipelinectl cache purge --keys-file keys.txt avatars s3://up/42.jpg
                """))
        @OptionGroup var target: Target
        @Argument(help: "Sources as requested (URLs or paths).") var sources: [String]
        @Option(help: "A file of signing keys, one ID:HEX per line (default: PIPELINECTL_KEYS): to name the answers' signed URLs to purgers that purge by URL.")
        var keysFile: String?
        @Flag(help: "Purge the pipeline's own cache only, not the CDNs of its purge: list.")
        var noCDN = false

        func run() async throws {
            guard !sources.isEmpty else {
                printError("error: name at least one source to purge")
                throw Exit.invalid
            }
            guard let pipeline = loadPipeline(target.pipeline) else { throw Exit.invalid }
            let purgers = noCDN ? [] : pipeline.purgers
            guard pipeline.dataCache != nil || !purgers.isEmpty else {
                printError("error: \(pipeline.file) has no data_cache" + (pipeline.purgers.isEmpty ? " and no purge: list" : ""))
                throw Exit.invalid
            }
            if pipeline.dataCache != nil {
                let (runner, _, cache) = try target.open(pipeline)
                var matchers: [@Sendable (String) -> Bool] = []
                for source in sources {
                    guard let matcher = runner.purgeMatcher(for: source) else {
                        printError("error: '\(source)': no loader of this pipeline serves it")
                        throw Exit.invalid
                    }
                    matchers.append(matcher)
                }
                let all = matchers
                let (entries, bytes) = try await cache.removeEntries { key in all.contains { $0(key) } }
                print(entries == 0 ? "nothing to purge in the cache: no entry of \(sources.count == 1 ? "this source" : "these sources")"
                      : "purged \(entries) entr\(entries == 1 ? "y" : "ies"), \(SummaryText.bytes(bytes))")
            }
            guard !purgers.isEmpty else { return }
            let keys: SigningKeys?
            do { keys = try SigningKeys.load(file: keysFile, environment: ProcessInfo.processInfo.environment) } catch let failure as PipelineError {
                printError("error: \(failure.message)")
                throw Exit.invalid
            }
            let request = pipeline.purgeRequest(sources: sources, keys: keys)
            // Every purger is asked, whatever another answered; a refusal is exit 3, a purger
            // that cannot be asked as configured (no keys for URLs) exit 2.
            var failed = false, invalid = false
            for config in purgers {
                do {
                    print(try await config.makePurger().purge(request))
                } catch let failure as PipelineError {
                    printError("error: \(failure.message.hasPrefix("purger '") ? "" : "purger '\(config.plugin.spec.name)': ")\(failure.message)")
                    if failure.kind == .invalidOption { invalid = true } else { failed = true }
                } catch {
                    printError("error: purger '\(config.plugin.spec.name)': \(error)")
                    failed = true
                }
            }
            if failed { throw Exit.infrastructure }
            if invalid { throw Exit.invalid }
        }
    }
}
