import Foundation
import PipelineKit
import Synchronization

/// A log of what happened, that a test can wait on: `await log.wait { $0.count("started a") == 2 }`
/// suspends until the condition holds (never on the clock; a bound in seconds only stops a test
/// that would otherwise hang, and then fails it).
public final class EventLog: Sendable {
    private struct Waiter {
        let condition: @Sendable ([String]) -> Bool
        let continuation: CheckedContinuation<Bool, Never>
    }
    private struct State {
        var events: [String] = []
        var waiters: [UUID: Waiter] = [:]
    }
    private let state = Mutex(State())

    public init() {}

    /// Every event so far, in order.
    public var events: [String] { state.withLock { $0.events } }

    /// Records `event` and wakes the waiters whose condition now holds.
    public func record(_ event: String) {
        let ready = state.withLock { state -> [CheckedContinuation<Bool, Never>] in
            state.events.append(event)
            let events = state.events
            let due = state.waiters.filter { $0.value.condition(events) }
            for id in due.keys { state.waiters[id] = nil }
            return due.values.map(\.continuation)
        }
        for continuation in ready { continuation.resume(returning: true) }
    }

    /// How many times `event` happened.
    public func count(_ event: String) -> Int { state.withLock { $0.events.filter { $0 == event }.count } }

    /// Waits until `condition` holds for the events; false when `seconds` passed first (a test
    /// that waits must fail, not hang, if the engine is wrong).
    @discardableResult
    public func wait(atMost seconds: Double = 60, until condition: @escaping @Sendable ([String]) -> Bool) async -> Bool {
        let id = UUID()
        return await withCheckedContinuation { continuation in
            let now = state.withLock { state -> Bool in
                if condition(state.events) { return true }
                state.waiters[id] = Waiter(condition: condition, continuation: continuation)
                return false
            }
            if now { continuation.resume(returning: true); return }
            DispatchQueue.global().asyncAfter(deadline: .now() + seconds) { [self] in
                let waiter = state.withLock { $0.waiters.removeValue(forKey: id) }
                waiter?.continuation.resume(returning: false)
            }
        }
    }

    /// Waits until `event` happened `times` times.
    @discardableResult
    public func wait(for event: String, times: Int = 1, atMost seconds: Double = 60) async -> Bool {
        await wait(atMost: seconds) { $0.filter { $0 == event }.count >= times }
    }
}

/// An in-memory loader for `scripted://NAME` sources, driven by the test: each source answers with
/// the bytes it was given, fails as told, or is held until the test releases it (or its task is
/// cancelled). Every call is logged: `started NAME`, `finished NAME`, `cancelled NAME`.
public final class ScriptedLoader: DataLoading, Sendable {
    public enum Answer: Sendable {
        /// Answers with these bytes.
        case bytes(Data)
        /// Fails with this error.
        case fail(PipelineError)
        /// Waits until ``release(_:)`` (then answers with the bytes) or until cancelled.
        case hold(Data)
    }
    public let log = EventLog()
    private struct Held {
        let id: UUID
        let name: String
        let continuation: CheckedContinuation<Void, any Error>
    }
    private struct State {
        var answers: [String: Answer] = [:]
        var held: [Held] = []
        /// Releases that came before the load they release.
        var early: [String: Int] = [:]
    }
    private let state = Mutex(State())
    public let maxConcurrentLoads: Int

    public init(maxConcurrentLoads: Int = 8) { self.maxConcurrentLoads = maxConcurrentLoads }

    /// What `scripted://name` answers from now on.
    public func script(_ name: String, _ answer: Answer) { state.withLock { $0.answers[name] = answer } }

    /// Lets one held load of `name` finish (the oldest; or the next to come).
    public func release(_ name: String) {
        let held = state.withLock { state -> Held? in
            guard let index = state.held.firstIndex(where: { $0.name == name }) else {
                state.early[name, default: 0] += 1
                return nil
            }
            return state.held.remove(at: index)
        }
        held?.continuation.resume()
    }

    /// Loads of `name` begun so far.
    public func calls(_ name: String) -> Int { log.count("started \(name)") }

