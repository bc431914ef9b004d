import Foundation
import PipelineKit

/// How a data cache decides that an entry is fresh, and what it keeps: shared by the `disk` and
/// `s3` caches, so the same options mean the same thing on one machine and on a fleet.
public struct CacheRules: Sendable {
    public enum Policy: String, Sendable, CaseIterable { case http, ttl, off }
    public enum Store: String, Sendable, CaseIterable { case original, processed, all }

    public let policy: Policy
    public let store: Store
    /// Lifetime of an entry when the response gives none (`http`), or of every entry (`ttl`).
    public let ttl: Double

    /// The options both caches take, with their defaults.
    static let options: [OptionSpec] = [
        .duration("ttl", default: "7d", min: "1s", max: "3650d", doc: "Lifetime of an entry when the response gives none (policy http), or of every entry (policy ttl)."),
        .oneOf("policy", Policy.allCases.map(\.rawValue), default: "http",
               doc: "http: honour Cache-Control/Expires and revalidate with ETag/Last-Modified; ttl: ignore HTTP headers, keep for ttl; off: do not cache."),
        .oneOf("store", Store.allCases.map(\.rawValue), default: "original",
               doc: "What is kept: loaded bytes (original), encoded outputs (processed, so an unchanged item is not loaded, decoded or encoded again), or both (all)."),
    ]

    public init(policy: Policy, store: Store, ttl: Double) {
        self.policy = policy
        self.store = store
        self.ttl = ttl
    }

    init(options: PluginOptions) {
        self.init(policy: Policy(rawValue: options.string("policy")!)!, store: Store(rawValue: options.string("store")!)!,
                  ttl: options.seconds("ttl")!)
    }

    public var storesOriginals: Bool { policy != .off && store != .processed }
    public var storesOutputs: Bool { policy != .off && store != .original }

    /// Whether an entry stored under `meta` is fresh at `now` (`true`), usable after revalidation
    /// (`false`), or of no use (`nil`).
    func freshness(_ meta: CacheEntry.Meta, now: Date) -> Bool? {
        let age = now.timeIntervalSince1970 - meta.storedAt
        let directives = meta.directives
        switch policy {
        case .off:
            return nil
        case .ttl:
            guard age < ttl else { return nil }
            return !directives.revalidateAlways
        case .http:
            if directives.revalidateAlways || directives.noCache { return directives.canRevalidate ? false : nil }
            if directives.immutable { return true }
            if age < (directives.maxAge ?? ttl) { return true }
            return directives.canRevalidate ? false : nil
        }
    }
}

/// One stored entry, byte for byte: `PKDC`, a version, the body's length and SHA-256, the length of
/// a JSON meta, the meta, the body. A reader checks length and checksum, so a short, damaged or
/// foreign entry is recognised and never served.
enum CacheEntry {
    struct Meta: Codable {
        var key: String
        var contentType: String?
        var finalURL: String?
        var storedAt: Double
        var directives: CacheDirectives
        var output: OutputStamp?
    }

    static let magic = Data("PKDC".utf8)
    static let version: UInt8 = 2
    static let headerLength = 52

    /// The name of `key`'s entry under a root: `ab/abcdef...` (the SHA-256 of the key, its first
    /// two hex digits as a directory).
    static func name(for key: String) -> String {
        let hash = Hashing.sha256Hex(key)
        return "\(hash.prefix(2))/\(hash)"
    }

    /// Whether `name` (relative to a root) is an entry's name.
    static func isEntryName(_ name: Substring) -> Bool {
        let parts = name.split(separator: "/", omittingEmptySubsequences: false)
        let hex = { (part: Substring) in part.allSatisfy { $0.isHexDigit && !$0.isUppercase } }
        return parts.count == 2 && parts[0].count == 2 && parts[1].count == 64 && hex(parts[1]) && parts[1].hasPrefix(parts[0])
    }

    static func encode(meta: Meta, body: Data) throws -> Data {
        let metaData = try JSONEncoder().encode(meta)
        var out = Data()
        out.reserveCapacity(headerLength + metaData.count + body.count)
        out.append(magic)
        out.append(contentsOf: [version, 0, 0, 0])
        withUnsafeBytes(of: UInt64(body.count).littleEndian) { out.append(contentsOf: $0) }
        out.append(Hashing.sha256(body))
        withUnsafeBytes(of: UInt32(metaData.count).littleEndian) { out.append(contentsOf: $0) }
        out.append(metaData)
        out.append(body)
        return out
    }

    /// The header fields: body length, body checksum, meta length; `nil` for a foreign file.
    static func header(_ bytes: [UInt8]) -> (length: Int, checksum: Data, metaLength: Int)? {
        guard bytes.count >= headerLength, Data(bytes[0..<4]) == magic, bytes[4] == version else { return nil }
        let length = bytes[8..<16].reversed().reduce(UInt64(0)) { $0 << 8 | UInt64($1) }
        let metaLength = bytes[48..<52].reversed().reduce(UInt32(0)) { $0 << 8 | UInt32($1) }
        guard length < 1 << 40 else { return nil }
        return (Int(length), Data(bytes[16..<48]), Int(metaLength))
    }

    /// The meta and body of a whole entry; `nil` when it is short, damaged or foreign. With
    /// `verify` false the body's checksum is not computed (the caller checked these very bytes).
    static func decode(_ file: Data, verify: Bool = true) -> (Meta, Data)? {
        guard let (length, checksum, metaLength) = header([UInt8](file.prefix(headerLength))),
              file.count == headerLength + metaLength + length else { return nil }
        let start = file.startIndex
        let metaData = file[(start + headerLength)..<(start + headerLength + metaLength)]
        let body = file[(start + headerLength + metaLength)...]
        guard !verify || Hashing.sha256(Data(body)) == checksum,
              let meta = try? JSONDecoder().decode(Meta.self, from: metaData) else { return nil }
        return (meta, Data(body))
    }

    /// Reads only the header and meta of an entry file (for stats and prune), not its body.
    /// The meta of an entry from its first bytes (`prefix`); `nil` when they are not an entry's,
    /// or do not reach the end of its meta (``metaEnd(_:)`` says how many bytes would).
    static func meta(prefix: Data) -> Meta? {
        guard let end = metaEnd(prefix), prefix.count >= end else { return nil }
        let start = prefix.startIndex
        return try? JSONDecoder().decode(Meta.self, from: prefix[(start + headerLength)..<(start + end)])
    }

    /// How many bytes from the start of an entry reach the end of its meta; `nil` for a foreign file.
    static func metaEnd(_ prefix: Data) -> Int? {
        guard let (_, _, metaLength) = header([UInt8](prefix.prefix(headerLength))), metaLength < 1 << 20 else { return nil }
        return headerLength + metaLength
    }

    static func readMeta(_ path: String) -> Meta? {
        guard let handle = FileHandle(forReadingAtPath: path) else { return nil }
        defer { try? handle.close() }
        guard let head = try? handle.read(upToCount: headerLength),
              let (_, _, metaLength) = header([UInt8](head)), metaLength < 1 << 20,
              let metaData = try? handle.read(upToCount: metaLength), metaData.count == metaLength else { return nil }
        return try? JSONDecoder().decode(Meta.self, from: metaData)
    }
}
