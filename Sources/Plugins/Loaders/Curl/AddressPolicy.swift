import Foundation

/// Which address ranges a loader may connect to. Defaults follow imgproxy: loopback and link-local
/// (which holds cloud metadata at 169.254.169.254) refused; private ranges allowed.
struct AddressPolicy: Sendable, Equatable {
    var allowLoopback = false
    var allowLinkLocal = false
    var allowPrivate = true
    /// Where the allow_* options live in the pipeline file (`loader.http.`), for the message that
    /// tells how to permit a refused address; `nil` when no option can.
    var optionPath: String? = "loader.http."

    enum Range: String { case loopback, linkLocal = "link-local", privateRange = "private", publicRange = "public" }

    /// A description of the refused address (`127.0.0.1 (loopback)`), or `nil` when allowed.
    func refusal(for sockaddr: UnsafeRawPointer, family: Int32) -> String? {
        guard let (text, range) = AddressPolicy.classify(sockaddr, family: family) else {
            return "an address of unknown family \(family)"
        }
        switch range {
        case .loopback where !allowLoopback, .linkLocal where !allowLinkLocal, .privateRange where !allowPrivate:
            guard let optionPath else { return "\(text) (\(range.rawValue) address, refused)" }
            let option = "allow_" + (range == .privateRange ? "private" : range == .linkLocal ? "link_local" : "loopback")
            return "\(text) (\(range.rawValue) address; set \(optionPath)\(option): true to permit)"
        default:
            return nil
        }
    }

    static func classify(_ sockaddr: UnsafeRawPointer, family: Int32) -> (String, Range)? {
        if family == AF_INET {
            let addr = sockaddr.load(as: sockaddr_in.self)
            let bytes = withUnsafeBytes(of: addr.sin_addr.s_addr) { Array($0) }
            return ("\(bytes[0]).\(bytes[1]).\(bytes[2]).\(bytes[3])", classifyV4(bytes))
        }
        if family == AF_INET6 {
            let addr = sockaddr.load(as: sockaddr_in6.self)
            let bytes = withUnsafeBytes(of: addr.sin6_addr) { Array($0) }
            var buffer = [CChar](repeating: 0, count: Int(INET6_ADDRSTRLEN))
            var copy = addr.sin6_addr
            inet_ntop(AF_INET6, &copy, &buffer, socklen_t(buffer.count))
            let text = String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
            if bytes[0..<10].allSatisfy({ $0 == 0 }), bytes[10] == 0xff, bytes[11] == 0xff {
                return (text, classifyV4(Array(bytes[12..<16])))  // IPv4-mapped
            }
            if bytes[0..<15].allSatisfy({ $0 == 0 }), bytes[15] <= 1 { return (text, .loopback) }  // ::1 and ::
            if bytes[0] == 0xfe, bytes[1] & 0xc0 == 0x80 { return (text, .linkLocal) }
            if bytes[0] & 0xfe == 0xfc { return (text, .privateRange) }
            return (text, .publicRange)
        }
        return nil
    }

    static func classifyV4(_ b: [UInt8]) -> Range {
        switch (b[0], b[1]) {
        case (127, _), (0, _): return .loopback  // 0.0.0.0 reaches this host on Linux
        case (169, 254): return .linkLocal
        case (10, _), (192, 168): return .privateRange
        case (172, let second) where (16...31).contains(second): return .privateRange
        case (100, let second) where (64...127).contains(second): return .privateRange
        default: return .publicRange
        }
    }
}

/// Host name patterns a loader may, or may not, fetch from. `*.example.com` matches every
/// subdomain (not `example.com` itself); other patterns match the whole host, case-insensitively.
struct HostPolicy: Sendable, Equatable {
    var allow: [String] = []
    var deny: [String] = []

    /// Whether `host` may be fetched: not denied, and allowed when an allow list is set.
    func allows(_ host: String) -> Bool {
        let host = host.lowercased()
        if deny.contains(where: { HostPolicy.matches(host, $0) }) { return false }
        return allow.isEmpty || allow.contains(where: { HostPolicy.matches(host, $0) })
    }

    static func matches(_ host: String, _ pattern: String) -> Bool {
        let pattern = pattern.lowercased()
        if pattern.hasPrefix("*.") { return host.hasSuffix(String(pattern.dropFirst(1))) }
        return host == pattern
    }
}
