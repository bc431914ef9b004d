#!/usr/bin/env python3
"""The service benchmark (issue 32): `pipelinectl serve` against thumbor 7.8 and two
`vipsthumbnail` processes, in one run, on the same photos: fit in 512x512, quality 80, the source's
format kept (JPEG, PNG, WebP). Called by bench/serve.sh (`make bench-serve`), which installs the
peers and builds the release binary. Prints a table and writes it to bench/results/serve.md.

  origin     nginx on loopback serves the corpus files (no cache in front of any service)
  load       wrk rotating over the group's files: for the throughput table 2 connections, one per
             wrk thread, each thread starting half-way through the list from the other, every
             request's latency kept by source; 8 connections for stored results, 64 for overload
             (both on every group)
  latency    p50/p99 of all requests, and the p99 of each request's latency over its own source's
             median: the photos span 1 to 15 MP, so the first pair mostly measures the spread of
             their sizes, the second what the service adds to each; and the p99 of each request's
             latency minus that median, in ms (the ratio weighs the same wait more on faster answers)
  ours       `pipelinectl serve`, signed URLs, no data cache (uncached) unless stated; twice: the
             default decoder (shrink-on-load keeps 2x the fitted size, 3x where a PNG is averaged
             in blocks) and `shrink_on_load: fast`; each as one process on both CPUs, then as
             thumbor is run: two processes each held to one CPU, one connection to each
  thumbor    thumbor 7.8 (Pillow), two single-process servers on two ports with one connection
             each (see wrk_pair), no storage, no result storage, same quality and PNG zlib level
  vips       `vipsthumbnail` on the local files, two processes at once: no HTTP, a reference
             (same quality and PNG zlib level; its PNG rows unfiltered, as it writes them)
  PSNR       every answer of each service, and vipsthumbnail's files, against a full-decode Lanczos
             reference; the worst image
  KiB        the answers' bytes, one of each source
  RSS        the service's process tree, sampled every 50 ms through each phase; the peak

Groups: photos of at least 1 MP from both corpora (corpus.sh: JPEG, PNG; formats.sh: lossy and
lossless WebP, JPEG variants, PNG variants).
"""
import base64
import filecmp
import hashlib
import hmac
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "bench"))
import run as common  # noqa: E402  (psnr, descendants, rss_kb)

BIN = os.environ.get("BIN") or os.path.join(ROOT, ".build/release/pipelinectl")  # BIN=...: another build, for an A/B
SIZE = 512
QUALITY = 80
# zlib's level for PNG answers: our `png` encoder's default, set in thumbor (PNG_COMPRESSION_LEVEL,
# 6 by default) and vipsthumbnail (compression, 6 by default) too, so each compresses as hard.
PNG_LEVEL = 5
SECONDS = int(os.environ.get("BENCH_SERVE_SECONDS", "20"))
OVERLOAD_SECONDS = int(os.environ.get("BENCH_OVERLOAD_SECONDS", "60"))
KEY = os.urandom(32)
# More `pipelinectl serve` options for every run of ours, e.g. "--http-nice 0" to compare.
EXTRA = os.environ.get("BENCH_SERVE_EXTRA", "").split()
# Variables added to the service's environment (bench/serve-ab.py's ENV_A and ENV_B).
EXTRA_ENV = {}


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(port, path="/", seconds=60):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=2).read()
            return
        except urllib.error.HTTPError:
            return
        except OSError:
            time.sleep(0.1)
    sys.exit(f"nothing answered on port {port}")


class Sampler:
    """Peak RSS of a process tree, sampled every 50 ms while running."""

    def __init__(self, pid):
        self.pid, self.peak, self.done = pid, 0, threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def run(self):
        while not self.done.is_set():
            self.peak = max(self.peak, common.rss_kb(common.descendants(self.pid)))
            time.sleep(0.05)

    def stop(self):
        self.done.set()
        self.thread.join()
        return self.peak / 1024


