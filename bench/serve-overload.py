#!/usr/bin/env python3
"""`pipelinectl serve` under more load than it has places for (issue 56), on the service
benchmark's mixed set (every group of bench/serve.py: corpus JPEG and PNG, formats WebP, JPEG and
PNG, photos of 1 MP and more), through a loopback nginx origin, load from wrk. Default options,
no data cache: every request is made anew (a cold cache throughout).

  rate      200s per second at 2 connections (the service's own pace), then at 64 connections
            for BENCH_OVERLOAD_SECONDS (default 60) from a fresh process: goodput, its ratio to the
            2-connection rate, 429s, 5xx, and /readyz polled every 500 ms throughout
  fairness  two clients at once (X-Forwarded-For from a --trusted-proxy), one with 64 connections,
            one with 2, both asking for AVIF (Chromium's Accept): each one's 200s per second.
            Every request names a source of its own (the same photos under alias directories
            of the origin, /a17/...), so no request joins another's work: each answer is a job,
            and the shares are shares of the service's work, not of coalesced answers
  memory    peak RSS of the process, sampled every 50 ms, at 2 connections in three orders of the
            list (as listed, reversed, shuffled), with glibc's malloc and with jemalloc preloaded;
            and for one request for a 7000x7000 grey PNG
wrk's --timeout (60 s) is above the longest wait the service allows (--queue-wait, 5 s).

Usage: bench/serve-overload.py   (env: BIN=path/to/pipelinectl, BENCH_OVERLOAD_SECONDS=60,
       BENCH_RATE_SECONDS=20, BENCH_ONLY=fairness, BENCH_SECOND_CLIENT_CONNECTIONS=2). Needs nginx, wrk and libjemalloc2 (bench/serve.sh installs the first two).
"""
import json
import os
import random
import re
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "bench"))
import serve as s  # noqa: E402

OVERLOAD = int(os.environ.get("BENCH_OVERLOAD_SECONDS", "60"))
RATE = int(os.environ.get("BENCH_RATE_SECONDS", "20"))
ONLY = os.environ.get("BENCH_ONLY", "")  # "fairness": that phase alone
SMALL = int(os.environ.get("BENCH_SECOND_CLIENT_CONNECTIONS", "2"))
# Alias directories of the origin, half for each client of the fairness phase: 40 x 71 photos
# gives each client 1,420 sources, more than either asks for in 60 s.
ALIASES = 40
JEMALLOC = "/usr/lib/x86_64-linux-gnu/libjemalloc.so.2"
AVIF_ACCEPT = "image/avif,image/webp,image/apng,image/*,*/*;q=0.8"


def start(work, extra=(), env=None):
    directory = s.write_preset(work, "overload", "{}")
    environment = dict(os.environ, PIPELINECTL_KEYS="bench:" + s.KEY.hex(), **(env or {}))
    process = subprocess.Popen([s.BIN, "serve", directory, "--listen", "127.0.0.1:0", "--no-access-log", *extra], stdout=subprocess.PIPE,
                               stderr=subprocess.DEVNULL, env=environment, text=True, start_new_session=True)
    match = re.search(r":(\d+) ", process.stdout.readline())
    if not match:
        sys.exit("pipelinectl serve did not start")
    threading.Thread(target=lambda: process.stdout.read(), daemon=True).start()
    return process, int(match.group(1))


