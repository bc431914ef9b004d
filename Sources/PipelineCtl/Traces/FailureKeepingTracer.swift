import Foundation
import PipelineKit
import Synchronization
import Tracing

/// The sampler of `OTEL_TRACES_SAMPLER` and `OTEL_TRACES_SAMPLER_ARG`, decided here rather than
/// by the exporter: `always_on`, `always_off`, `traceidratio`, and `parentbased_` each of them
/// (the default, `parentbased_always_on`, follows a remote parent's sampled flag and keeps every
/// trace that starts here).
struct TraceSampler: Sendable, Equatable {
    enum Root: Sendable, Equatable {
        case always, never
        case ratio(Double)
    }

    var root: Root
    var parentBased: Bool

    /// The sampler `environment` names; `problem` says what was wrong with it (the default used).
    static func from(_ environment: [String: String]) -> (sampler: TraceSampler, problem: String?) {
        let name = (environment["OTEL_TRACES_SAMPLER"] ?? "parentbased_always_on").lowercased()
        let argument = environment["OTEL_TRACES_SAMPLER_ARG"]
        let parentBased = name.hasPrefix("parentbased_")
        let rootName = parentBased ? String(name.dropFirst("parentbased_".count)) : name
        switch rootName {
        case "always_on": return (TraceSampler(root: .always, parentBased: parentBased), nil)
        case "always_off": return (TraceSampler(root: .never, parentBased: parentBased), nil)
        case "traceidratio":
            guard let text = argument else { return (TraceSampler(root: .ratio(1), parentBased: parentBased), nil) }
            guard let ratio = Double(text), (0...1).contains(ratio) else {
                return (TraceSampler(root: .ratio(1), parentBased: parentBased),
                        "OTEL_TRACES_SAMPLER_ARG must be a ratio from 0 to 1, got '\(text)': sampling every trace")
            }
            return (TraceSampler(root: .ratio(ratio), parentBased: parentBased), nil)
        default:
            return (TraceSampler(root: .always, parentBased: true),
                    "OTEL_TRACES_SAMPLER '\(name)' is not one of always_on, always_off, traceidratio and their parentbased_ forms: using parentbased_always_on")
        }
    }

    /// Whether a trace that starts here (`remoteSampled`: the remote parent's flag, `nil` with
    /// none) with `traceID` is sampled.
    func sampled(traceID: String, remoteSampled: Bool?) -> Bool {
        if parentBased, let remoteSampled { return remoteSampled }
        switch root {
        case .always: return true
        case .never: return false
        case .ratio(let ratio):
            // The trace id's low 64 bits against the ratio's share of them, as OpenTelemetry's
            // TraceIdRatioBased does: the same trace is sampled alike wherever it is decided.
            guard ratio < 1 else { return true }
            let low = UInt64(traceID.suffix(16), radix: 16) ?? 0
            return Double(low) < ratio * Double(UInt64.max)
        }
    }
}

/// The process's tracer with traces on: `base` (the exporter's) samples every span it is given,
/// and this tracer decides which traces it is given.
///
/// A sampled trace's spans go straight to `base`. An unsampled one's are kept here as records,
/// with their own ids (its trace id inherited from a remote parent, or new), and propagated with
/// the sampled flag off; when its local root ends, they are dropped, unless one of them failed
/// (an error status): then they are all given to `base` with their times, attributes, events and
/// status, so that a failed item's spans are exported whatever the sampling rate. The replayed
/// root continues the remote parent, or else names the root's first id as its parent (an id no
/// exported span has: the trace id is the one every answer, report and log line already named),
/// and carries `pipelinectl.kept_on_failure`.
final class FailureKeepingTracer<Base: Tracer>: Tracer, Sendable {
    typealias Span = KeptSpan

    let base: Base
    let sampler: TraceSampler

    init(base: Base, sampler: TraceSampler) {
        self.base = base
        self.sampler = sampler
    }

    func startSpan<Instant: TracerInstant>(
        _ operationName: String, context: @autoclosure () -> ServiceContext, ofKind kind: SpanKind,
        at instant: @autoclosure () -> Instant, function: String, file fileID: String, line: UInt
    ) -> KeptSpan {
        let parent = context()
        let start = instant().nanosecondsSinceEpoch
        if let tree = parent.deferredTree {
            return KeptSpan(deferred: tree.start(operationName, kind: kind, parent: parent.deferredSpan, at: start), in: parent)
        }
        if parent.forwardedTrace {
            return KeptSpan(forwarded: base.startSpan(operationName, context: parent, ofKind: kind, at: NanosecondInstant(start)))
        }
        let remote = Traceparent(EngineSpans.propagation(of: parent, tracer: base))
        let traceID = remote?.traceID ?? Traceparent.newTraceID()
        if sampler.sampled(traceID: traceID, remoteSampled: remote?.sampled) {
            return KeptSpan(forwarded: base.startSpan(operationName, context: parent, ofKind: kind, at: NanosecondInstant(start)))
        }
        let tree = DeferredTree(traceID: traceID, remote: remote, replay: { [base] spans, root in Self.replay(spans, root: root, into: base) })
        return KeptSpan(deferred: tree.start(operationName, kind: kind, parent: nil, at: start), in: parent)
    }

