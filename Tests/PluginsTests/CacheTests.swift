import Foundation
import PipelineKit
@testable import Plugins
import Testing
import TestSupport

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
}

@Suite struct MemoryImageCacheTests {
    func image(_ w: Int, _ h: Int) throws -> Image {
        let wand = Wand()
        try wand.readBuiltIn("xc:gray", size: (w, h))
        return Image(taking: wand)
    }

    @Test func evictsLeastRecentlyUsedByCost() throws {
        let one = try image(10, 10)  // cost 800
        let cache = MemoryImageCache(costLimit: 2000)
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
}