def load(port, paths, work, connections, seconds, tag, headers=None, disjoint=False):
    """wrk over `paths` in turn with `headers`: requests, non-2xx, socket errors, seconds.
    `disjoint`: each wrk thread walks its own quarter of `paths` (no two threads ask for one
    path), else each starts at a random place."""
    script = os.path.join(work, f"load-{tag}.lua")
    with open(script, "w") as f:
        f.write("paths = {" + ",".join(json.dumps(p) for p in paths) + "}\n")
        f.write("headers = {" + ",".join(f"[{json.dumps(k)}] = {json.dumps(v)}" for k, v in (headers or {}).items()) + "}\n")
        f.write("disjoint = " + ("true" if disjoint else "false") + "\n")
        f.write("""counter = 0
made = 0
setup = function(thread) thread:set("number", made); made = made + 1 end
init = function(args)
  if disjoint then counter = number * math.floor(#paths / 4) else counter = math.random(#paths) end
end
request = function()
  counter = counter + 1
  return wrk.format("GET", paths[(counter % #paths) + 1], headers)
end
done = function(summary, latency, requests)
  io.write(string.format("RESULT %d %d %d %d\\n", summary.requests, summary.duration, summary.errors.status,
    summary.errors.connect + summary.errors.read + summary.errors.write + summary.errors.timeout))
end
""")
    out = subprocess.run(["wrk", f"-t{min(connections, 4)}", f"-c{connections}", f"-d{seconds}s", "--timeout", "60s", "-s", script,
                          f"http://127.0.0.1:{port}"], capture_output=True, text=True).stdout
    fields = re.search(r"RESULT (\d+) (\d+) (\d+) (\d+)", out)
    if not fields:
        sys.exit("wrk printed no result:\n" + out)
    requests, duration, non2xx, errors = map(int, fields.groups())
    return {"requests": requests, "seconds": duration / 1e6, "non2xx": non2xx, "errors": errors, "ok": requests - non2xx}


class Ready:
    """/readyz every 500 ms: how many answers were not 200."""

    def __init__(self, port):
        self.port, self.bad, self.polls, self.done = port, 0, 0, threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def run(self):
        while not self.done.wait(0.5):
            self.polls += 1
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{self.port}/readyz", timeout=5).read()
            except (urllib.error.URLError, OSError):
                self.bad += 1

    def stop(self):
        self.done.set()
        self.thread.join()
        return self.bad, self.polls


def statuses(port):
    counts, _ = s.metrics(port)
    return counts


