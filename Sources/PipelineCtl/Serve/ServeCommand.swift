import ArgumentParser
import Foundation
import Hummingbird
import Logging
import PipelineHummingbird
import PipelineService
import PipelineKit
import ServiceLifecycle

struct Serve: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "serve",
        abstract: "Serve pipelines as an on-demand image service.",
        discussion: helpText("""
            Every pipeline file named (or every *.yaml in a directory named) is served under its
            name: GET /SIGNATURE/PIPELINE[/VARIANT]/SOURCE[?PARAM=VALUE...]. The source is a URL or
            path, plain, percent-encoded or 'b64:' and base64url. `pipelinectl sign` prints the
            path to request. Keys come from PIPELINECTL_KEYS (ID:HEX,ID:HEX; the first signs, all
            verify) or --keys-file. Also: /livez, /readyz, /metrics.

            On SIGTERM /readyz answers 503, requests in flight finish (within --grace), exit 0.

            Examples:
              export PIPELINECTL_KEYS=main:$(openssl rand -hex 32)
              pipelinectl serve pipelines/ --listen 0.0.0.0:8080
              pipelinectl serve pipelines/thumbnails.yaml --allow-unsigned
            """))

    @Argument(help: "Pipeline files, or directories of them, to serve (each under its name).")
    var pipelines: [String]

    @Option(help: "Address and port to listen on (port 0: any free port, printed at start).")
    var listen: String = "127.0.0.1:8080"

    @Option(help: "A file of signing keys, one ID:HEX per line (default: PIPELINECTL_KEYS).")
    var keysFile: String?

    @Flag(help: "Serve requests without checking signatures. For development only: anyone can make the service work.")
    var allowUnsigned = false

    @Option(help: "Requests processed at once (default: one per CPU the process may use, as --workers).")
    var jobs: Int?

    @Option(help: "Requests that may wait for a job; past jobs + queue, 429 at once (default: 64 per job, at least 128).")
    var queue: Int?

    @Option(help: "Longest a request waits for a job place: past it, 429 (0: no limit). A request whose wait, expected from recent jobs' times and the clients waiting, is longer is refused at once.")
    var queueWait: String = "5s"

    @Option(help: "Longest time a request may take, waiting included (then 504).")
    var timeout: String = "30s"

    @Option(help: "CPU workers for decode, process and encode (default: one per CPU the process may use, counting its affinity mask and cgroup CPU quota; each pinned to a CPU of its own when they match the mask).")
    var workers: Int?

    @Option(help: "Memory decodes in progress may take together, estimated from each header.")
    var decodeMemory: String = "200MiB"

    @Option(help: "Outputs larger than this are sent from a temporary file rather than kept in memory while they are sent.")
    var spoolThreshold: String = "32MiB"

    @Option(help: ArgumentHelp("Deprecated and ignored: outputs are no longer kept in a response store (see --spool-threshold).", visibility: .hidden))
    var responseMemory: String?

    @Option(help: "After SIGTERM, how long requests in flight may take before the service exits anyway (exit 1).")
    var grace: String = "25s"

    @Option(help: "After SIGTERM, how long to keep accepting requests while /readyz says 503 (load balancers notice).")
    var drainDelay: String = "0s"

    @Option(help: "Nice value of the threads that read, parse and write HTTP (0-19; 0: level with image work). Under overload, image work then keeps more of the cores and requests already accepted finish sooner.")
    var httpNice: Int = 10

    @Option(help: "Longest time a connection may take to send a request's head, from its opening (a slow header is closed at it).")
    var headerTimeout: String = "10s"

    @Option(help: "Longest time a request's body may take after its head.")
    var bodyTimeout: String = "30s"

    @Option(help: "How long a kept-alive connection may wait for its next request.")
    var idleTimeout: String = "60s"

    @Option(help: "Open connections at most; past it the oldest idle ones are closed to make room, or, when every one is in a request, a new one is answered 503 (default: 4096, lowered to fit the open-file limit).")
    var maxConnections: Int?

    @Option(name: .customLong("trusted-proxy"), help: "The address of a proxy in front (repeatable): from it, X-Forwarded-For names the client that places are shared by.")
    var trustedProxies: [String] = []

    @Option(help: "A second address for /metrics, /livez and /readyz (HOST:PORT); /metrics then leaves the public port.")
    var metricsListen: String?

    @Flag(inversion: .prefixedNo, help: "One JSON line per request on standard output.")
    var accessLog = true

    @Option(help: "Log level: trace, debug, info, notice, warning, error, critical.")
    var logLevel: Logger.Level = .warning

    func validate() throws {
        if pipelines.isEmpty { throw ValidationError("name at least one pipeline file or directory") }
        if let jobs, jobs < 1 { throw ValidationError("--jobs must be at least 1") }
        if let queue, queue < 0 { throw ValidationError("--queue must be 0 or more") }
        if let workers, workers < 1 { throw ValidationError("--workers must be at least 1") }
        if !(0...19).contains(httpNice) { throw ValidationError("--http-nice must be 0 to 19, got \(httpNice)") }
        if let maxConnections, maxConnections < 1 { throw ValidationError("--max-connections must be at least 1") }
        for (name, value) in [("--timeout", timeout), ("--queue-wait", queueWait), ("--grace", grace), ("--drain-delay", drainDelay)] where Units.parseDuration(value) == nil {
            throw ValidationError("\(name) expects a duration such as 30s or 2m, got '\(value)'")
        }
        for (name, value) in [("--header-timeout", headerTimeout), ("--body-timeout", bodyTimeout), ("--idle-timeout", idleTimeout)]
            where (Units.parseDuration(value) ?? 0) <= 0 {
            throw ValidationError("\(name) expects a duration above 0 such as 10s, got '\(value)'")
        }
        for (name, value) in [("--decode-memory", decodeMemory), ("--spool-threshold", spoolThreshold)] where (Units.parseSize(value) ?? 0) < 1 {
            throw ValidationError("\(name) expects a size such as 64MiB, got '\(value)'")
        }
        _ = try ListenAddress(listen)
        if let metricsListen { _ = try ListenAddress(metricsListen, option: "--metrics-listen") }
        for proxy in trustedProxies where !proxy.contains(where: { $0 == "." || $0 == ":" }) {
            throw ValidationError("--trusted-proxy expects an IP address such as 10.0.0.5 or fd00::1, got '\(proxy)'")
        }
    }

    func run() async throws {
        let logLevel = self.logLevel
        LoggingSystem.bootstrap({ label, provider in
            JSONLogHandler(label: label, logLevel: logLevel, metadataProvider: provider)
        }, metadataProvider: Telemetry.logMetadata)
        if responseMemory != nil { printError("warning: --response-memory is ignored: outputs go straight to their response (see --spool-threshold)") }
        let keys = try loadKeys()
        let settings = ServeSettings(command: self)
        let library = try await ServiceSetup.make(files: try ServiceSetup.pipelineFiles(pipelines), keys: keys, settings: settings)
        try await ServiceHTTP(library: library, settings: settings, accessLog: accessLog).run()
    }

    /// The signing keys; `nil` with --allow-unsigned (said loudly). Exits 2 without either.
    func loadKeys() throws -> SigningKeys? {
        if allowUnsigned {
            printError("WARNING: --allow-unsigned: signatures are not checked; anyone who can reach this service can make it fetch and resize. Never use it in production.")
            return nil
        }
        return try requiredKeys(file: keysFile, otherwise: ", or --allow-unsigned for development")
    }
}

