import ArgumentParser
import Foundation
import PipelineKit

struct Sign: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "sign",
        abstract: "Print the signed path that asks `pipelinectl serve` for a source.",
        discussion: helpText("""
            The parameters, the variant and the source are checked against the pipeline file, as
            the service would (a source outside serve.sources is refused, exit 2). Keys come from PIPELINECTL_KEYS or --keys-file; the first key signs.

            Examples:
              pipelinectl sign thumbnails https://img.example.com/a.jpg
              pipelinectl sign pipelines/resize.yaml https://img.example.com/a.jpg \\
                --param w=320 --expires 1h
              pipelinectl sign responsive https://img.example.com/a.jpg \\
                --variant small --base http://localhost:8080
              pipelinectl sign thumbnails https://img.example.com/a.jpg --info
              pipelinectl sign thumbnails https://img.example.com/a.jpg --info --header
              pipelinectl sign thumbnails https://img.example.com/a.jpg \\
                --source-version "$ETAG"
            """))

    @Argument(help: "The pipeline file, or its name in pipelines/.")
    var pipeline: String

    @Argument(help: "The source URL or path, as the service should load it.")
    var source: String

    @Option(help: "The variant to ask for (pipelines with variants).")
    var variant: String?

    @Option(name: .customLong("param"), help: "NAME=VALUE for a parameter the pipeline declares in params: (repeatable).")
    var params: [String] = []

    @Option(help: "How long the link works (e.g. 1h, 7d); default: for ever.")
    var expires: String?

    @Option(help: "A version of the source (its ETag, upload time or content hash), sent as v=: a new version is a new URL, so browsers and CDNs that keep the old answer for a year fetch the new one.")
    var sourceVersion: String?

    @Option(help: "A file of signing keys, one ID:HEX per line (default: PIPELINECTL_KEYS).")
    var keysFile: String?

    @Option(help: "Put this before the path (http://localhost:8080).")
    var base: String = ""

    @Flag(help: "Sign the URL of the source's facts (JSON: size, format, EXIF, BlurHash, ThumbHash, dHash, colour): /info/SIGNATURE/PIPELINE/SOURCE.")
    var info = false

    @Flag(help: "With --info: the header's facts only (format, size, orientation, EXIF; nothing decoded): ?facts=header.")
    var header = false

    func run() async throws {
        guard let loaded = loadPipeline(pipeline) else { throw Exit.invalid }
        var values: [String: String] = [:]
        for pair in params {
            guard let equals = pair.firstIndex(of: "="), equals != pair.startIndex else {
                printError("error: --param expects NAME=VALUE, got '\(pair)'")
                throw Exit.invalid
            }
            values[String(pair[..<equals])] = String(pair[pair.index(after: equals)...])
        }
        do {
            // Facts are the source's: no variant is named (checked below).
            if !info { _ = try loaded.restricted(toVariant: variant).applying(values) }
        } catch let failure as PipelineError {
            printError("error: \(loaded.file): \(failure.message)")
            throw Exit.invalid
        }
        // The service would refuse it: say so now, not at the first request.
        if let refusal = SourceBoundary(loaded.servedSources).refusal(for: source) {
            printError("error: \(loaded.file): the service would refuse this source (source_not_allowed): \(refusal)")
            throw Exit.invalid
        }
        var until: Int?
        if let expires {
            guard let seconds = Units.parseDuration(expires), seconds > 0 else {
                printError("error: --expires expects a duration such as 1h or 7d, got '\(expires)'")
                throw Exit.invalid
            }
            until = Int(Date().timeIntervalSince1970 + seconds)
        }
        let keys = try requiredKeys(file: keysFile)
        if header, !info {
            printError("error: --header goes with --info (the facts of the source's header)")
            throw Exit.invalid
        }
        if info {
            guard variant == nil, values.isEmpty else {
                printError("error: --info signs the source's facts, which take no variant or parameters")
                throw Exit.invalid
            }
            let path = ServeRequest.path(pipeline: loaded.name, variant: nil, source: source, parameters: header ? ["facts": "header"] : [:],
                                         expires: until,
                                         version: sourceVersion)
            print(base + ServeRequest.infoPrefix + keys.sign(ServeRequest.infoSigned(path)) + path)
            return
        }
        let path = ServeRequest.path(pipeline: loaded.name, variant: variant, source: source, parameters: values, expires: until,
                                     version: sourceVersion)
        print(base + "/" + keys.sign(path) + path)
    }
}
