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
struct EngineSpans: Sendable {
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
