#!/usr/bin/env python3
"""`pipelinectl serve` with video sources in the mix (issue 62): its peak RSS must stay at most
300 MiB. One service (the release binary, both CPUs) answers 512 px posters and thumbnails from
an nginx origin on loopback, through the `http` loader: large videos are read by range, the rest
fetched whole.

  origin   nginx serving the corpus photos (corpus.sh's JPEG and PNG of at least 1 MP) and clips
           made here by ffmpeg: 1080p H.264 (10 s and 2 min), 1080p HEVC (1 min), 720p VP9 (30 s),
           720p AV1 (10 s), 4K H.264 (10 s), and a 2-hour 1080p film by stream copy (index at the
           end), each clip under 4 names so that answers are not shared
  load     8 client threads for --seconds, each request a random source: a photo, or a clip's
           poster at a random time within it (`?t=`), so decodes and range reads overlap
  phases   photos only, then the mix (photos and videos, half each), then videos only; each
           phase with a fresh service
  RSS      the service's process, sampled every 50 ms; the peak of each phase

Prints a table (requests, failures, answers/s, p50/p99 latency, peak RSS) and writes it to
bench/results/serve-video.md.

Usage: bench/serve-video.py [--seconds 40] [--work DIR]
"""
import argparse, os, random, re, shutil, statistics, subprocess, sys, tempfile, threading, time, urllib.error, urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "bench"))
import serve  # noqa: E402  (free_port, wait_for, sign, Sampler, start_nginx, BIN, KEY)

CLIPS = [
    ("h264-1080-10s.mp4", 10, "1920x1080", ["-c:v", "libx264", "-preset", "veryfast", "-crf", "26"]),
    ("h264-1080-120s.mp4", 120, "1920x1080", ["-c:v", "libx264", "-preset", "ultrafast", "-crf", "28"]),
    ("hevc-1080-60s.mp4", 60, "1920x1080", ["-c:v", "libx265", "-preset", "ultrafast", "-crf", "30", "-tag:v", "hvc1", "-x265-params", "log-level=none"]),
    ("vp9-720-30s.webm", 30, "1280x720", ["-c:v", "libvpx-vp9", "-deadline", "realtime", "-cpu-used", "8", "-b:v", "1500k", "-row-mt", "1"]),
    ("av1-720-10s.mkv", 10, "1280x720", ["-c:v", "libsvtav1", "-preset", "10", "-crf", "35"]),
    ("h264-2160-10s.mp4", 10, "3840x2160", ["-c:v", "libx264", "-preset", "ultrafast", "-crf", "28"]),
]


# A command the service runs under (BENCH_PREFIX="env MALLOC_ARENA_MAX=2", say), to compare.
PREFIX = os.environ.get("BENCH_PREFIX", "").split()


def ffmpeg(*args):
    subprocess.run(["ffmpeg", "-hide_banner", "-loglevel", "error", "-y", *args], check=True)


def make_origin(work):
    root = os.path.join(work, "origin")
    os.makedirs(root, exist_ok=True)
    clips = []
    for name, seconds, size, codec in CLIPS:
        path = os.path.join(root, name)
        if not os.path.exists(path):
            ffmpeg("-f", "lavfi", "-i", f"testsrc2=size={size}:rate=25,noise=alls=3:allf=t", "-t", str(seconds), "-g", "50",
                   "-pix_fmt", "yuv420p", *codec, path)
        clips.append((name, seconds))
    film = os.path.join(root, "film-2h.mp4")
    if not os.path.exists(film):
        segment = os.path.join(work, "segment.mp4")
        ffmpeg("-f", "lavfi", "-i", "testsrc2=size=1920x1080:rate=25", "-t", "10", "-c:v", "libx264", "-preset", "ultrafast",
               "-b:v", "2M", "-g", "50", "-pix_fmt", "yuv420p", segment)
        ffmpeg("-stream_loop", "719", "-i", segment, "-c", "copy", film)
    clips.append(("film-2h.mp4", 7200))
    # Four names for each clip: answers of one name are not shared with another's.
    videos = []
    for name, seconds in clips:
        for copy in range(4):
            alias = f"c{copy}-{name}"
            if not os.path.exists(os.path.join(root, alias)):
                os.link(os.path.join(root, name), os.path.join(root, alias))
            videos.append((alias, seconds))
    corpus = subprocess.run(["bash", os.path.join(ROOT, "bench/corpus.sh")], capture_output=True, text=True, check=True).stdout.split()[-1]
    photos = serve.photos([os.path.join(corpus, f) for f in sorted(os.listdir(corpus)) if f.endswith((".jpg", ".png"))])
    for path in photos:
        target = os.path.join(root, os.path.basename(path))
        if not os.path.exists(target):
            shutil.copy(path, target)
    return root, [os.path.basename(p) for p in photos], videos


