import InMemoryTracing
import PipelineKit
import Testing
import Tracing
@testable import PipelineCtl

/// The sampler of OTEL_TRACES_SAMPLER, decided by pipelinectl so that a failed item is exported
/// whatever the rate (issue 63): a sampled trace goes straight to the exporter's tracer; an
/// unsampled one is kept aside and dropped, unless a span of it failed, when it is given whole.
@Suite struct TraceSamplingTests {
    @Test func theSamplerVariablesAreReadAsOpenTelemetrySaysAndBadOnesSaid() {
        #expect(TraceSampler.from([:]).sampler == TraceSampler(root: .always, parentBased: true))
        #expect(TraceSampler.from(["OTEL_TRACES_SAMPLER": "always_off"]).sampler == TraceSampler(root: .never, parentBased: false))
        let ratio = TraceSampler.from(["OTEL_TRACES_SAMPLER": "parentbased_traceidratio", "OTEL_TRACES_SAMPLER_ARG": "0.25"])
        #expect(ratio.sampler == TraceSampler(root: .ratio(0.25), parentBased: true) && ratio.problem == nil)
        let bad = TraceSampler.from(["OTEL_TRACES_SAMPLER": "traceidratio", "OTEL_TRACES_SAMPLER_ARG": "lots"])
        #expect(bad.sampler.root == .ratio(1) && bad.problem?.contains("'lots'") == true)
        let unknown = TraceSampler.from(["OTEL_TRACES_SAMPLER": "jaeger_remote"])
        #expect(unknown.sampler == TraceSampler(root: .always, parentBased: true) && unknown.problem?.contains("jaeger_remote") == true)
    }

    /// A `traceparent` as W3C Trace Context reads it: version 00 exactly four fields of 2, 32, 16
    /// and 2 hex digits (any case, kept lower-case); a later version may add fields after them;
    /// version ff, an all-zero id and anything else are refused.
    @Test func aTraceparentIsReadAsTraceContextSays() throws {
        let trace = "0af7651916cd43dd8448eb211c80319c", span = "b7ad6b7169203331"
        let read = try #require(Traceparent(["traceparent": "00-\(trace)-\(span)-01", "tracestate": "a=1"]))
        #expect(read == Traceparent(traceID: trace, spanID: span, sampled: true, state: "a=1"))
        #expect(Traceparent(["traceparent": "00-\(trace.uppercased())-\(span.uppercased())-00"]) == Traceparent(traceID: trace, spanID: span, sampled: false))
        #expect(Traceparent(["traceparent": "01-\(trace)-\(span)-03-beef-"])?.sampled == true, "a later version's extra fields")
        for bad in ["", "00-\(trace)-\(span)", "00-\(trace)-\(span)-01-beef", "ff-\(trace)-\(span)-01", "0-\(trace)-\(span)-01",
                    "00-\(trace.dropLast())-\(span)-01", "00-\(trace)x-\(span)-01", "00-\(trace)-\(span)-0g", "00_\(trace)-\(span)-01",
                    "00-\(String(repeating: "0", count: 32))-\(span)-01", "00-\(trace)-0000000000000000-01", "01-\(trace)-\(span)-01-xyz",
                    "00-\(trace)-\(span)-01\u{00e9}", "00-0af7651916cd43dd8448eb211c80319\u{00e9}-\(span)-01"] {
            #expect(Traceparent(["traceparent": bad]) == nil, "\(bad)")
        }
        let traces = (0..<10_000).map { _ in Traceparent.newTraceID() }, spans = (0..<10_000).map { _ in Traceparent.newSpanID() }
        #expect(Set(traces).count == traces.count && Set(spans).count == spans.count)
        #expect(traces.allSatisfy { $0.utf8.count == 32 && $0.allSatisfy { "0123456789abcdef".contains($0) } })
        #expect(spans.allSatisfy { $0.utf8.count == 16 && $0.allSatisfy { "0123456789abcdef".contains($0) } && $0 != String(repeating: "0", count: 16) })
    }

