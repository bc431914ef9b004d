#!/usr/bin/env python3
"""Two builds of `pipelinectl run` against each other, in one run, on every format group of both
corpora (bench/run.py's groups: corpus.sh's JPEG and PNG, formats.sh's WebP, AVIF, HEIC, GIF,
TIFF, JPEG and PNG) and on the 160 MP strip TIFF and PNG of its huge group: the same pipeline as
bench/run.py's format table (fit 256x256, JPEG Q80), ROUNDS rounds per group alternating A B, B A,
A B ... so that drift of the machine falls on both alike.

A group's list is its files repeated (as symbolic links named apart) up to BENCH_AB_ITEMS entries
(200), so a run lasts seconds rather than the tenths in which a small group's noise is half its
time. Reported per group: each build's median wall, CPU and peak RSS over the rounds, B's wall over
A's (median), and the spread of that ratio over the rounds (each round's B over the same round's
A): "within noise" means 1.00 lies inside a group's spread, or the median is no worse than it.

Usage: BIN_A=old/pipelinectl BIN_B=.build/release/pipelinectl bench/batch-ab.py
       (env: BENCH_AB_ROUNDS=3, BENCH_AB_ITEMS=200, BENCH_AB_HUGE=1 to include the 160 MP files,
       BENCH_AB_GROUPS="corpus JPEG,GIF": only these groups; ENV_A, ENV_B="NAME=VALUE ...":
       variables added to one side's environment, so that one build runs against itself with a
       setting on and off, e.g. traces: BIN_A=$BIN BIN_B=$BIN ENV_B="OTEL_EXPORTER_OTLP_ENDPOINT=...")
"""
import math
import os
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "bench"))
import run as r  # noqa: E402

ROUNDS = int(os.environ.get("BENCH_AB_ROUNDS", "3"))
ITEMS = int(os.environ.get("BENCH_AB_ITEMS", "200"))
BINS = {"A": os.environ.get("BIN_A"), "B": os.environ.get("BIN_B") or os.path.join(ROOT, ".build/release/pipelinectl")}
ENVS = {side: dict(os.environ, **dict(pair.split("=", 1) for pair in os.environ.get(f"ENV_{side}", "").split() if "=" in pair))
        for side in "AB"}


def expanded(work, slug, paths):
    """paths repeated as symbolic links in their own folder up to ITEMS entries; the list's path."""
    folder = os.path.join(work, slug)
    os.makedirs(folder)
    copies = max(1, math.ceil(ITEMS / len(paths)))
    entries = []
    for copy in range(copies):
        for path in paths:
            link = os.path.join(folder, f"c{copy}-{os.path.basename(path)}")
            os.symlink(path, link)
            entries.append(link)
    listing = os.path.join(work, slug + ".txt")
    with open(listing, "w") as f:
        f.write("\n".join(entries) + "\n")
    return listing, len(entries)


def main():
    if not BINS["A"]:
        sys.exit("BIN_A (the build to compare against) is required")
    corpus = subprocess.run(["bash", os.path.join(ROOT, "bench/corpus.sh")], capture_output=True, text=True,
                            check=True).stdout.strip().splitlines()[-1]
    work = tempfile.mkdtemp(prefix="pipelinectl-bench-batch-ab-")
    yaml_path = os.path.join(work, "formats.yaml")
    r.pipeline(yaml_path, encoder=f"{{ jpeg: {{ quality: {r.QUALITY}, background: black }} }}")
    huge_yaml = os.path.join(work, "huge.yaml")
    r.huge_pipeline(huge_yaml)
    only = [g.strip() for g in os.environ.get("BENCH_AB_GROUPS", "").split(",") if g.strip()]
    groups = []
    for label, paths in r.format_groups(corpus):
        if only and label not in only:
            continue
        slug = "".join(c if c.isalnum() else "-" for c in label.lower())
        listing, n = expanded(work, slug, paths)
        groups.append((label, yaml_path, listing, n))
    if os.environ.get("BENCH_AB_HUGE") == "1":
        files, _ = r.huge_files(work, corpus)
        for label, path in files:
            if label in ("TIFF, LZW strips", "PNG") and (not only or f"160 MP {label}" in only):
                listing = os.path.join(work, f"huge-{os.path.basename(path)}.txt")
                with open(listing, "w") as f:
                    f.write(path + "\n")
                groups.append((f"160 MP {label}", huge_yaml, listing, 1))
    print(f"A: {BINS['A']} {os.environ.get('ENV_A', '')}\nB: {BINS['B']} {os.environ.get('ENV_B', '')}\n"
          f"work: {work}; {ROUNDS} rounds, lists of {ITEMS}+", flush=True)
    rows = []
    for label, yaml, listing, n in groups:
        runs = {"A": [], "B": []}
        print(f" {label} ({n} items)", flush=True)
        for round_number in range(ROUNDS):
            for which in ("AB" if round_number % 2 == 0 else "BA"):
                out = os.path.join(work, f"out-{which}")
                subprocess.run(["rm", "-rf", out], check=True)
                m = r.measure(f"{which} ({label})", [BINS[which], "run", yaml, listing, "-o", out, "--progress", "none"], n,
                              env=ENVS[which], check_output=f"{n} items: {n} ok", single=True)
                runs[which].append(m)
        median = {k: sorted(v, key=lambda m: m.wall)[len(v) // 2] for k, v in runs.items()}
        ratios = [b.wall / a.wall for a, b in zip(runs["A"], runs["B"])]
        rows.append((label, n, median, statistics.median(ratios), min(ratios), max(ratios),
                     statistics.median(b.cpu / a.cpu for a, b in zip(runs["A"], runs["B"]))))
    print()
    print("| group | items | A wall s | B wall s | B/A wall (median) | B/A per round | B/A CPU | A peak MiB | B peak MiB |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for label, n, m, ratio, low, high, cpu in rows:
        print(f"| {label} | {n} | {m['A'].wall:.2f} | {m['B'].wall:.2f} | {ratio:.3f} | {low:.3f}-{high:.3f} | {cpu:.3f} | "
              f"{m['A'].rss_kb / 1024:.0f} | {m['B'].rss_kb / 1024:.0f} |")
    subprocess.run(["rm", "-rf", work])


if __name__ == "__main__":
    main()
