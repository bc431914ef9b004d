import Foundation
import MagickKit
import PipelineKit
@testable import Plugins
import Synchronization
import Testing
import TestImages

@Suite struct DiskDataCacheTests {
    @Test func storesAndReads() async throws {
        let dir = try Fixtures.temporaryDirectory()
        let cache = DiskDataCache(path: dir.path, sizeLimit: 10_000_000)
        #expect(await cache.data(for: "k") == nil)
        try await cache.store(LoadedData(data: Data("hello".utf8), contentType: "image/png"), for: "k")
        let hit = await cache.data(for: "k")
        #expect(hit?.data == Data("hello".utf8))
        #expect(hit?.contentType == "image/png")
        // No temporary files left behind.
        let shard = dir.appendingPathComponent(String(Hashing.sha256Hex("k").prefix(2))).path
        #expect(try FileManager.default.contentsOfDirectory(atPath: shard) == [Hashing.sha256Hex("k")])
    }

    @Test func corruptedEntryIsDroppedNeverServed() async throws {
        let dir = try Fixtures.temporaryDirectory()
        let cache = DiskDataCache(path: dir.path, sizeLimit: 10_000_000)
        try await cache.store(LoadedData(data: Data(repeating: 7, count: 1000)), for: "k")
        let path = cache.entryPath(for: "k")
        var bytes = [UInt8](try Data(contentsOf: URL(fileURLWithPath: path)))
        bytes[bytes.count - 10] ^= 0xFF
        try Data(bytes).write(to: URL(fileURLWithPath: path))
        #expect(await cache.data(for: "k") == nil)
        #expect(!FileManager.default.fileExists(atPath: path))
    }

    /// An entry checked once is not hashed again on every hit, but a change to its file after
    /// that check is caught: damaged in place after a hit, it is dropped, never served. (The
    /// damage is dated explicitly so the test does not depend on the kernel's timestamp grain.)
    @Test func anEntryDamagedAfterAHitIsDroppedNeverServed() async throws {
        let dir = try Fixtures.temporaryDirectory()
        let cache = DiskDataCache(path: dir.path, sizeLimit: 10_000_000)
        try await cache.store(LoadedData(data: Data(repeating: 7, count: 1000)), for: "k")
        #expect(await cache.data(for: "k")?.data == Data(repeating: 7, count: 1000))
        #expect(await cache.data(for: "k")?.data == Data(repeating: 7, count: 1000))
        let path = cache.entryPath(for: "k")
        let before = try FileManager.default.attributesOfItem(atPath: path)[.systemFileNumber] as? Int
        let handle = try #require(FileHandle(forUpdatingAtPath: path))
        try handle.seek(toOffset: try handle.seekToEnd() - 10)
        try handle.write(contentsOf: [0x55])
        try handle.close()
        try FileManager.default.setAttributes([.modificationDate: Date(timeIntervalSince1970: 1_000_000_000)], ofItemAtPath: path)
        #expect(try FileManager.default.attributesOfItem(atPath: path)[.systemFileNumber] as? Int == before, "damaged in place")
        #expect(await cache.data(for: "k") == nil)
        #expect(!FileManager.default.fileExists(atPath: path))
    }

    @Test func truncatedEntryIsDropped() async throws {
        let dir = try Fixtures.temporaryDirectory()
        let cache = DiskDataCache(path: dir.path, sizeLimit: 10_000_000)
        try await cache.store(LoadedData(data: Data(repeating: 7, count: 1000)), for: "k")
        let path = cache.entryPath(for: "k")
        try Data(try Data(contentsOf: URL(fileURLWithPath: path)).prefix(500)).write(to: URL(fileURLWithPath: path))
        #expect(await cache.data(for: "k") == nil)
    }

