import Crypto
import Foundation

/// One share of a list run by many processes or machines: shard `index` of `count` (0-based).
///
/// A source belongs to the shard ``shard(ofKey:count:)`` gives for its cache key: the first
/// eight bytes of the SHA-256 of the key's UTF-8, read big-endian, modulo `count`. It depends on
/// nothing but the key, so it holds when the list grows or is reordered, duplicates land in the
/// same shard, and every machine agrees. **This function is a frozen contract**: changing it would
/// move sources between shards of runs already under way. Golden vectors in the tests hold it.
public struct Shard: Sendable, Equatable, CustomStringConvertible {
    /// 0-based.
    public let index: Int
    /// How many shards share the list.
    public let count: Int

    public init(index: Int, count: Int) throws {
        guard count >= 1 else { throw PipelineError(.invalidOption, "the shard count must be at least 1, got \(count)") }
        guard (0..<count).contains(index) else {
            throw PipelineError(.invalidOption, "shard index \(index) is out of range for \(count) shards (0 to \(count - 1))")
        }
        self.index = index
        self.count = count
    }

    /// Environment variables through which batch engines give an array task its index, in the
    /// order they are looked at: Kubernetes Indexed Jobs, Slurm job arrays, AWS Batch array jobs.
    public static let indexVariables = ["JOB_COMPLETION_INDEX", "SLURM_ARRAY_TASK_ID", "AWS_BATCH_JOB_ARRAY_INDEX"]

    /// Reads `K/N` or `auto/N` (K from the first of ``indexVariables`` that is set).
    public static func parse(_ text: String, environment: [String: String]) throws -> Shard {
        let parts = text.split(separator: "/", omittingEmptySubsequences: false).map(String.init)
        guard parts.count == 2, let count = Int(parts[1]) else {
            throw PipelineError(.invalidOption, "--shard expects K/N or auto/N (for example 3/16), got '\(text)'")
        }
        if parts[0] == "auto" {
            guard let name = indexVariables.first(where: { environment[$0] != nil }), let value = environment[name] else {
                throw PipelineError(.invalidOption, "--shard auto/\(count) needs the shard index in one of "
                    + indexVariables.joined(separator: ", ") + "; none is set")
            }
            guard let index = Int(value) else {
                throw PipelineError(.invalidOption, "\(name) is '\(value)', not a shard index")
            }
            do { return try Shard(index: index, count: count) } catch let error as PipelineError {
                throw PipelineError(.invalidOption, "\(name)=\(value): " + error.message)
            }
        }
        guard let index = Int(parts[0]) else {
            throw PipelineError(.invalidOption, "--shard expects K/N or auto/N (for example 3/16), got '\(text)'")
        }
        return try Shard(index: index, count: count)
    }

    /// The shard of `count` that the source with cache key `key` belongs to. Frozen (see the type).
    public static func shard(ofKey key: String, count: Int) -> Int {
        var key = key
        let digest = key.withUTF8 { SHA256.hash(data: UnsafeRawBufferPointer($0)) }
        let value = digest.withUnsafeBytes { bytes in bytes.prefix(8).reduce(UInt64(0)) { $0 << 8 | UInt64($1) } }
        return Int(value % UInt64(count))
    }

    /// Whether the source with cache key `key` is this shard's.
    public func owns(key: String) -> Bool { count == 1 || Self.shard(ofKey: key, count: count) == index }

    /// `K/N`.
    public var description: String { "\(index)/\(count)" }

    /// `-shard-K-of-N`, added to the names of this shard's files (report, metrics, manifest).
    public var fileSuffix: String { "-shard-\(index)-of-\(count)" }

    /// `path` with ``fileSuffix`` before its extension: `run.json` becomes `run-shard-3-of-16.json`.
    public func name(_ path: String) -> String {
        let url = URL(fileURLWithPath: path)
        let ext = url.pathExtension
        guard !ext.isEmpty else { return path + fileSuffix }
        return String(path.dropLast(ext.count + 1)) + fileSuffix + "." + ext
    }
}
