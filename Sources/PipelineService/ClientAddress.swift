import Foundation

/// Who a request comes from, for sharing places between clients: the peer's address, or, when
/// the peer is a proxy the operator trusts (`--trusted-proxy`), the nearest address in
/// `X-Forwarded-For` that is not one of them. A client cannot pick its own share by sending
/// the header: from an untrusted peer it is ignored.
package enum ClientAddress {
    package static func of(peer: String?, forwardedFor: [String], trusting proxies: Set<String>) -> String {
        let peer = peer ?? ""
        guard proxies.contains(peer) else { return peer }
        let hops = forwardedFor.flatMap { $0.split(separator: ",") }.map { $0.trimmingCharacters(in: .whitespaces) }.filter { !$0.isEmpty }
        return hops.reversed().first { !proxies.contains($0) } ?? hops.first ?? peer
    }
}
