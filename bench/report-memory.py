#!/usr/bin/env python3
"""Does a report grow with the list? The same long run of small images three times: without a
report, with --report run.json (one JSON document) and with --report-format jsonl, peak RSS of
each measured as bench/run.py measures it (the process tree, sampled every 10 ms).

The sources are local files: ITEMS hard links to a few hundred distinct small images (made by
ImageMagick from its built-in patterns), so every line is its own source (no de-duplication) and
no server takes part. Each run writes into a directory of its own, and the three are run twice,
the second time in reverse order: deleting a run's outputs before the next made ext4 search its
recently deleted inodes for every new file (a tenth of the CPU in `perf`), which charged whichever
run came later. Each figure is the mean of its two rounds.

Usage: bench/report-memory.py [ITEMS]   (default 200000; `make bench-reports` builds first)
"""
import os
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import run  # noqa: E402  (bench/run.py: measure, BIN)

ITEMS = int(sys.argv[1]) if len(sys.argv) > 1 else 200_000
DISTINCT = 300


def main():
    work = tempfile.mkdtemp(prefix="pipelinectl-report-bench-")
    try:
        images = os.path.join(work, "images")
        os.makedirs(images)
        patterns = ["plasma:", "gradient:navy-gold", "pattern:checkerboard", "rose:", "logo:", "granite:"]
        print(f"making {DISTINCT} small images and {ITEMS} links to them ...", flush=True)
        for i in range(DISTINCT):
            spec = patterns[i % len(patterns)]
            subprocess.run(["convert", "-size", "96x72", spec, "-resize", f"{64 + i % 48}x{48 + i % 32}!",
                            os.path.join(images, f"s{i}.png")], check=True)
        links = os.path.join(work, "links")
        os.makedirs(links)
        with open(os.path.join(work, "list.txt"), "w") as f:
            for i in range(ITEMS):
                path = os.path.join(links, f"l{i}.png")
                os.link(os.path.join(images, f"s{i % DISTINCT}.png"), path)
                f.write(path + "\n")
        pipeline = os.path.join(work, "p.yaml")
        with open(pipeline, "w") as f:
            f.write("processors:\n  - resize: { width: 32 }\nencoder: { jpeg: { quality: 80 } }\n"
                    f"output: {{ dir: {work}/out, name: \"{{index}}.{{ext}}\" }}\n")
        base = [run.BIN, "run", pipeline, os.path.join(work, "list.txt"), "--progress", "none"]
        cases = [("no report", []),
                 ("--report run.json", ["--report", os.path.join(work, "run.json")]),
                 ("--report run.jsonl --report-format jsonl", ["--report", os.path.join(work, "run.jsonl"), "--report-format", "jsonl"])]
        rounds = {name: [] for name, _ in cases}
        for number, order in enumerate([cases, list(reversed(cases))]):
            for name, extra in order:
                out = os.path.join(work, f"out-{number}-{len(rounds[name])}-{abs(hash(name)) % 1000}")
                rounds[name].append(run.measure(f"{ITEMS} items, {name}", base + extra + ["-o", out], ITEMS,
                                                check_output=f"{ITEMS} items: {ITEMS} ok"))
        results = []
        for name, _ in cases:
            ms = rounds[name]
            mean = run.Measurement(name, sum(m.wall for m in ms) / len(ms), sum(m.cpu for m in ms) / len(ms),
                                   max(m.rss_kb for m in ms), ITEMS)
            results.append((name, mean))
        plain = results[0][1]
        report_size = os.path.getsize(os.path.join(work, "run.json"))
        print()
        print(f"| run ({ITEMS} small images) | wall s | cpu s | peak RSS MiB | vs no report |")
        print("|---|---|---|---|---|")
        for name, m in results:
            print(f"| {name} | {m.wall:.1f} | {m.cpu:.1f} | {m.rss_kb / 1024:.0f} | {m.rss_kb / plain.rss_kb:.2f}x |")
        print("(wall and cpu: mean of two rounds; peak RSS: the larger of the two)")
        print(f"\nrun.json: {report_size / 1e6:.0f} MB, {report_size / ITEMS:.0f} bytes per item")
        worst = max(m.rss_kb for _, m in results[1:]) / plain.rss_kb
        print(f"largest peak with a report: {worst:.2f}x the run without (target: at most 1.10x)")
        return 0 if worst <= 1.10 else 1
    finally:
        if not os.environ.get("BENCH_KEEP"):
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
