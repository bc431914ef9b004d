#!/usr/bin/env python3
"""How much a size made from a shared decode differs from the same size made alone.

When several sizes of one source are asked for at once (`serve`), they decode once, with the hint
covering the largest (as a pipeline's variants do). This measures, per format group of both bench
corpora, a 256 px fit made alone against the same fit made beside a 1024 px one (one decode for
both), each scored as PSNR against a full decode (`convert SRC -filter Lanczos -resize 256x256`),
and the two against each other. Outputs are PNG, so only the decode and resize differ.

Then the saving: `pipelinectl serve` answers 256, 512 and 1024 px fits of every file of a group,
the three sizes of a file asked for one after another (three fetches, three decodes) or at once
(one of each), and the service's CPU seconds (user + system, from /proc) are compared.

With ORIGIN_MS=N the service fetches the files from a loopback HTTP origin (bench/slow_server.py)
that waits N ms before each answer, as a remote origin would; by default it reads them from disk.

Usage: python3 bench/shared-decode.py   (BIN=path/to/pipelinectl; default .build/release, else debug;
       ORIGIN_MS=20: sources over HTTP; SKIP_QUALITY=1: only the CPU table)
"""
import concurrent.futures
import glob
import urllib.parse
import urllib.request
import os
import re
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "bench"))
from run import psnr  # noqa: E402  (the bench's own PSNR, resizing a candidate off by a pixel)

BIN = os.environ.get("BIN") or next(p for p in [os.path.join(ROOT, ".build/release/pipelinectl"),
                                                 os.path.join(ROOT, ".build/debug/pipelinectl")] if os.path.exists(p))


def corpus(script):
    out = subprocess.run(["bash", os.path.join(ROOT, "../shared/bench", script)], capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"{script} failed:\n{out.stderr}")
    return out.stdout.strip().splitlines()[-1]


def groups():
    plain = corpus("corpus.sh")
    yield "corpus JPEG", sorted(glob.glob(plain + "/*.jpg"))
    yield "corpus PNG", sorted(glob.glob(plain + "/*.png"))
    formats = corpus("formats.sh")
    for name in sorted(os.listdir(formats)):
        files = sorted(f for f in glob.glob(os.path.join(formats, name, "*")) if os.path.isfile(f))
        if files:
            yield "formats " + name, files


def pipeline(path, out, variants):
    body = "".join(f"""  v{size}:
    processors: [ {{ resize: {{ width: {size}, height: {size}, mode: fit }} }} ]
    encoder: png
""" for size in variants)
    with open(path, "w") as f:
        f.write(f"""version: 1
decoder:
  imagemagick: {{ formats: [jpeg, png, webp, avif, heic, gif, tiff], max_pixels: 200MP }}
variants:
{body}output:
  dir: {out}
  name: "{{stem}}-{{variant}}.{{ext}}"
""")


