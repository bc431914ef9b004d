import Foundation
import HTTPTypes
import NIOCore
import NIOHTTPTypes
import PipelineService
import Synchronization

/// Deadlines and a cap for the service's connections, so that one client cannot take it down
/// with idle or slow sockets:
/// - a request's head must arrive whole within `header` of the connection opening (a slow
///   header, byte by byte, is closed at the deadline however often it sends);
/// - its body within `body` of its head;
/// - a kept-alive connection's next request within `idle` of the last answer;
/// - past `cap` open connections, the oldest that are not in a request (idle, or still sending
///   their first head) are closed to make room; when every one is in a request, the new
///   connection is answered `503` with `Connection: close` and closed.
package struct ConnectionLimits: Sendable {
    package var header: Double = 10
    package var body: Double = 30
    package var idle: Double = 60
    package var cap: Int = 4096

    package init(header: Double = 10, body: Double = 30, idle: Double = 60, cap: Int = 4096) {
        self.header = header
        self.body = body
        self.idle = idle
        self.cap = cap
    }
}

/// The service's open connections: who may be evicted, and counts for `/metrics`.
package final class ConnectionTable: Sendable {
    package struct Entry {
        let channel: any Channel
        /// Requests read and not yet answered.
        var busy: Int
        /// When it last became idle (or opened).
        var since: ContinuousClock.Instant
    }

    /// Why the service closed a connection.
    package enum CloseReason: String, CaseIterable, Sendable {
        case evicted, refused
        case headerTimeout = "header_timeout", bodyTimeout = "body_timeout", idleTimeout = "idle_timeout"
    }

    package let limits: ConnectionLimits
    private let entries = Mutex<[ObjectIdentifier: Entry]>([:])
    private let closes = Mutex<[CloseReason: Int]>([:])

    package init(limits: ConnectionLimits) { self.limits = limits }

    package var count: Int { entries.withLock { $0.count } }

    /// Connections closed by the service so far, by reason.
    package var closed: [CloseReason: Int] { closes.withLock { $0 } }
    /// For the metrics: open now, and closed by reason (every reason).
    package var counts: ConnectionCounts {
        let closed = closed
        return ConnectionCounts(open: count, closed: CloseReason.allCases.map { ($0.rawValue, closed[$0] ?? 0) })
    }

    package func count(_ reason: CloseReason, _ times: Int = 1) {
        guard times > 0 else { return }
        closes.withLock { $0[reason, default: 0] += times }
    }

    /// Registers a new connection. Returns `false` when it is over the cap with nothing to evict
    /// (every other connection is in a request); otherwise closes the oldest idle ones past it.
    package func opened(_ channel: any Channel) -> Bool {
        let key = ObjectIdentifier(channel)
        let (admitted, victims) = entries.withLock { table -> (Bool, [any Channel]) in
            table[key] = Entry(channel: channel, busy: 0, since: .now)
            var victims: [any Channel] = []
            while table.count > limits.cap {
                var oldest: (key: ObjectIdentifier, since: ContinuousClock.Instant)?
                for (other, entry) in table where other != key && entry.busy == 0 && entry.since < (oldest?.since ?? .now) {
                    oldest = (other, entry.since)
                }
                guard let oldest, let victim = table.removeValue(forKey: oldest.key) else {
                    table[key] = nil
                    return (false, victims)
                }
                victims.append(victim.channel)
            }
            return (true, victims)
        }
        for victim in victims { victim.close(promise: nil) }
        count(.evicted, victims.count)
        if !admitted { count(.refused) }
        return admitted
    }

    package func closed(_ channel: any Channel) { _ = entries.withLock { $0.removeValue(forKey: ObjectIdentifier(channel)) } }

    package func requestStarted(_ channel: any Channel) {
        entries.withLock { $0[ObjectIdentifier(channel)]?.busy += 1 }
    }

    /// Returns whether the connection is now idle (no request left unanswered).
    package func requestAnswered(_ channel: any Channel) -> Bool {
        entries.withLock { table in
            guard var entry = table[ObjectIdentifier(channel)] else { return true }
            entry.busy = max(0, entry.busy - 1)
            if entry.busy == 0 { entry.since = .now }
            table[ObjectIdentifier(channel)] = entry
            return entry.busy == 0
        }
    }
}

