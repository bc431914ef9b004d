#!/usr/bin/env python3
"""Animated AVIF against animated WebP, both written by pipelinectl, at equal mean SSIM (issue 62).

The set: the animated GIFs of the formats corpus (../shared/bench/formats.sh), and animations
made here with ImageMagick, img2webp and photos of the bench corpus (../shared/bench/corpus.sh):
GIF and WebP, 10 to 100 frames, with alpha and without, photographic and drawn. Nothing is chosen
on them: the AVIF qualities tried are a fixed list.

For each animation, `pipelinectl run` (release build, `PIPELINECTL`) writes it once as WebP at
`--webp` (default 82, `auto`'s default quality) and once per AVIF quality (`--avif`). The
reference is ImageMagick's coalesced frames of the source, as the decoder keeps them (no resize).
Every frame of every output is read back (WebP by ImageMagick, AVIF by libavif's avifdec, frame
by frame), laid over mid-grey by its own alpha, and compared with the reference laid over the
same grey: scikit-image SSIM on RGB, the mean over frames. AVIF's bytes at WebP's mean SSIM are
interpolated between the two AVIF qualities around it (the same rule as avif-quality.py).

Usage: bench/animated-avif.py [--webp 82] [--avif 30,40,50,60,70,80] [--work DIR]
Prints the set, a Markdown table per animation and the encode times (the report's `encode` ms).
"""
import argparse, glob, json, os, subprocess, sys, tempfile

import numpy as np
from PIL import Image
from skimage.metrics import structural_similarity

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run(*args, **kw):
    return subprocess.run(args, check=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE, **kw)


def frames_png(pattern):
    return sorted(glob.glob(pattern))


def make_set(work, corpus, formats):
    """(name, path, kind) for every animation of the set."""
    photos = sorted(glob.glob(os.path.join(corpus, "*.jpg")))[:4]
    out = []
    for gif in sorted(glob.glob(os.path.join(formats, "gif", "anim*.gif"))):
        out.append((os.path.basename(gif), gif, "formats corpus GIF"))
    d = os.path.join(work, "made")
    os.makedirs(d, exist_ok=True)

    def frames(name, count, command):
        folder = os.path.join(d, name)
        os.makedirs(folder, exist_ok=True)
        for i in range(count):
            command(i, os.path.join(folder, f"f{i:03d}.png"))
        return sorted(glob.glob(os.path.join(folder, "f*.png")))

    def gif(name, files, delay_cs, kind):
        path = os.path.join(d, name + ".gif")
        # Each frame replaces the last (transparent frames would otherwise pile up).
        run("convert", "-delay", str(delay_cs), "-dispose", "background", *files, "-loop", "0", path)
        out.append((name + ".gif", path, kind))

    def webp(name, files, delay_ms, kind, lossless=False):
        path = os.path.join(d, name + ".webp")
        args = ["img2webp", "-loop", "0"] + (["-lossless"] if lossless else ["-lossy", "-q", "90"])
        for f in files:
            args += ["-d", str(delay_ms), f]
        run(*args, "-o", path)
        out.append((name + ".webp", path, kind))

    # A window panning across a photo (30 frames), as GIF and as lossy WebP.
    pan = frames("pan", 30, lambda i, f: run("convert", photos[0], "-resize", "900x600^", "-crop", f"360x240+{i * 18}+{i * 8}", "+repage", f))
    gif("pan", pan, 6, "photo pan, GIF, 30 frames")
    webp("pan", pan, 60, "photo pan, lossy WebP, 30 frames")
    # A cross-fade between two photos (20 frames), lossy WebP.
    fade = frames("fade", 20, lambda i, f: run("convert", "(", photos[1], "-resize", "400x266^", "-extent", "400x266", ")",
                                               "(", photos[2], "-resize", "400x266^", "-extent", "400x266", ")",
                                               "-compose", "blend", "-define", f"compose:args={i * 5}", "-composite", f))
    webp("fade", fade, 80, "photo cross-fade, lossy WebP, 20 frames")
    # A zoom into a photo (40 frames), GIF (dithered to 256 colours).
    zoom = frames("zoom", 40, lambda i, f: run("convert", photos[3], "-resize", "720x480^", "-gravity", "center",
                                               "-crop", f"{720 - i * 9}x{480 - i * 6}+0+0", "+repage", "-resize", "360x240!", f))
    gif("zoom", zoom, 5, "photo zoom, GIF, 40 frames")
    # A logo turning on transparency (36 frames), lossless WebP with alpha.
    logo = os.path.join(d, "logo.png")
    run("convert", "-size", "200x200", "xc:none", "-fill", "#d33", "-draw", "circle 100,100 100,20", "-fill", "#fff",
        "-draw", "rectangle 60,90 140,110", "-fill", "#36c", "-draw", "polygon 100,30 120,70 80,70", "PNG32:" + logo)
    turn = frames("turn", 36, lambda i, f: run("convert", logo, "-background", "none", "-rotate", str(i * 10), "-gravity", "center",
                                               "-extent", "200x200", "PNG32:" + f))
    webp("turn", turn, 40, "logo turning, alpha, lossless WebP, 36 frames", lossless=True)
    # A ball bouncing on transparency (60 frames), GIF with a transparent colour.
    ball = frames("ball", 60, lambda i, f: run("convert", "-size", "160x160", "xc:none", "-fill", "#2a2",
                                               "-draw", f"circle 80,{20 + abs(30 - i) * 4} 80,{6 + abs(30 - i) * 4}", "PNG32:" + f))
    gif("ball", ball, 3, "ball bouncing, transparent GIF, 60 frames")
    # Scrolling text (100 frames), GIF.
    strip = os.path.join(d, "strip.png")
    run("convert", "-size", "1400x80", "xc:#ffe", "-fill", "#003", "-pointsize", "40", "-annotate", "+10+55",
        "PipelineKit writes animated AVIF through libavif, every frame with its time.", strip)
    ticker = frames("ticker", 100, lambda i, f: run("convert", strip, "-crop", f"320x80+{i * 10}+0", "+repage", f))
    gif("ticker", ticker, 4, "text ticker, GIF, 100 frames")
    # A soft gradient turning under a translucent vignette (10 frames), lossy WebP with alpha.
    glow = frames("glow", 10, lambda i, f: run("convert", "-size", "256x256", f"radial-gradient:hsl({i * 36},80%,60%)-none",
                                               "PNG32:" + f))
    webp("glow", glow, 100, "translucent gradient, alpha, lossy WebP, 10 frames")
    return out


