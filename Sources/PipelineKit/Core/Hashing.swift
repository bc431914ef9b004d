import Crypto
import Foundation

/// SHA-256, for cache keys, entry checksums and output names.
public enum Hashing {
    /// The 32-byte digest of `data`.
    public static func sha256(_ data: Data) -> Data { Data(SHA256.hash(data: data)) }

    /// Lower-case hex of the digest of `data`.
    public static func sha256Hex(_ data: Data) -> String { hex(sha256(data)) }

    /// Lower-case hex of the digest of `text`'s UTF-8 bytes.
    public static func sha256Hex(_ text: String) -> String { hex(sha256(Data(text.utf8))) }

    /// Lower-case hex of `bytes`.
    public static func hex(_ bytes: Data) -> String {
        let digits = Array("0123456789abcdef".utf8)
        var out = [UInt8]()
        out.reserveCapacity(bytes.count * 2)
        for byte in bytes {
            out.append(digits[Int(byte >> 4)])
            out.append(digits[Int(byte & 0x0f)])
        }
        return String(decoding: out, as: UTF8.self)
    }
}

extension LoadedData {
    /// Lower-case hex of the SHA-256 of the whole body: ``data``, or the file left open, read in
    /// 1 MiB pieces (a file that cannot be read hashes as its path and size, and its decode fails).
    /// Reads the disk for a file: call it off Swift's shared threads.
    /// A body read by range is never read whole for this: it hashes as its name, validator and size.
    public func bodyDigest() -> String {
        if let ranged { return Hashing.sha256Hex("ranged:\(ranged.name):\(ranged.validator):\(ranged.size)") }
        guard let file else { return Hashing.sha256Hex(data) }
        var hasher = SHA256()
        var offset = 0
        while offset < file.size {
            guard let piece = try? file.read(at: offset, count: min(1 << 20, file.size - offset)), !piece.isEmpty else {
                return Hashing.sha256Hex("unreadable:\(file.path):\(file.size)")
            }
            hasher.update(data: piece)
            offset += piece.count
        }
        return Hashing.hex(Data(hasher.finalize()))
    }

    /// ``bodyDigest()`` from async code: a file is read on the I/O threads (``WorkerPool/io``).
    public func readBodyDigest() async throws -> String {
        guard file != nil else { return bodyDigest() }
        let open = self
        return try await WorkerPool.io.run { open.bodyDigest() }
    }
}
