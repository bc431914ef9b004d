#!/usr/bin/env python3
"""AVIF's quality for `auto`, chosen to match WebP's visual quality, and checked on other images.

`auto` has one `quality` (JPEG, WebP); handed unchanged to AVIF it made AVIFs larger than the
WebPs at far more encode time. This finds, for each WebP quality, the AVIF quality whose mean SSIM
over a training set is at least WebP's, then reports per image, on a second set, the bytes and
SSIM of both at the chosen pair.

- Encoders: ImageMagick's (`convert`, the same libwebp and libheif coders that `pipelinectl`'s
  MagickWand encoders call), with the options our encoders pass (quality only).
- SSIM: scikit-image's `structural_similarity` on RGB (channel_axis=2, data_range=255),
  against the resized image before encoding, at the size served (`--size`, default a 512 px box).
- Training set: bench corpus photos (../shared/bench/corpus.sh, JPEG and PNG wallpapers).
- Report set: the formats corpus (../shared/bench/formats.sh): its WebP, AVIF, HEIC, JPEG and
  PNG sources, each decoded and resized first (its own compression is in the reference).

With `--format jxl` the same is done for JPEG XL, through cjxl and djxl (libjxl 0.7, the library
the `jxl` encoder calls, at its default effort 7); the tables still say "AVIF" for the candidate.

Usage: bench/avif-quality.py [--format avif|jxl] [--train DIR] [--report DIR] [--size 512] [--webp 60,70,75,80,82,85,90] [--avif-step 2]
Prints a Markdown table of the mapping and one of the report.

       bench/avif-quality.py --equal-ssim [--report DIR] [--webp 82] [--avif 66,68,...,80]
Rate against distortion on the report set alone, tuning nothing: WebP at its quality, AVIF at
each quality given; each one's bytes and mean SSIM over all images and per source group; and, by
linear interpolation between the two AVIF qualities around WebP's mean SSIM, AVIF's bytes at
WebP's mean SSIM (below 1.00: AVIF is smaller at equal SSIM).
"""
import argparse, glob, os, subprocess, sys, tempfile
from concurrent.futures import ThreadPoolExecutor

import numpy as np
from PIL import Image  # scikit-image's dependency
from skimage.metrics import structural_similarity


