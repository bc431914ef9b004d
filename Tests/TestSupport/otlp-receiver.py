#!/usr/bin/env python3
"""A real OTLP/HTTP trace receiver for the tests: no OpenTelemetry Collector is packaged in Debian
or on PyPI, so this decodes what an exporter sends with the OpenTelemetry project's own protobuf
definitions (`opentelemetry-proto` on PyPI) and writes each span as one JSON line.

  POST /v1/traces   application/x-protobuf (or application/json), gzip or not: an
                    ExportTraceServiceRequest; answered 200 with an empty ExportTraceServiceResponse
  --answer 500      answer every export 500 instead (an exporter that is down behind a proxy)
  --delay S         wait S seconds before answering (a slow exporter)
  --count-only      decode each export but write one line per export, {"spans": N}, not one per
                    span (the benchmarks: far less of the machine's CPU than a line per span)

Prints `listening PORT` once it listens. Each span line: trace_id, span_id, parent_span_id (hex),
name, kind, start and end (unix ns), status {code, message}, attributes, links [{trace_id,
span_id, attributes}], and resource (the resource's attributes).

Usage: otlp-receiver.py --out spans.jsonl [--port 0] [--answer 200] [--delay 0]
"""
import argparse
import gzip
import http.server
import json
import sys
import threading
import time

from google.protobuf import json_format
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2


def value(any_value):
    kind = any_value.WhichOneof("value")
    if kind == "array_value":
        return [value(v) for v in any_value.array_value.values]
    if kind == "kvlist_value":
        return {kv.key: value(kv.value) for kv in any_value.kvlist_value.values}
    if kind == "bytes_value":
        return any_value.bytes_value.hex()
    return getattr(any_value, kind) if kind else None


def attributes(pairs):
    return {kv.key: value(kv.value) for kv in pairs}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--answer", type=int, default=200)
    parser.add_argument("--delay", type=float, default=0)
    parser.add_argument("--count-only", action="store_true")
    options = parser.parse_args()
    lock = threading.Lock()
    out = open(options.out, "a", buffering=1)

    class Handler(http.server.BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def do_POST(self):
            body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            if self.headers.get("Content-Encoding", "") == "gzip":
                body = gzip.decompress(body)
            if options.delay:
                time.sleep(options.delay)
            if self.path != "/v1/traces":
                self.send_response(404)
                self.end_headers()
                return
            if options.answer != 200:
                with lock:
                    out.write(json.dumps({"refused": options.answer, "bytes": len(body)}) + "\n")
                self.send_response(options.answer)
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            request = trace_service_pb2.ExportTraceServiceRequest()
            if self.headers.get("Content-Type", "").startswith("application/json"):
                json_format.Parse(body, request)
            else:
                request.ParseFromString(body)
            lines = []
            if options.count_only:
                count = sum(len(scope.spans) for resources in request.resource_spans for scope in resources.scope_spans)
                lines.append(json.dumps({"spans": count}))
            for resource_spans in ([] if options.count_only else request.resource_spans):
                resource = attributes(resource_spans.resource.attributes)
                for scope_spans in resource_spans.scope_spans:
                    for span in scope_spans.spans:
                        lines.append(json.dumps({
                            "trace_id": span.trace_id.hex(), "span_id": span.span_id.hex(),
                            "parent_span_id": span.parent_span_id.hex(), "name": span.name, "kind": span.kind,
                            "start": span.start_time_unix_nano, "end": span.end_time_unix_nano,
                            "status": {"code": span.status.code, "message": span.status.message},
                            "attributes": attributes(span.attributes),
                            "links": [{"trace_id": link.trace_id.hex(), "span_id": link.span_id.hex(),
                                       "attributes": attributes(link.attributes)} for link in span.links],
                            "resource": resource,
                        }))
            with lock:
                for line in lines:
                    out.write(line + "\n")
            answer = trace_service_pb2.ExportTraceServiceResponse().SerializeToString()
            self.send_response(200)
            self.send_header("Content-Type", "application/x-protobuf")
            self.send_header("Content-Length", str(len(answer)))
            self.end_headers()
            self.wfile.write(answer)

    server = http.server.ThreadingHTTPServer(("127.0.0.1", options.port), Handler)
    print(f"listening {server.server_address[1]}", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    sys.exit(main())