def rgb_over_grey(path):
    with Image.open(path) as im:
        rgba = np.asarray(im.convert("RGBA")).astype(np.float64)
    alpha = rgba[..., 3:4] / 255
    return (rgba[..., :3] * alpha + 128 * (1 - alpha)).round().astype(np.uint8)


def reference_frames(src, folder):
    os.makedirs(folder, exist_ok=True)
    run("convert", src, "-coalesce", "PNG32:" + os.path.join(folder, "r%03d.png"))
    return [rgb_over_grey(p) for p in frames_png(os.path.join(folder, "r*.png"))]


def output_frames(path, count, folder):
    os.makedirs(folder, exist_ok=True)
    if path.endswith(".avif"):
        for i in range(count):
            run("avifdec", "--index", str(i), path, os.path.join(folder, f"o{i:03d}.png"))
    else:
        run("convert", path, "-coalesce", "PNG32:" + os.path.join(folder, "o%03d.png"))
    return [rgb_over_grey(p) for p in frames_png(os.path.join(folder, "o*.png"))]


def encode_all(binary, sources, encoder, work, label):
    """Runs the pipeline over every source; {source: (path, bytes, encode ms)}."""
    folder = os.path.join(work, label)
    os.makedirs(folder, exist_ok=True)
    pipeline = os.path.join(folder, "p.yaml")
    with open(pipeline, "w") as f:
        f.write(f"version: 1\nname: {label}\ndecoder: {{ imagemagick: {{ max_frames: 200 }} }}\nencoder: {encoder}\n")
    urls = os.path.join(folder, "list.txt")
    with open(urls, "w") as f:
        f.write("\n".join(sources) + "\n")
    report = os.path.join(folder, "report.json")
    run(binary, "run", pipeline, urls, "--output", os.path.join(folder, "out"), "--report", report, "--workers", "1")
    items = json.load(open(report))["items"]
    return {i["source"]: (i["outputs"][0], i["bytes_out"], i["timings_ms"]["encode"]) for i in items if i["status"] == "ok"}


