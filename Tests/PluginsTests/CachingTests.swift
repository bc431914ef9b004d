import FlyingFox
import Foundation
@testable import PipelineKit
import Plugins
import Synchronization
import Testing
import TestImages

/// A clock tests move by hand.
final class TestClock: Sendable {
    private let current = Mutex(Date(timeIntervalSince1970: 1_800_000_000))
    var now: @Sendable () -> Date { { [self] in current.withLock { $0 } } }
    func advance(_ seconds: Double) { current.withLock { $0 += seconds } }
}

/// The data cache inside real runs: a real loopback server that answers conditional requests and
/// counts them, real files on disk, the real decoder and encoders; only the clock is injected.
@Suite(.serialized) struct CachingTests {
    let clock = TestClock()

    /// The built-ins, with `disk` reading `clock`, and a processor that counts its runs.
    var registry: PluginRegistry {
        var registry = PluginRegistry()
        for plugin in BuiltIns.plugins where plugin.spec.name != "disk" { try! registry.register(plugin) }
        let clock = self.clock
        try! registry.register(Plugin.dataCache(DiskDataCache.spec) { try DiskDataCache(options: $0, now: clock.now) })
        try! registry.register(CountingProcessor.plugin)
        return registry
    }

    struct Run {
        let summary: RunSummary
        let items: [ItemResult]
        subscript(_ index: Int) -> ItemResult { items.first { $0.index == index }! }
    }

    func run(_ yaml: String, lines: [String], output: URL, onItem: @escaping @Sendable (ItemResult) -> Void = { _ in }) async throws -> Run {
        let (pipeline, diagnostics) = PipelineFile.parse(text: yaml, file: "cache.yaml", registry: registry)
        guard let pipeline else { throw PipelineValidationError(diagnostics: diagnostics, source: yaml) }
        var options = RunOptions()
        options.outputDirectory = output.path
        let runner = try PipelineRunner(pipeline: pipeline, registry: registry, options: options)
        let collected = Mutex<[ItemResult]>([])
        let sources = lines.enumerated().map { Source(text: $0.element, index: $0.offset + 1) }
        let summary = try await runner.run(AsyncStream { continuation in
            for source in sources { continuation.yield(source) }
            continuation.finish()
        }) { item in
            onItem(item)
            collected.withLock { $0.append(item) }
        }
        return Run(summary: summary, items: collected.withLock { $0 }.sorted { $0.index < $1.index })
    }

    func pipeline(cache: URL, options: String = "", processors: String = "[ { resize: { width: 64 } } ]") -> String {
        """
        loader:
          http: { allow_loopback: true, retry_attempts: 1 }
        data_cache:
          disk: { path: \(cache.path)\(options.isEmpty ? "" : ", " + options) }
        processors: \(processors)
        encoder: png
        """
    }

    /// Entry files in a cache directory (not temporary files, not last-run.json).
    func entryFiles(_ cache: URL) throws -> [String] {
        try FileManager.default.subpathsOfDirectory(atPath: cache.path)
            .filter { $0.contains("/") && !($0 as NSString).lastPathComponent.hasPrefix(".") && $0.count > 10 }
    }

    @Test func freshEntryIsUsedWithoutARequest() async throws {
        let server = try await TestServer.start()
        let photo = CacheableResource(body: try Fixtures.jpeg(200, 100), headers: ["Cache-Control": "max-age=3600", "ETag": "\"v1\""])
        server.serve("/a.jpg", photo)
        let cache = try Fixtures.temporaryDirectory("cache"), out = try Fixtures.temporaryDirectory("out")
        let first = try await run(pipeline(cache: cache), lines: [server.url("/a.jpg")], output: out)
        clock.advance(3000)
        let second = try await run(pipeline(cache: cache), lines: [server.url("/a.jpg")], output: out)
        #expect(first[1].cacheData == .miss)
        #expect(second[1].status == .kept && second[1].cacheData == .hit)
        #expect(photo.fullResponses == 1 && photo.notModifiedResponses == 0)
        await server.stop()
    }

