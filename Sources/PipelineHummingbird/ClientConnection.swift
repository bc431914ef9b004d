import Foundation
import HTTPTypes
import Hummingbird
import NIOCore
import NIOHTTPTypes
import PipelineKit

/// A request context that knows its connection, so that ``ImageRoutes`` can stop a request's
/// work when its client goes away (with ``ClientCloseWatcher`` in the connection's pipeline).
/// Without it, a request runs to its end whether or not anyone waits for the answer.
public protocol ClientConnectionContext: RequestContext {
    /// The request's connection.
    var channel: any Channel { get }
}

/// Hummingbird's basic request context plus the connection: the context `pipelinectl serve` uses,
/// and the one to use for an app whose only routes are images and a few of its own.
public struct ImageRequestContext: ClientConnectionContext {
    public var coreContext: CoreRequestContextStorage
    public let channel: any Channel

    public init(source: ApplicationRequestContextSource) {
        coreContext = CoreRequestContextStorage(source: source)
        channel = source.channel
    }
}

/// Sees the client close its side of a connection (or the connection fail) while an answer is
/// being made, without reading the request stream. Add one to each connection's pipeline:
///
/// ```swift
/// server: .http1(configuration: .init(additionalChannelHandlers: [ClientCloseWatcher()]))
/// ```
///
/// It passes everything on unchanged; NIO keeps reading the socket while the handler works, so
/// the end of the input arrives here as an event. (Reading the request stream instead would make
/// Hummingbird close the connection after each answer.)
public final class ClientCloseWatcher: ChannelInboundHandler, RemovableChannelHandler, Sendable {
    public typealias InboundIn = HTTPRequestPart

    private let closed = OneTimeSignal()

    public init() {}

    public func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        if let event = event as? ChannelEvent, event == .inputClosed { closed.fire() }
        context.fireUserInboundEventTriggered(event)
    }

    public func errorCaught(context: ChannelHandlerContext, error: any Error) {
        if error is IOError { closed.fire() }  // reset by the peer, broken pipe
        context.fireErrorCaught(error)
    }

    public func channelInactive(context: ChannelHandlerContext) {
        closed.fire()
        context.fireChannelInactive()
    }

    /// Returns once the client has closed its side of the connection (at once if it already
    /// has), or when the calling task is cancelled.
    public func clientClosed() async { await closed.wait() }
}

extension HTTPField.Name {
    static let xForwardedFor = HTTPField.Name("X-Forwarded-For")!
}