    /// Flushing is the exporter service's (its graceful shutdown).
    func forceFlush() {}

    func activeSpan(identifiedBy context: ServiceContext) -> KeptSpan? { nil }

    func inject<Carrier, Inject: Injector>(_ context: ServiceContext, into carrier: inout Carrier, using injector: Inject)
    where Inject.Carrier == Carrier {
        if let tree = context.deferredTree, let span = context.deferredSpan {
            injector.inject("00-\(tree.traceID)-\(span.spanID)-00", forKey: "traceparent", into: &carrier)
            if let state = tree.remote?.state, !state.isEmpty { injector.inject(state, forKey: "tracestate", into: &carrier) }
        } else {
            base.inject(context, into: &carrier, using: injector)
        }
    }

    func extract<Carrier, Extract: Extractor>(_ carrier: Carrier, into context: inout ServiceContext, using extractor: Extract)
    where Extract.Carrier == Carrier {
        base.extract(carrier, into: &context, using: extractor)
    }

    /// Gives `base` the spans of a failed unsampled trace, parents before children.
    static func replay(_ spans: [DeferredSpan], root: DeferredSpan, into base: Base) {
        let tree = root.tree
        var parent = ServiceContext.topLevel
        let carrier = ["traceparent": "00-\(tree.traceID)-\(tree.remote?.spanID ?? root.spanID)-01",
                       "tracestate": tree.remote?.state ?? ""]
        base.extract(carrier, into: &parent, using: HeaderExtractor())
        var made: [ObjectIdentifier: ServiceContext] = [:]
        for span in spans.sorted(by: { $0.start < $1.start }) {
            let record = span.record.withLock { $0 }
            let context = span.parent.flatMap { made[ObjectIdentifier($0)] } ?? parent
            let replayed = base.startSpan(record.name, context: context, ofKind: span.kind, at: NanosecondInstant(span.start))
            made[ObjectIdentifier(span)] = replayed.context
            var attributes = record.attributes
            if span === root { attributes["pipelinectl.kept_on_failure"] = true }
            replayed.attributes = attributes
            for event in record.events { replayed.addEvent(event) }
            for (error, errorAttributes, at) in record.errors {
                replayed.recordError(error, attributes: errorAttributes, at: NanosecondInstant(at))
            }
            if let status = record.status { replayed.setStatus(status) }
            replayed.end(at: NanosecondInstant(record.end ?? span.start))
        }
    }
}

/// A span of ``FailureKeepingTracer``: the exporter's own, or a record of an unsampled trace.
final class KeptSpan: Tracing.Span, Sendable {
    enum Kind: Sendable {
        case forwarded(any Tracing.Span)
        case deferred(DeferredSpan)
    }

    let kind: Kind
    let context: ServiceContext

    init(forwarded span: any Tracing.Span) {
        kind = .forwarded(span)
        var context = span.context
        context.forwardedTrace = true
        self.context = context
    }

    /// A record's context: the parent's values, with this span's.
    init(deferred span: DeferredSpan, in parent: ServiceContext) {
        kind = .deferred(span)
        var context = parent
        context.deferredTree = span.tree
        context.deferredSpan = span
        self.context = context
    }

    var operationName: String {
        get {
            switch kind {
            case .forwarded(let span): span.operationName
            case .deferred(let span): span.record.withLock { $0.name }
            }
        }
        set {
            switch kind {
            case .forwarded(let span): span.operationName = newValue
            case .deferred(let span): span.record.withLock { $0.name = newValue }
            }
        }
    }

    var attributes: SpanAttributes {
        get {
            switch kind {
            case .forwarded(let span): span.attributes
            case .deferred(let span): span.record.withLock { $0.attributes }
            }
        }
        set {
            switch kind {
            case .forwarded(let span): span.attributes = newValue
            case .deferred(let span): span.record.withLock { $0.attributes = newValue }
            }
        }
    }

    var isRecording: Bool {
        switch kind {
        case .forwarded(let span): span.isRecording
        case .deferred(let span): span.record.withLock { $0.end == nil }
        }
    }

    func setStatus(_ status: SpanStatus) {
        switch kind {
        case .forwarded(let span): span.setStatus(status)
        case .deferred(let span):
            span.record.withLock { $0.status = status }
            if status.code == .error { span.tree.failed() }
        }
    }

    func addEvent(_ event: SpanEvent) {
        switch kind {
        case .forwarded(let span): span.addEvent(event)
        case .deferred(let span): span.record.withLock { $0.events.append(event) }
        }
    }