    @Test func staleEntryIsRevalidatedAndA304ReusesTheBody() async throws {
        let server = try await TestServer.start()
        let photo = CacheableResource(body: try Fixtures.jpeg(200, 100), headers: ["Cache-Control": "max-age=60", "ETag": "\"v1\""])
        server.serve("/a.jpg", photo)
        let cache = try Fixtures.temporaryDirectory("cache"), out = try Fixtures.temporaryDirectory("out")
        _ = try await run(pipeline(cache: cache), lines: [server.url("/a.jpg")], output: out)
        clock.advance(120)
        let second = try await run(pipeline(cache: cache), lines: [server.url("/a.jpg")], output: out)
        #expect(second[1].status == .kept && second[1].cacheData == .revalidated && second[1].width == 64)
        #expect(photo.fullResponses == 1 && photo.notModifiedResponses == 1)
        #expect(photo.conditionalHeaders.last == ["If-None-Match": "\"v1\""])
        // The 304 renewed the entry's freshness: within the next 60 s, no request at all.
        clock.advance(30)
        let third = try await run(pipeline(cache: cache), lines: [server.url("/a.jpg")], output: out)
        #expect(third[1].cacheData == .hit)
        #expect(photo.conditionalHeaders.count == 2)
        await server.stop()
    }

    @Test func lastModifiedAloneIsAValidatorToo() async throws {
        let server = try await TestServer.start()
        let modified = "Wed, 21 Oct 2026 07:28:00 GMT"
        let photo = CacheableResource(body: try Fixtures.jpeg(200, 100), headers: ["Cache-Control": "no-cache", "Last-Modified": modified])
        server.serve("/a.jpg", photo)
        let cache = try Fixtures.temporaryDirectory("cache"), out = try Fixtures.temporaryDirectory("out")
        _ = try await run(pipeline(cache: cache), lines: [server.url("/a.jpg")], output: out)
        // no-cache: stored, but checked before every use, even a second later.
        clock.advance(1)
        let second = try await run(pipeline(cache: cache), lines: [server.url("/a.jpg")], output: out)
        #expect(second[1].cacheData == .revalidated)
        #expect(photo.conditionalHeaders.last == ["If-Modified-Since": modified])
        #expect(photo.fullResponses == 1 && photo.notModifiedResponses == 1)
        await server.stop()
    }

    @Test func changedSourceIsStoredAgainAfterRevalidation() async throws {
        let server = try await TestServer.start()
        let photo = CacheableResource(body: try Fixtures.jpeg(200, 100), headers: ["Cache-Control": "max-age=60", "ETag": "\"v1\""])
        server.serve("/a.jpg", photo)
        let cache = try Fixtures.temporaryDirectory("cache"), out = try Fixtures.temporaryDirectory("out")
        _ = try await run(pipeline(cache: cache), lines: [server.url("/a.jpg")], output: out)
        photo.update(body: try Fixtures.jpeg(100, 200), headers: ["Cache-Control": "max-age=60", "ETag": "\"v2\""])
        clock.advance(120)
        let second = try await run(pipeline(cache: cache), lines: [server.url("/a.jpg")], output: out)
        #expect(second[1].cacheData == .miss && second[1].width == 64 && second[1].height == 128)
        #expect(photo.fullResponses == 2)
        let third = try await run(pipeline(cache: cache), lines: [server.url("/a.jpg")], output: out)
        #expect(third[1].cacheData == .hit && third[1].height == 128)
        await server.stop()
    }

    @Test func noStoreIsNeverStored() async throws {
        let server = try await TestServer.start()
        let photo = CacheableResource(body: try Fixtures.jpeg(200, 100), headers: ["Cache-Control": "no-store", "ETag": "\"v1\""])
        server.serve("/a.jpg", photo)
        let cache = try Fixtures.temporaryDirectory("cache"), out = try Fixtures.temporaryDirectory("out")
        let first = try await run(pipeline(cache: cache, options: "store: all"), lines: [server.url("/a.jpg")], output: out)
        let second = try await run(pipeline(cache: cache, options: "store: all"), lines: [server.url("/a.jpg")], output: out)
        #expect(first[1].status == .ok && second[1].status == .kept)
        #expect(first[1].cacheData == .miss && second[1].cacheData == .miss)
        #expect(try entryFiles(cache).isEmpty)
        #expect(photo.fullResponses == 2 && photo.conditionalHeaders.allSatisfy(\.isEmpty))
        await server.stop()
    }

    @Test func expiresInThePastMeansStale() async throws {
        let server = try await TestServer.start()
        let photo = CacheableResource(body: try Fixtures.jpeg(200, 100), headers: [
            "Expires": "Thu, 01 Jan 1970 00:00:00 GMT", "ETag": "\"e\"",
        ])
        server.serve("/a.jpg", photo)
        let cache = try Fixtures.temporaryDirectory("cache"), out = try Fixtures.temporaryDirectory("out")
        _ = try await run(pipeline(cache: cache), lines: [server.url("/a.jpg")], output: out)
        let second = try await run(pipeline(cache: cache), lines: [server.url("/a.jpg")], output: out)
        #expect(second[1].cacheData == .revalidated)
        await server.stop()
    }

