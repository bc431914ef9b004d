#!/usr/bin/env python3
"""Two builds of `pipelinectl serve` against each other, in one run, on every group of the
service benchmark (bench/serve.py: corpus JPEG and PNG, formats WebP, JPEG and PNG, photos of 1 MP
and more, through a loopback nginx): the default decoder, no data cache, 2 connections, the same
warm-up and wrk rotation as bench/serve.py. Each build runs ROUNDS times per group, alternating
(A B A B ...), each time as a fresh process, so that drift of the machine falls on both alike.
Reported per group: each build's median rate, p99 latency and p99 over each source's median
(bench/serve.py's "own"), and the peak RSS; and B's rate over A's. Each run also prints the
service's CPU time and minor page faults per answer during the measured seconds.

Usage: BIN_A=old/pipelinectl BIN_B=.build/release/pipelinectl bench/serve-ab.py
       (env: BENCH_AB_ROUNDS=3, BENCH_SERVE_SECONDS=15, BENCH_SERVE_GROUPS=...; ENV_A, ENV_B="NAME=VALUE
       ...": variables added to one side's service, e.g. traces on against off for one build)
"""
import os
import re
import statistics
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "bench"))
os.environ.setdefault("BENCH_SERVE_SECONDS", "15")
import serve as s  # noqa: E402

ROUNDS = int(os.environ.get("BENCH_AB_ROUNDS", "3"))
BINS = {"A": os.environ.get("BIN_A"), "B": os.environ.get("BIN_B") or os.path.join(ROOT, ".build/release/pipelinectl")}
ENVS = {side: dict(pair.split("=", 1) for pair in os.environ.get(f"ENV_{side}", "").split() if "=" in pair) for side in "AB"}


def counts(pid):
    """The service process's minor page faults and CPU seconds so far (/proc/PID/stat)."""
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return int(fields[7]), (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def main():
    if not BINS["A"]:
        sys.exit("BIN_A (the build to compare against) is required")
    work = tempfile.mkdtemp(prefix="pipelinectl-bench-ab-")
    os.chmod(work, 0o755)
    root = os.path.join(work, "origin")
    os.makedirs(root)
    found = s.groups()
    if os.environ.get("BENCH_SERVE_GROUPS"):
        wanted = os.environ["BENCH_SERVE_GROUPS"].split(",")
        found = [g for g in found if g[0] in wanted]
    for label, files in found:
        slug = re.sub(r"[^a-z]+", "-", label.lower()).strip("-")
        os.makedirs(os.path.join(root, slug))
        for f in files:
            os.symlink(f, os.path.join(root, slug, os.path.basename(f)))
    nginx, origin = s.start_nginx(work, root)
    print(f"A {BINS['A']} {os.environ.get('ENV_A', '')}\nB {BINS['B']} {os.environ.get('ENV_B', '')}\n{ROUNDS} rounds of {s.SECONDS} s per build and group", flush=True)
    rows = []
    try:
        for label, files in found:
            slug = re.sub(r"[^a-z]+", "-", label.lower()).strip("-")
            paths = [s.sign(f"/fit/http://127.0.0.1:{origin}/{slug}/{os.path.basename(f)}") for f in files]
            results = {"A": [], "B": []}
            for round_ in range(ROUNDS):
                for build in ("A", "B") if round_ % 2 == 0 else ("B", "A"):
                    s.BIN = BINS[build]
                    s.EXTRA_ENV = ENVS[build]
                    process, port = s.start_ours(work, f"{build}-{slug}-{round_}", "{}")
                    s.fetch_all(port, paths, os.path.join(work, "out", build, slug, str(round_)))
                    sampler = s.Sampler(process.pid)
                    before = counts(process.pid)
                    result = s.wrk(port, paths, work, 2, s.SECONDS, per_source=True)
                    after = counts(process.pid)
                    result["peak"] = sampler.stop()
                    answered = max(1, result["rate"] * s.SECONDS)
                    result["cpu_ms"] = (after[1] - before[1]) * 1000 / answered
                    result["faults"] = (after[0] - before[0]) / answered
                    s.stop(process)
                    results[build].append(result)
                    print(f"{label} {build} round {round_ + 1}: {result['rate']:.2f}/s p99 {result['p99']:.0f} ms, "
                          f"peak {result['peak']:.0f} MiB, non-2xx {result['non2xx']}, "
                          f"CPU {result['cpu_ms']:.1f} ms and {result['faults']:.0f} page faults per answer", flush=True)
            row = [label, len(files)]
            for build in ("A", "B"):
                r = results[build]
                row += [statistics.median(x["rate"] for x in r), statistics.median(x["p99"] for x in r),
                        statistics.median(x["own"] for x in r), max(x["peak"] for x in r), sum(x["non2xx"] for x in r)]
            rows.append(row)
    finally:
        nginx.terminate()
    print("\n| group | files | A /s | A p99 ms | A own p99 | A peak MiB | B /s | B p99 ms | B own p99 | B peak MiB | B/A rate | non-2xx A, B |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for label, n, ar, ap, ao, am, ae, br, bp, bo, bm, be in rows:
        print(f"| {label} | {n} | {ar:.2f} | {ap:.0f} | {ao:.2f} | {am:.0f} | {br:.2f} | {bp:.0f} | {bo:.2f} | {bm:.0f} | {br / ar:.2f}x | {ae}, {be} |")


if __name__ == "__main__":
    main()