    func recordError<Instant: TracerInstant>(_ error: any Error, attributes: SpanAttributes, at instant: @autoclosure () -> Instant) {
        switch kind {
        case .forwarded(let span): span.recordError(error, attributes: attributes, at: instant())
        case .deferred(let span):
            let at = instant().nanosecondsSinceEpoch
            span.record.withLock { $0.errors.append((error, attributes, at)) }
        }
    }

    func addLink(_ link: SpanLink) {
        if case .forwarded(let span) = kind { span.addLink(link) }  // a record's links point nowhere once replayed
    }

    func end<Instant: TracerInstant>(at instant: @autoclosure () -> Instant) {
        switch kind {
        case .forwarded(let span): span.end(at: instant())
        case .deferred(let span): span.tree.end(span, at: instant().nanosecondsSinceEpoch)
        }
    }
}

/// One span of an unsampled trace, as recorded.
final class DeferredSpan: Sendable {
    struct Record: @unchecked Sendable {  // SpanEvent, SpanLink and errors are values handed over whole
        var name: String
        var attributes = SpanAttributes()
        var events: [SpanEvent] = []
        var errors: [(any Error, SpanAttributes, UInt64)] = []
        var status: SpanStatus?
        var end: UInt64?
    }

    let tree: DeferredTree
    let parent: DeferredSpan?
    let kind: SpanKind
    let start: UInt64
    let spanID: String
    let record: Mutex<Record>

    init(tree: DeferredTree, parent: DeferredSpan?, name: String, kind: SpanKind, start: UInt64) {
        self.tree = tree
        self.parent = parent
        self.kind = kind
        self.start = start
        spanID = Traceparent.newSpanID()
        record = Mutex(Record(name: name))
    }
}

/// The spans of one unsampled trace in this process, until its root ends.
final class DeferredTree: Sendable {
    struct State {
        var spans: [DeferredSpan] = []
        var failed = false
        /// Decided at the root's end: replayed (a span failed) or dropped.
        var decided: Bool?
        var root: DeferredSpan?
    }

    let traceID: String
    let remote: Traceparent?
    let replay: @Sendable ([DeferredSpan], DeferredSpan) -> Void
    let state = Mutex(State())

    init(traceID: String, remote: Traceparent?, replay: @escaping @Sendable ([DeferredSpan], DeferredSpan) -> Void) {
        self.traceID = traceID
        self.remote = remote
        self.replay = replay
    }

    func start(_ name: String, kind: SpanKind, parent: DeferredSpan?, at start: UInt64) -> DeferredSpan {
        let span = DeferredSpan(tree: self, parent: parent, name: name, kind: kind, start: start)
        state.withLock { state in
            if state.root == nil { state.root = span }
            if state.decided == nil { state.spans.append(span) }
        }
        return span
    }

    func failed() { state.withLock { $0.failed = true } }

    /// Ends `span`; the root's end decides the trace. A span that ends after it is replayed
    /// alone when the trace was kept, or dropped.
    func end(_ span: DeferredSpan, at instant: UInt64) {
        let first = span.record.withLock { record in
            defer { if record.end == nil { record.end = instant } }
            return record.end == nil
        }
        guard first else { return }
        let (spans, root) = state.withLock { state -> ([DeferredSpan], DeferredSpan?) in
            guard let root = state.root else { return ([], nil) }
            if let decided = state.decided { return decided ? ([span], root) : ([], nil) }
            guard span === root else { return ([], nil) }
            state.decided = state.failed
            defer { state.spans = [] }
            return state.failed ? (state.spans, root) : ([], nil)
        }
        if let root, !spans.isEmpty { replay(spans, root) }
    }
}

/// An instant given in nanoseconds since the epoch (a recorded span's times, replayed).
struct NanosecondInstant: TracerInstant {
    let nanosecondsSinceEpoch: UInt64

    init(_ nanoseconds: UInt64) { nanosecondsSinceEpoch = nanoseconds }

    static func < (lhs: NanosecondInstant, rhs: NanosecondInstant) -> Bool { lhs.nanosecondsSinceEpoch < rhs.nanosecondsSinceEpoch }
}

private enum DeferredTreeKey: ServiceContextKey { typealias Value = DeferredTree }
private enum DeferredSpanKey: ServiceContextKey { typealias Value = DeferredSpan }
private enum ForwardedTraceKey: ServiceContextKey { typealias Value = Bool }

extension ServiceContext {
    /// The unsampled trace a span of ``FailureKeepingTracer`` belongs to, and the span.
    var deferredTree: DeferredTree? {
        get { self[DeferredTreeKey.self] }
        set { self[DeferredTreeKey.self] = newValue }
    }

    var deferredSpan: DeferredSpan? {
        get { self[DeferredSpanKey.self] }
        set { self[DeferredSpanKey.self] = newValue }
    }

    /// Whether the context's span is a sampled one of ``FailureKeepingTracer`` (its children are too).
    var forwardedTrace: Bool {
        get { self[ForwardedTraceKey.self] ?? false }
        set { self[ForwardedTraceKey.self] = newValue }
    }
}
