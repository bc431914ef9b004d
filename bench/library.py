#!/usr/bin/env python3
"""The library API against `pipelinectl run`, in one run, on every format group: the same
pipeline (fit in 512x512, JPEG q80) and the same list of local files, each group through
`pipelinectl run` and through `pipelinectl bench-library` (ImagePipelines.process with the
pipeline's own output:, as many items in flight as run keeps), alternating (A B A B ...), each
time as a fresh process into a fresh output directory. Reported per group: each side's median
throughput (items/s, start-up included) and peak RSS, and the library's over run's.

Usage: bench/library.py   (env: BIN=.build/release/pipelinectl, BENCH_LIBRARY_ROUNDS=3,
       BENCH_LIBRARY_GROUPS="corpus JPEG,formats webp")
"""
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "bench"))
import serve as s  # noqa: E402  (Sampler)

BIN = os.environ.get("BIN") or os.path.join(ROOT, ".build/release/pipelinectl")
ROUNDS = int(os.environ.get("BENCH_LIBRARY_ROUNDS", "3"))


def groups():
    corpus = subprocess.run(["bash", os.path.join(ROOT, "bench/corpus.sh")], capture_output=True, text=True, check=True).stdout.split()[-1]
    formats = subprocess.run(["bash", os.path.join(ROOT, "../shared/bench/formats.sh")], capture_output=True, text=True, check=True).stdout.split()[-1]
    files = sorted(os.listdir(corpus))
    found = [("corpus JPEG", [os.path.join(corpus, f) for f in files if f.endswith(".jpg")]),
             ("corpus PNG", [os.path.join(corpus, f) for f in files if f.endswith(".png")])]
    for kind in sorted(os.listdir(formats)):
        folder = os.path.join(formats, kind)
        if os.path.isdir(folder):
            found.append((f"formats {kind}", [os.path.join(folder, f) for f in sorted(os.listdir(folder))]))
    wanted = os.environ.get("BENCH_LIBRARY_GROUPS", "").split(",") if os.environ.get("BENCH_LIBRARY_GROUPS") else None
    return [(label, paths) for label, paths in found if paths and (wanted is None or label in wanted)]


def run_report(binary, pipeline, files, work, workers=2, label="run"):
    """One `pipelinectl run` of `pipeline` over `files` into a fresh folder under `work`: its wall
    time and its JSON report (the folder is removed). Exits on any status but 0 and 1."""
    out = tempfile.mkdtemp(dir=work, prefix=label)
    listing = os.path.join(out, "list.txt")
    with open(listing, "w") as f:
        f.write("\n".join(files) + "\n")
    report = os.path.join(out, "report.json")
    start = time.monotonic()
    done = subprocess.run([binary, "run", pipeline, listing, "--output", os.path.join(out, "o"), "--report", report,
                           "--progress", "none", "--workers", str(workers)], capture_output=True, text=True)
    wall = time.monotonic() - start
    if done.returncode not in (0, 1):
        sys.exit(f"{label}: exit {done.returncode}\n{done.stderr}")
    with open(report) as f:
        data = json.load(f)
    shutil.rmtree(out)
    return wall, data


def timed(command):
    start = time.monotonic()
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    sampler = s.Sampler(process.pid)
    out, err = process.communicate()
    peak = sampler.stop()
    if process.returncode not in (0, 1):
        sys.exit(f"{' '.join(command)} failed ({process.returncode}): {err[-2000:]}")
    return time.monotonic() - start, peak, out


def main():
    work = tempfile.mkdtemp(prefix="pipelinectl-bench-library-")
    rows = []
    print(f"{BIN}\n{ROUNDS} rounds per side and group", flush=True)
    try:
        for label, files in groups():
            folders = sorted({os.path.dirname(f) + "/" for f in files})
            listing = os.path.join(work, "list.txt")
            with open(listing, "w") as out:
                out.write("\n".join(files) + "\n")
            pipeline = os.path.join(work, "bench.yaml")
            with open(pipeline, "w") as out:
                out.write("version: 1\nname: bench\nprocessors:\n  - resize: { width: 512, height: 512, mode: fit }\n"
                          "encoder: { jpeg: { quality: 80 } }\n"
                          f"serve:\n  sources: [{', '.join(repr(f) for f in folders)}]\n"
                          f"output:\n  dir: {work}/out\n")
            times = {"run": [], "library": []}
            peaks = {"run": [], "library": []}
            for round_ in range(ROUNDS + 1):  # round 0 warms the page cache, not counted
                for side in ("run", "library") if round_ % 2 == 0 else ("library", "run"):
                    shutil.rmtree(os.path.join(work, "out"), ignore_errors=True)
                    command = [BIN, "run", pipeline, listing, "--quiet"] if side == "run" else [BIN, "bench-library", pipeline, listing]
                    seconds, peak, _ = timed(command)
                    made = len(os.listdir(os.path.join(work, "out")))
                    if made < len(files) * 0.9:
                        sys.exit(f"{label}: {side} made {made} outputs of {len(files)}")
                    if round_:
                        times[side].append(seconds)
                        peaks[side].append(peak)
            rate = {side: len(files) / statistics.median(times[side]) for side in times}
            peak = {side: max(peaks[side]) for side in peaks}
            rows.append((label, len(files), rate, peak))
            print(f"{label:14} {len(files):4} items  run {rate['run']:6.1f}/s {peak['run']:5.0f} MiB  "
                  f"library {rate['library']:6.1f}/s {peak['library']:5.0f} MiB  "
                  f"x{rate['library'] / rate['run']:.3f} rate, x{peak['library'] / peak['run']:.3f} RSS", flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print("\n| group | items | run items/s | library items/s | library/run | run peak MiB | library peak MiB | RSS ratio |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for label, count, rate, peak in rows:
        print(f"| {label} | {count} | {rate['run']:.1f} | {rate['library']:.1f} | {rate['library'] / rate['run']:.3f} | "
              f"{peak['run']:.0f} | {peak['library']:.0f} | {peak['library'] / peak['run']:.3f} |")


if __name__ == "__main__":
    main()