def cpu_seconds(pid):
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def service_cost(files, tmp):
    """CPU seconds of the service for three sizes of every file, one after another and at once."""
    folder = os.path.dirname(files[0])
    origin = None
    if os.environ.get("ORIGIN_MS"):
        origin = subprocess.Popen([sys.executable, os.path.join(ROOT, "bench/slow_server.py"), folder, os.environ["ORIGIN_MS"]],
                                  stdout=subprocess.PIPE, text=True)
        base = f"http://127.0.0.1:{int(origin.stdout.readline())}"
        sources = [base + "/" + os.path.basename(f) for f in files]
    else:
        base, sources = folder + "/", files
    presets = os.path.join(tmp, "presets")
    os.makedirs(presets, exist_ok=True)
    with open(os.path.join(presets, "fit.yaml"), "w") as f:
        f.write(f"""version: 1
loader:
  http: {{ allow_loopback: true, max_concurrent: 16, timeout: 60s }}
decoder:
  imagemagick: {{ formats: [jpeg, png, webp, avif, heic, gif, tiff], max_pixels: 200MP }}
processors:
  - resize: {{ width: 256, height: 256, mode: fit }}
encoder: {{ jpeg: {{ quality: 85 }} }}
output: {{ dir: {tmp}/unused }}
params:
  w: {{ sets: processors.0.resize.width, min: 16, max: 2048 }}
  h: {{ sets: processors.0.resize.height, min: 16, max: 2048 }}
serve:
  sources: ["{base}"]
""")
    process = subprocess.Popen([BIN, "serve", presets, "--listen", "127.0.0.1:0", "--no-access-log", "--allow-unsigned",
                                "--jobs", "3"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        port = int(re.search(r":(\d+) ", process.stdout.readline()).group(1))

        def get(source, size):
            url = f"http://127.0.0.1:{port}/_/fit/{urllib.parse.quote(source, safe='')}?w={size}&h={size}"
            with urllib.request.urlopen(url, timeout=300) as answer:
                if answer.status != 200:
                    sys.exit(f"{url}: {answer.status}")
                answer.read()

        sizes = [256, 512, 1024]
        costs = {}
        with concurrent.futures.ThreadPoolExecutor(3) as pool:
            for way in ("apart", "together", "apart again"):
                before = cpu_seconds(process.pid)
                for source in sources:
                    if way.startswith("apart"):
                        for size in sizes:
                            get(source, size)
                    else:
                        list(pool.map(lambda size: get(source, size), sizes))
                costs[way] = cpu_seconds(process.pid) - before
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics") as answer:
            found = re.search(r"pipelinectl_decodes_shared_total\{[^}]*\} (\d+)", answer.read().decode())
        costs["shared"] = int(found.group(1)) if found else 0
        return costs
    finally:
        process.terminate()
        process.wait()
        if origin:
            origin.terminate()
            origin.wait()


def quality_table(group, files, tmp):
    """One row of the quality table: 256 px alone and beside 1024 px, against a full decode."""
    listing = os.path.join(tmp, "list.txt")
    with open(listing, "w") as f:
        f.write("\n".join(files) + "\n")
    alone, beside, refs = (os.path.join(tmp, d) for d in ("alone", "beside", "refs"))
    os.makedirs(refs)
    pipeline(os.path.join(tmp, "alone.yaml"), alone, [256])
    pipeline(os.path.join(tmp, "beside.yaml"), beside, [256, 1024])
    for name in ("alone", "beside"):
        run = subprocess.run([BIN, "run", os.path.join(tmp, name + ".yaml"), listing, "--quiet"],
                             capture_output=True, text=True)
        if run.returncode != 0:
            sys.exit(f"{name}: exit {run.returncode}\n{run.stdout[-2000:]}{run.stderr[-2000:]}")
    scores = []
    for source in files:
        stem = re.sub(r"\.[^.]*$", "", os.path.basename(source))
        ref = os.path.join(refs, stem + ".png")
        subprocess.run(["convert", source + "[0]", "-auto-orient", "-filter", "Lanczos", "-resize", "256x256",
                        "+repage", "PNG48:" + ref], check=True, capture_output=True)  # 16 bits: IM6's 8-bit PNG writer truncates
        a, b = os.path.join(alone, stem + "-v256.png"), os.path.join(beside, stem + "-v256.png")
        scores.append((psnr(a, ref), psnr(b, ref), psnr(b, a)))
    col = lambda i: [s[i] for s in scores]  # noqa: E731
    mean = lambda xs: sum(xs) / len(xs)  # noqa: E731
    print(f"| {group} | {len(files)} | {min(col(0)):.2f} / {mean(col(0)):.2f} | {min(col(1)):.2f} / {mean(col(1)):.2f} "
          f"| {min(col(2)):.2f} |", flush=True)


def main():
    print(f"binary: {BIN}")
    print("| group | files | alone: min / mean dB | beside 1024: min / mean dB | alone vs beside: min dB |")
    print("|---|---:|---:|---:|---:|")
    costs = []
    for group, files in groups():
        with tempfile.TemporaryDirectory() as tmp:
            if not os.environ.get("SKIP_QUALITY"):
                quality_table(group, files, tmp)
            costs.append((group, dict(service_cost(files, tmp), files=len(files))))
    print("\nThe service's CPU seconds for 256, 512 and 1024 px of every file (no result storage):")
    print("| group | apart | together | apart, again | together / apart | requests that shared a decode |")
    print("|---|---:|---:|---:|---:|---:|")
    for group, cost in costs:
        apart = (cost["apart"] + cost["apart again"]) / 2
        print(f"| {group} | {cost['apart']:.2f} | {cost['together']:.2f} | {cost['apart again']:.2f} | {cost['together'] / apart:.2f} | {cost['shared']} of {2 * cost['files']} |")


if __name__ == "__main__":
    main()
