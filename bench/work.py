#!/usr/bin/env python3
"""The worker benchmark (issue 31): `pipelinectl work` on both queues against `pipelinectl run` over
the same sources, in one run, on this machine. Called by bench/work.sh.

SQS (moto's S3 and SQS on loopback, the bucket notifying the queue of every upload):
  throughput  BENCH_WORK_UPLOADS (1,000) uploads of the bench corpus (72 wallpapers, cycled under
              distinct keys) are queued first; then `work --until-empty` drains them and `run`
              processes the same 1,000 s3:// URLs from a list; BENCH_WORK_ROUNDS (2) rounds in
              turn, ABBA (the keys uploaded again before each later `work`). Ratio = run's mean
              wall / work's mean wall.
  latency     a waiting worker; uploads at a steady BENCH_WORK_RATE (10/s) for BENCH_WORK_SECONDS
              (60 s); upload-to-output = when the output file appeared (the watcher looks every
              10 ms) minus when the PUT returned.
PostgreSQL (PostgreSQL 15 on loopback, started here as a created user):
  throughput  BENCH_WORK_PG_ROWS (100,000) small images (hard links to 100 JPEGs of 320x180 made
              from the corpus) enqueued with COPY; `work --until-empty` against `run` over the same
              list, in rounds as above (enqueued again before each later `work`).
  latency     a waiting worker; INSERTs at 10/s through one psql session, as above.
moto runs with Tests/TestSupport/moto-server.py's fixes: without the one to its ReceiveMessage,
moto spent 90% of its CPU computing queue attributes, on the cores the worker runs on.
Peak RSS is the worker's (and run's) ru_maxrss from /usr/bin/time. Outputs go to a new directory
for each command on tmpfs (/dev/shm, or BENCH_WORK_OUT), removed once counted, so no command finds
another's outputs: on ext4 the same `run` of 20,000 small images took 32.8 s of CPU in one round
and 39.6 s in the next, by what the commands before it had written and deleted (ext4 looking for
free inodes), which fell on one command of a pair or the other (on tmpfs: 27.3 and 27.6 s). Each
later PostgreSQL round truncates the table before enqueueing, so every `work` claims from a table
as fresh as the first round's.
Throughput is given two ways: whole commands (process start to exit; `work --until-empty` ends on
a receive that waits 1 s for nothing, SQS's way of telling a queue is empty), and items a second
from the first output written to the last (the files' modification times), what a worker that
runs for days sees. The pipeline: fit in 256x256, JPEG quality 80, shrink on load.
"""
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN = os.environ.get("BENCH_BIN") or os.path.join(ROOT, ".build/release/pipelinectl")  # BENCH_BIN: another build to measure
UPLOADS = int(os.environ.get("BENCH_WORK_UPLOADS", "1000"))
RATE = float(os.environ.get("BENCH_WORK_RATE", "10"))
SECONDS = float(os.environ.get("BENCH_WORK_SECONDS", "60"))
PG_ROWS = int(os.environ.get("BENCH_WORK_PG_ROWS", "100000"))
ONLY = os.environ.get("BENCH_WORK_ONLY", "")  # sqs or postgres
ROUNDS = int(os.environ.get("BENCH_WORK_ROUNDS", "2"))  # rounds of work and run, in turn
OUT_ROOT = os.environ.get("BENCH_WORK_OUT") or ("/dev/shm" if os.path.isdir("/dev/shm") else None)
ENV = dict(os.environ, AWS_ACCESS_KEY_ID="testing", AWS_SECRET_ACCESS_KEY="testing", AWS_REGION="us-east-1")


def free_port():
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def pipeline(work, loader):
    path = os.path.join(work, "bench.yaml")
    with open(path, "w") as f:
        f.write(f"""version: 1
name: bench
loader: {loader}
decoder:
  imagemagick: {{ shrink_on_load: fast }}
processors:
  - resize: {{ width: 256, height: 256, mode: fit }}
encoder:
  jpeg: {{ quality: 80 }}
output: {{ dir: "{work}/unused", name: "{{stem}}.{{ext}}" }}
""")
    return path