/// One connection's view of ``ConnectionTable``: it sits after the HTTP codec, sees each
/// request's head and end and each answer's end, and keeps the connection's one deadline.
package final class ConnectionGuard: ChannelDuplexHandler, RemovableChannelHandler {
    package typealias InboundIn = HTTPRequestPart
    package typealias InboundOut = HTTPRequestPart
    package typealias OutboundIn = HTTPResponsePart
    package typealias OutboundOut = HTTPResponsePart

    private let table: ConnectionTable
    private var registered = false
    private var deadline: Scheduled<Void>?
    private var closeAfterAnswer = false
    private var requestsOpen = 0

    package init(table: ConnectionTable) { self.table = table }

    package func handlerAdded(context: ChannelHandlerContext) {
        if context.channel.isActive { register(context) }
    }

    package func channelActive(context: ChannelHandlerContext) {
        register(context)
        context.fireChannelActive()
    }

    package func channelInactive(context: ChannelHandlerContext) {
        deadline?.cancel()
        table.closed(context.channel)
        context.fireChannelInactive()
    }

    package func handlerRemoved(context: ChannelHandlerContext) {
        deadline?.cancel()
        table.closed(context.channel)
    }

    private func register(_ context: ChannelHandlerContext) {
        guard !registered else { return }
        registered = true
        guard table.opened(context.channel) else {
            refuse(context)
            return
        }
        arm(context, after: table.limits.header, reason: .headerTimeout)
    }

    /// Over the cap with every connection in a request: a clear answer, then the close.
    private func refuse(_ context: ChannelHandlerContext) {
        let body = "too many open connections; retry shortly\n"
        var fields = HTTPFields()
        fields[.connection] = "close"
        fields[.contentType] = "text/plain"
        fields[.contentLength] = String(body.utf8.count)
        fields[.retryAfter] = "1"
        context.write(wrapOutboundOut(.head(HTTPResponse(status: .serviceUnavailable, headerFields: fields))), promise: nil)
        context.write(wrapOutboundOut(.body(context.channel.allocator.buffer(string: body))), promise: nil)
        let channel = context.channel
        context.writeAndFlush(wrapOutboundOut(.end(nil))).whenComplete { _ in channel.close(promise: nil) }
    }

    /// Closes the connection `seconds` from now unless something rearms or cancels the deadline.
    private func arm(_ context: ChannelHandlerContext, after seconds: Double, reason: ConnectionTable.CloseReason) {
        deadline?.cancel()
        let table = self.table
        let channel = context.channel
        deadline = context.eventLoop.scheduleTask(in: .nanoseconds(Int64(seconds * 1_000_000_000))) {
            table.count(reason)
            channel.close(promise: nil)
        }
    }

    package func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        switch unwrapInboundIn(data) {
        case .head(let head):
            requestsOpen += 1
            table.requestStarted(context.channel)
            if head.headerFields[.connection]?.lowercased() == "close" { closeAfterAnswer = true }
            // The body, if any, must follow within its own deadline; none runs while an answer is made.
            arm(context, after: table.limits.body, reason: .bodyTimeout)
        case .body:
            break
        case .end:
            deadline?.cancel()
            deadline = nil
        }
        context.fireChannelRead(data)
    }

    package func write(context: ChannelHandlerContext, data: NIOAny, promise: EventLoopPromise<Void>?) {
        let part = unwrapOutboundIn(data)
        if case .head(let head) = part, head.headerFields[.connection]?.lowercased() == "close" { closeAfterAnswer = true }
        guard case .end = part, requestsOpen > 0 else {
            context.write(data, promise: promise)
            return
        }
        requestsOpen -= 1
        let idle = table.requestAnswered(context.channel) && requestsOpen == 0
        if idle, closeAfterAnswer {
            let written = promise ?? context.eventLoop.makePromise()
            context.write(data, promise: written)
            let channel = context.channel
            written.futureResult.whenComplete { _ in channel.close(promise: nil) }
            return
        }
        context.write(data, promise: promise)
        if idle { arm(context, after: table.limits.idle, reason: .idleTimeout) }
    }
}