def photos(paths):
    keep = []
    for path in paths:
        size = subprocess.run(["identify", "-format", "%w %h\n", path + "[0]"], capture_output=True, text=True).stdout.split()
        if len(size) >= 2 and int(size[0]) * int(size[1]) >= 1_000_000:
            keep.append(path)
    return keep


def groups():
    corpus = subprocess.run(["bash", os.path.join(ROOT, "bench/corpus.sh")], capture_output=True, text=True, check=True).stdout.split()[-1]
    formats = subprocess.run(["bash", os.path.join(ROOT, "../shared/bench/formats.sh")], capture_output=True, text=True, check=True).stdout.split()[-1]
    files = sorted(os.listdir(corpus))
    found = [
        ("corpus JPEG", [os.path.join(corpus, f) for f in files if f.endswith(".jpg")]),
        ("corpus PNG", [os.path.join(corpus, f) for f in files if f.endswith(".png")]),
        ("formats WebP", [os.path.join(formats, "webp", f) for f in sorted(os.listdir(os.path.join(formats, "webp")))]),
        ("formats JPEG", [os.path.join(formats, "jpeg", f) for f in sorted(os.listdir(os.path.join(formats, "jpeg")))]),
        ("formats PNG", [os.path.join(formats, "png", f) for f in sorted(os.listdir(os.path.join(formats, "png")))]),
    ]
    return [(label, photos(paths)) for label, paths in found]


