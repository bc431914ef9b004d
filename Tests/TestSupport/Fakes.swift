import Foundation
import PipelineKit
import Synchronization

/// In-memory stand-ins for the stage slots the scripted stages leave out (the data cache, the
/// image cache, the list, the report), for the engine's tests: no disk, no network, no codec.
/// Each logs what it was asked to the shared ``EventLog`` (`cache hit KEY`, `cache miss KEY`,
/// `cache stored KEY`, `image hit KEY`, `image stored KEY`, `settled TEXT STATUS`, `report item
/// TEXT STATUS`), and keeps its contents in an object the test holds, so that a second runner
/// made by the same test finds what the first stored.
public final class Fakes: Sendable {
    public let log: EventLog
    /// The data cache's entries, by key.
    public let dataEntries = Mutex<[String: CachedEntry]>([:])
    /// Whether entries read back are fresh (`false`: every entry is stale, to be revalidated).
    public let entriesAreFresh = Atomic(true)
    /// The image cache's images, by key.
    public let images = Mutex<[String: PipelineImage]>([:])
    /// What the report was given: the run header's pipeline, each item, the summary.
    public let reported = Mutex<(header: RunHeader?, items: [ItemResult], summary: RunSummary?)>((nil, [], nil))

    public init(log: EventLog) { self.log = log }

    /// The `fake` data cache (`outputs: true` stores processed outputs as well as originals).
    public func dataCache(storesOutputs: Bool) -> FakeDataCache { FakeDataCache(fakes: self, storesOutputs: storesOutputs) }

    /// The `fake` image cache.
    public var imageCache: FakeImageCache { FakeImageCache(fakes: self) }

    /// The `fake` report.
    public var report: FakeReport { FakeReport(fakes: self) }

    /// The plugins, to register beside ``ScriptedStages``'s: `data_cache: fake`, `image_cache:
    /// fake`, the `fake` report.
    public var plugins: [Plugin] {
        [
            .dataCache(PluginSpec(name: "fake", summary: "An in-memory data cache for engine tests.",
                                  options: [.bool("outputs", default: false, doc: "Store processed outputs too.")])) { options in
                self.dataCache(storesOutputs: options.bool("outputs") ?? false)
            },
            .imageCache(PluginSpec(name: "fake", summary: "An in-memory image cache for engine tests.")) { _ in self.imageCache },
            .report(PluginSpec(name: "fake", summary: "Collects the report in memory.")) { _ in self.report },
        ]
    }
}

/// An in-memory data cache: entries as ``Fakes/dataEntries`` holds them.
public struct FakeDataCache: DataCaching {
    let fakes: Fakes
    public let storesOutputs: Bool

    public func entry(for key: String) async throws -> CachedEntry? {
        guard var entry = fakes.dataEntries.withLock({ $0[key] }) else {
            fakes.log.record("cache miss \(key)")
            return nil
        }
        entry.isFresh = fakes.entriesAreFresh.load(ordering: .relaxed)
        fakes.log.record("cache hit \(key)")
        return entry
    }

    public func store(_ data: LoadedData, for key: String, output: OutputStamp?) async throws {
        // The bytes, read now: a loaded file may be a window on a file that changes later.
        let copy = LoadedData(data: data.data, contentType: data.contentType)
        fakes.dataEntries.withLock { $0[key] = CachedEntry(data: copy, isFresh: true, output: output) }
        fakes.log.record("cache stored \(key)")
    }

    @discardableResult
    public func remove(_ key: String) async -> Bool { fakes.dataEntries.withLock { $0.removeValue(forKey: key) != nil } }
}

/// An in-memory image cache: images as ``Fakes/images`` holds them.
public struct FakeImageCache: ImageCaching {
    let fakes: Fakes

    public func image(for key: String) -> PipelineImage? {
        let image = fakes.images.withLock { $0[key] }
        fakes.log.record(image == nil ? "image miss \(key)" : "image hit \(key)")
        return image
    }

    public func store(_ image: PipelineImage, for key: String) {
        fakes.images.withLock { $0[key] = image }
        fakes.log.record("image stored \(key)")
    }
}

/// A report kept in ``Fakes/reported``.
public struct FakeReport: ReportWriting {
    let fakes: Fakes

    public func begin(_ run: RunHeader) throws { fakes.reported.withLock { $0.header = run } }

    public func item(_ item: ItemResult) throws {
        fakes.reported.withLock { $0.items.append(item) }
        fakes.log.record("report item \(item.source) \(item.status.rawValue)")
    }

    public func finish(summary: RunSummary, statistics: RunStatistics) throws {
        fakes.reported.withLock { $0.summary = summary }
    }
}

/// A list that hands out the sources the test gives it, as they come (a queue, say): the cursor
/// waits for the next ``add(_:)``, and ends after ``close()``. Every settled item is logged
/// (`settled TEXT STATUS`), as a queue would acknowledge or release it.
public final class FakeList: SourceListing, SourceCursor, Sendable {
    private struct State {
        var waiting: [Source] = []
        var closed = false
        var reader: CheckedContinuation<Source?, Never>?
        var next = 1
    }
    private let state = Mutex(State())
    public let log: EventLog

    public init(log: EventLog) { self.log = log }

    public var name: String { "fake list" }
    public var baseDirectory: String { "/" }
    public var readsAhead: Bool { false }

    /// Adds sources to the list (each `scripted://NAME`), in order.
    public func add(_ names: String...) {
        for name in names {
            let handOver = state.withLock { state -> (CheckedContinuation<Source?, Never>, Source)? in
                let source = Source(text: "scripted://" + name, index: state.next)
                state.next += 1
                guard let reader = state.reader else {
                    state.waiting.append(source)
                    return nil
                }
                state.reader = nil
                return (reader, source)
            }
            if let (reader, source) = handOver { reader.resume(returning: source) }
        }
    }

    /// Ends the list once what was added has been read.
    public func close() {
        let reader = state.withLock { state -> CheckedContinuation<Source?, Never>? in
            state.closed = true
            defer { state.reader = nil }
            return state.waiting.isEmpty ? state.reader : nil
        }
        reader?.resume(returning: nil)
    }

    public func open() async throws -> any SourceCursor { self }

    public func next() async throws -> Source? {
        await withCheckedContinuation { continuation in
            let ready = state.withLock { state -> Source?? in
                if !state.waiting.isEmpty { return .some(state.waiting.removeFirst()) }
                if state.closed { return .some(nil) }
                state.reader = continuation
                return nil
            }
            if let ready { continuation.resume(returning: ready) }
        }
    }

    public func settle(_ source: Source, as result: ItemResult) async {
        log.record("settled \(source.text) \(result.status.rawValue)")
    }
}