/// The keys of `--keys-file`, else of `PIPELINECTL_KEYS`; exits 2 saying why when there are none
/// or they are malformed (`otherwise` ends the message: another way out).
func requiredKeys(file: String?, otherwise: String = "") throws -> SigningKeys {
    do {
        guard let keys = try SigningKeys.load(file: file, environment: ProcessInfo.processInfo.environment) else {
            printError("error: no signing keys: set \(SigningKeys.environmentVariable) (ID:HEX,...) or --keys-file" + otherwise)
            throw Exit.invalid
        }
        return keys
    } catch let failure as PipelineError {
        printError("error: \(failure.message)")
        throw Exit.invalid
    }
}

/// The options the service runs with.
struct ServeSettings: Sendable {
    var listen: ListenAddress
    var jobs: Int
    var queue: Int
    /// Longest expected queue wait in seconds (`--queue-wait`; 0: no such limit).
    var queueWait: Double
    var timeout: Double
    var workers: Int
    var decodeMemory: Int
    var spoolThreshold: Int
    var grace: Double
    var drainDelay: Double
    /// Nice value for the threads that answer HTTP (see `--http-nice`).
    var httpNice: Int
    /// Connection deadlines and cap (the cap before it is fitted to the open-file limit).
    var connections: ConnectionLimits
    /// Whether `--max-connections` was given (then it is not lowered silently).
    var connectionCapGiven: Bool
    /// `--metrics-listen`: the operations port, when apart from the public one.
    var metricsListen: ListenAddress?
    /// `--trusted-proxy`: peers whose X-Forwarded-For names the client.
    var trustedProxies: Set<String>