    public func load(_ source: Source) async throws -> LoadedData {
        let name = String(source.text.dropFirst("scripted://".count))
        log.record("started \(name)")
        switch state.withLock({ $0.answers[name] }) ?? .fail(PipelineError(.notFound, "nothing scripted for \(name)")) {
        case .bytes(let data):
            log.record("finished \(name)")
            return LoadedData(data: data)
        case .fail(let error):
            log.record("failed \(name)")
            throw error
        case .hold(let data):
            do { try await hold(name) } catch {
                log.record("cancelled \(name)")
                throw error
            }
            log.record("finished \(name)")
            return LoadedData(data: data)
        }
    }

    private func hold(_ name: String) async throws {
        let id = UUID()
        try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, any Error>) in
                let resume: Result<Void, any Error>? = state.withLock { state in
                    if Task.isCancelled { return .failure(CancellationError()) }
                    if state.early[name, default: 0] > 0 {
                        state.early[name]! -= 1
                        return .success(())
                    }
                    state.held.append(Held(id: id, name: name, continuation: continuation))
                    return nil
                }
                if let resume { continuation.resume(with: resume) }
            }
        } onCancel: {
            let held = state.withLock { state -> Held? in
                guard let index = state.held.firstIndex(where: { $0.id == id }) else { return nil }
                return state.held.remove(at: index)
            }
            held?.continuation.resume(throwing: CancellationError())
        }
    }
}

/// Pixels that are only a size: what the fake decoder makes, so engine tests need no codec.
public final class FakePixels: PixelStorage {
    public let byteCount: Int
    public init(width: Int, height: Int) { byteCount = width * height * 4 }
}

/// Scripted stages as plugins: the `scripted` loader (one shared instance the test drives), the
/// `fake` decoder (bytes `"WxH"` make an image of that size; anything else fails as
/// `decode_failed`), the `fake_half` processor (halves the size) and the `fake` encoder (writes
/// `"fake WxH"`). Each logs to the loader's log: `decoded NAME`, `encoded WxH`.
public enum ScriptedStages {
    /// With `fakes`, its data cache, image cache and report too (``Fakes/plugins``).
    public static func registry(_ loader: ScriptedLoader, fakes: Fakes? = nil) -> PluginRegistry {
        var registry = PluginRegistry()
        for plugin in fakes?.plugins ?? [] { try! registry.register(plugin) }
        let log = loader.log
        try! registry.register(.loader(PluginSpec(name: "scripted", summary: "Scripted loads for engine tests."),
                                       schemes: ["scripted"]) { _ in loader })
        try! registry.register(.decoder(PluginSpec(name: "fake", summary: "Sizes from text.")) { _ in FakeDecoder(log: log) })
        try! registry.register(.processor(PluginSpec(name: "fake_half", summary: "Halves the size.")) { _ in FakeHalf() })
        try! registry.register(.encoder(PluginSpec(name: "fake", summary: "Writes the size.")) { _ in FakeEncoder(log: log) })
        try! registry.register(.destination(PluginSpec(name: "files", summary: "Outputs as plain files."),
                                            schemes: [""]) { options in ScriptedDirectory(path: options.string("dir") ?? "out", log: log) })
        return registry
    }

    /// A pipeline of the scripted stages.
    public static let pipeline = """
        loader: scripted
        decoder: fake
        processors:
          - fake_half
        encoder: fake
        """
}

/// Decodes the text `WxH` into a fake image of that size.
public struct FakeDecoder: ImageDecoding {
    let log: EventLog
    public init(log: EventLog) { self.log = log }
    public func decode(_ data: LoadedData, hint: DecodeHint) throws -> PipelineImage {
        let text = String(decoding: data.data, as: UTF8.self)
        let parts = text.split(separator: "x").compactMap { Int($0) }
        guard parts.count == 2 else { throw PipelineError(.decodeFailed, "not a fake image: '\(text.prefix(20))'") }
        log.record("decoded \(text)")
        return PipelineImage(width: parts[0], height: parts[1], hasAlpha: false, sourceFormat: "FAKE",
                             storage: FakePixels(width: parts[0], height: parts[1]))
    }
}

