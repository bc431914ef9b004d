#!/usr/bin/env python3
"""`/info` against a thumbnail answer of the same service, same run (issue 60).

One `pipelinectl serve` (release build) with a preset that fits each image in 256x256 (JPEG Q80)
and a disk data cache that keeps outputs (`store: processed`, on /dev/shm), sources read from
the bench corpora on local disk. For every file of every format group of both corpora, one
request at a time over one kept-alive connection:

  cold   header  /info?facts=header  (load, header read; nothing decoded, nothing cached)
         thumb   the thumbnail, first asked (load, decode, resize, encode, store)
         full    /info, first asked (load, decode, analyze: hashes, colour; stored)
  warm   thumb   the thumbnail again (the stored output, the source's stat checked)
         full    /info again (the stored facts, the source's stat checked)
         header  /info?facts=header again (the header read again: it is not stored)

Cold header goes before or after cold thumb in turn (by file), so neither always finds the
other's page cache. Prints p50 (and the worst file) per group in ms, and the issue's ratios:
cold header / cold thumb and warm full / warm thumb, each to be at most 0.30; full facts cold
(which decode) are reported beside them.

The warm answers are then measured again with wrk (one connection, one thread, 3 s rotating
over the group's files), which takes the Python client's own time per request out of both: the
last two columns of the second table.

Usage: bench/info.py   (BENCH_BIN: the binary, default .build/release/pipelinectl)
"""
import base64
import hashlib
import hmac
import http.client
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "bench"))
from library import groups  # noqa: E402  (both corpora, by format group)

BIN = os.environ.get("BENCH_BIN", os.path.join(ROOT, ".build/release/pipelinectl"))
KEY = bytes(range(32))


def sign(path, info=False):
    signature = base64.urlsafe_b64encode(hmac.new(KEY, (("info:" if info else "") + path).encode(), hashlib.sha256).digest())
    return ("/info/" if info else "/") + signature.decode().rstrip("=") + path


def start(work, roots):
    presets = os.path.join(work, "presets")
    os.makedirs(presets)
    sources = ", ".join(f'"{root}/"' for root in roots)
    with open(os.path.join(presets, "fit.yaml"), "w") as f:
        f.write(f"""version: 1
name: fit
data_cache:
  disk: {{ path: {work}/cache, size_limit: 10GB, store: processed }}
processors: [ {{ resize: {{ width: 256, height: 256, mode: fit }} }} ]
encoder: {{ jpeg: {{ quality: 80 }} }}
serve: {{ sources: [{sources}] }}
output: {{ dir: {work}/unused }}
""")
    env = dict(os.environ, PIPELINECTL_KEYS="bench:" + KEY.hex())
    process = subprocess.Popen([BIN, "serve", presets, "--listen", "127.0.0.1:0", "--no-access-log", "--timeout", "120s"],
                               stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env, text=True, start_new_session=True)
    match = re.search(r":(\d+) ", process.stdout.readline())
    if not match:
        sys.exit("pipelinectl serve did not start")
    threading.Thread(target=lambda: process.stdout.read(), daemon=True).start()
    return process, int(match.group(1))


def timed(connection, path):
    start = time.perf_counter()
    connection.request("GET", path)
    response = connection.getresponse()
    body = response.read()
    elapsed = (time.perf_counter() - start) * 1000
    if response.status != 200:
        raise RuntimeError(f"{path}: HTTP {response.status} {body[:200]!r}")
    return elapsed


def wrk_p50(port, paths, work):
    """p50 latency (ms) of one wrk connection rotating over `paths` for 3 s (all answered 200)."""
    script = os.path.join(work, "rotate.lua")
    with open(script, "w") as f:
        f.write("paths = {" + ",".join('"' + p.replace('"', '\\"') + '"' for p in paths) + "}\n"
                + "i = 0\nrequest = function()\n  i = i % #paths + 1\n  return wrk.format(\"GET\", paths[i])\nend\n"
                + "done = function(summary, latency, requests)\n"
                + "  io.write(string.format(\"p50 %.4f errors %d\\n\", latency:percentile(50) / 1000, summary.errors.status))\nend\n")
    out = subprocess.run(["wrk", "-t1", "-c1", "-d3s", "-s", script, f"http://127.0.0.1:{port}"], capture_output=True, text=True).stdout
    match = re.search(r"p50 ([0-9.]+) errors (\d+)", out)
    if not match or match.group(2) != "0":
        sys.exit("wrk: " + out)
    return float(match.group(1))


def main():
    if not os.path.exists(BIN):
        sys.exit(f"no binary at {BIN}: build it (swift build -c release --product pipelinectl) or set BENCH_BIN")
    work = tempfile.mkdtemp(prefix="bench-info-", dir="/dev/shm" if os.path.isdir("/dev/shm") else None)
    all_groups = groups()
    roots = sorted({os.path.dirname(os.path.dirname(files[0])) if "formats" in label else os.path.dirname(files[0])
                    for label, files in all_groups})
    process, port = start(work, roots)
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    kinds = ["cold header", "cold thumb", "cold full", "warm thumb", "warm full", "warm header"]
    print("| group | files | " + " | ".join(f"{k} p50 ms" for k in kinds) + " | cold header / cold thumb | warm full / warm thumb |")
    print("|---|---|" + "---|" * len(kinds) + "---|---|")
    totals = {k: [] for k in kinds}
    try:
        for label, files in all_groups:
            times = {k: [] for k in kinds}
            for n, path in enumerate(files):
                thumb, full, header = sign("/fit/" + path), sign("/fit/" + path, info=True), sign("/fit/" + path + "?facts=header", info=True)
                order = [("cold header", header), ("cold thumb", thumb)]
                for kind, url in (order if n % 2 == 0 else order[::-1]):
                    times[kind].append(timed(connection, url))
                times["cold full"].append(timed(connection, full))
                times["warm thumb"].append(timed(connection, thumb))
                times["warm full"].append(timed(connection, full))
                times["warm header"].append(timed(connection, header))
            p50 = {k: statistics.median(v) for k, v in times.items()}
            for k in kinds:
                totals[k] += times[k]
            print(f"| {label} | {len(files)} | " + " | ".join(f"{p50[k]:.2f}" for k in kinds)
                  + f" | {p50['cold header'] / p50['cold thumb']:.2f} | {p50['warm full'] / p50['warm thumb']:.2f} |")
        p50 = {k: statistics.median(v) for k, v in totals.items()}
        worst = {k: max(v) for k, v in totals.items()}
        print(f"| all | {len(totals['cold thumb'])} | " + " | ".join(f"{p50[k]:.2f} (max {worst[k]:.0f})" for k in kinds)
              + f" | {p50['cold header'] / p50['cold thumb']:.2f} | {p50['warm full'] / p50['warm thumb']:.2f} |")
        print("\nwarm, by wrk (one connection, p50 ms):\n")
        print("| group | warm thumb | warm full | warm header | warm full / warm thumb |")
        print("|---|---|---|---|---|")
        if shutil.which("wrk") is None:
            print("(wrk is not installed: apt-get install wrk)")
            return
        for label, files in all_groups:
            thumb = wrk_p50(port, [sign("/fit/" + p) for p in files], work)
            full = wrk_p50(port, [sign("/fit/" + p, info=True) for p in files], work)
            header = wrk_p50(port, [sign("/fit/" + p + "?facts=header", info=True) for p in files], work)
            print(f"| {label} | {thumb:.3f} | {full:.3f} | {header:.3f} | {full / thumb:.2f} |")
    finally:
        connection.close()
        os.killpg(process.pid, 15)
        process.wait()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