    @Test func sizeLimitHoldsDuringWrites() async throws {
        let dir = try Fixtures.temporaryDirectory()
        let cache = DiskDataCache(path: dir.path, sizeLimit: 1_000_000, sweepTo: 0.7)
        for i in 0..<30 {
            try await cache.store(LoadedData(data: Data(repeating: UInt8(i), count: 100_000)), for: "k\(i)")
        }
        let total = try FileManager.default.subpathsOfDirectory(atPath: dir.path).reduce(0) { sum, sub in
            let attributes = try FileManager.default.attributesOfItem(atPath: dir.appendingPathComponent(sub).path)
            return sum + ((attributes[.type] as? FileAttributeType) == .typeRegular ? (attributes[.size] as? Int ?? 0) : 0)
        }
        #expect(total <= 1_000_000)
        #expect(await cache.data(for: "k29") != nil)  // the newest survives
        #expect(await cache.data(for: "k0") == nil)  // the oldest was swept
    }

    /// The size limit holds at every moment, also while several writes are in progress: each
    /// write reserves its room first, counting the writes in flight, and sweeps before it lands.
    @Test func sizeLimitHoldsWithConcurrentWriters() async throws {
        let dir = try Fixtures.temporaryDirectory()
        let cache = DiskDataCache(path: dir.path, sizeLimit: 1_000_000, sweepTo: 0.7)
        let largest = Mutex(0), done = Atomic<Bool>(false)
        let watcher = Thread {
            while !done.load(ordering: .relaxed) {
                let size = (FileManager.default.enumerator(atPath: dir.path)?.allObjects as? [String] ?? []).reduce(0) { sum, path in
                    guard !(path as NSString).lastPathComponent.hasPrefix(".") else { return sum }
                    let attributes = try? FileManager.default.attributesOfItem(atPath: dir.appendingPathComponent(path).path)
                    return sum + ((attributes?[.type] as? FileAttributeType) == .typeRegular ? (attributes?[.size] as? Int ?? 0) : 0)
                }
                largest.withLock { $0 = max($0, size) }
            }
        }
        watcher.start()
        try await withThrowingTaskGroup(of: Void.self) { group in
            for i in 0..<60 {
                group.addTask { try await cache.store(LoadedData(data: Data(repeating: UInt8(i), count: 240_000)), for: "k\(i)") }
            }
            try await group.waitForAll()
        }
        done.store(true, ordering: .relaxed)
        #expect(largest.withLock { $0 } <= 1_000_000)
        #expect(largest.withLock { $0 } >= 240_000)  // the watcher saw entries land
    }

    /// A warm run over local files revalidates every entry (size and modification time): when
    /// nothing changed and no lifetime is counted from the store time, the entry is left as it is
    /// rather than rewritten (and synced to disk) on every hit. Anything else is still recorded.
    @Test func refreshRewritesOnlyWhatChanges() async throws {
        let dir = try Fixtures.temporaryDirectory()
        let clock = Mutex(Date(timeIntervalSince1970: 1_000_000))
        let cache = DiskDataCache(path: dir.path, sizeLimit: 10_000_000, now: { clock.withLock { $0 } })
        func inode(_ key: String) throws -> UInt64 {
            try #require(try FileManager.default.attributesOfItem(atPath: cache.entryPath(for: key))[.systemFileNumber] as? UInt64)
        }
        let file = CacheDirectives(etag: "100-5", revalidateAlways: true)
        try await cache.store(LoadedData(data: Data("local".utf8), directives: file), for: "f")
        let before = try inode("f")
        clock.withLock { $0 += 60 }
        await cache.refresh("f", directives: file)
        #expect(try inode("f") == before)
        #expect(await cache.entry(for: "f")?.data.data == Data("local".utf8))
        // Changed validators are written.
        let touched = CacheDirectives(etag: "100-6", revalidateAlways: true)
        await cache.refresh("f", directives: touched)
        #expect(try inode("f") != before)
        #expect(await cache.entry(for: "f")?.data.directives == touched)
        // A response with a lifetime: a 304 renews it from now, so the store time is rewritten.
        let http = CacheDirectives(etag: "\"v1\"", maxAge: 100)
        try await cache.store(LoadedData(data: Data("web".utf8), directives: http), for: "h")
        clock.withLock { $0 += 150 }
        #expect(await cache.entry(for: "h")?.isFresh == false)
        await cache.refresh("h", directives: http)
        #expect(await cache.entry(for: "h")?.isFresh == true)
    }
}