def main():
    for tool in ["nginx", "wrk"]:
        if not s.shutil.which(tool):
            sys.exit(f"{tool} is missing (bench/serve.sh installs it)")
    work = tempfile.mkdtemp(prefix="pipelinectl-bench-overload-")
    os.chmod(work, 0o755)
    root = os.path.join(work, "origin")
    os.makedirs(root)
    files = []
    for label, group in s.groups():
        slug = re.sub(r"[^a-z]+", "-", label.lower()).strip("-")
        os.makedirs(os.path.join(root, slug))
        for f in group:
            os.symlink(f, os.path.join(root, slug, os.path.basename(f)))
            files.append(f"{slug}/{os.path.basename(f)}")
    grey = os.path.join(root, "grey.png")
    subprocess.run(["convert", "-size", "7000x7000", "gradient:gray20-gray80", "-colorspace", "Gray", "-depth", "8", "PNG:" + grey], check=True)
    # Alias directories for the fairness phase: /a<N>/<file> is <file> under another source name.
    for alias in range(ALIASES):
        os.symlink(".", os.path.join(root, f"a{alias}"))
    nginx, origin = s.start_nginx(work, root)
    sources = [f"http://127.0.0.1:{origin}/{f}" for f in files]
    paths = [s.sign("/fit/" + u) for u in sources]
    aliased = {name: [s.sign(f"/fit/http://127.0.0.1:{origin}/a{alias}/{f}") for alias in aliases for f in files]
               for name, aliases in [("greedy", range(0, ALIASES // 2)), ("small", range(ALIASES // 2, ALIASES))]}
    print(f"{len(paths)} photos; origin on {origin}; binary {s.BIN}", flush=True)
    rows = []
    try:
        if ONLY == "fairness":
            fairness(work, aliased, rows)
            return
        # Memory and pace: three orders, two allocators, 2 connections.
        shuffled = paths[:]
        random.Random(7).shuffle(shuffled)
        pace = {}
        for allocator, env in [("glibc", {}), ("jemalloc", {"LD_PRELOAD": JEMALLOC})]:
            if env and not os.path.exists(JEMALLOC):
                continue
            for order, listed in [("listed", paths), ("reversed", paths[::-1]), ("shuffled", shuffled)]:
                process, port = start(work, env=env)
                sampler = s.Sampler(process.pid)
                result = load(port, listed, work, 2, RATE, f"{allocator}-{order}")
                peak = sampler.stop()
                s.stop(process)
                pace.setdefault(allocator, []).append(result["ok"] / result["seconds"])
                rows.append(f"| 2 connections, {order} | {allocator} | {result['ok'] / result['seconds']:.1f} | {result['non2xx']} | {peak:.0f} |")
                print(rows[-1], flush=True)
        rate2 = sum(pace["glibc"]) / len(pace["glibc"])
        # The grey PNG, whole: the largest decode of the run.
        for allocator, env in [("glibc", {}), ("jemalloc", {"LD_PRELOAD": JEMALLOC})]:
            if env and not os.path.exists(JEMALLOC):
                continue
            process, port = start(work, env=env, extra=["--timeout", "120s"])
            sampler = s.Sampler(process.pid)
            started = time.monotonic()
            with urllib.request.urlopen(f"http://127.0.0.1:{port}" + s.sign(f"/fit/http://127.0.0.1:{origin}/grey.png"), timeout=120) as answer:
                answer.read()
            peak = sampler.stop()
            s.stop(process)
            rows.append(f"| 7000x7000 grey PNG | {allocator} | {time.monotonic() - started:.2f} s | | {peak:.0f} |")
            print(rows[-1], flush=True)
        # Goodput at 64 connections, from a fresh process.
        process, port = start(work)
        sampler, ready = s.Sampler(process.pid), Ready(port)
        result = load(port, paths, work, 64, OVERLOAD, "64", headers={"Accept": "image/jpeg"})
        bad, polls = ready.stop()
        peak = sampler.stop()
        counts = statuses(port)
        s.stop(process)
        fivexx = sum(v for k, v in counts.items() if k.startswith("5"))
        goodput = result["ok"] / result["seconds"]
        rows.append(f"| 64 connections, {OVERLOAD} s | glibc | {goodput:.1f} ({goodput / rate2:.2f}x the 2-connection rate {rate2:.1f}) | "
                    f"429: {int(counts.get('429', 0))}, 5xx: {int(fivexx)}, socket errors: {result['errors']}, /readyz not 200: {bad} of {polls} | {peak:.0f} |")
        print(rows[-1], flush=True)
        fairness(work, aliased, rows)
    finally:
        nginx.terminate()
    print("\n| phase | allocator | 200s per second | refusals and errors | peak RSS MiB |\n|---|---|---|---|---|")
    print("\n".join(rows))


def fairness(work, aliased, rows):
    """Two clients at once (X-Forwarded-For from a trusted proxy): 64 connections and SMALL,
    each over its own `aliased` sources (no two requests share a source)."""
    process, port = start(work, extra=["--trusted-proxy", "127.0.0.1"])
    sampler = s.Sampler(process.pid)
    results = {}

    def client(name, connections):
        results[name] = load(port, aliased[name], work, connections, OVERLOAD, "client-" + name,
                             headers={"Accept": AVIF_ACCEPT, "X-Forwarded-For": f"198.51.100.{connections}"}, disjoint=True)
    threads = [threading.Thread(target=client, args=("greedy", 64)), threading.Thread(target=client, args=("small", SMALL))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    peak = sampler.stop()
    s.stop(process)
    greedy = results["greedy"]["ok"] / results["greedy"]["seconds"]
    small = results["small"]["ok"] / results["small"]["seconds"]
    rows.append(f"| two clients, AVIF, {OVERLOAD} s | glibc | 64 connections: {greedy:.2f}, {SMALL} connections: {small:.2f} "
                f"(the second's share {small / (greedy + small):.2f}) | 429: {results['greedy']['non2xx']} and {results['small']['non2xx']} | {peak:.0f} |")
    print(rows[-1], flush=True)


if __name__ == "__main__":
    main()