def start_nginx(work, root):
    """nginx serving `root`, with the video types (Debian's mime.types lacks Matroska)."""
    port = serve.free_port()
    conf = os.path.join(work, "nginx-video.conf")
    with open(conf, "w") as f:
        f.write(f"""daemon off; worker_processes 1; pid {work}/nginx.pid; error_log {work}/nginx.err;
events {{ worker_connections 1024; }}
http {{ include /etc/nginx/mime.types; types {{ video/x-matroska mkv; video/webm webm; video/mp4 mp4; image/jpeg jpg; image/png png; }}
  access_log off; sendfile on; keepalive_requests 100000;
  server {{ listen 127.0.0.1:{port}; root {root}; }} }}
""")
    process = subprocess.Popen(["nginx", "-c", conf, "-p", work], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    serve.wait_for(port)
    return process, port


def start_service(work, origin_port):
    directory = os.path.join(work, "pipelines")
    os.makedirs(directory, exist_ok=True)
    with open(os.path.join(directory, "fit.yaml"), "w") as f:
        f.write(f"""version: 1
name: fit
params:
  t: {{ sets: decoder.imagemagick.frame, max: 7200 }}
loader:
  http: {{ allow_loopback: true, max_concurrent: 16, timeout: 120s, accept: [image/*, video/*], max_bytes: 100MB }}
decoder:
  imagemagick: {{ formats: [jpeg, png, webp, video] }}
processors:
  - resize: {{ width: 512, height: 512, mode: fit }}
encoder:
  jpeg: {{ quality: 80 }}
serve:
  sources: ["http://127.0.0.1:{origin_port}/"]
""")
    env = dict(os.environ, PIPELINECTL_KEYS="bench:" + serve.KEY.hex())
    process = subprocess.Popen(PREFIX + [serve.BIN, "serve", directory, "--listen", "127.0.0.1:0", "--no-access-log", "--queue", "256",
                                "--timeout", "120s"] + serve.EXTRA, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, text=True,
                               start_new_session=True)
    line = process.stdout.readline()
    match = re.search(r":(\d+) ", line)
    if not match:
        sys.exit(f"pipelinectl serve did not start: {line} {process.stderr.read()}")
    threading.Thread(target=lambda: process.stdout.read(), daemon=True).start()
    threading.Thread(target=lambda: process.stderr.read(), daemon=True).start()
    return process, int(match.group(1))


def phase(work, origin_port, photos, videos, share, seconds, threads=8):
    """One fresh service under load for `seconds`; `share` of the requests are videos."""
    process, port = start_service(work, origin_port)
    sampler = serve.Sampler(process.pid)
    latencies, failures, lock = [], [], threading.Lock()
    deadline = time.monotonic() + seconds

    def client(seed):
        rng = random.Random(seed)
        while time.monotonic() < deadline:
            if rng.random() < share:
                name, length = rng.choice(videos)
                at = round(rng.uniform(0, max(1, length - 1)), 1)
                path = serve.sign(f"/fit/http://127.0.0.1:{origin_port}/{name}?t={at}")
            else:
                path = serve.sign(f"/fit/http://127.0.0.1:{origin_port}/{rng.choice(photos)}")
            start = time.monotonic()
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=180) as answer:
                    answer.read()
                with lock:
                    latencies.append(time.monotonic() - start)
            except (urllib.error.URLError, OSError) as error:
                with lock:
                    failures.append(f"{path}: {error}")

    workers = [threading.Thread(target=client, args=(seed,)) for seed in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    peak = sampler.stop()
    process.send_signal(2)
    try:
        process.wait(timeout=30)
    except subprocess.TimeoutExpired:
        process.kill()
    return latencies, failures, peak


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=int, default=40)
    parser.add_argument("--work")
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--phases", default="photos,mix,videos", help="which phases, in order: photos, mix, videos")
    options = parser.parse_args()
    work = options.work or tempfile.mkdtemp(prefix="serve-video-")
    root, photos, videos = make_origin(work)
    nginx, origin_port = start_nginx(work, root)
    rows = []
    try:
        chosen = {"photos": ("photos only", 0.0), "mix": ("photos and videos", 0.5), "videos": ("videos only", 1.0)}
        for label, share in (chosen[name] for name in options.phases.split(",")):
            latencies, failures, peak = phase(work, origin_port, photos, videos, share, options.seconds, options.clients)
            ordered = sorted(latencies)
            p99 = ordered[int(len(ordered) * 0.99) - 1] if ordered else 0
            rows.append(f"| {label} | {len(latencies)} | {len(failures)} | {len(latencies) / options.seconds:.1f} | "
                        f"{statistics.median(ordered) * 1000:.0f} | {p99 * 1000:.0f} | {peak:.0f} |")
            print(rows[-1], flush=True)
            for failure in failures[:5]:
                print("  failed:", failure)
    finally:
        nginx.kill()
    table = ["| phase | answers | failed | answers/s | p50 ms | p99 ms | peak RSS MiB |", "|---|---|---|---|---|---|---|"] + rows
    prefix = f"`{' '.join(PREFIX)}` " if PREFIX else ""
    text = (f"{prefix}`bench/serve-video.py --seconds {options.seconds} --clients {options.clients}`: {len(photos)} photos, "
            f"{len(videos)} video names ({len(videos) // 4} clips), {options.clients} clients, 512 px JPEG answers.\n\n" + "\n".join(table) + "\n")
    print(text)
    os.makedirs(os.path.join(ROOT, "bench/results"), exist_ok=True)
    with open(os.path.join(ROOT, "bench/results/serve-video.md"), "w") as f:
        f.write(text)


if __name__ == "__main__":
    main()
