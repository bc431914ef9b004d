import Foundation
import PipelineKit
import Tracing

/// The bookkeeping of a queue list (SQS, PostgreSQL): the messages received and not yet settled,
/// and which sources each waits for. A message is finished when every source it named is settled;
/// the same source named by several held messages (duplicates) settles them one by one, in order.
struct HeldMessages<Message: Sendable>: Sendable {
    /// A received message and the sources of it not yet settled.
    struct Held: Sendable {
        var message: Message
        var pending: Int
        var failures: [ItemError] = []
        /// The message's span (``MessageTrace``), ended when it is settled or handed back.
        var span: (any Span)?
    }

    private(set) var held: [String: Held] = [:]
    /// Source text -> ids of the held messages waiting for it.
    private var waiting: [String: [String]] = [:]
    private var nextIndex = 1

    var count: Int { held.count }
    var messages: [Message] { held.values.map(\.message) }

    /// Whether the message `id` is held.
    func contains(_ id: String) -> Bool { held[id] != nil }

    /// Replaces the handle of a held message received again (only the newest handle may
    /// acknowledge it, in SQS).
    mutating func replace(_ id: String, with message: Message) { held[id]?.message = message }

    /// Holds `message` until each of `sources` is settled; the sources for the engine, numbered.
    /// `versions`: each source's version, when the message tells it (``Source/version``).
    /// `span`: the message's, whose trace the sources' items continue.
    mutating func hold(_ id: String, _ message: Message, sources: [String], versions: [String?] = [], span: (any Span)? = nil) -> [Source] {
        held[id] = Held(message: message, pending: sources.count, span: span)
        return sources.enumerated().map { offset, text in
            waiting[text, default: []].append(id)
            defer { nextIndex += 1 }
            var source = Source(text: text, index: nextIndex, version: offset < versions.count ? versions[offset] : nil)
            source.trace = span.map { SourceTrace($0.context) }
            return source
        }
    }

    /// Settles one source of the first message waiting for it; that message when it is now finished.
    mutating func settle(_ text: String, as result: ItemResult) -> Held? {
        guard let id = waiting[text]?.first else { return nil }
        waiting[text]?.removeFirst()
        if waiting[text]?.isEmpty == true { waiting[text] = nil }
        guard var entry = held[id] else { return nil }
        entry.pending -= 1
        if result.status == .failed, let error = result.error { entry.failures.append(error) }
        guard entry.pending <= 0 else {
            held[id] = entry
            return nil
        }
        held[id] = nil
        if let span = entry.span {
            if let failure = entry.failures.first {
                span.attributes["pipelinectl.error.kind"] = failure.kind.rawValue
                span.setStatus(SpanStatus(code: .error, message: failure.message))
            }
            span.end()
        }
        return entry
    }

    /// Forgets every held message; those messages (to hand back).
    mutating func removeAll() -> [Message] {
        defer {
            held = [:]
            waiting = [:]
        }
        for span in held.values.compactMap(\.span) {
            span.attributes["pipelinectl.handed_back"] = true
            span.end()
        }
        return messages
    }
}

/// How a queue settles a failed item, the same for every queue.
enum QueueSettlement {
    /// Runs `body` every `seconds` until it returns `false` (its list is gone) or the task is
    /// cancelled: a queue list's lease keeper and its flusher of done messages.
    static func repeating(every seconds: Double, _ body: @escaping @Sendable () async -> Bool) -> Task<Void, Never> {
        Task {
            while !Task.isCancelled {
                try? await Task.sleep(for: .seconds(seconds))
                guard await body() else { return }
            }
        }
    }

    /// `call` run to its end even when the calling task is cancelled (its own task, which does not
    /// inherit the cancellation): for settling calls a queue must see through, a deletion taken
    /// out of what waits to be deleted, or an extension that must land before a hand-back.
    static func uncancelled<T: Sendable>(_ call: @escaping @Sendable () async throws -> T) async throws -> T {
        try await Task { try await call() }.value
    }

    /// Cancels `tasks` (a list's flusher and keeper) and waits for each to end: a settling call one
    /// had begun runs to its end (``uncancelled(_:)``) before whatever the caller does next.
    static func stop(_ tasks: Task<Void, Never>?...) async {
        for task in tasks { task?.cancel() }
        for task in tasks { await task?.value }
    }

    /// Whether a failure may pass if the item is tried again later: the message is released for
    /// redelivery with a backoff rather than recorded as failed.
    static func mayPass(_ error: ItemError) -> Bool {
        switch error.kind {
        case .timeout, .dns, .connect, .tls, .network, .truncated, .io, .writeFailed, .cancelled, .auth, .eventPending: return true
        case .httpStatus: return error.message.contains("HTTP 5") || error.message.contains("HTTP 429")
        default: return error.stage == .output && error.kind != .outputCollision
        }
    }

    /// The wait before a released message comes back: 10 s doubling with each delivery, at most 15 minutes.
    static func backoff(deliveries: Int) -> Int { min(900, 10 * (1 << min(7, max(0, deliveries - 1)))) }
}