def mean_ssim(reference, frames):
    if len(frames) != len(reference):
        return float("nan")
    return float(np.mean([structural_similarity(a, b, channel_axis=2, data_range=255) for a, b in zip(reference, frames)]))


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--corpus", default=os.environ.get("BENCH_CORPUS", "/tmp/bench-corpus"))
    parser.add_argument("--formats", default=os.environ.get("BENCH_FORMATS", "/tmp/bench-formats"))
    parser.add_argument("--webp", type=int, default=82)
    parser.add_argument("--avif", default="30,40,50,60,70,80")
    parser.add_argument("--work")
    args = parser.parse_args()
    binary = os.environ.get("PIPELINECTL", os.path.join(ROOT, ".build/release/pipelinectl"))
    qualities = [int(q) for q in args.avif.split(",")]
    work = args.work or tempfile.mkdtemp(prefix="animated-avif-")
    animations = make_set(work, args.corpus, args.formats)
    sources = [path for _, path, _ in animations]
    webp = encode_all(binary, sources, f"{{ webp: {{ quality: {args.webp} }} }}", work, "webp")
    avif = {q: encode_all(binary, sources, f"{{ avif: {{ quality: {q} }} }}", work, f"avif{q}") for q in qualities}
    print(f"## {len(animations)} animations; WebP {args.webp} against AVIF at {args.avif} (pipelinectl {binary})\n")
    print("| animation | kind | frames | size | WebP bytes | WebP mean SSIM | "
          + " | ".join(f"AVIF {q}: SSIM, bytes/WebP" for q in qualities) + " | AVIF / WebP bytes at WebP's SSIM |")
    print("|---|---|---|---|---|---|" + "---|" * len(qualities) + "---|")
    totals = {"webp_ms": 0.0, "avif_ms": {q: 0.0 for q in qualities}}
    ratios = []
    for name, src, kind in animations:
        ref = reference_frames(src, os.path.join(work, "ref", name))
        wpath, wbytes, wms = webp[src]
        totals["webp_ms"] += wms
        wssim = mean_ssim(ref, output_frames(wpath, len(ref), os.path.join(work, "frames", name, "webp")))
        points = []
        for q in qualities:
            apath, abytes, ams = avif[q][src]
            totals["avif_ms"][q] += ams
            points.append((mean_ssim(ref, output_frames(apath, len(ref), os.path.join(work, "frames", name, f"avif{q}"))), abytes, q))
        below = [p for p in points if p[0] <= wssim]
        above = [p for p in points if p[0] >= wssim]
        if below and above:
            (s0, b0, _), (s1, b1, _) = max(below), min(above)
            equal = b0 if s1 == s0 else b0 + (b1 - b0) * (wssim - s0) / (s1 - s0)
            ratio = f"{equal / wbytes:.2f}"
            ratios.append(equal / wbytes)
        elif not below:
            ratio = f"at most {points[0][1] / wbytes:.2f} (AVIF {points[0][2]} is already above)"
            ratios.append(points[0][1] / wbytes)
        else:
            ratio = "outside the range (AVIF's best is below WebP's SSIM)"
        size = Image.open(src).size
        cells = " | ".join(f"{s:.4f}, {b / wbytes:.2f}" for s, b, _ in points)
        print(f"| {name} | {kind} | {len(ref)} | {size[0]}x{size[1]} | {wbytes} | {wssim:.4f} | {cells} | {ratio} |")
    print(f"\nAVIF bytes at WebP's mean SSIM over WebP's bytes: worst {max(ratios):.2f}, "
          f"geometric mean {float(np.exp(np.mean(np.log(ratios)))):.2f} ({len(ratios)} of {len(animations)} animations bracketed)")
    print(f"\nEncode time, all animations, one worker: WebP {totals['webp_ms'] / 1000:.2f} s; "
          + ", ".join(f"AVIF {q} {ms / 1000:.2f} s ({ms / totals['webp_ms']:.1f}x)" for q, ms in totals["avif_ms"].items()))


if __name__ == "__main__":
    sys.exit(main())
