#!/usr/bin/env python3
"""Poster frames from video: `pipelinectl run` (two workers) against the ffmpeg CLI (two processes
at a time), on clips made here by ffmpeg, every codec the poster path takes (issue 62).

Clips: ffmpeg's moving test pattern with light noise (every frame differs and compresses like camera
footage, not like a flat card), 1280x720 at 25 frames a second, a keyframe every 2 s (`-g 50`),
for each codec (H.264 and HEVC in MP4, VP8 and VP9 in WebM, AV1 in Matroska), short (10 s) and
long (2 min); the H.264 clips also stored sideways (rotation 90). Each group holds `--copies`
copies of its clip (files of their own, so neither side reads one from a cache the other warmed).

Both make a 320 px wide JPEG (quality 80) of the frame at `--at` seconds (a third of a short
clip): ours with `decoder: { imagemagick: { formats: [video], frame: T } }`, `resize: { width:
320 }` and `jpeg`; ffmpeg's with `ffmpeg -ss T -i F -frames:v 1 -vf scale=320:-2 -q:v 4`, two
processes at a time (xargs -P 2). Wall time per group, rounds alternating which runs first; the
ratio is ffmpeg's time over ours (above 1: we are faster). The frames are compared too: PSNR of
ours against ffmpeg's, each group's worst.

Usage: bench/posters.py [--rounds 3] [--copies 8] [--at 3.4] [--work DIR]
"""
import argparse, glob, json, os, shutil, statistics, subprocess, sys, tempfile, time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CODECS = [
    ("h264", "mp4", ["-c:v", "libx264", "-preset", "veryfast", "-crf", "28"]),
    ("hevc", "mp4", ["-c:v", "libx265", "-preset", "veryfast", "-crf", "28", "-tag:v", "hvc1", "-x265-params", "log-level=none"]),
    ("vp8", "webm", ["-c:v", "libvpx", "-deadline", "realtime", "-cpu-used", "8", "-b:v", "2M"]),
    ("vp9", "webm", ["-c:v", "libvpx-vp9", "-deadline", "realtime", "-cpu-used", "8", "-b:v", "1500k", "-row-mt", "1"]),
    ("av1", "mkv", ["-c:v", "libsvtav1", "-preset", "10", "-crf", "35"]),
]


def run(args, **kw):
    return subprocess.run(args, check=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE, **kw)


def make_clip(path, seconds, codec_args, rotate=False):
    if os.path.exists(path):
        return
    src = ["-f", "lavfi", "-i", "testsrc2=size=1280x720:rate=25,noise=alls=3:allf=t"]
    tmp = path + ".tmp" + os.path.splitext(path)[1]
    run(["ffmpeg", "-hide_banner", "-loglevel", "error", "-y", *src, "-t", str(seconds), "-g", "50", "-pix_fmt", "yuv420p",
         *codec_args, tmp])
    if rotate:
        run(["ffmpeg", "-hide_banner", "-loglevel", "error", "-y", "-i", tmp, "-c", "copy", "-metadata:s:v:0", "rotate=90", path])
        os.remove(tmp)
    else:
        os.rename(tmp, path)


def groups(work, copies):
    out = []
    for name, ext, args in CODECS:
        for length, seconds in (("10 s", 10), ("2 min", 120)):
            clip = os.path.join(work, "clips", f"{name}-{seconds}.{ext}")
            make_clip(clip, seconds, args)
            out.append((f"{name} {length}", clip))
            if name == "h264":
                turned = os.path.join(work, "clips", f"{name}-{seconds}-rot90.{ext}")
                make_clip(turned, seconds, args, rotate=True)
                out.append((f"{name} {length}, rotated", turned))
    result = []
    for label, clip in out:
        folder = os.path.join(work, "groups", label.replace(" ", "_").replace(",", ""))
        os.makedirs(folder, exist_ok=True)
        files = []
        for i in range(copies):
            copy = os.path.join(folder, f"c{i}" + os.path.splitext(clip)[1])
            if not os.path.exists(copy):
                shutil.copyfile(clip, copy)
            files.append(copy)
        result.append((label, files))
    return result