@Suite struct MemoryImageCacheTests {
    func image(_ w: Int, _ h: Int) throws -> PipelineImage {
        let wand = Wand()
        try wand.readBuiltIn("xc:gray", size: (w, h))
        return PipelineImage(taking: wand)
    }

    @Test func evictsLeastRecentlyUsedByCost() throws {
        let one = try image(10, 10)  // cost 800
        let cache = MemoryImageCache(costLimit: 2000, preferredAfterPurge: 2000, entryCostLimit: 2000)
        cache.store(one, for: "a")
        cache.store(one, for: "b")
        _ = cache.image(for: "a")  // a is now more recent than b
        cache.store(one, for: "c")
        #expect(cache.image(for: "a") != nil)
        #expect(cache.image(for: "b") == nil)
        #expect(cache.image(for: "c") != nil)
        #expect(cache.totalCost == 1600)
        #expect(cache.evictions == 1)
        #expect(cache.evictionCount == 1)
    }

    @Test func imageLargerThanLimitIsNotCached() throws {
        let cache = MemoryImageCache(costLimit: 100)
        cache.store(try image(10, 10), for: "a")
        #expect(cache.count == 0)
    }

    @Test func purgesLeastRecentlyUsedDownToThePreferredSize() throws {
        let one = try image(10, 10)  // cost 800
        let cache = MemoryImageCache(costLimit: 8000, preferredAfterPurge: 4000, entryCostLimit: 8000)
        for i in 0..<10 { cache.store(one, for: "k\(i)") }  // 8000: at the limit, no purge yet
        #expect(cache.count == 10 && cache.evictions == 0)
        _ = cache.image(for: "k0")  // k0 becomes the most recently used
        cache.store(one, for: "k10")  // 8800 > 8000: purge to <= 4000
        #expect(cache.totalCost == 4000 && cache.count == 5)
        #expect(cache.evictions == 6)
        #expect(cache.image(for: "k0") != nil && cache.image(for: "k10") != nil)
        #expect(cache.image(for: "k1") == nil && cache.image(for: "k6") == nil)
        #expect(cache.image(for: "k7") != nil && cache.image(for: "k9") != nil)
    }

    @Test func entryCostLimitKeepsLargeImagesOut() throws {
        let cache = MemoryImageCache(costLimit: 100_000, entryCostLimit: 1000)
        cache.store(try image(10, 10), for: "small")  // 800
        cache.store(try image(20, 20), for: "large")  // 3200
        #expect(cache.image(for: "small") != nil && cache.image(for: "large") == nil)
    }

    @Test func ttlExpiresEntriesByTheInjectedClock() throws {
        let time = Mutex(Date(timeIntervalSince1970: 0))
        let cache = MemoryImageCache(costLimit: 100_000, ttl: 60, now: { time.withLock { $0 } })
        cache.store(try image(10, 10), for: "a")
        time.withLock { $0 += 59 }
        #expect(cache.image(for: "a") != nil)
        time.withLock { $0 += 2 }
        #expect(cache.image(for: "a") == nil && cache.totalCost == 0)
    }

    @Test func preferredSizeLargerThanTheLimitIsAValidationError() throws {
        let (pipeline, diagnostics) = PipelineFile.parse(text: """
            image_cache:
              memory: { cost_limit: 10MB, preferred_after_purge: 20MB }
            encoder: png
            """, file: "m.yaml", registry: BuiltIns.registry())
        #expect(pipeline == nil)
        #expect(diagnostics.map(\.description).joined().contains("preferred_after_purge (20MB) is larger than cost_limit (10MB)"))
    }
}
