import Foundation
import HTTPTypes
import Hummingbird
import Logging
import NIOCore
import PipelineHummingbird
import PipelineService
import PipelineKit
import Prometheus
import ServiceLifecycle
import Synchronization

/// A worker's `/livez`, `/readyz` and `/metrics` (`pipelinectl work --listen`): the operations
/// routes `serve` has too (``OperationsRoutes``), on a Hummingbird router of their own.
/// `/readyz` answers 200 once the queue is open and 503 from a stop signal on; `/metrics` holds
/// the run's item metrics and the queue's depth, asked of the queue at most every 5 seconds.
final class WorkEndpoints: Sendable {
    let list: any SourceListing
    let metrics: RunMetrics
    let address: ListenAddress
    private let stopping = Atomic(false)
    private let lastDepth = Mutex<(at: ContinuousClock.Instant, depth: ListDepth?)?>(nil)
    private let server = Mutex<Task<Void, Never>?>(nil)

    init(list: any SourceListing, metrics: RunMetrics, address: ListenAddress) {
        self.list = list
        self.metrics = metrics
        self.address = address
    }

    /// Starts serving; returns once the port is bound (the address printed on standard output),
    /// or throws when it cannot be.
    func start() async throws {
        let bound = AsyncStream<Result<Int, any Error>>.makeStream()
        let router = Router()
        OperationsRoutes(notReady: "stopping\n", ready: { [self] in !stopping.load(ordering: .relaxed) }) { [self] in
            metrics.exposition(depth: await currentDepth(), queue: list.name)
        }.add(to: router)
        var logger = Logger(label: "pipelinectl.http")
        logger.logLevel = .critical
        let app = Application(
            router: router,
            configuration: ApplicationConfiguration(address: .hostname(address.host, port: address.port),
                                                    serverName: "pipelinectl/\(PipelineCtl.version)"),
            onServerRunning: { [address] channel in
                bound.continuation.yield(.success(channel.localAddress?.port ?? address.port))
            },
            logger: logger)
        let task = Task {
            do { try await app.runService(gracefulShutdownSignals: []) } catch {
                bound.continuation.yield(.failure(error))
            }
            bound.continuation.finish()
        }
        server.withLock { $0 = task }
        for await result in bound.stream {
            switch result {
            case .success(let port):
                FileHandle.standardOutput.write(Data("listening on http://\(address.host):\(port) (/livez, /readyz, /metrics)\n".utf8))
                return
            case .failure(let error):
                throw PipelineError(.invalidOption, "--listen \(address.host):\(address.port): cannot listen: \(error)")
            }
        }
        throw PipelineError(.invalidOption, "--listen \(address.host):\(address.port): the server ended at once")
    }

    /// From a stop signal on, `/readyz` answers 503.
    func stop() { stopping.store(true, ordering: .relaxed) }

    /// Stops serving.
    func close() { server.withLock { $0?.cancel() } }

    /// The queue's depth, asked again when the last answer is older than 5 seconds.
    private func currentDepth() async -> ListDepth? {
        if let last = lastDepth.withLock({ $0 }), ContinuousClock.now - last.at < .seconds(5) { return last.depth }
        let depth = await list.depth()
        lastDepth.withLock { $0 = (ContinuousClock.now, depth) }
        return depth
    }
}
