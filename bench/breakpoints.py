#!/usr/bin/env python3
"""Breakpoints by bytes (issue 60) over every format group of both bench corpora.

For each group, one `pipelinectl run` of a variant with breakpoints by bytes (WebP Q80, widths
320 to 1920, a step of BENCH_BP_STEP, 20KB by default, at most 10) and, in the same run of this
script, one of fixed variants at six widths (320, 640, 960, 1280, 1600, 1920, WebP Q80): the
price of choosing widths against not choosing them. Order alternates by group (bytes first in
even groups), two workers each.

Checked for every image (the issue's criterion): successive sizes differ by the step +-35%
(the last gap, and a set capped by max_images, are exempt), at most max_images widths, and the
run's `decodes` equals its items (one decode per source). Prints a Markdown table; exits 1 when
a check fails.

Usage: bench/breakpoints.py   (BENCH_BIN: the binary, default .build/release/pipelinectl)
"""
import os
import shutil
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "bench"))
from library import groups, run_report  # noqa: E402  (both corpora, by format group; one run and its report)

BIN = os.environ.get("BENCH_BIN", os.path.join(ROOT, ".build/release/pipelinectl"))
STEP = os.environ.get("BENCH_BP_STEP", "20KB")
MAX_IMAGES = 10
FIXED = [320, 640, 960, 1280, 1600, 1920]


def write_pipelines(work):
    by_bytes = os.path.join(work, "bytes.yaml")
    with open(by_bytes, "w") as f:
        f.write(f"""version: 1
name: bytes
decoder: imagemagick
processors: [ auto_orient ]
variants:
  web:
    breakpoints: {{ min_width: 320, max_width: 1920, bytes_step: {STEP}, max_images: {MAX_IMAGES} }}
    encoder: {{ webp: {{ quality: 80 }} }}
    name: "{{stem}}-{{width}}w.{{ext}}"
""")
    fixed = os.path.join(work, "fixed.yaml")
    with open(fixed, "w") as f:
        f.write("version: 1\nname: fixed\ndecoder: imagemagick\nprocessors: [ auto_orient ]\nencoder: { webp: { quality: 80 } }\nvariants:\n")
        for width in FIXED:
            f.write(f"  w{width}:\n    processors: [ {{ resize: {{ width: {width} }} }} ]\n")
        f.write("output:\n  name: \"{stem}-{variant}.{ext}\"\n")
    return by_bytes, fixed


def run(pipeline, files, work, label):
    return run_report(BIN, pipeline, files, work, label=label)


def check(data, step_bytes):
    """(steps checked, steps within +-35%, worst deviation, capped sets, failures, widths per image, trial share)."""
    checked = within = capped = 0
    worst = 0.0
    failures = []
    widths = []
    trial = encode = 0.0
    for item in data["items"]:
        if item["status"] != "ok":
            failures.append(f"{item['source']}: {item['status']} {item.get('error', {}).get('kind', '')}")
            continue
        choice = item["facts"]["breakpoints"]["by_bytes"]["web"]
        sizes = choice["bytes"]
        widths.append(len(sizes))
        trial += choice["trial_ms"]
        encode += choice["encode_ms"]
        if len(sizes) > MAX_IMAGES:
            failures.append(f"{item['source']}: {len(sizes)} widths")
        if choice["capped"]:
            capped += 1
            continue
        for a, b in list(zip(sizes, sizes[1:]))[:-1]:
            checked += 1
            deviation = (b - a - choice["step"]) / choice["step"]
            worst = max(worst, abs(deviation))
            if abs(deviation) <= 0.35:
                within += 1
            else:
                failures.append(f"{item['source']}: step {b - a} against {choice['step']} ({deviation:+.0%}) in {sizes}")
    if data["summary"].get("decodes") != data["summary"]["ok"]:
        failures.append(f"decodes {data['summary'].get('decodes')} for {data['summary']['ok']} items")
    return checked, within, worst, capped, failures, widths, trial / max(1.0, trial + encode)


def main():
    if not os.path.exists(BIN):
        sys.exit(f"no binary at {BIN}: build it (swift build -c release --product pipelinectl) or set BENCH_BIN")
    work = tempfile.mkdtemp(prefix="bench-breakpoints-", dir="/dev/shm" if os.path.isdir("/dev/shm") else None)
    by_bytes, fixed = write_pipelines(work)
    print(f"breakpoints by bytes: widths 320-1920, step {STEP}, at most {MAX_IMAGES}; fixed: {FIXED}; 2 workers\n")
    print("| group | images | widths per image (min/mean/max) | steps within ±35% | worst step | capped | "
          "trial share of encode time | wall bytes / fixed 6 | decodes |")
    print("|---|---|---|---|---|---|---|---|---|")
    all_failures = []
    for index, (label, files) in enumerate(groups()):
        order = [("bytes", by_bytes), ("fixed", fixed)] if index % 2 == 0 else [("fixed", fixed), ("bytes", by_bytes)]
        walls = {}
        for name, pipeline in order:
            walls[name], data_ = run(pipeline, files, work, name)
            if name == "bytes":
                data = data_
        checked, within, worst, capped, failures, widths, share = check(data, STEP)
        all_failures += [f"{label}: {f}" for f in failures]
        per = f"{min(widths)}/{sum(widths) / len(widths):.1f}/{max(widths)}" if widths else "-"
        print(f"| {label} | {len(files)} | {per} | {within}/{checked} | {worst:.0%} | {capped} | {share:.0%} | "
              f"{walls['bytes']:.2f} s / {walls['fixed']:.2f} s = {walls['bytes'] / walls['fixed']:.2f}x | "
              f"{data['summary'].get('decodes')} for {data['summary']['ok']} |")
    shutil.rmtree(work)
    if all_failures:
        print("\nfailed checks:")
        for failure in all_failures:
            print("  " + failure)
        sys.exit(1)


if __name__ == "__main__":
    main()