    @Test func ttlPolicyIgnoresHeadersAndExpiresWithTheClock() async throws {
        let server = try await TestServer.start()
        // The headers say "do not store"; policy ttl ignores them.
        let photo = CacheableResource(body: try Fixtures.jpeg(200, 100), headers: ["Cache-Control": "no-store", "ETag": "\"v1\""])
        server.serve("/a.jpg", photo)
        let cache = try Fixtures.temporaryDirectory("cache"), out = try Fixtures.temporaryDirectory("out")
        let yaml = pipeline(cache: cache, options: "policy: ttl, ttl: 1h")
        #expect(try await run(yaml, lines: [server.url("/a.jpg")], output: out)[1].cacheData == .miss)
        clock.advance(59 * 60)
        #expect(try await run(yaml, lines: [server.url("/a.jpg")], output: out)[1].cacheData == .hit)
        clock.advance(2 * 60)
        #expect(try await run(yaml, lines: [server.url("/a.jpg")], output: out)[1].cacheData == .miss)
        // Expired under ttl means fetched again, not revalidated.
        #expect(photo.fullResponses == 2 && photo.conditionalHeaders.allSatisfy(\.isEmpty))
        await server.stop()
    }

    @Test func withoutALifetimeFromTheServerTtlApplies() async throws {
        let server = try await TestServer.start()
        let photo = CacheableResource(body: try Fixtures.jpeg(200, 100), headers: ["ETag": "\"v1\""])
        server.serve("/a.jpg", photo)
        let cache = try Fixtures.temporaryDirectory("cache"), out = try Fixtures.temporaryDirectory("out")
        let yaml = pipeline(cache: cache, options: "ttl: 1d")
        _ = try await run(yaml, lines: [server.url("/a.jpg")], output: out)
        clock.advance(23 * 3600)
        #expect(try await run(yaml, lines: [server.url("/a.jpg")], output: out)[1].cacheData == .hit)
        clock.advance(2 * 3600)
        #expect(try await run(yaml, lines: [server.url("/a.jpg")], output: out)[1].cacheData == .revalidated)
        await server.stop()
    }

