#!/usr/bin/env python3
"""Draws one trace as an SVG waterfall: a row per span, indented under its parent, its bar from
start to end on a common time axis, with its name, duration and a few attributes.

The spans are the JSON lines Tests/TestSupport/otlp-receiver.py writes (what a real exporter sent).

Usage: trace-svg.py SPANS.jsonl (--trace TRACE_ID | --root NAME) [--attributes a,b,...] > trace.svg
"""
import argparse
import html
import json
import sys


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("spans")
    parser.add_argument("--trace")
    parser.add_argument("--root", help="the trace whose root span has this name (the first one)")
    parser.add_argument("--attributes", default="", help="attributes shown after each name")
    options = parser.parse_args()
    spans = [json.loads(line) for line in open(options.spans) if line.strip().startswith("{")]
    spans = [s for s in spans if "name" in s]
    trace = options.trace
    if not trace and options.root:
        trace = next((s["trace_id"] for s in spans if s["name"] == options.root), None)
    if not trace:
        sys.exit("trace-svg: no such trace")
    spans = [s for s in spans if s["trace_id"] == trace]
    ids = {s["span_id"] for s in spans}
    children = {}
    for span in spans:
        parent = span["parent_span_id"] if span["parent_span_id"] in ids else None
        children.setdefault(parent, []).append(span)
    rows = []

    def walk(parent, depth):
        for span in sorted(children.get(parent, []), key=lambda s: s["start"]):
            rows.append((depth, span))
            walk(span["span_id"], depth + 1)

    walk(None, 0)
    start = min(s["start"] for s in spans)
    end = max(s["end"] for s in spans)
    total = max(end - start, 1)
    shown = [a for a in options.attributes.split(",") if a]
    label_width, bar_width, row = 520, 460, 22
    height = row * len(rows) + 40
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{label_width + bar_width + 20}" height="{height}" '
           f'font-family="sans-serif" font-size="12">',
           '<rect width="100%" height="100%" fill="#fff"/>',
           f'<text x="8" y="16" fill="#555">trace {trace}: {total / 1e6:.1f} ms</text>']
    for index, (depth, span) in enumerate(rows):
        y = 28 + index * row
        x = label_width + (span["start"] - start) / total * bar_width
        width = max((span["end"] - span["start"]) / total * bar_width, 1.5)
        failed = span.get("status", {}).get("code") == 2
        colour = "#d04040" if failed else ("#4a78c2" if depth == 0 else "#6fa0e0")
        extra = " ".join(f"{a.removeprefix('pipelinectl.')}={span['attributes'][a]}" for a in shown if a in span["attributes"])
        x_name = 8 + 14 * depth
        out.append(f'<text x="{x_name}" y="{y + 14}" fill="#222">{html.escape(span["name"])}</text>')
        if extra:  # a text of its own (renderers that do not flow <tspan> overlap it otherwise)
            out.append(f'<text x="{x_name + 7 * len(span["name"]) + 10}" y="{y + 14}" fill="#777" font-size="11">{html.escape(extra)}</text>')
        out.append(f'<rect x="{x:.1f}" y="{y + 3}" width="{width:.1f}" height="14" rx="2" fill="{colour}"/>')
        out.append(f'<text x="{min(x + width + 4, label_width + bar_width - 60):.1f}" y="{y + 14}" fill="#555">'
                   f'{(span["end"] - span["start"]) / 1e6:.1f} ms</text>')
    out.append("</svg>")
    print("\n".join(out))


if __name__ == "__main__":
    main()
