import Tracing

/// The engine's spans (swift-distributed-tracing): one per item, and under it one per stage
/// (load, decode, each processor, encode, store). They go to ``RunOptions/tracer``, or else to
/// the process's tracer (`InstrumentationSystem.tracer`), which is a no-op unless the program set
/// one up: the library bootstraps nothing, and with no tracer a span costs a few calls.
///
/// An item's span continues the task's context (`ServiceContext.current`): a caller that runs an
/// item under a request's or a message's context (`ServiceContext.withValue`) gets the item in
/// that trace. Work that runs on the engine's worker threads starts its spans from a context
/// handed over explicitly, since task-local values do not cross to those threads.
package struct EngineSpans: Sendable {
    /// `nil`: the process's tracer, looked up at each span (a program may set it up after the
    /// runner was made).
    let tracer: (any Tracer)?

    var current: any Tracer { tracer ?? InstrumentationSystem.tracer }

    /// Runs `body` in a span `name`, a child of the task's context, which is the span's while
    /// `body` runs; ended when `body` returns or throws, a thrown error recorded with its kind.
    func with<T>(_ name: String, kind: SpanKind = .internal, _ body: (any Span) async throws -> T) async throws -> T {
        let span = Self.start(current, name, context: ServiceContext.current ?? .topLevel, kind: kind)
        defer { span.end() }
        do {
            return try await ServiceContext.$current.withValue(span.context) { try await body(span) }
        } catch {
            Self.fail(span, error)
            throw error
        }
    }

    /// A span `name` from `context`, for work on a worker thread: the caller ends it. `at`: when
    /// it began, when that was before now.
    func start(_ name: String, context: ServiceContext, kind: SpanKind = .internal,
               at instant: DefaultTracerClock.Instant = DefaultTracerClock.now) -> any Span {
        Self.start(current, name, context: context, kind: kind, at: instant)
    }

    private static func start<T: Tracer>(_ tracer: T, _ name: String, context: ServiceContext, kind: SpanKind,
                                         at instant: DefaultTracerClock.Instant = DefaultTracerClock.now) -> any Span {
        tracer.startSpan(name, context: context, ofKind: kind, at: instant)
    }

    /// The W3C trace id of `span`: what the tracer puts in a `traceparent` for its context;
    /// `nil` when it propagates none (the no-op tracer) or something else.
    func traceID(of span: any Span) -> String? {
        Self.traceparent(of: span.context, tracer: current).flatMap(Self.traceID(traceparent:))
    }

    /// The `traceparent` `tracer` propagates for `context` (the process's tracer by default);
    /// `nil` when it propagates none.
    package static func traceparent(of context: ServiceContext?, tracer: (any Tracer)? = nil) -> String? {
        propagation(of: context, tracer: tracer)["traceparent"]
    }

    /// The headers `tracer` propagates for `context` (`traceparent`, `tracestate`, by lower-cased
    /// name); empty when none.
    package static func propagation(of context: ServiceContext?, tracer: (any Tracer)? = nil) -> [String: String] {
        guard let context else { return [:] }
        var headers: [String: String] = [:]
        (tracer ?? InstrumentationSystem.tracer).inject(context, into: &headers, using: HeaderInjector())
        return headers
    }

    /// The trace id of the task's context (`ServiceContext.current`) through the process's
    /// tracer: what a failed answer or a log line names.
    package static var currentTraceID: String? {
        traceparent(of: ServiceContext.current).flatMap(traceID(traceparent:))
    }

    /// The trace id of a W3C `traceparent` (`00-TRACEID-SPANID-FLAGS`); `nil` when malformed.
    package static func traceID(traceparent: String) -> String? {
        Traceparent(["traceparent": traceparent])?.traceID
    }

    /// Marks `span` failed by `error`: recorded, the status an error, and the failure's kind and
    /// stage as the report gives them (`pipelinectl.error.kind`, `pipelinectl.error.stage`).
    static func fail(_ span: any Span, _ error: any Error) {
        guard span.isRecording else { return }
        span.recordError(error)
        if let failure = error as? PipelineError {
            span.attributes["pipelinectl.error.kind"] = failure.kind.rawValue
            if let stage = failure.stage { span.attributes["pipelinectl.error.stage"] = stage.rawValue }
            span.setStatus(SpanStatus(code: .error, message: failure.message))
        } else {
            span.setStatus(SpanStatus(code: .error))
        }
    }
}

/// The span of a batch run, in the context its items run under: each item is then a trace of its
/// own, linked to the run's span rather than its child (a run of 10,000 items is not one trace).
private enum BatchRunKey: ServiceContextKey { typealias Value = ServiceContext }

extension ServiceContext {
    /// The context of the batch run's span, when the items run under one (`pipelinectl run`).
    package var batchRun: ServiceContext? {
        get { self[BatchRunKey.self] }
        set { self[BatchRunKey.self] = newValue }
    }
}

/// Headers into a dictionary by lower-cased name, for reading what a tracer propagates.
package struct HeaderInjector: Injector {
    package init() {}

    package func inject(_ value: String, forKey key: String, into carrier: inout [String: String]) {
        carrier[key.lowercased()] = value
    }
}

/// Headers out of a dictionary (as given, or by lower-cased name), for a tracer to continue a
/// context carried in message attributes or columns.
package struct HeaderExtractor: Extractor {
    package init() {}

    package func extract(key: String, from carrier: [String: String]) -> String? {
        carrier[key] ?? carrier[key.lowercased()]
    }
}

/// A W3C `traceparent`'s parts.
package struct Traceparent: Sendable, Equatable {
    package let traceID: String
    package let spanID: String
    package let sampled: Bool
    package var state: String?

    package init(traceID: String, spanID: String, sampled: Bool, state: String? = nil) {
        self.traceID = traceID
        self.spanID = spanID
        self.sampled = sampled
        self.state = state
    }

    /// From propagated headers; `nil` when there is no valid `traceparent`.
    package init?(_ headers: [String: String]) {
        guard let text = headers["traceparent"] else { return nil }
        let parts = text.lowercased().split(separator: "-", omittingEmptySubsequences: false)
        // Version 00 has exactly four parts; a later version may add more after them.
        guard parts.count == 4 || (parts.count > 4 && parts[0] != "00"), parts[0].count == 2, parts[0] != "ff", parts[1].count == 32, parts[2].count == 16, parts[3].count == 2,
              parts.allSatisfy({ $0.allSatisfy(\.isHexDigit) }), parts[1].contains(where: { $0 != "0" }),
              parts[2].contains(where: { $0 != "0" }), let flags = UInt8(parts[3], radix: 16) else { return nil }
        traceID = String(parts[1])
        spanID = String(parts[2])
        sampled = flags & 1 == 1
        state = headers["tracestate"]
    }

    package static func newTraceID() -> String { hex(UInt64.random(in: 1...UInt64.max)) + hex(UInt64.random(in: 1...UInt64.max)) }
    package static func newSpanID() -> String { hex(UInt64.random(in: 1...UInt64.max)) }

    private static func hex(_ value: UInt64) -> String {
        let digits = String(value, radix: 16)
        return String(repeating: "0", count: 16 - digits.count) + digits
    }
}