def run(*args):
    subprocess.run(args, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def load_rgb(path):
    with Image.open(path) as im:
        return np.asarray(im.convert("RGB"))


def ssim(a, b):
    return structural_similarity(a, b, channel_axis=2, data_range=255)


def reference(src, size, work):
    ref = os.path.join(work, os.path.basename(src) + ".ref.png")
    run("convert", src + "[0]", "-auto-orient", "-resize", f"{size}x{size}>", "-alpha", "off", "-strip", ref)
    return ref


def encoded(ref, fmt, quality, work):
    out = os.path.join(work, f"{os.path.basename(ref)}.{quality}.{fmt}")
    png = out + ".png"
    if fmt == "jxl":
        # libjxl's own tools: the `jxl` encoder maps quality to distance as cjxl does, effort 7.
        run("cjxl", ref, out, "-q", str(quality), "-e", "7")
        run("djxl", out, png)
    else:
        run("convert", ref, "-quality", str(quality), out)
        run("convert", out, png)
    return os.path.getsize(out), ssim(load_rgb(ref), load_rgb(png))


def measure(refs, fmt, qualities, work):
    jobs = [(r, q) for r in refs for q in qualities]
    with ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as pool:
        results = list(pool.map(lambda job: encoded(job[0], fmt, job[1], work), jobs))
    table = {}
    for (r, q), (size, score) in zip(jobs, results):
        table.setdefault(q, {})[r] = (size, score)
    return table


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--train", default=os.environ.get("BENCH_CORPUS", "/tmp/bench-corpus"))
    parser.add_argument("--report", default=os.environ.get("BENCH_FORMATS", "/tmp/bench-formats"))
    parser.add_argument("--size", type=int, default=512)
    parser.add_argument("--webp", default="60,70,75,80,82,85,90")
    parser.add_argument("--avif-step", type=int, default=2, help="step between the AVIF qualities tried (20 to 94)")
    parser.add_argument("--equal-ssim", action="store_true", help="on the report set: AVIF's bytes at WebP's mean SSIM")
    parser.add_argument("--avif", default="66,68,70,72,74,76,78,80", help="AVIF qualities for --equal-ssim")
    parser.add_argument("--format", default="avif", choices=["avif", "jxl"],
                        help="the format matched to WebP: avif (ImageMagick's libheif) or jxl (cjxl and djxl, libjxl 0.7)")
    args = parser.parse_args()
    if args.equal_ssim:
        return equal_ssim(args)
    webp_qualities = [int(q) for q in args.webp.split(",")]
    avif_qualities = list(range(20, 95, args.avif_step))
    with tempfile.TemporaryDirectory() as work:
        train = sorted(glob.glob(os.path.join(args.train, "*.jpg")) + glob.glob(os.path.join(args.train, "*.png")))
        refs = [reference(src, args.size, work) for src in train]
        webp = measure(refs, "webp", webp_qualities, work)
        avif = measure(refs, args.format, avif_qualities, work)
        mean = lambda table, q: (np.mean([v[1] for v in table[q].values()]), sum(v[0] for v in table[q].values()))
        print(f"## Training: {len(refs)} photos of {args.train}, {args.size} px box, scikit-image SSIM (RGB)\n")
        print("| WebP quality | WebP mean SSIM | WebP bytes | AVIF quality at equal SSIM | AVIF mean SSIM | AVIF bytes | AVIF/WebP bytes |")
        print("|---|---|---|---|---|---|---|")
        mapping = {}
        for wq in webp_qualities:
            target, wbytes = mean(webp, wq)
            chosen = next((aq for aq in avif_qualities if mean(avif, aq)[0] >= target), avif_qualities[-1])
            mapping[wq] = chosen
            ascore, abytes = mean(avif, chosen)
            print(f"| {wq} | {target:.4f} | {wbytes} | {chosen} | {ascore:.4f} | {abytes} | {abytes / wbytes:.2f} |")
        sources = sorted(p for p in glob.glob(os.path.join(args.report, "*", "*")) if not p.endswith(".complete"))
        wq = 82 if 82 in mapping else webp_qualities[len(webp_qualities) // 2]
        aq = mapping[wq]
        print(f"\n## Report: {len(sources)} images of {args.report}, WebP {wq} against AVIF {aq}\n")
        print("| image | WebP bytes | WebP SSIM | AVIF bytes | AVIF SSIM | AVIF/WebP bytes |")
        print("|---|---|---|---|---|---|")
        totals = [0, 0, [], []]
        for src in sources:
            try:
                ref = reference(src, args.size, work)
                wb, ws = encoded(ref, "webp", wq, work)
                ab, as_ = encoded(ref, args.format, aq, work)
            except subprocess.CalledProcessError:
                print(f"| {os.path.relpath(src, args.report)} | could not be read | | | | |")
                continue
            totals[0] += wb; totals[1] += ab; totals[2].append(ws); totals[3].append(as_)
            print(f"| {os.path.relpath(src, args.report)} | {wb} | {ws:.4f} | {ab} | {as_:.4f} | {ab / wb:.2f} |")
        print(f"| **all** | {totals[0]} | {np.mean(totals[2]):.4f} | {totals[1]} | {np.mean(totals[3]):.4f} | {totals[1] / totals[0]:.2f} |")


def equal_ssim(args):
    webp_quality = int(args.webp.split(",")[0]) if args.webp != "60,70,75,80,82,85,90" else 82
    avif_qualities = [int(q) for q in args.avif.split(",")]
    with tempfile.TemporaryDirectory() as work:
        sources = sorted(p for p in glob.glob(os.path.join(args.report, "*", "*")) if not p.endswith(".complete"))
        refs, groups = [], {}
        for src in sources:
            try:
                ref = reference(src, args.size, work)
            except subprocess.CalledProcessError:
                continue
            refs.append(ref)
            groups.setdefault(os.path.relpath(src, args.report).split(os.sep)[0], []).append(ref)
        webp = measure(refs, "webp", [webp_quality], work)[webp_quality]
        avif = measure(refs, args.format, avif_qualities, work)

        def at_equal(subset):
            target = np.mean([webp[r][1] for r in subset])
            wbytes = sum(webp[r][0] for r in subset)
            points = [(np.mean([avif[q][r][1] for r in subset]), sum(avif[q][r][0] for r in subset), q) for q in avif_qualities]
            below = [p for p in points if p[0] <= target]
            above = [p for p in points if p[0] >= target]
            if not below or not above:
                return target, wbytes, points, None
            (s0, b0, _), (s1, b1, _) = max(below), min(above)
            equal = b0 if s1 == s0 else b0 + (b1 - b0) * (target - s0) / (s1 - s0)
            return target, wbytes, points, equal / wbytes

        print(f"## Equal SSIM: {len(refs)} images of {args.report}, {args.size} px box, WebP {webp_quality}, AVIF {args.avif}\n")
        print("| group | images | WebP mean SSIM | " + " | ".join(f"AVIF {q}: SSIM, bytes/WebP" for q in avif_qualities)
              + " | AVIF bytes / WebP bytes at WebP's SSIM |")
        print("|---|---|---|" + "---|" * len(avif_qualities) + "---|")
        for name, subset in sorted(groups.items()) + [("**all**", refs)]:
            target, wbytes, points, ratio = at_equal(subset)
            cells = " | ".join(f"{s:.4f}, {b / wbytes:.2f}" for s, b, _ in points)
            print(f"| {name} | {len(subset)} | {target:.4f} | {cells} | {'outside the range' if ratio is None else f'{ratio:.2f}'} |")


if __name__ == "__main__":
    sys.exit(main())