def cpu_seconds(pid):
    """User + system CPU seconds of a running process so far (from /proc)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def timed(args, env=ENV, cwd=None, server=None):
    """Runs args under /usr/bin/time; (wall seconds, peak RSS MiB, CPU seconds of the command,
    CPU seconds the server process (moto, PostgreSQL's postmaster children excluded) spent meanwhile,
    stdout+stderr)."""
    before = cpu_seconds(server) if server else 0
    started = time.monotonic()
    result = subprocess.run(["/usr/bin/time", "-f", "RSSKB %M CPU %U %S"] + args, env=env, cwd=cwd, capture_output=True, text=True)
    wall = time.monotonic() - started
    served = (cpu_seconds(server) - before) if server else 0
    line = next((line.split() for line in result.stderr.splitlines() if line.startswith("RSSKB ")), ["", "0", "", "0", "0"])
    rss, cpu = int(line[1]) / 1024, float(line[3]) + float(line[4])
    if result.returncode not in (0, 1):
        sys.exit(f"{' '.join(args)} failed ({result.returncode}): {result.stdout}{result.stderr}")
    return wall, rss, cpu, served, result.stdout + result.stderr


def output_dir(work, name):
    """A new directory for one command's outputs (on OUT_ROOT when set)."""
    return tempfile.mkdtemp(prefix=f"pipelinectl-bench-{name}-", dir=OUT_ROOT or work)


def count_outputs(out):
    """(outputs in out, seconds from the first written to the last); out is removed."""
    if not os.path.isdir(out):
        return 0, 0.0
    times = [entry.stat().st_mtime_ns for entry in os.scandir(out) if not entry.name.startswith(".")]
    shutil.rmtree(out, ignore_errors=True)
    return len(times), ((max(times) - min(times)) / 1e9 if times else 0.0)


class Watcher(threading.Thread):
    """Notes when each output file appears in out (looks every 10 ms)."""

    def __init__(self, out):
        super().__init__(daemon=True)
        self.out, self.seen, self.stop = out, {}, False

    def run(self):
        while not self.stop:
            if os.path.isdir(self.out):
                now = time.monotonic()
                for name in os.listdir(self.out):
                    if not name.startswith(".") and name not in self.seen:
                        self.seen[name] = now
            time.sleep(0.01)


class Worker:
    """pipelinectl work in the background, under /usr/bin/time."""

    def __init__(self, args, env=ENV):
        self.log = tempfile.TemporaryFile()
        self.process = subprocess.Popen(["/usr/bin/time", "-f", "RSSKB %M", BIN, "work"] + args, env=env,
                                        stdout=self.log, stderr=self.log)

    def stop(self):
        # /usr/bin/time passes SIGTERM on to the worker (its child): signal the worker itself.
        for pid in subprocess.run(["pgrep", "-P", str(self.process.pid)], capture_output=True, text=True).stdout.split():
            os.kill(int(pid), signal.SIGTERM)
        self.process.wait(timeout=120)
        self.log.seek(0)
        text = self.log.read().decode()
        rss = next((int(line.split()[1]) for line in text.splitlines() if line.startswith("RSSKB ")), 0) / 1024
        return rss, text


def percentile(values, p):
    values = sorted(values)
    return values[min(len(values) - 1, int(round(p / 100 * (len(values) - 1))))]


def latency_row(name, latencies, sent, rss):
    made = len(latencies)
    return (f"| {name} | {sent} at {RATE:g}/s | {made} | {statistics.median(latencies) * 1000:.0f} ms | "
            f"{percentile(latencies, 99) * 1000:.0f} ms | {max(latencies) * 1000:.0f} ms | {rss:.0f} MiB |")


def steady(send, sources, watcher, out_names):
    """Sends sources at RATE; the latency of each (output seen minus sent)."""
    sent_at = {}
    interval = 1 / RATE
    start = time.monotonic()
    for index, source in enumerate(sources):
        target = start + index * interval
        delay = target - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        send(source)
        sent_at[out_names[index]] = time.monotonic()
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and any(n not in watcher.seen for n in sent_at):
        time.sleep(0.05)
    missing = [n for n in sent_at if n not in watcher.seen]
    if missing:
        sys.exit(f"outputs never appeared: {missing[:5]} ({len(missing)})")
    return [watcher.seen[n] - sent_at[n] for n in sent_at]


def alternated(name, count, run_once, work_once, unit, run_server=None):
    """ROUNDS rounds of `work` and `run` in turn, ABBA (work, run, run, work, ...), so that a
    machine getting faster or slower during the benchmark, and what one command leaves behind for
    the next (dirty pages, a warm cache), fall on both alike. Each call returns ((wall, RSS, CPU,
    server CPU, output), outputs made). The row: mean walls, their ratio, every round's
    ratio, mean CPU, peak RSS."""
    runs, works = [], []
    for n in range(ROUNDS):
        order = [("work", work_once), ("run", run_once)] if n % 2 == 0 else [("run", run_once), ("work", work_once)]
        for kind, once in order:
            measured, (made, span) = once(n)
            if made != count:
                sys.exit(f"{name}: {kind} made {made} outputs of {count}: {measured[4][-2000:]}")
            (works if kind == "work" else runs).append(measured + (span,))
    def means(field):
        """run's and work's mean of one field, and each round's ratio of run's over work's."""
        return (statistics.mean(m[field] for m in runs), statistics.mean(m[field] for m in works),
                ", ".join(f"{r[field] / w[field]:.2f}" for r, w in zip(runs, works)))

    run_wall, work_wall, each = means(0)
    run_span, work_span, each_span = means(5)
    run_server_cpu = run_server if run_server is not None else f"{statistics.mean(m[3] for m in runs):.1f} s"
    return (f"| {name} | {run_wall:.1f} s ({count / run_wall:.1f}{unit}) | {work_wall:.1f} s ({count / work_wall:.1f}{unit}) | "
            f"**{run_wall / work_wall:.2f}x** ({each}) | {(count - 1) / run_span:.1f}{unit} / {(count - 1) / work_span:.1f}{unit}: "
            f"**{run_span / work_span:.2f}x** ({each_span}) | {statistics.mean(m[2] for m in runs):.1f} s / {statistics.mean(m[2] for m in works):.1f} s | "
            f"{run_server_cpu} / {statistics.mean(m[3] for m in works):.1f} s | {max(m[1] for m in runs):.0f} MiB | {max(m[1] for m in works):.0f} MiB |")


def corpus():
    folder = subprocess.run(["bash", os.path.join(ROOT, "bench/corpus.sh")], capture_output=True, text=True, check=True).stdout.strip()
    return sorted(os.path.join(folder, n) for n in os.listdir(folder) if n.lower().endswith((".jpg", ".png")))


def bench_sqs(work, files):
    import boto3
    port = free_port()
    moto = subprocess.Popen([sys.executable, os.path.join(ROOT, "Tests/TestSupport/moto-server.py"), "-H", "127.0.0.1", "-p", str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    endpoint = f"http://127.0.0.1:{port}"
    env = dict(ENV, AWS_ENDPOINT_URL=endpoint)
    try:
        for _ in range(300):
            try:
                kw = dict(endpoint_url=endpoint, region_name="us-east-1", aws_access_key_id="testing", aws_secret_access_key="testing")
                s3, sqs = boto3.client("s3", **kw), boto3.client("sqs", **kw)
                s3.list_buckets()
                break
            except Exception:
                time.sleep(0.1)
        s3.create_bucket(Bucket="uploads")
        queue = sqs.create_queue(QueueName="uploads")["QueueUrl"]
        arn = sqs.get_queue_attributes(QueueUrl=queue, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
        s3.put_bucket_notification_configuration(Bucket="uploads", NotificationConfiguration={
            "QueueConfigurations": [{"QueueArn": arn, "Events": ["s3:ObjectCreated:*"]}]})
        bodies = [open(f, "rb").read() for f in files]
        keys = [f"in/u{i:05d}{os.path.splitext(files[i % len(files)])[1]}" for i in range(UPLOADS)]

        def queue_uploads():
            # Each PUT notifies the queue: the same keys uploaded again queue them again.
            for i, key in enumerate(keys):
                s3.put_object(Bucket="uploads", Key=key, Body=bodies[i % len(bodies)])

        queue_uploads()
        listing = os.path.join(work, "sqs-list.txt")
        with open(listing, "w") as f:
            f.write("".join(f"s3://uploads/{k}\n" for k in keys))
        yaml = pipeline(work, f'{{ s3: {{ endpoint: "{endpoint}", region: us-east-1 }} }}')
        def run_once(n):
            out = output_dir(work, f"sqs-run-{n}")
            measured = timed([BIN, "run", yaml, listing, "-o", out, "--progress", "none", "-q"], env, server=moto.pid)
            return measured, count_outputs(out)

        def work_once(n):
            if n > 0:
                queue_uploads()
            out = output_dir(work, f"sqs-work-{n}")
            measured = timed([BIN, "work", yaml, "--queue", queue, "--until-empty", "-o", out, "--progress", "none", "-q"],
                             env, server=moto.pid)
            return measured, count_outputs(out)

        rows = [alternated(f"SQS (moto), {UPLOADS} uploads queued", UPLOADS, run_once, work_once, "/s")]
        # Latency at a steady rate: a waiting worker.
        out = os.path.join(work, "sqs-live")
        watcher = Watcher(out)
        watcher.start()
        worker = Worker([yaml, "--queue", queue, "-o", out, "--progress", "none", "-q"], env)
        time.sleep(2)  # the worker's start-up is not part of an upload's latency
        count = int(RATE * SECONDS)
        live = [f"live/l{i:05d}{os.path.splitext(files[i % len(files)])[1]}" for i in range(count)]
        names = [f"l{i:05d}.jpg" for i in range(count)]
        latencies = steady(lambda key: s3.put_object(Bucket="uploads", Key=key, Body=bodies[live.index(key) % len(bodies)]),
                           live, watcher, names)
        watcher.stop = True
        rss, _ = worker.stop()
        return rows, [latency_row("SQS (moto)", latencies, count, rss)]
    finally:
        moto.kill()
        moto.wait()


def postgres_cpu(data):
    """CPU seconds of the PostgreSQL server in data/data: the postmaster, the backends it has
    reaped (its children's times) and those alive now."""
    with open(f"{data}/data/postmaster.pid") as f:
        master = int(f.readline())
    with open(f"/proc/{master}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    total = sum(int(x) for x in fields[11:15]) / os.sysconf("SC_CLK_TCK")
    for pid in os.listdir("/proc"):
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            if pid.isdigit() and int(fields[1]) == master:
                total += cpu_seconds(int(pid))
        except (OSError, ValueError):
            pass
    return total


def bench_postgres(work, files):
    bins = sorted(d for d in os.listdir("/usr/lib/postgresql") if d.isdigit())[-1]
    bins = f"/usr/lib/postgresql/{bins}/bin"
    user = "pipelinectl-pg" if os.getuid() == 0 else None
    as_user = ["runuser", "-u", user, "--"] if user else []
    if user and subprocess.run(["id", "-u", user], capture_output=True).returncode != 0:
        subprocess.run(["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", user], check=True)
    data = tempfile.mkdtemp(prefix="pipelinectl-bench-pg-")
    if user:
        shutil.chown(data, user)
    port = free_port()
    subprocess.run(as_user + [f"{bins}/initdb", "-D", f"{data}/data", "-U", "postgres", "--auth=trust", "--no-sync"],
                   check=True, capture_output=True)
    subprocess.run(as_user + [f"{bins}/pg_ctl", "-D", f"{data}/data", "-l", f"{data}/log", "-w", "-o",
                              f"-p {port} -k {data} -c listen_addresses=127.0.0.1", "start"],
                   check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, close_fds=True)
    url = f"postgres://postgres@127.0.0.1:{port}/postgres"
    try:
        # 100 small JPEGs (320x180) made from the corpus, hard-linked under distinct names.
        small = os.path.join(work, "small")
        os.makedirs(small)
        for i, f in enumerate(files[:100]):
            subprocess.run(["convert", f + "[0]", "-resize", "320x180!", "-quality", "85", os.path.join(small, f"s{i:03d}.jpg")], check=True)
        seeds = sorted(os.listdir(small))
        rows_dir = os.path.join(work, "rows")
        os.makedirs(rows_dir)
        sources = []
        for i in range(PG_ROWS):
            path = os.path.join(rows_dir, f"r{i:06d}.jpg")
            os.link(os.path.join(small, seeds[i % len(seeds)]), path)
            sources.append(path)
        listing = os.path.join(work, "pg-list.txt")
        with open(listing, "w") as f:
            f.write("\n".join(sources) + "\n")
        subprocess.run([BIN, "queue", "init", url], check=True, capture_output=True)
        started = time.monotonic()
        subprocess.run([BIN, "queue", "enqueue", url, listing], check=True, capture_output=True)
        enqueue = time.monotonic() - started
        yaml = pipeline(work, "file")

        def run_once(n):
            out = output_dir(work, f"pg-run-{n}")
            measured = timed([BIN, "run", yaml, listing, "-o", out, "--progress", "none", "-q"], server=None)
            return measured, count_outputs(out)

        def work_once(n):
            if n > 0:
                subprocess.run(["psql", "-q", url, "-c", "TRUNCATE pipelinectl_queue"], check=True, capture_output=True)
                subprocess.run([BIN, "queue", "enqueue", url, listing], check=True, capture_output=True)
            out = output_dir(work, f"pg-work-{n}")
            server_before = postgres_cpu(data)
            wall, rss, cpu, _, text = timed([BIN, "work", yaml, "--queue", url, "--until-empty", "-o", out, "--progress", "none", "-q"])
            return (wall, rss, cpu, postgres_cpu(data) - server_before, text), count_outputs(out)

        rows = [alternated(f"PostgreSQL, {PG_ROWS} small images queued (enqueue: {enqueue:.1f} s)", PG_ROWS, run_once, work_once, "/s",
                           run_server="-")]
        # Latency: INSERTs at a steady rate through one psql session.
        out = os.path.join(work, "pg-live")
        watcher = Watcher(out)
        watcher.start()
        worker = Worker([yaml, "--queue", url, "-o", out, "--progress", "none", "-q"])
        time.sleep(2)
        psql = subprocess.Popen(["psql", "-q", url], stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)
        count = int(RATE * SECONDS)
        live_dir = os.path.join(work, "live")
        os.makedirs(live_dir)
        live = []
        for i in range(count):
            path = os.path.join(live_dir, f"l{i:05d}.jpg")
            os.link(os.path.join(small, seeds[i % len(seeds)]), path)
            live.append(path)

        def send(path):
            psql.stdin.write(f"INSERT INTO pipelinectl_queue (source) VALUES ('{path}');\n")
            psql.stdin.flush()

        latencies = steady(send, live, watcher, [os.path.basename(p) for p in live])
        psql.stdin.close()
        psql.wait()
        watcher.stop = True
        rss, _ = worker.stop()
        return rows, [latency_row("PostgreSQL", latencies, count, rss)]
    finally:
        subprocess.run(as_user + [f"{bins}/pg_ctl", "-D", f"{data}/data", "-m", "immediate", "stop"], capture_output=True)
        shutil.rmtree(data, ignore_errors=True)


def main():
    files = corpus()
    work = tempfile.mkdtemp(prefix="pipelinectl-bench-work-")
    os.chmod(work, 0o755)
    throughput, latency = [], []
    try:
        if ONLY in ("", "sqs"):
            rows, lat = bench_sqs(work, files)
            throughput += rows
            latency += lat
        if ONLY in ("", "postgres"):
            rows, lat = bench_postgres(work, files)
            throughput += rows
            latency += lat
    finally:
        shutil.rmtree(work, ignore_errors=True)
    version = subprocess.run([BIN, "--version"], capture_output=True, text=True).stdout.splitlines()[0]
    lines = [f"{version}, {os.cpu_count()} cores, {time.strftime('%Y-%m-%d')}", "",
             f"Throughput: {ROUNDS} rounds of each, alternated (work, run, run, work, ...); walls and CPU are means, the ratio is run's mean wall over work's (each round's in brackets).", "",
             "| Queue | run (same sources) | work --until-empty | work vs run | first to last output, run / work | CPU of run / work | CPU of the queue server during run / work | run peak RSS | work peak RSS |",
             "|---|---|---|---|---|---|---|---|---|"] + throughput + ["",
             "| Queue | uploads | outputs | p50 upload-to-output | p99 | max | worker peak RSS |",
             "|---|---|---|---|---|---|---|"] + latency
    text = "\n".join(lines)
    print(text)
    os.makedirs(os.path.join(ROOT, "bench/results"), exist_ok=True)
    with open(os.path.join(ROOT, "bench/results/work.md"), "w") as f:
        f.write(text + "\n")


if __name__ == "__main__":
    main()