def start_nginx(work, root):
    port = free_port()
    conf = os.path.join(work, "nginx.conf")
    with open(conf, "w") as f:
        f.write(f"""daemon off; worker_processes 1; pid {work}/nginx.pid; error_log {work}/nginx.err;
events {{ worker_connections 1024; }}
http {{ include /etc/nginx/mime.types; access_log off; sendfile on; keepalive_requests 100000;
  server {{ listen 127.0.0.1:{port}; root {root}; }} }}
""")
    process = subprocess.Popen(["nginx", "-c", conf, "-p", work], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_for(port)
    return process, port


def sign(path):
    signature = base64.urlsafe_b64encode(hmac.new(KEY, path.encode(), hashlib.sha256).digest()).decode().rstrip("=")
    return "/" + signature + path


def start_ours(work, name, decoder, cache=None, cpu=None):
    """`pipelinectl serve` with the preset `name`; `cpu`: held to that one CPU (taskset), so
    its jobs and workers default to one."""
    directory = write_preset(work, name, decoder, cache)
    env = dict(os.environ, PIPELINECTL_KEYS="bench:" + KEY.hex(), **EXTRA_ENV)
    process = subprocess.Popen(([] if cpu is None else ["taskset", "-c", str(cpu)]) + [BIN, "serve", directory, "--listen", "127.0.0.1:0", "--no-access-log", "--queue", "256",
                                "--timeout", "120s"] + EXTRA, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env, text=True,
                               start_new_session=True)
    line = process.stdout.readline()
    match = re.search(r":(\d+) ", line)
    if not match:
        sys.exit(f"pipelinectl serve did not start: {line}")
    threading.Thread(target=lambda: process.stdout.read(), daemon=True).start()
    return process, int(match.group(1))


def write_preset(work, name, decoder, cache=None):
    """A directory with the one preset `fit`: the benchmark's work."""
    directory = os.path.join(work, "presets-" + name)
    os.makedirs(directory, exist_ok=True)
    cache_lines = f"data_cache:\n  disk: {{ path: {cache}, size_limit: 10GB, store: processed }}\n" if cache else ""
    with open(os.path.join(directory, "fit.yaml"), "w") as f:
        f.write(f"""version: 1
name: fit
loader:
  http: {{ allow_loopback: true, max_concurrent: 16, timeout: 60s }}
{cache_lines}decoder:
  imagemagick: {decoder}
processors:
  - resize: {{ width: {SIZE}, height: {SIZE}, mode: fit }}
encoder:
  auto: {{ quality: {QUALITY} }}
output: {{ dir: {work}/unused }}
""")
    return directory


def start_thumbor(work, processes=2):
    port = free_port()
    conf = os.path.join(work, "thumbor.conf")
    with open(conf, "w") as f:
        f.write(f"""ALLOW_UNSAFE_URL = True
QUALITY = {QUALITY}
WEBP_QUALITY = {QUALITY}
PNG_COMPRESSION_LEVEL = {PNG_LEVEL}
AUTO_WEBP = False
LOADER = 'thumbor.loaders.http_loader'
STORAGE = 'thumbor.storages.no_storage'
RESULT_STORAGE = None
HTTP_LOADER_MAX_CLIENTS = 16
MAX_AGE = 0
RESPECT_ORIENTATION = True
""")
    process = subprocess.Popen(["thumbor", "--port", str(port), "--ip", "127.0.0.1", "--conf", conf, "--processes", str(processes), "-l", "error"],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    wait_for(port, "/healthcheck")
    return process, port


def stop(process):
    try:
        os.killpg(process.pid, signal.SIGTERM)
    except ProcessLookupError:
        pass
    try:
        process.wait(30)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)


def wrk(port, paths, work, connections, seconds, tag="", per_source=False, offset=0):
    """wrk rotating over `paths`. per_source: one connection per wrk thread (each thread's
    requests then follow one another), thread k starting k/connections of the way through the list
    (plus `offset` of it), and every request's latency kept by its source (LuaJIT's clock around
    request and response): "own" is then the 99th percentile of each request's latency over the
    median of its own source's, what the service adds beyond the spread of the photos' sizes."""
    script = os.path.join(work, f"rotate{tag}.lua")
    with open(script, "w") as f:
        f.write("paths = {" + ",".join(json.dumps(p) for p in paths) + "}\n")
        f.write(f"per_source = {'true' if per_source else 'false'}\nconnections = {connections}\noffset = {offset}\n")
        f.write("""counter = 0
threads = {}
setup = function(thread)
  thread:set("id", #threads)
  table.insert(threads, thread)
end
init = function(args)
  if per_source then
    counter = math.floor(#paths * ((id or 0) / connections + offset))
    local ffi = require("ffi")
    ffi.cdef("typedef struct { long tv_sec; long tv_nsec; } pk_timespec; int clock_gettime(int, pk_timespec *);")
    local ts = ffi.new("pk_timespec")
    now = function() ffi.C.clock_gettime(1, ts); return tonumber(ts.tv_sec) * 1000000 + tonumber(ts.tv_nsec) / 1000 end
    latencies = {}
  end
end
request = function()
  counter = counter + 1
  current = (counter % #paths) + 1
  if per_source then started = now() end
  return wrk.format("GET", paths[current])
end
if per_source then  -- defined only when wanted: wrk then copies every response's headers and body into Lua
  response = function(status, headers, body)
    if started then
      table.insert(latencies, current .. " " .. math.floor(now() - started))
      started = nil
    end
  end
end
done = function(summary, latency, requests)
  io.write(string.format("RESULT %d %d %d %d %d %d\\n", summary.requests, summary.duration, summary.errors.status,
    latency:percentile(50), latency:percentile(99), summary.errors.connect + summary.errors.read + summary.errors.write + summary.errors.timeout))
  if per_source then
    for _, thread in ipairs(threads) do
      for _, line in ipairs(thread:get("latencies")) do io.write("LAT " .. line .. "\\n") end
    end
  end
end
""")
    threads = connections if per_source else 1
    out = subprocess.run(["wrk", f"-t{threads}", f"-c{connections}", f"-d{seconds}s", "--timeout", "30s", "-s", script,
                          f"http://127.0.0.1:{port}"], capture_output=True, text=True).stdout
    fields = re.search(r"RESULT (\d+) (\d+) (\d+) (\d+) (\d+) (\d+)", out)
    if not fields:
        sys.exit("wrk printed no result:\n" + out)
    requests, duration_us, non2xx, p50, p99, socket_errors = map(int, fields.groups())
    result = {"rate": requests / (duration_us / 1e6), "p50": p50 / 1000, "p99": p99 / 1000, "non2xx": non2xx,
              "errors": socket_errors, "requests": requests}
    if per_source:
        result["latencies"] = [(int(a), int(b)) for a, b in re.findall(r"LAT (\d+) (\d+)", out)]
        result["own"] = own_source_p99(result["latencies"])
        result["excess"] = own_source_excess_p99(result["latencies"])
    return result


def own_source_medians(latencies):
    """Each source's median latency, for sources asked for at least three times (fewer: no
    median to speak of)."""
    by_source = {}
    for source, us in latencies:
        by_source.setdefault(source, []).append(us)
    return {k: sorted(v)[len(v) // 2] for k, v in by_source.items() if len(v) >= 3}


def percentile99(values):
    values = sorted(values)
    return values[min(len(values) - 1, int(len(values) * 0.99))] if values else None


def own_source_p99(latencies):
    """The 99th percentile of latency / (median latency of the same source), over every request
    (sources as `own_source_medians`)."""
    medians = own_source_medians(latencies)
    return percentile99(us / medians[source] for source, us in latencies if source in medians and medians[source] > 0)


def own_source_excess_p99(latencies):
    """The 99th percentile, in ms, of each request's latency minus the median of its own source's
    (same sources): the time the service added beyond its usual, in absolute terms. The ratio
    weighs the same few ms of waiting more on a service that answers faster."""
    medians = own_source_medians(latencies)
    return percentile99((us - medians[source]) / 1000 for source, us in latencies if source in medians)


def wrk_pair(ports, paths, work, seconds):
    """One connection to each of two single-process thumbors at once, summed. thumbor's
    `--processes 2` shares one listening socket, and both of wrk's kept-alive connections often
    land in the same process (one core): measured here at 25 and at 49 req/s on the same files in
    two runs. Two processes on two ports, one connection each, is thumbor using both cores."""
    results = [None, None]

    def one(i):
        results[i] = wrk(ports[i], paths, work, 1, seconds, tag=str(i), per_source=True, offset=i / 2)

    threads = [threading.Thread(target=one, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    a, b = results
    latencies = a["latencies"] + b["latencies"]
    return {"rate": a["rate"] + b["rate"], "p50": (a["p50"] + b["p50"]) / 2, "p99": max(a["p99"], b["p99"]),
            "non2xx": a["non2xx"] + b["non2xx"], "errors": a["errors"] + b["errors"], "requests": a["requests"] + b["requests"],
            "latencies": latencies, "own": own_source_p99(latencies), "excess": own_source_excess_p99(latencies)}


def fetch_all(port, paths, directory):
    os.makedirs(directory, exist_ok=True)
    outputs = []
    for index, path in enumerate(paths):
        target = os.path.join(directory, f"{index:03d}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=120) as response, open(target, "wb") as f:
                f.write(response.read())
        except urllib.error.HTTPError as error:
            sys.exit(f"{path}: {error.code} {error.read().decode(errors='replace')[:500]}")
        outputs.append(target)
    return outputs


def worst_psnr(outputs, references):
    """The lowest PSNR over the answers, each flattened onto black first (as the reference)."""
    values = []
    for out, ref in zip(outputs, references):
        flat = out + ".flat.png"
        subprocess.run(["convert", out + "[0]", "+repage", "-background", "black", "-flatten", flat], check=True)
        values.append(common.psnr(flat, ref))
    return min(values)


def vips_directory(work):
    return os.path.join(work, "vips-out")


def vips(files, work):
    out = vips_directory(work)
    os.makedirs(out, exist_ok=True)
    env = dict(os.environ, VIPS_CONCURRENCY="1")
    halves = [files[0::2], files[1::2]]
    extension = vips_extension(files[0])
    target = f"{out}/%s.{extension}" + (f"[compression={PNG_LEVEL}]" if extension == "png" else f"[Q={QUALITY}]")
    start = time.monotonic()
    processes = [subprocess.Popen(["vipsthumbnail", "--size", f"{SIZE}x{SIZE}", "-o", target] + half, env=env,
                                  stdout=subprocess.DEVNULL, stderr=subprocess.PIPE) for half in halves]
    for p in processes:
        _, errors = p.communicate()
        if p.returncode != 0:
            sys.exit("vipsthumbnail failed: " + errors.decode(errors="replace")[-2000:])
    return len(files) / (time.monotonic() - start)


def vips_outputs(files, work):
    """The files vipsthumbnail wrote for `files` (the last pass's), in their order."""
    out = vips_directory(work)
    return [os.path.join(out, os.path.splitext(os.path.basename(f))[0] + "." + vips_extension(f)) for f in files]


def vips_extension(path):
    # The source's format, as the services keep it (vipsthumbnail picks the saver by extension;
    # a group has one format).
    return {".jpg": "jpg", ".jpeg": "jpg", ".png": "png", ".webp": "webp"}[os.path.splitext(path)[1].lower()]


def vips_rate(files, work):
    # One untimed pass first (the first start of vipsthumbnail in a run may load its libraries from
    # disk), then passes over the group for at least 240 images: a pass of 24 images lasted about a
    # second, and the first group read 12.5 and 25.9 img/s in two full runs (32-45 otherwise).
    vips((files * 2)[:2], work)
    rounds = max(1, -(-240 // max(1, len(files))))
    return vips(files * rounds, work)


def metrics(port):
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    statuses, buckets = {}, {}
    for line in text.splitlines():
        m = re.match(r'pipelinectl_requests_total\{.*status="(\d+)".*\} (\S+)', line)
        if m:
            statuses[m.group(1)] = statuses.get(m.group(1), 0) + float(m.group(2))
        m = re.match(r'pipelinectl_request_duration_seconds_bucket\{.*le="([^"]+)".*status="(\d+)".*\} (\S+)', line) or \
            re.match(r'pipelinectl_request_duration_seconds_bucket\{.*status="(\d+)".*le="([^"]+)".*\} (\S+)', line)
        if m:
            a, b, count = m.groups()
            le, status = (a, b) if not a.isdigit() or "." in a or a == "+Inf" else (b, a)
            buckets.setdefault(status, {})[le] = buckets.setdefault(status, {}).get(le, 0) + float(count)
    return statuses, buckets


def share_within(buckets, status, seconds):
    """The share of `status` answers timed within `seconds` (a bucket bound) by the service."""
    counts = buckets.get(status, {})
    total = counts.get("+Inf", 0)
    within = max((v for k, v in counts.items() if k != "+Inf" and float(k) <= seconds + 1e-9), default=0)
    return within / total if total else None


def main():
    for tool in ["nginx", "wrk", "thumbor", "vipsthumbnail"]:
        if not shutil.which(tool):
            sys.exit(f"{tool} is missing (bench/serve.sh installs it)")
    work = tempfile.mkdtemp(prefix="pipelinectl-bench-serve-")
    os.chmod(work, 0o755)  # nginx's workers run as another user
    root = os.path.join(work, "origin")
    os.makedirs(root)
    found = groups()
    if os.environ.get("BENCH_SERVE_GROUPS"):  # "corpus JPEG,formats PNG": these groups only
        wanted = os.environ["BENCH_SERVE_GROUPS"].split(",")
        found = [g for g in found if g[0] in wanted] or sys.exit(f"no group named {wanted}")
    lines, peaks = [], {"ours": 0, "ours-fast": 0, "thumbor": 0}  # and "... per CPU": both processes
    nginx, origin = None, None
    try:
        rows = []
        for label, files in found:
            slug = re.sub(r"[^a-z]+", "-", label.lower()).strip("-")
            os.makedirs(os.path.join(root, slug))
            for f in files:
                os.symlink(f, os.path.join(root, slug, os.path.basename(f)))
        nginx, origin = start_nginx(work, root)
        print(f"work: {work}; origin on {origin}", flush=True)
        only_load = os.environ.get("BENCH_SERVE_ONLY") == "load"
        for label, files in ([] if only_load else found):
            slug = re.sub(r"[^a-z]+", "-", label.lower()).strip("-")
            sources = [f"http://127.0.0.1:{origin}/{slug}/{os.path.basename(f)}" for f in files]
            refs = os.path.join(work, "ref", slug)
            os.makedirs(refs)
            references = []
            for index, f in enumerate(files):
                ref = os.path.join(refs, f"{index:03d}.png")
                # As bench/run.py: resized, then the page geometry reset (IM6's -auto-orient keeps
                # the unrotated one, and -flatten paints onto it), then flattened onto black.
                subprocess.run(["convert", f + "[0]", "-auto-orient", "-filter", "Lanczos", "-resize", f"{SIZE}x{SIZE}", "+repage",
                                "-background", "black", "-flatten", "PNG48:" + ref], check=True)  # 16 bits: IM6's 8-bit PNG writer truncates
                references.append(ref)
            row = {"group": label, "files": len(files)}
            for name, decoder in [("ours", "{}"), ("ours-fast", "{ shrink_on_load: fast }")]:
                process, port = start_ours(work, name, decoder)
                paths = [sign("/fit/" + s) for s in sources]
                outputs = fetch_all(port, paths, os.path.join(work, "out", name, slug))  # warms the process, not a cache
                sampler = Sampler(process.pid)
                row[name] = wrk(port, paths, work, 2, SECONDS, per_source=True)
                peaks[name] = max(peaks[name], sampler.stop())
                row[name]["psnr"] = worst_psnr(outputs, references)
                row[name]["bytes"] = sum(os.path.getsize(o) for o in outputs)
                stop(process)
                # The same service laid out as thumbor is: one process per CPU, one connection each.
                pair = [start_ours(work, f"{name}-cpu{cpu}", decoder, cpu=cpu) for cpu in sorted(os.sched_getaffinity(0))[:2]]
                same = True
                for index, (_, port) in enumerate(pair):
                    again = fetch_all(port, paths, os.path.join(work, "out", f"{name}-cpu{index}", slug))
                    same = same and all(filecmp.cmp(a, b, shallow=False) for a, b in zip(outputs, again))
                samplers = [Sampler(process.pid) for process, _ in pair]
                row[name + "-percpu"] = wrk_pair([port for _, port in pair], paths, work, SECONDS)
                row[name + "-percpu"]["same"] = same
                peaks[name + " per CPU"] = max(peaks.get(name + " per CPU", 0), sum(sampler.stop() for sampler in samplers))
                for process, _ in pair:
                    stop(process)
            pair = [start_thumbor(work, processes=1) for _ in range(2)]
            paths = [f"/unsafe/fit-in/{SIZE}x{SIZE}/" + s for s in sources]
            outputs = fetch_all(pair[0][1], paths, os.path.join(work, "out", "thumbor", slug))
            fetch_all(pair[1][1], paths, os.path.join(work, "out", "thumbor-2", slug))
            samplers = [Sampler(process.pid) for process, _ in pair]
            row["thumbor"] = wrk_pair([port for _, port in pair], paths, work, SECONDS)
            peaks["thumbor"] = max(peaks["thumbor"], sum(sampler.stop() for sampler in samplers))
            row["thumbor"]["psnr"] = worst_psnr(outputs, references)
            row["thumbor"]["bytes"] = sum(os.path.getsize(o) for o in outputs)
            for process, _ in pair:
                stop(process)
            row["vips"] = vips_rate(files, work)
            # vipsthumbnail's own answers, as a fourth PSNR: its pre-shrink rule differs by format
            # (JPEG keeps 2x the target, as our default; WebP goes to the target in libwebp's box
            # rescaler, as our `fast`), and the ratio means something only beside it.
            row["vips_psnr"] = worst_psnr(vips_outputs(files, work), references)
            rows.append(row)
            print(json.dumps({k: ({n: x for n, x in v.items() if n != "latencies"} if isinstance(v, dict) else v)
                              for k, v in row.items()}), flush=True)

        # Stored results and overload, on every group: stored answers are as large as the
        # format makes them, and a queue is as long as the group's jobs are slow.
        loads = []
        for label, files in found:
            slug = re.sub(r"[^a-z]+", "-", label.lower()).strip("-")
            paths = [sign("/fit/" + f"http://127.0.0.1:{origin}/{slug}/{os.path.basename(f)}") for f in files]
            process, port = start_ours(work, "stored-" + slug, "{}", cache=os.path.join(work, "cache-" + slug))
            fetch_all(port, paths, os.path.join(work, "out", "stored-" + slug))
            sampler = Sampler(process.pid)
            stored = wrk(port, paths, work, 8, SECONDS)
            peaks["ours"] = max(peaks["ours"], sampler.stop())
            stop(process)
            print(json.dumps({"group": label, "stored": stored}), flush=True)

            process, port = start_ours_overload(work)
            sampler = Sampler(process.pid)
            overload = wrk(port, paths, work, 64, OVERLOAD_SECONDS)
            peaks["ours"] = max(peaks["ours"], sampler.stop())
            statuses, buckets = metrics(port)
            stop(process)
            overload.update({"statuses": statuses, "429_within_10ms": share_within(buckets, "429", 0.01),
                             "200_within_1s": share_within(buckets, "200", 1.0)})
            print(json.dumps({"group": label, "overload": overload}), flush=True)
            loads.append({"group": label, "stored": stored, "overload": overload})
        if not only_load:
            write_table(rows, loads, peaks, partial=bool(os.environ.get("BENCH_SERVE_GROUPS")))
    finally:
        if nginx:
            nginx.terminate()
        if os.environ.get("BENCH_KEEP") != "1":
            shutil.rmtree(work, ignore_errors=True)


def start_ours_overload(work):
    """The service as deployed by default (jobs = cores, queue = 64 per job and at least 128, queue-wait 5 s)."""
    directory = write_preset(work, "overload", "{}")
    env = dict(os.environ, PIPELINECTL_KEYS="bench:" + KEY.hex())
    process = subprocess.Popen([BIN, "serve", directory, "--listen", "127.0.0.1:0", "--no-access-log"] + EXTRA, stdout=subprocess.PIPE,
                               stderr=subprocess.DEVNULL, env=env, text=True, start_new_session=True)
    match = re.search(r":(\d+) ", process.stdout.readline())
    threading.Thread(target=lambda: process.stdout.read(), daemon=True).start()
    return process, int(match.group(1))


def write_table(rows, loads, peaks, partial=False):
    out = ["| group | files | ours req/s (p50/p99 ms) | ours fast req/s (p50/p99) | thumbor req/s (p50/p99) | 2x vipsthumbnail img/s "
           "| ours/vips | fast/vips | fast/thumbor | ours/thumbor | worst PSNR ours / fast / thumbor / vips "
           "| p99 / own source's median: ours / fast / thumbor | p99 over own source's median, ms: ours / fast / thumbor | answers' KiB ours / fast / thumbor |",
           "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    excess = lambda x: "-" if x.get("excess") is None else f"{x['excess']:.1f}"  # noqa: E731
    own = lambda x: "-" if x.get("own") is None else f"{x['own']:.2f}"  # noqa: E731
    for r in rows:
        o, f, t = r["ours"], r["ours-fast"], r["thumbor"]
        out.append(f"| {r['group']} | {r['files']} | {o['rate']:.1f} ({o['p50']:.0f}/{o['p99']:.0f}) | {f['rate']:.1f} ({f['p50']:.0f}/{f['p99']:.0f}) "
                   f"| {t['rate']:.1f} ({t['p50']:.0f}/{t['p99']:.0f}) | {r['vips']:.1f} | {o['rate'] / r['vips']:.2f}x | {f['rate'] / r['vips']:.2f}x "
                   f"| {f['rate'] / t['rate']:.2f}x | {o['rate'] / t['rate']:.2f}x "
                   f"| {o['psnr']:.2f} / {f['psnr']:.2f} / {t['psnr']:.2f} / {r['vips_psnr']:.2f} "
                   f"| {own(o)} / {own(f)} / {own(t)} | {excess(o)} / {excess(f)} / {excess(t)} | {o['bytes'] / 1024:.0f} / {f['bytes'] / 1024:.0f} / {t['bytes'] / 1024:.0f} |")
    out += ["", "The same service laid out as thumbor is run: two processes, each held to one CPU (`taskset -c`; its "
            "jobs and workers then default to one), one connection to each:", "",
            "| group | ours req/s (p50/p99 ms) | fast req/s (p50/p99) | ours/thumbor | fast/thumbor | ours/vips | fast/vips "
            "| p99 / own source's median: ours / fast | p99 over own source's median, ms: ours / fast | answers as one process's |",
            "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        o, f, t = r["ours-percpu"], r["ours-fast-percpu"], r["thumbor"]
        out.append(f"| {r['group']} | {o['rate']:.1f} ({o['p50']:.0f}/{o['p99']:.0f}) | {f['rate']:.1f} ({f['p50']:.0f}/{f['p99']:.0f}) "
                   f"| {o['rate'] / t['rate']:.2f}x | {f['rate'] / t['rate']:.2f}x | {o['rate'] / r['vips']:.2f}x | {f['rate'] / r['vips']:.2f}x "
                   f"| {own(o)} / {own(f)} | {excess(o)} / {excess(f)} | {'identical' if o['same'] and f['same'] else 'DIFFERENT'} |")
    failures = {f"{r['group']} {k}": r[k]["non2xx"] for r in rows for k in ("ours", "ours-fast", "thumbor", "ours-percpu", "ours-fast-percpu")
                if r[k]["non2xx"]}
    closes = sum(r[k]["errors"] for r in rows for k in ("ours", "ours-fast", "ours-percpu", "ours-fast-percpu"))
    out += ["", f"Answers other than 2xx during the table: {failures or 'none'}. Read errors wrk counts for ours "
            f"(connections closed under it): {closes}.", "",
            "Stored results (data cache `store: processed`, 8 connections) and overload (64 connections, "
            f"{OVERLOAD_SECONDS} s, default jobs, queue and queue wait), each group's files:", "",
            "| group | stored req/s | stored p50 / p99 ms | stored non-2xx | overload answers/s | overload statuses "
            "| 429 within 10 ms (server) | 200 within 1 s (server) | socket errors |",
            "|---|---|---|---|---|---|---|---|---|"]
    for load in loads:
        st, ov = load["stored"], load["overload"]
        statuses = ", ".join(f"{k}: {v:.0f}" for k, v in sorted(ov["statuses"].items()))
        out.append(f"| {load['group']} | {st['rate']:.0f} | {st['p50']:.2f} / {st['p99']:.2f} | {st['non2xx']} | {ov['rate']:.0f} "
                   f"| {statuses} | {fmt_share(ov['429_within_10ms'])} | {fmt_share(ov['200_within_1s'])} | {ov['errors']} |")
    out += ["",
            "Peak RSS (MiB): " + ", ".join(f"{k} {v:.0f}" for k, v in peaks.items()) + "."]
    text = "\n".join(out) + "\n"
    print(text)
    if partial:  # some groups only: the full table in bench/results stays
        return
    os.makedirs(os.path.join(ROOT, "bench/results"), exist_ok=True)
    with open(os.path.join(ROOT, "bench/results/serve.md"), "w") as f:
        f.write(f"# bench/serve.sh, {time.strftime('%Y-%m-%d %H:%M')}\n\n{text}")


def fmt_share(value):
    return "-" if value is None else f"{value * 100:.1f}%"


if __name__ == "__main__":
    main()
