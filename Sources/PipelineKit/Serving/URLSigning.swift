import Crypto
import Foundation

/// The keys that sign and verify `pipelinectl serve` URLs: HMAC-SHA256 over the path after the
/// signature (and the query), written as unpadded base64url.
///
/// Keys come from `PIPELINECTL_KEYS` (`ID:HEX,ID:HEX`) or a keys file (one `ID:HEX` per line,
/// `#` comments), never from a pipeline file. The first key signs; every key verifies, so a new key
/// is rolled out by putting it first while the old one still verifies links already handed out.
public struct SigningKeys: Sendable {
    public struct Key: Sendable {
        /// A name for people and logs (never the secret).
        public let id: String
        let secret: Data
        var key: SymmetricKey { SymmetricKey(data: secret) }
    }
    public let keys: [Key]

    /// The environment variable keys are read from.
    public static let environmentVariable = "PIPELINECTL_KEYS"

    /// Parses `ID:HEX` pairs separated by commas or new lines; throws naming the entry that is wrong.
    public init(parsing text: String, origin: String) throws {
        var keys: [Key] = []
        let entries = text.split(whereSeparator: { $0 == "," || $0 == "\n" })
            .map { $0.trimmingCharacters(in: .whitespaces) }
            .filter { !$0.isEmpty && !$0.hasPrefix("#") }
        for (number, entry) in entries.enumerated() {
            let parts = entry.split(separator: ":", maxSplits: 1).map(String.init)
            guard parts.count == 2, !parts[0].isEmpty else {
                throw PipelineError(.invalidOption, "\(origin): key \(number + 1) is not ID:HEX")
            }
            guard let bytes = Self.hexBytes(parts[1]) else {
                throw PipelineError(.invalidOption, "\(origin): key '\(parts[0])' is not hexadecimal")
            }
            guard bytes.count >= 16 else {
                throw PipelineError(.invalidOption, "\(origin): key '\(parts[0])' has \(bytes.count) bytes; use at least 16 (32 hex digits)")
            }
            keys.append(Key(id: parts[0], secret: bytes))
        }
        guard !keys.isEmpty else { throw PipelineError(.invalidOption, "\(origin): no keys") }
        self.keys = keys
    }

    /// The keys of `--keys-file`, else of `PIPELINECTL_KEYS`; `nil` when neither is given.
    public static func load(file: String?, environment: [String: String]) throws -> SigningKeys? {
        if let file {
            let text: String
            do { text = try String(contentsOfFile: file, encoding: .utf8) } catch {
                throw PipelineError(.notFound, "--keys-file \(file): cannot be read")
            }
            return try SigningKeys(parsing: text, origin: file)
        }
        guard let text = environment[environmentVariable], !text.isEmpty else { return nil }
        return try SigningKeys(parsing: text, origin: environmentVariable)
    }

    /// The signature of `signed` (the request path after the signature, with its query) by the first key.
    public func sign(_ signed: String) -> String { Self.signature(signed, keys[0].key) }

    /// The key whose signature `signature` is, or `nil` when none signed `signed`.
    public func verify(_ signature: String, of signed: String) -> Key? {
        guard let given = Self.base64URLDecode(signature), given.count == SHA256.byteCount else { return nil }
        return keys.first { HMAC<SHA256>.isValidAuthenticationCode(given, authenticating: Data(signed.utf8), using: $0.key) }
    }

    static func signature(_ signed: String, _ key: SymmetricKey) -> String {
        base64URLEncode(Data(HMAC<SHA256>.authenticationCode(for: Data(signed.utf8), using: key)))
    }

    /// Unpadded base64url.
    public static func base64URLEncode(_ data: Data) -> String {
        data.base64EncodedString().replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_")
            .replacingOccurrences(of: "=", with: "")
    }

    /// Base64url with or without padding; `nil` when it is not.
    public static func base64URLDecode(_ text: String) -> Data? {
        // On the bytes: every request's signature comes through here, 429s included.
        var plain = [UInt8]()
        plain.reserveCapacity(text.utf8.count + 3)
        for byte in text.utf8 {
            switch byte {
            case UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "0")...UInt8(ascii: "9"):
                plain.append(byte)
            case UInt8(ascii: "-"): plain.append(UInt8(ascii: "+"))
            case UInt8(ascii: "_"): plain.append(UInt8(ascii: "/"))
            case UInt8(ascii: "="): continue
            default: return nil
            }
        }
        plain.append(contentsOf: repeatElement(UInt8(ascii: "="), count: (4 - plain.count % 4) % 4))
        return Data(base64Encoded: Data(plain))
    }

    static func hexBytes(_ hex: String) -> Data? {
        guard hex.count % 2 == 0, hex.allSatisfy(\.isHexDigit) else { return nil }
        var data = Data(capacity: hex.count / 2)
        var index = hex.startIndex
        while index < hex.endIndex {
            let next = hex.index(index, offsetBy: 2)
            data.append(UInt8(hex[index..<next], radix: 16)!)
            index = next
        }
        return data
    }
}