    init(command: Serve) {
        listen = (try? ListenAddress(command.listen)) ?? ListenAddress(host: "127.0.0.1", port: 8080)
        let cores = UsableCores.count
        jobs = command.jobs ?? cores
        queue = command.queue ?? max(128, 64 * jobs)
        queueWait = Units.parseDuration(command.queueWait) ?? 5
        timeout = Units.parseDuration(command.timeout) ?? 30
        workers = command.workers ?? cores
        decodeMemory = Units.parseSize(command.decodeMemory) ?? 200 << 20
        spoolThreshold = Units.parseSize(command.spoolThreshold) ?? 32 << 20
        grace = Units.parseDuration(command.grace) ?? 25
        drainDelay = Units.parseDuration(command.drainDelay) ?? 0
        httpNice = command.httpNice
        connections = ConnectionLimits(header: Units.parseDuration(command.headerTimeout) ?? 10,
                                       body: Units.parseDuration(command.bodyTimeout) ?? 30,
                                       idle: Units.parseDuration(command.idleTimeout) ?? 60,
                                       cap: command.maxConnections ?? 4096)
        connectionCapGiven = command.maxConnections != nil
        metricsListen = command.metricsListen.flatMap { try? ListenAddress($0, option: "--metrics-listen") }
        trustedProxies = Set(command.trustedProxies)
    }
}

/// `HOST:PORT`, `[V6]:PORT` or `:PORT` (every address).
struct ListenAddress: Sendable {
    let host: String
    let port: Int

    init(host: String, port: Int) {
        self.host = host
        self.port = port
    }

    init(_ text: String, option: String = "--listen") throws {
        guard let colon = text.lastIndex(of: ":"), let port = Int(text[text.index(after: colon)...]), (0...65535).contains(port) else {
            throw ValidationError("\(option) expects HOST:PORT (127.0.0.1:8080, 0.0.0.0:8080, :8080), got '\(text)'")
        }
        var host = String(text[..<colon])
        if host.hasPrefix("["), host.hasSuffix("]") { host = String(host.dropFirst().dropLast()) }
        self.host = host.isEmpty ? "0.0.0.0" : host
        self.port = port
    }
}

/// Loads the pipeline files into the library the service runs (one set of workers and one
/// decode memory budget for every preset).
enum ServiceSetup {
    /// Files named, and the `*.yaml`/`*.yml` files of directories named (sorted), as
    /// ``ImagePipelines`` reads them; a directory without any is an error (exit 2).
    static func pipelineFiles(_ arguments: [String]) throws -> [String] {
        do { return try ImagePipelines.files(arguments) } catch let empty as PipelineLoadError {
            printError("error: " + empty.diagnostics.map { "\($0.file): \($0.message)" }.joined(separator: "\n"))
            throw Exit.invalid
        }
    }

    static func make(files: [String], keys: SigningKeys?, settings: ServeSettings) async throws -> ImagePipelines {
        var options = ImagePipelines.Options()
        options.workers = settings.workers
        options.decodeMemory = settings.decodeMemory
        options.itemTimeout = settings.timeout
        options.spoolThreshold = settings.spoolThreshold
        options.keys = keys
        options.logger = Logger(label: "pipelinectl")
        let library: ImagePipelines
        do {
            library = try ImagePipelines(paths: files.map { PipelineFile.locate($0) ?? $0 }, registry: PipelineCtl.registry, options: options)
        } catch let invalid as PipelineLoadError {
            printError(invalid.description)
            throw Exit.invalid
        }
        var invalid = false
        for (name, runner) in library.baseRunners.sorted(by: { $0.key < $1.key }) {
            if let dataCache = runner.dataCacheStage, let problem = await dataCache.preflight() {
                printError("error: \(library.pipelines[name]!.file): data cache: \(problem.message)")
                invalid = true
            }
        }
        if invalid { throw Exit.invalid }
        return library
    }
}