def drop_caches():
    # Both sides read the files from the page cache: warm them once, the same for each.
    pass


def ours(binary, files, at, out):
    shutil.rmtree(out, ignore_errors=True)
    os.makedirs(out)
    pipeline = os.path.join(out, "p.yaml")
    with open(pipeline, "w") as f:
        f.write("version: 1\nname: posters\n"
                "loader: { file: { max_bytes: 8GB } }\n"
                f"decoder: {{ imagemagick: {{ formats: [video], frame: {at} }} }}\n"
                "processors: [ { resize: { width: 320 } } ]\nencoder: { jpeg: { quality: 80 } }\n")
    urls = os.path.join(out, "list.txt")
    with open(urls, "w") as f:
        f.write("\n".join(files) + "\n")
    start = time.monotonic()
    run([binary, "run", pipeline, urls, "--output", os.path.join(out, "o"), "--report", os.path.join(out, "r.json"), "--workers", "2"])
    wall = time.monotonic() - start
    items = json.load(open(os.path.join(out, "r.json")))["items"]
    bad = [i for i in items if i["status"] != "ok"]
    if bad:
        raise SystemExit(f"pipelinectl failed: {bad[0]}")
    return wall, {i["source"]: i["outputs"][0] for i in items}


def theirs(files, at, out):
    shutil.rmtree(out, ignore_errors=True)
    os.makedirs(out)
    script = "\n".join(f"{f}\t{os.path.join(out, str(n) + '.jpg')}" for n, f in enumerate(files)) + "\n"
    start = time.monotonic()
    subprocess.run(["xargs", "-P", "2", "-L", "1", "sh", "-c",
                    f'ffmpeg -hide_banner -loglevel error -y -ss {at} -i "$0" -frames:v 1 -vf scale=320:-2 -q:v 4 "$1"'],
                   input=script.replace("\t", " ").encode(), check=True)
    wall = time.monotonic() - start
    return wall, {f: os.path.join(out, f"{n}.jpg") for n, f in enumerate(files)}


def psnr(a, b):
    r = subprocess.run(["compare", "-metric", "PSNR", a, b, "null:"], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    text = r.stderr.decode().split()[0] if r.stderr else "0"
    return float("inf") if text == "inf" else float(text)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--copies", type=int, default=8)
    parser.add_argument("--at", type=float, default=3.4)
    parser.add_argument("--work", default=os.path.join(tempfile.gettempdir(), "bench-posters"))
    args = parser.parse_args()
    binary = os.environ.get("PIPELINECTL", os.path.join(ROOT, ".build/release/pipelinectl"))
    work = args.work
    os.makedirs(os.path.join(work, "clips"), exist_ok=True)
    print(f"## Posters: pipelinectl ({binary}) against ffmpeg, {args.copies} clips a group, frame at {args.at} s, "
          f"{args.rounds} rounds\n")
    print("| group | clip MB | ours s (median) | ffmpeg s (median) | ffmpeg / ours | worst PSNR ours vs ffmpeg |")
    print("|---|---|---|---|---|---|")
    for label, files in groups(work, args.copies):
        for f in files:  # the page cache holds every copy before either side runs
            with open(f, "rb") as handle:
                while handle.read(1 << 22):
                    pass
        mine, other = [], []
        for r in range(args.rounds):
            order = [0, 1] if r % 2 == 0 else [1, 0]
            for side in order:
                if side == 0:
                    wall, our_out = ours(binary, files, args.at, os.path.join(work, "ours"))
                    mine.append(wall)
                else:
                    wall, their_out = theirs(files, args.at, os.path.join(work, "theirs"))
                    other.append(wall)
        worst = min(psnr(our_out[f], their_out[f]) for f in files)
        size = os.path.getsize(files[0]) / 1e6
        a, b = statistics.median(mine), statistics.median(other)
        print(f"| {label} | {size:.1f} | {a:.2f} | {b:.2f} | {b / a:.2f}x | {worst:.1f} dB |", flush=True)


if __name__ == "__main__":
    sys.exit(main())
