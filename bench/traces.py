#!/usr/bin/env python3
"""Traces against a run of many small items: `pipelinectl run` over N distinct small images
(BENCH_TRACES_ITEMS, 10,000: symbolic links to one 64x64 JPEG, named apart) three ways, ROUNDS
rounds alternating: traces off; on, exporting to a real OTLP/HTTP receiver on loopback
(Tests/TestSupport/otlp-receiver.py --count-only, which decodes every export with
opentelemetry-proto and counts its spans); on but sampling none (OTEL_TRACES_SAMPLER=always_off:
the spans are made and dropped, so the difference to "receiving" is their export); and on,
with the exporter's endpoint down (nothing listens). Reported: wall, peak RSS and exit code of
each, the spans the receiver got, and the warnings about dropped spans (one is expected when
down). What issue 63 asks: an exporter that is down changes no exit code and adds at most 16 MiB
of peak RSS over such a run.

Usage: BIN=.build/release/pipelinectl python3 bench/traces.py   (env: BENCH_TRACES_ITEMS, BENCH_TRACES_ROUNDS=3)
The binary must have the exporter (`make release` builds it with the OTLP trait).
"""
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN = os.environ.get("BIN", os.path.join(ROOT, ".build/release/pipelinectl"))
ITEMS = int(os.environ.get("BENCH_TRACES_ITEMS", "10000"))
ROUNDS = int(os.environ.get("BENCH_TRACES_ROUNDS", "3"))


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run(work, pipeline, listing, env):
    """One run: its wall seconds, peak RSS (MiB, from wait4), exit code, standard output and error,
    and its CPU seconds (the run's process alone: not the receiver's).
    The outputs go to a new directory in memory (/dev/shm), removed after: on ext4, 10,000 files
    made where 10,000 were just removed took 1.2-3.6 s of system time depending on what the last
    run left (its recently freed inodes), which was most of the spread of the "off" runs."""
    out = tempfile.mkdtemp(prefix="pipelinectl-bench-traces-out-", dir="/dev/shm" if os.path.isdir("/dev/shm") else work)
    try:
        return run_into(out, pipeline, listing, env)
    finally:
        shutil.rmtree(out, ignore_errors=True)


def run_into(out, pipeline, listing, env):
    with tempfile.TemporaryFile() as stdout, tempfile.TemporaryFile() as stderr:
        start = time.monotonic()
        process = subprocess.Popen([BIN, "run", pipeline, listing, "-o", out, "--progress", "none"], env=env,
                                   stdout=stdout, stderr=stderr)
        _, status, usage = os.wait4(process.pid, 0)
        wall = time.monotonic() - start
        stdout.seek(0)
        stderr.seek(0)
        return (wall, usage.ru_maxrss / 1024, os.waitstatus_to_exitcode(status), stdout.read().decode(), stderr.read().decode(),
                usage.ru_utime + usage.ru_stime)


def main():
    version = subprocess.run([BIN, "--version"], capture_output=True, text=True).stdout
    if "OTLP/HTTP exporter" not in version:
        sys.exit(f"{BIN} has no trace exporter: build it with make release (the OTLP trait)")
    work = tempfile.mkdtemp(prefix="pipelinectl-bench-traces-")
    image = os.path.join(work, "small.jpg")
    subprocess.run(["convert", "-size", "64x64", "plasma:", "-quality", "85", image], check=True)
    folder = os.path.join(work, "items")
    os.makedirs(folder)
    with open(os.path.join(work, "urls.txt"), "w") as listing:
        for index in range(ITEMS):
            link = os.path.join(folder, f"i{index:05d}.jpg")
            os.symlink(image, link)
            listing.write(link + "\n")
    pipeline = os.path.join(work, "small.yaml")
    with open(pipeline, "w") as f:
        f.write("processors:\n  - resize: { width: 32 }\nencoder: { jpeg: { quality: 80 } }\noutput: { dir: out }\n")
    spans = os.path.join(work, "spans.jsonl")
    port = free_port()
    receiver = subprocess.Popen([sys.executable, os.path.join(ROOT, "Tests/TestSupport/otlp-receiver.py"), "--out", spans,
                                 "--port", str(port), "--count-only"], stdout=subprocess.PIPE, text=True)
    assert receiver.stdout.readline().startswith("listening")
    down = free_port()
    ways = {"off": {}, "receiving": {"OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{port}"},
            "always_off": {"OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{port}", "OTEL_TRACES_SAMPLER": "always_off"},
            "down": {"OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{down}"}}
    results = {name: [] for name in ways}
    print(f"{BIN}\n{ITEMS} items, {ROUNDS} rounds", flush=True)
    try:
        for round_ in range(ROUNDS):
            order = list(ways) if round_ % 2 == 0 else list(reversed(ways))
            for name in order:
                env = dict(os.environ, **ways[name])
                wall, peak, code, stdout, stderr, cpu = run(work, pipeline, os.path.join(work, "urls.txt"), env)
                warnings = stderr.count("spans are being dropped")
                results[name].append((wall, peak, code, warnings, cpu))
                print(f"round {round_ + 1} {name}: {wall:.1f} s, {cpu:.2f} s CPU, peak {peak:.0f} MiB, exit {code}, "
                      f"dropped-span warnings {warnings}; {stdout.strip().splitlines()[-1] if stdout.strip() else ''}", flush=True)
    finally:
        receiver.terminate()
    received = sum(json.loads(line).get("spans", 0) for line in open(spans) if line.startswith("{")) if os.path.exists(spans) else 0
    print("\n| traces | wall s (median) | CPU s (median) | CPU per item over off, µs | peak RSS MiB (median) | peak RSS MiB (max) | exit codes | dropped-span warnings |")
    print("|---|---:|---:|---:|---:|---:|---|---|")
    off_cpu = statistics.median(r[4] for r in results["off"])
    for name, rows in results.items():
        cpu = statistics.median(r[4] for r in rows)
        print(f"| {name} | {statistics.median(r[0] for r in rows):.2f} | {cpu:.2f} | {(cpu - off_cpu) / ITEMS * 1e6:.0f} | "
              f"{statistics.median(r[1] for r in rows):.0f} | "
              f"{max(r[1] for r in rows):.0f} | {sorted(set(r[2] for r in rows))} | {[r[3] for r in rows]} |")
    print(f"\nspans received: {received} over {ROUNDS} rounds ({received / max(1, ROUNDS * ITEMS):.1f} per item)")
    shutil.rmtree(work)


if __name__ == "__main__":
    main()