    /// A ratio samples about that share of trace ids, the same id alike each time; a remote
    /// parent's flag decides for parentbased samplers.
    @Test func aRatioSamplesItsShareAndAParentDecidesForParentBased() {
        let sampler = TraceSampler(root: .ratio(0.25), parentBased: true)
        let ids = (0..<4000).map { _ in Traceparent.newTraceID() }
        let share = Double(ids.filter { sampler.sampled(traceID: $0, remoteSampled: nil) }.count) / Double(ids.count)
        #expect(abs(share - 0.25) < 0.04, "\(share)")
        #expect(ids.allSatisfy { sampler.sampled(traceID: $0, remoteSampled: nil) == sampler.sampled(traceID: $0, remoteSampled: nil) })
        #expect(ids.allSatisfy { sampler.sampled(traceID: $0, remoteSampled: true) })
        #expect(!ids.contains { sampler.sampled(traceID: $0, remoteSampled: false) })
        #expect(!TraceSampler(root: .never, parentBased: false).sampled(traceID: ids[0], remoteSampled: true))
    }

    /// Spans of one item under `tracer`: the item, a load and a decode under it; the decode fails
    /// when `fails`.
    func item(_ tracer: some Tracer, fails: Bool) {
        let item = tracer.startSpan("item", context: .topLevel)
        let load = tracer.startSpan("load", context: item.context)
        load.attributes["pipelinectl.bytes_in"] = 1234
        load.end()
        let decode = tracer.startSpan("decode", context: item.context)
        if fails {
            decode.recordError(PipelineError(.decodeFailed, "bad bytes"))
            decode.setStatus(SpanStatus(code: .error, message: "bad bytes"))
        }
        decode.end()
        item.end()
    }

    @Test func anUnsampledTraceIsDroppedUnlessItFailedThenGivenWhole() throws {
        let base = InMemoryTracer()
        let tracer = FailureKeepingTracer(base: base, sampler: TraceSampler(root: .never, parentBased: true))
        item(tracer, fails: false)
        #expect(base.finishedSpans.isEmpty, "an unsampled trace that went well is dropped")
        item(tracer, fails: true)
        let spans = base.finishedSpans
        #expect(spans.map(\.operationName).sorted() == ["decode", "item", "load"])
        let root = try #require(spans.first { $0.operationName == "item" })
        #expect(root.attributes["pipelinectl.kept_on_failure"]?.toSpanAttribute() == .bool(true))
        #expect(spans.filter { $0.operationName != "item" }.allSatisfy { $0.parentSpanID == root.spanID && $0.traceID == root.traceID })
        let decode = try #require(spans.first { $0.operationName == "decode" })
        #expect(decode.status?.code == .error && decode.errors.count == 1)
        let load = try #require(spans.first { $0.operationName == "load" })
        #expect(load.attributes["pipelinectl.bytes_in"]?.toSpanAttribute() == .int64(1234))
        #expect(load.startInstant.nanosecondsSinceEpoch <= load.endInstant.nanosecondsSinceEpoch)
    }

    /// Sampled: every span goes straight to the exporter's tracer, ended as it ends.
    @Test func aSampledTraceGoesStraightThrough() {
        let base = InMemoryTracer()
        let tracer = FailureKeepingTracer(base: base, sampler: TraceSampler(root: .always, parentBased: true))
        let item = tracer.startSpan("item", context: .topLevel)
        let load = tracer.startSpan("load", context: item.context)
        load.end()
        #expect(base.finishedSpans.map(\.operationName) == ["load"])
        item.end()
        #expect(base.finishedSpans.count == 2)
    }

    /// An unsampled span propagates its trace with the sampled flag off, so an origin that
    /// traces does not keep what this process may drop.
    @Test func anUnsampledSpanPropagatesItsTraceUnsampled() throws {
        let tracer = FailureKeepingTracer(base: InMemoryTracer(), sampler: TraceSampler(root: .never, parentBased: true))
        let span = tracer.startSpan("item", context: .topLevel)
        let parent = try #require(Traceparent(EngineSpans.propagation(of: span.context, tracer: tracer)))
        #expect(!parent.sampled && parent.traceID.count == 32)
        span.end()
    }
}