/// Halves a fake image's size.
public struct FakeHalf: ImageProcessing {
    public init() {}
    public var identifier: String { "fake_half" }
    public func process(_ image: PipelineImage) throws -> PipelineImage {
        // Derived, as every processor's image must be: it keeps its source's identity and facts.
        image.derived(width: max(1, image.width / 2), height: max(1, image.height / 2), hasAlpha: false, frameCount: 1,
                      storage: FakePixels(width: image.width / 2, height: image.height / 2))
    }
}

/// Writes a fake image's size as text; fails on an empty image.
public struct FakeEncoder: ImageEncoding {
    let log: EventLog
    public init(log: EventLog) { self.log = log }
    public var fileExtension: String { "fake" }
    public var identifier: String { "fake" }
    public func encode(_ image: PipelineImage) throws -> Data {
        guard image.width > 0, image.height > 0 else { throw PipelineError(.encodeFailed, "nothing to encode: an empty image") }
        log.record("encoded \(image.width)x\(image.height)")
        return Data("fake \(image.width)x\(image.height)".utf8)
    }
}

/// Outputs as plain files in the output directory, for engine tests: every store is logged
/// (`wrote PATH`), and fingerprints are kept in this process's memory (by absolute path), so a
/// second run in the same test sees them.
public final class ScriptedDirectory: OutputDestination, Sendable {
    let log: EventLog
    let path: String
    private static let fingerprints = Mutex<[String: OutputFingerprint]>([:])

    public init(path: String, log: EventLog) {
        self.path = path
        self.log = log
    }

    public var localDirectory: String? { path }

    public func location(_ relative: String) -> String { path + "/" + relative }

    public func write(_ output: OutputFile) async throws {
        let target = location(output.relative)
        try AtomicFile.write(output.data, to: target)
        Self.fingerprints.withLock { $0[target] = output.fingerprint }
        log.record("wrote \(output.relative)")
    }

    public func stored(_ relative: String) async throws -> ExistingOutput? {
        let target = location(relative)
        guard FileManager.default.fileExists(atPath: target) else { return nil }
        return ExistingOutput(fingerprint: Self.fingerprints.withLock { $0[target] })
    }

    public func read(_ relative: String) async throws -> Data? { FileManager.default.contents(atPath: location(relative)) }
}

/// A run of scripted sources: the summary and each item, by line.
public struct ScriptedRun: Sendable {
    public let summary: RunSummary
    public let items: [ItemResult]
    /// The output directory.
    public let output: URL
    /// The item of line `index`.
    public subscript(_ index: Int) -> ItemResult { items.first { $0.index == index }! }
}

extension ScriptedStages {
    /// A runner of `yaml` (by default ``pipeline``) on the scripted stages (and `fakes`), writing
    /// into a fresh temporary directory.
    public static func runner(_ loader: ScriptedLoader, fakes: Fakes? = nil, yaml: String = pipeline,
                              configure: (inout RunOptions) -> Void = { _ in }) throws -> PipelineRunner {
        let registry = registry(loader, fakes: fakes)
        let (parsed, diagnostics) = PipelineFile.parse(text: yaml, file: "scripted.yaml", registry: registry)
        guard let parsed else { throw PipelineError(.invalidOption, diagnostics.map(\.description).joined(separator: "\n")) }
        var options = RunOptions()
        options.outputDirectory = try Fixtures.temporaryDirectory("scripted").path
        configure(&options)
        return try PipelineRunner(pipeline: parsed, registry: registry, options: options)
    }

    /// Runs `names` through `runner` as the lines of a list (`scripted://NAME`, lines 1...).
    public static func run(_ runner: PipelineRunner, _ names: [String]) async throws -> ScriptedRun {
        let items = Mutex<[ItemResult]>([])
        let sources = names.enumerated().map { Source(text: "scripted://" + $0.element, index: $0.offset + 1) }
        let summary = try await runner.run(AsyncStream { continuation in
            for source in sources { continuation.yield(source) }
            continuation.finish()
        }) { item in items.withLock { $0.append(item) } }
        return ScriptedRun(summary: summary, items: items.withLock { $0 }.sorted { $0.index < $1.index },
                           output: URL(fileURLWithPath: runner.outputDirectory))
    }
}