    @Test func corruptedAndTruncatedEntriesAreRefetchedNeverServed() async throws {
        let server = try await TestServer.start()
        let photo = CacheableResource(body: try Fixtures.jpeg(300, 200), headers: ["Cache-Control": "max-age=3600"])
        server.serve("/a.jpg", photo)
        let cache = try Fixtures.temporaryDirectory("cache"), out = try Fixtures.temporaryDirectory("out")
        let yaml = pipeline(cache: cache)
        _ = try await run(yaml, lines: [server.url("/a.jpg")], output: out)
        let entry = cache.appendingPathComponent(try #require(try entryFiles(cache).first))
        // One byte flipped in the middle of the stored body.
        var bytes = [UInt8](try Data(contentsOf: entry))
        bytes[bytes.count - 500] ^= 0x55
        try Data(bytes).write(to: entry)
        let afterFlip = try await run(yaml, lines: [server.url("/a.jpg")], output: out)
        #expect(afterFlip[1].status == .kept && afterFlip[1].cacheData == .miss && afterFlip[1].height == 43)
        #expect(photo.fullResponses == 2)
        // Cut short, as by a full disk.
        let whole = try Data(contentsOf: entry)
        try whole.prefix(whole.count / 2).write(to: entry)
        let afterCut = try await run(yaml, lines: [server.url("/a.jpg")], output: out)
        #expect(afterCut[1].status == .kept && afterCut[1].cacheData == .miss)
        #expect(photo.fullResponses == 3)
        // And the refetched entry is whole again.
        #expect(try await run(yaml, lines: [server.url("/a.jpg")], output: out)[1].cacheData == .hit)
        await server.stop()
    }

    @Test func sizeLimitHoldsThroughoutARunLargerThanTheLimit() async throws {
        let server = try await TestServer.start()
        for i in 0..<40 {
            var noise = Data(count: 100_000)
            noise.withUnsafeMutableBytes { for j in 0..<$0.count { $0[j] = UInt8(truncatingIfNeeded: (i * 7919 + j * 31) ^ (j >> 3)) } }
            server.serve("/blob\(i)", noise, contentType: "application/octet-stream")
        }
        let cache = try Fixtures.temporaryDirectory("cache")
        let (pipeline, diagnostics) = PipelineFile.parse(text: """
            loader:
              http: { allow_loopback: true, max_concurrent: 4 }
            data_cache:
              disk: { path: \(cache.path), size_limit: 1MB, sweep_to: 0.7 }
            encoder: png
            """, file: "fetch.yaml", registry: registry)
        #expect(diagnostics.isEmpty)
        var options = RunOptions()
        options.fetchOnly = true
        let runner = try PipelineRunner(pipeline: try #require(pipeline), registry: registry, options: options)
        let largest = Mutex(0)
        let lines = (0..<40).map { Source(text: server.url("/blob\($0)"), index: $0 + 1) }
        let summary = try await runner.run(AsyncStream { c in lines.forEach { c.yield($0) }; c.finish() }) { _ in
            let size = (try? FileManager.default.subpathsOfDirectory(atPath: cache.path))?.reduce(0) { sum, path in
                guard !(path as NSString).lastPathComponent.hasPrefix(".") else { return sum }
                let attributes = try? FileManager.default.attributesOfItem(atPath: cache.appendingPathComponent(path).path)
                return sum + ((attributes?[.type] as? FileAttributeType) == .typeRegular ? (attributes?[.size] as? Int ?? 0) : 0)
            } ?? 0
            largest.withLock { $0 = max($0, size) }
        }
        #expect(summary.ok == 40)
        #expect(largest.withLock { $0 } <= 1_000_000)
        #expect(largest.withLock { $0 } >= 600_000)
        await server.stop()
    }

    static let variants = """
        processors:
          - count: { tag: caching.shared }
        variants:
          small:
            processors: [ { count: { tag: caching.small } }, { resize: { width: 50 } } ]
            encoder: png
          large:
            processors: [ { count: { tag: caching.large } }, { resize: { width: WIDTH } } ]
            encoder: jpeg
        """

    func variantsPipeline(cache: URL, largeWidth: Int) -> String {
        """
        loader:
          http: { allow_loopback: true }
        data_cache:
          disk: { path: \(cache.path), store: all }
        """ + "\n" + Self.variants.replacingOccurrences(of: "WIDTH", with: "\(largeWidth)")
    }

    @Test func processedCacheReRunDoesNoRequestNoDecodeNoEncode() async throws {
        CountingProcessor.reset("caching.")
        let server = try await TestServer.start()
        let photo = CacheableResource(body: try Fixtures.jpeg(400, 300), headers: ["Cache-Control": "max-age=3600"])
        server.serve("/a.jpg", photo)
        let cache = try Fixtures.temporaryDirectory("cache"), out = try Fixtures.temporaryDirectory("out")
        let yaml = variantsPipeline(cache: cache, largeWidth: 200)
        let first = try await run(yaml, lines: [server.url("/a.jpg")], output: out)
        #expect(first[1].status == .ok && first[1].cacheData == .miss)
        let firstBytes = try first[1].outputs.map { try Data(contentsOf: URL(fileURLWithPath: $0)) }
        for path in first[1].outputs { try FileManager.default.removeItem(atPath: path) }
        CountingProcessor.reset("caching.")
        let second = try await run(yaml, lines: [server.url("/a.jpg")], output: out)
        #expect(second[1].status == .ok && second[1].cacheData == .processedHit)
        #expect(second[1].timings.decode == 0 && second[1].timings.encode == 0 && second[1].timings.process == 0)
        #expect(CountingProcessor.counts("caching.").isEmpty)
        #expect(photo.fullResponses == 1 && photo.conditionalHeaders.count == 1)
        #expect(second[1].width == 50 && second[1].height == 38)
        // The outputs are rewritten, byte for byte.
        #expect(try second[1].outputs.map { try Data(contentsOf: URL(fileURLWithPath: $0)) } == firstBytes)
        await server.stop()
    }

    @Test func changingOneOptionInvalidatesOnlyWhatItAffects() async throws {
        CountingProcessor.reset("caching.")
        let server = try await TestServer.start()
        let photo = CacheableResource(body: try Fixtures.jpeg(400, 300), headers: ["Cache-Control": "max-age=3600"])
        server.serve("/a.jpg", photo)
        let cache = try Fixtures.temporaryDirectory("cache"), out = try Fixtures.temporaryDirectory("out")
        _ = try await run(variantsPipeline(cache: cache, largeWidth: 200), lines: [server.url("/a.jpg")], output: out)
        CountingProcessor.reset("caching.")
        let changed = try await run(variantsPipeline(cache: cache, largeWidth: 120), lines: [server.url("/a.jpg")], output: out)
        #expect(changed[1].status == .ok)
        // The large variant's chain ran again; the small one's did not, and its stored output was used.
        #expect(CountingProcessor.counts("caching.") == ["caching.shared": 1, "caching.large": 1])
        #expect(changed[1].cacheData == .hit)  // its source bytes came from the cache (store: all)
        let large = try await Identified.file(try #require(changed[1].outputs.first { $0.hasSuffix(".jpg") }))
        #expect(large.width == 120)
        #expect(photo.fullResponses == 1)
        await server.stop()
    }

    @Test func processedOutputsFollowTheSourceWhenItChanges() async throws {
        let server = try await TestServer.start()
        let photo = CacheableResource(body: try Fixtures.jpeg(400, 300), headers: ["Cache-Control": "max-age=60", "ETag": "\"v1\""])
        server.serve("/a.jpg", photo)
        let cache = try Fixtures.temporaryDirectory("cache"), out = try Fixtures.temporaryDirectory("out")
        let yaml = pipeline(cache: cache, options: "store: processed")
        _ = try await run(yaml, lines: [server.url("/a.jpg")], output: out)
        clock.advance(120)
        // Stale, not modified: the stored output is used after one conditional request.
        let revalidated = try await run(yaml, lines: [server.url("/a.jpg")], output: out)
        #expect(revalidated[1].cacheData == .processedHit && photo.notModifiedResponses == 1)
        // Stale and changed: made again from the new bytes.
        photo.update(body: try Fixtures.jpeg(300, 400), headers: ["Cache-Control": "max-age=60", "ETag": "\"v2\""])
        clock.advance(120)
        let changed = try await run(yaml, lines: [server.url("/a.jpg")], output: out)
        #expect(changed[1].cacheData == .miss && changed[1].height == 85)
        // store: processed keeps no loaded bytes.
        #expect(try entryFiles(cache).count == 1)
        await server.stop()
    }

    @Test func localFilesOutputsAreCheckedAgainstTheFile() async throws {
        let input = try Fixtures.temporaryDirectory("in"), cache = try Fixtures.temporaryDirectory("cache")
        let out = try Fixtures.temporaryDirectory("out")
        let file = input.appendingPathComponent("p.jpg")
        try Fixtures.jpeg(400, 300).write(to: file)
        let yaml = pipeline(cache: cache, options: "store: all")
        #expect(try await run(yaml, lines: [file.path], output: out)[1].cacheData == .miss)
        let warm = try await run(yaml, lines: [file.path], output: out)
        #expect(warm[1].cacheData == .processedHit && warm[1].height == 48)
        try Fixtures.jpeg(300, 400).write(to: file)  // a new file under the same name
        let changed = try await run(yaml, lines: [file.path], output: out)
        #expect(changed[1].cacheData == .miss && changed[1].height == 85)
        // The loaded bytes of a local file are not copied into the cache; only outputs are.
        #expect(try entryFiles(cache).count == 1)
    }
}

@Suite struct CacheDirectivesTests {
    @Test func readsHTTPHeaders() {
        let fresh = CacheDirectives(httpHeaders: ["cache-control": "public, max-age=600", "age": "100", "etag": "\"x\""])
        #expect(fresh.maxAge == 500 && fresh.etag == "\"x\"" && !fresh.noStore && fresh.canRevalidate)
        let expires = CacheDirectives(httpHeaders: ["expires": "Sun, 22 Nov 2026 10:10:00 GMT", "date": "Sun, 22 Nov 2026 10:00:00 GMT"])
        #expect(expires.maxAge == 600)
        #expect(CacheDirectives(httpHeaders: ["expires": "0"]).maxAge == 0)
        #expect(CacheDirectives(httpHeaders: ["cache-control": "no-store"]).noStore)
        #expect(CacheDirectives(httpHeaders: ["cache-control": "no-cache"]).noCache)
        // max-age wins over Expires.
        #expect(CacheDirectives(httpHeaders: ["cache-control": "max-age=5", "expires": "0"]).maxAge == 5)
        #expect(CacheDirectives(httpHeaders: [:]).maxAge == nil)
    }
}
