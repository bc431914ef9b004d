#!/usr/bin/env python3
"""Throughput, memory and quality benchmark: pipelinectl against vipsthumbnail and ImageMagick's
convert, on the same files, the same output (fit in 256x256, JPEG quality 80), the same two cores,
in one run. Called by bench/run.sh (`make bench`), which builds the release binary and installs
the peers. Prints a table and writes it, with the machine, to bench/results/latest.md.

Every figure comes from this run:
  wall      time from start to the last process's exit
  cpu       user + system time of the command and every child it waited for (getrusage)
  peak RSS  the largest sum of resident memory over the command's process tree, sampled every
            10 ms from /proc (the tree itself every 50 ms), so two concurrent vipsthumbnail
            processes count together; never less than the largest single process's ru_maxrss
  PSNR      of every thumbnail against a reference made from a full decode with Lanczos
            (`convert SRC -filter Lanczos -resize 256x256 PNG48:REF`), min and mean over the
            corpus. The reference is kept at 16 bits: ImageMagick 6's PNG writer truncates
            its Q16 values to 8 bits (every reference pixel was floor(value), half a level low
            on average), which cost any rounding resizer about 2 dB against it.
"""
import os
import re
import resource
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN = os.path.join(ROOT, ".build/release/pipelinectl")
SIZE = 256
QUALITY = 80
LONG_LIST = int(os.environ.get("BENCH_LONG_LIST", "20000"))
SHORT_LIST = int(os.environ.get("BENCH_SHORT_LIST", "1000"))
ROUNDS = int(os.environ.get("BENCH_ROUNDS", "3"))
LATENCY_MS = 50


def descendants(pid):
    """pid and all its descendants (one pass over /proc)."""
    children = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            children.setdefault(int(fields[1]), []).append(int(entry))
        except (OSError, IndexError, ValueError):
            pass
    found, stack = [], [pid]
    while stack:
        current = stack.pop()
        found.append(current)
        stack.extend(children.get(current, []))
    return found


def rss_kb(pids):
    """Resident memory of pids together, in KiB (processes that have gone count 0)."""
    total = 0
    for current in pids:
        try:
            with open(f"/proc/{current}/statm") as f:
                total += int(f.read().split()[1]) * PAGE_KB
        except (OSError, IndexError, ValueError):
            pass
    return total


PAGE_KB = os.sysconf("SC_PAGE_SIZE") // 1024


class Measurement:
    def __init__(self, name, wall, cpu, rss_kb, images):
        self.name, self.wall, self.cpu, self.rss_kb, self.images = name, wall, cpu, rss_kb, images
        self.psnr = None
        self.spread = None  # (fastest, slowest) wall over the rounds, when repeated
        self.config = None

    @property
    def rate(self):
        return self.images / self.wall if self.wall > 0 else 0


def measure(name, command, images, shell=False, env=None, check_output=None, single=False, discard=False):
    """Runs command (a list, or a shell string), sampling its process tree's RSS.

    single: the command is one process (no children that outlive it): its CPU time and peak RSS
    come from the kernel for that process (wait4), and nothing samples /proc meanwhile. The
    sampler takes CPU from the cores the command runs on (a lone huge JPEG on both cores read
    1.56 cores busy with it and 1.72 without, same binary), which a command using one core
    does not feel and one using both does."""
    if single:
        return measure_single(name, command, images, env, check_output, discard)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.monotonic()
    process = subprocess.Popen(command, shell=shell, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               start_new_session=True)
    peak = [0]
    done = threading.Event()

    def sample():
        # RSS every 10 ms, the process tree every 50 ms: scanning all of /proc each time took 17%
        # of a core, taken from whatever was being measured.
        tree, ticks = [process.pid], 0
        while not done.is_set():
            if ticks % 5 == 0:
                tree = descendants(process.pid)
            peak[0] = max(peak[0], rss_kb(tree))
            ticks += 1
            time.sleep(0.01)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    output, _ = process.communicate()
    wall = time.monotonic() - start
    done.set()
    sampler.join()
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    rss = max(peak[0], after.ru_maxrss if after.ru_maxrss > before.ru_maxrss else 0)
    text = output.decode(errors="replace")
    if process.returncode != 0:
        sys.exit(f"{name} failed (exit {process.returncode}):\n{text[-3000:]}")
    if check_output and not re.search(check_output, text):
        sys.exit(f"{name}: expected /{check_output}/ in its output:\n{text[-3000:]}")
    print(f"  {name}: {wall:.2f} s wall, {cpu:.2f} s cpu, {rss / 1024:.0f} MiB", flush=True)
    return Measurement(name, wall, cpu, rss, images)


def measure_single(name, command, images, env, check_output, discard=False):
    """measure() of one process: its own rusage from wait4, output to a temporary file (its last
    64 KB read back), or to /dev/null with discard. The kernel counts this process's RSS at its
    exec into its peak, so the peak is never below this script's own (about 15 MB): keep it small."""
    with tempfile.TemporaryFile() as output:
        start = time.monotonic()
        process = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL if discard else output, stderr=subprocess.STDOUT,
                                   start_new_session=True)
        _, status, usage = os.wait4(process.pid, 0)
        wall = time.monotonic() - start
        process.returncode = os.waitstatus_to_exitcode(status)
        output.seek(max(0, output.seek(0, os.SEEK_END) - 65536))
        text = output.read().decode(errors="replace")
    cpu = usage.ru_utime + usage.ru_stime
    if process.returncode != 0:
        sys.exit(f"{name} failed (exit {process.returncode}):\n{text[-3000:]}")
    if check_output and not re.search(check_output, text):
        sys.exit(f"{name}: expected /{check_output}/ in its output:\n{text[-3000:]}")
    print(f"  {name}: {wall:.2f} s wall, {cpu:.2f} s cpu, {usage.ru_maxrss / 1024:.0f} MiB", flush=True)
    return Measurement(name, wall, cpu, usage.ru_maxrss, images)


def psnr(candidate, reference):
    """PSNR (dB) of candidate against reference, resizing the candidate when it is off by a pixel."""
    size = subprocess.run(["identify", "-format", "%wx%h", reference], capture_output=True, text=True).stdout
    other = subprocess.run(["identify", "-format", "%wx%h", candidate], capture_output=True, text=True).stdout
    source = candidate
    if size != other:
        source = candidate + ".resized.png"
        subprocess.run(["convert", candidate, "-resize", size + "!", source], check=True)
    result = subprocess.run(["compare", "-metric", "PSNR", source, reference, "null:"], capture_output=True, text=True)
    match = re.match(r"\s*(inf|[0-9.]+)", result.stderr)
    if not match:
        sys.exit(f"compare {candidate} {reference}: {result.stderr.strip()}")
    return 100.0 if match.group(1) == "inf" else float(match.group(1))


def quality(outputs, references, names, suffix):
    values = []
    for name in names:
        out = os.path.join(outputs, name + suffix)
        if not os.path.exists(out):
            sys.exit(f"missing output {out}")
        values.append(psnr(out, os.path.join(references, name + ".png")))
    return min(values), statistics.mean(values)


def start_server(directory, delay_ms):
    server = subprocess.Popen([sys.executable, os.path.join(ROOT, "bench/slow_server.py"), directory, str(delay_ms)],
                              stdout=subprocess.PIPE, text=True)
    port = int(server.stdout.readline())
    return server, port


def pipeline(path, cache=None, encoder=None, shrink=True, concurrent=16, max_pixels=None):
    encoder = encoder or f"{{ jpeg: {{ quality: {QUALITY} }} }}"
    cache_lines = f"data_cache:\n  disk: {{ path: {cache}, size_limit: 10GB, store: all }}\n" if cache else ""
    with open(path, "w") as f:
        f.write(f"""version: 1
name: bench
loader:
  http: {{ allow_loopback: true, max_concurrent: {concurrent}, timeout: 60s }}
{cache_lines}decoder:
  imagemagick: {{ shrink_on_load: {str(shrink).lower()}{f", max_pixels: {max_pixels}" if max_pixels else ""} }}
processors:
  - resize: {{ width: {SIZE}, height: {SIZE}, mode: fit }}
encoder: {encoder}
output:
  dir: out
  name: "{{stem}}.{{ext}}"
  existing: replace   # every round writes its outputs: one that found the last round's would keep them
""")


FORMAT_GROUPS = ["webp", "avif", "heic", "gif", "tiff", "jpeg", "png"]


def floor_command(path, w, h, scratch):
    """The codec's own command-line decoder for one file at the scale pipelinectl decodes it to,
    writing raw pixels (to /dev/null, or a YUV file in `scratch` for the HEIF tools, which need a
    name): djpeg and dwebp at the reduced size (2x the fitted size); for formats without a scaled
    decode, the whole picture: pngtopnm (libpng), gif2rgb (giflib), tifftopnm (libtiff), avifdec
    (libavif with dav1d, YUV out: no colour conversion), heif-convert (libheif with libde265, YUV
    out). None for a file none of these reads."""
    room = max(w / SIZE, h / SIZE) / 2
    suffix = path.lower().rsplit(".", 1)[-1]
    scratch_file = os.path.join(scratch, f"{abs(hash(path))}.y4m")
    if suffix in ("jpg", "jpeg"):
        d = 8 if room >= 8 else 4 if room >= 4 else 2 if room >= 2 else 1
        return ["djpeg", "-scale", f"1/{d}", "-outfile", "/dev/null", path]
    if suffix == "webp":
        scale = ["-scale", str(max(1, int(w / room + 0.99))), str(max(1, int(h / room + 0.99)))] if room >= 1 else []
        return ["dwebp", "-quiet", *scale, path, "-ppm", "-o", "/dev/null"]
    if suffix == "jxl":
        # libjxl has no scaled decode: the whole picture, one thread, no output written.
        return ["djxl", "--num_threads=1", "--quiet", path]
    return {"png": ["pngtopnm", path], "gif": ["gif2rgb", "-1", path], "tif": ["tifftopnm", "-quiet", path],
            "tiff": ["tifftopnm", "-quiet", path], "avif": ["avifdec", "-j", "1", path, scratch_file],
            "heic": ["heif-convert", "--quiet", path, scratch_file]}.get(suffix)


def decoder_floor(paths):
    """The codec alone (floor_command for every file), two at a time, output discarded. Process
    start-up (a few ms each) is included. None when a file has no such decoder."""
    import concurrent.futures
    commands = []
    scratch = tempfile.mkdtemp(prefix="floor-", dir="/dev/shm" if os.path.isdir("/dev/shm") else None)
    try:
        for path in paths:
            if path.endswith(".jxl"):  # ImageMagick 6 cannot read it; its floor needs no size
                commands.append(floor_command(path, 0, 0, scratch))
                continue
            size = subprocess.run(["identify", "-format", "%w %h\n", path + "[0]"], capture_output=True, text=True).stdout.split()
            if len(size) < 2:
                return None
            command = floor_command(path, int(size[0]), int(size[1]), scratch)
            if command is None:
                return None
            commands.append(command)
        start = time.monotonic()
        with concurrent.futures.ThreadPoolExecutor(2) as pool:
            list(pool.map(lambda c: subprocess.run(c, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL), commands))
        return time.monotonic() - start
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


HUGE = (16000, 10000)  # 160 MP


def huge_files(work, corpus):
    """The huge-image group, made from the largest corpus photo scaled to 160 MP by vips (ImageMagick's
    policy.xml refuses images this large): JPEG, PNG (unfiltered rows, vips's default, and every
    row filtered), LZW strip TIFF, tiled pyramidal TIFF (JPEG tiles). With a reference for each from the whole image (Pillow's Lanczos
    from the lossless PNG)."""
    biggest = max((os.path.join(corpus, f) for f in os.listdir(corpus) if f.endswith(".jpg")), key=os.path.getsize)
    w, h = map(int, subprocess.run(["vipsheader", "-f", "width", biggest], capture_output=True, text=True).stdout.split() +
               subprocess.run(["vipsheader", "-f", "height", biggest], capture_output=True, text=True).stdout.split())
    directory = os.path.join(work, "huge")
    os.makedirs(directory)
    master = os.path.join(directory, "master.v")
    subprocess.run(["vips", "resize", biggest, master, str(HUGE[0] / w), "--vscale", str(HUGE[1] / h)], check=True)
    made = {
        "JPEG q90": ("huge.jpg", ["vips", "jpegsave", master, "huge.jpg", "--Q", "90"]),
        "PNG": ("huge.png", ["vips", "pngsave", master, "huge.png", "--compression", "6"]),
        # Every row filtered (Sub/Up/Average/Paeth chosen per row, as libpng's writers and
        # ImageMagick do): less to inflate, more to unfilter.
        "PNG, adaptive filters": ("huge-filtered.png", ["vips", "pngsave", master, "huge-filtered.png", "--compression", "6", "--filter", "all"]),
        "TIFF, LZW strips": ("huge-strips.tif", ["vips", "tiffsave", master, "huge-strips.tif", "--compression", "lzw"]),
        "TIFF, tiled pyramid (JPEG tiles)": ("huge-pyramid.tif", ["vips", "tiffsave", master, "huge-pyramid.tif", "--tile", "--pyramid",
                                                                  "--compression", "jpeg", "--Q", "85"]),
    }
    files = []
    for label, (name, command) in made.items():
        subprocess.run(command, cwd=directory, check=True)
        files.append((label, os.path.join(directory, name)))
    # The reference: the whole lossless image resized by Pillow (Lanczos, no reducing gap), a third
    # implementation: one made by vips's own resize is vipsthumbnail's output exactly for the
    # lossless files (100 dB), which no other resizer can match. Each channel is resized in floats
    # and written at 16 bits (a PPM): Pillow's 8-bit resize rounds after each of its two passes,
    # which a reference should not.
    reference = os.path.join(directory, "reference.ppm")
    scale = min(SIZE / HUGE[0], SIZE / HUGE[1])
    subprocess.run([sys.executable, "-c", "import sys, numpy; from PIL import Image; Image.MAX_IMAGE_PIXELS = None; "
                    "image = Image.open(sys.argv[1]).convert('RGB'); scale = float(sys.argv[3]); "
                    "size = (round(image.width * scale), round(image.height * scale)); "
                    "planes = [numpy.asarray(c.convert('F').resize(size, Image.LANCZOS)) for c in image.split()]; "
                    "pixels = numpy.clip(numpy.rint(numpy.stack(planes, -1) * 257), 0, 65535).astype('>u2'); "
                    "open(sys.argv[2], 'wb').write(b'P6 %d %d 65535\\n' % size + pixels.tobytes())",
                    os.path.join(directory, "huge.png"), reference, str(scale)], check=True)
    os.remove(master)
    return files, reference


def huge_pipeline(path):
    """The huge table's pipeline at path: the archive masters' limits (400 MP, 2 GB files)."""
    with open(path, "w") as f:
        f.write(f"""version: 1
name: huge
loader:
  file: {{ max_bytes: 2GB }}
decoder:
  imagemagick: {{ max_pixels: 400MP, max_width: 40000, max_height: 40000 }}
processors:
  - resize: {{ width: {SIZE}, height: {SIZE}, mode: fit }}
encoder: {{ jpeg: {{ quality: {QUALITY} }} }}
output: {{ dir: out, name: "{{stem}}.{{ext}}", existing: replace }}
""")


def huge_table(work, corpus):
    """One 160 MP image at a time (a lone huge image: can it use both cores?): pipelinectl with the
    archive-masters limits against vipsthumbnail (its default threads), median of ROUNDS; the cores
    busy are CPU time over wall time."""
    files, reference = huge_files(work, corpus)
    yaml = os.path.join(work, "huge.yaml")
    huge_pipeline(yaml)
    targets = []
    lines = ["| file | size | pipelinectl s (cores busy) | peak RSS | vipsthumbnail s (cores busy) | peak RSS | ours/vips speed | "
             "codec alone s | ours / codec | PSNR ours / vips, JPEG Q80 (dB) | PSNR ours / vips, PNG (dB) |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---|---|"]
    scratch = tempfile.mkdtemp(prefix="floor-", dir=work)
    yaml_png = os.path.join(work, "huge-png.yaml")
    for label, path in files:
        listed = os.path.join(work, "huge-list.txt")
        with open(listed, "w") as f:
            f.write(path + "\n")
        ours_out, vips_out = os.path.join(work, "huge-out-ours"), os.path.join(work, "huge-out-vips")
        os.makedirs(vips_out, exist_ok=True)
        stem = os.path.splitext(os.path.basename(path))[0]
        ours, vips = [], []
        for _ in range(ROUNDS):
            ours.append(measure("pipelinectl " + label, [BIN, "run", yaml, listed, "-o", ours_out, "--progress", "none"], 1,
                                check_output="1 ok", single=True))
            vips.append(measure("vipsthumbnail " + label, ["vipsthumbnail", "--size", f"{SIZE}x{SIZE}", "-o",
                                                          os.path.join(vips_out, "%s.jpg") + f"[Q={QUALITY}]", path], 1, single=True))
        o = sorted(ours, key=lambda m: m.wall)[len(ours) // 2]
        v = sorted(vips, key=lambda m: m.wall)[len(vips) // 2]
        # The codec alone on one core (floor_command; median of ROUNDS). None for the pyramid: the
        # tools read its first directory, the 160 MP one, not the level either program reads.
        command = None if "pyramid" in label else floor_command(path, HUGE[0], HUGE[1], scratch)
        floor = None
        if command:
            floors = [measure("codec alone " + label, command, 1, single=True, discard=True).wall for _ in range(ROUNDS)]
            floor = sorted(floors)[len(floors) // 2]
        quality_ours = psnr(os.path.join(ours_out, stem + ".jpg"), reference)
        quality_vips = psnr(os.path.join(vips_out, stem + ".jpg"), reference)
        # The path's own quality: the same thumbnails once more as PNG (untimed), so that the JPEG
        # encoder's loss at Q80 (about 40 dB on this photo for either tool) does not hide it.
        png_ours, png_vips = os.path.join(work, "huge-png-ours"), os.path.join(work, "huge-png-vips")
        os.makedirs(png_vips, exist_ok=True)
        with open(yaml_png, "w") as f:
            f.write(open(yaml).read().replace(f"encoder: {{ jpeg: {{ quality: {QUALITY} }} }}", "encoder: png"))
        subprocess.run([BIN, "run", yaml_png, listed, "-o", png_ours, "--progress", "none", "-q"], check=True)
        subprocess.run(["vipsthumbnail", "--size", f"{SIZE}x{SIZE}", "-o", os.path.join(png_vips, "%s.png"), path], check=True)
        lossless_ours = psnr(os.path.join(png_ours, stem + ".png"), reference)
        lossless_vips = psnr(os.path.join(png_vips, stem + ".png"), reference)
        lines.append(f"| {label} | {os.path.getsize(path) / 1e6:.0f} MB | {o.wall:.2f} ({o.cpu / o.wall:.2f}) | {o.rss_kb / 1024:.0f} MiB "
                     f"| {v.wall:.2f} ({v.cpu / v.wall:.2f}) | {v.rss_kb / 1024:.0f} MiB | {v.wall / o.wall:.2f}x "
                     f"| {'' if floor is None else f'{floor:.2f}'} | {'' if floor is None else f'{o.wall / floor:.2f}x'} "
                     f"| {quality_ours:.1f} / {quality_vips:.1f} | {lossless_ours:.2f} / {lossless_vips:.2f} |")
        # Issue 34's bar for every group: 1.1x vipsthumbnail, or within 1.1x of the codec alone.
        targets.append((f"{label}: max(vs vips, 1.1 x codec alone / ours) >= 1.1",
                        max(v.wall / o.wall, 1.1 * floor / o.wall if floor else 0), 1.1, ">="))
        targets.append((f"{label}: PSNR of the path (PNG outputs) >= 40 dB", lossless_ours, 40, ">="))
        targets.append((f"{label}: PSNR of the path no worse than vipsthumbnail's (dB difference)", lossless_ours - lossless_vips, 0.0, ">="))
        # Issue 34's targets: no slower than vipsthumbnail for the TIFFs, the strip TIFF in 150 MB,
        # a lone image keeping 1.6 cores busy (the pyramid reads too little to need it).
        if label.startswith("TIFF"):
            targets.append((f"{label}: speed against vipsthumbnail", v.wall / o.wall, 1.0, ">="))
        if "strips" in label:
            targets.append((f"{label}: peak RSS MiB", o.rss_kb / 1024, 150, "<="))
        if "pyramid" not in label:
            targets.append((f"{label}: cores busy", o.cpu / o.wall, 1.6, ">="))
    return lines, targets


def jxl_group(corpus, work):
    """The JPEG XL group, made here with cjxl from corpus.sh's photos (formats.sh has none): its
    first 8 JPEGs recompressed losslessly (what a JPEG turned into JPEG XL usually is) and its first
    8 PNGs encoded lossy at cjxl's quality 85. Empty without cjxl."""
    if shutil.which("cjxl") is None:
        return []
    folder = os.path.join(work, "jxl-group")
    os.makedirs(folder, exist_ok=True)
    files = sorted(os.listdir(corpus))
    made = []
    for source in [f for f in files if f.endswith(".jpg")][:8] + [f for f in files if f.endswith(".png")][:8]:
        target = os.path.join(folder, os.path.splitext(source)[0] + ".jxl")
        options = [] if source.endswith(".jpg") else ["-q", "85"]
        subprocess.run(["cjxl", os.path.join(corpus, source), target, "--quiet", *options], check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        made.append(target)
    return made


def format_groups(corpus, work=None):
    """Every format group of both corpora, as (label, paths): corpus.sh's JPEG and PNG, then
    formats.sh's folders (FORMAT_GROUPS), then JPEG XL made from corpus.sh's photos (when `work`
    is given: see jxl_group)."""
    formats = subprocess.run(["bash", os.path.join(ROOT, "../shared/bench/formats.sh")] if os.path.exists(
        os.path.join(ROOT, "../shared/bench/formats.sh")) else ["false"], capture_output=True, text=True)
    if formats.returncode != 0:
        sys.exit("the formats corpus (../shared/bench/formats.sh) is needed for the per-format table:\n" + formats.stderr)
    formats_dir = formats.stdout.strip().splitlines()[-1]
    groups = []
    main_files = sorted(os.listdir(corpus))
    groups.append(("corpus JPEG", [os.path.join(corpus, f) for f in main_files if f.endswith(".jpg")]))
    groups.append(("corpus PNG", [os.path.join(corpus, f) for f in main_files if f.endswith(".png")]))
    for name in FORMAT_GROUPS:
        folder = os.path.join(formats_dir, name)
        groups.append((name.upper() if name != "jpeg" and name != "png" else f"formats {name.upper()}",
                       [os.path.join(folder, f) for f in sorted(os.listdir(folder))]))
    jxl = jxl_group(corpus, work) if work else []
    if jxl:
        groups.append(("JXL", jxl))
    return groups


def format_table(work, corpus):
    """Every format group of both corpora (corpus.sh's JPEG and PNG, formats.sh's folders) against
    vipsthumbnail's faster 2-core configuration, in interleaved rounds like the main runs; the
    same output (fit 256x256, JPEG Q80, alpha flattened onto black as vipsthumbnail does), PSNR
    of every thumbnail (from a second, untimed run of each with PNG output) against a full-decode
    Lanczos reference (auto-oriented, flattened on black),
    and a mixed run over every file of both corpora for CPU use. Returns (rows, mixed, sol)."""
    groups = format_groups(corpus, work)
    table_dir = os.path.join(work, "formats")
    os.makedirs(table_dir)
    yaml_path = os.path.join(table_dir, "formats.yaml")
    pipeline(yaml_path, encoder=f"{{ jpeg: {{ quality: {QUALITY}, background: black }} }}")
    png_yaml = os.path.join(table_dir, "formats-png.yaml")
    pipeline(png_yaml, encoder="png")
    vips_env = dict(os.environ, VIPS_CONCURRENCY="1")

    def flat(path):
        """path flattened onto black (as the reference), for PSNR."""
        target = path + ".flat.png"
        subprocess.run(["convert", path, "-background", "black", "-flatten", target], check=True, stderr=subprocess.DEVNULL)
        return target

    rows = []
    for label, paths in groups:
        slug = re.sub(r"[^a-z]+", "-", label.lower()).strip("-")
        refs = os.path.join(table_dir, slug + "-ref")
        os.makedirs(refs)
        for path in paths:
            stem = os.path.splitext(os.path.basename(path))[0]
            if path.endswith(".jxl"):  # ImageMagick 6 cannot read it: djxl's full decode instead (its PNG at the
                # source's depth: djxl 0.7 fails to write 8-bit files as 16-bit PNG)
                decoded = os.path.join(refs, stem + ".djxl.png")
                subprocess.run(["djxl", path, decoded, "--quiet"], check=True,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                path = decoded
            subprocess.run(["convert", path + "[0]", "-auto-orient", "-filter", "Lanczos", "-resize", f"{SIZE}x{SIZE}", "+repage",
                            "-background", "black", "-flatten", "PNG48:" + os.path.join(refs, stem + ".png")],
                           check=True, stderr=subprocess.DEVNULL)
        listing = os.path.join(table_dir, slug + ".txt")
        with open(listing, "w") as f:
            f.write("\n".join(paths) + "\n")
        half = (len(paths) + 1) // 2
        def vips(output, env):
            target = f"'{output}/%s.jpg[Q={QUALITY}]'"
            parts = [" ".join(f"'{p}'" for p in chunk) for chunk in (paths[:half], paths[half:]) if chunk]
            return f"mkdir -p '{output}' && (" + " & ".join(f"vipsthumbnail -s {SIZE}x{SIZE} -o {target} {x}" for x in parts) + " & wait)"
        out = lambda name: os.path.join(table_dir, f"{slug}-{name}")
        n = len(paths)
        runs = {}
        print(f" {label} ({n} files)", flush=True)
        for round_number in range(ROUNDS):
            order = [0, 1, 2][round_number % 3:] + [0, 1, 2][:round_number % 3]
            for which in order:
                if which == 0:
                    m = measure(f"pipelinectl ({label})", [BIN, "run", yaml_path, listing, "-o", out("ours"), "--progress", "none"],
                                n, check_output=f"{n} items: {n} ok")
                    runs.setdefault("ours", []).append(m)
                elif which == 1:
                    runs.setdefault("vips", []).append(measure(f"vipsthumbnail VIPS_CONCURRENCY=1 ({label})", vips(out("vips"), vips_env),
                                                               n, shell=True, env=vips_env))
                else:
                    runs.setdefault("vips-threads", []).append(measure(f"vipsthumbnail default threads ({label})",
                                                                       vips(out("vips-threads"), None), n, shell=True))
        median = {k: sorted(v, key=lambda m: m.wall)[len(v) // 2] for k, v in runs.items()}
        best_vips = "vips" if median["vips"].wall <= median["vips-threads"].wall else "vips-threads"
        # Quality from lossless outputs of the same two programs (untimed): with JPEG Q80 outputs the
        # encoder's loss (about 25-35 dB) hides every difference in decoding and resizing.
        subprocess.run([BIN, "run", png_yaml, listing, "-o", out("ours-png"), "--progress", "none"], check=True,
                       stdout=subprocess.DEVNULL)
        subprocess.run(vips(out("vips-png"), vips_env).replace(f".jpg[Q={QUALITY}]", ".png"), shell=True, check=True,
                       env=vips_env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        stems = [os.path.splitext(os.path.basename(p))[0] for p in paths]
        ours_psnr = [psnr(flat(os.path.join(out("ours-png"), s + ".png")), os.path.join(refs, s + ".png")) for s in stems]
        vips_psnr = [psnr(flat(os.path.join(out("vips-png"), s + ".png")), os.path.join(refs, s + ".png")) for s in stems]
        worst = stems[ours_psnr.index(min(ours_psnr))]
        floors = [decoder_floor(paths) for _ in range(ROUNDS)]
        floor = None if None in floors else sorted(floors)[len(floors) // 2]
        rows.append(dict(label=label, n=n, ours=median["ours"], vips=median[best_vips], vips_config=best_vips, floor=floor,
                         ours_psnr=(min(ours_psnr), statistics.mean(ours_psnr)), vips_psnr=(min(vips_psnr), statistics.mean(vips_psnr)),
                         worst=worst))

    # A mixed run: every file of both corpora in one list, formats interleaved.
    everything = [p for _, paths in groups for p in paths]
    everything = [everything[i] for i in sorted(range(len(everything)), key=lambda i: (i * 7919) % len(everything))]
    mixed_list = os.path.join(table_dir, "mixed.txt")
    with open(mixed_list, "w") as f:
        f.write("\n".join(everything) + "\n")
    mixed_yaml = os.path.join(table_dir, "mixed.yaml")
    pipeline(mixed_yaml, encoder=f"{{ jpeg: {{ quality: {QUALITY}, background: black }} }}")
    with open(mixed_yaml) as f:
        text = f.read().replace('name: "{stem}.{ext}"', 'name: "{index}.{ext}"')
    with open(mixed_yaml, "w") as f:
        f.write(text)
    n = len(everything)
    mixed = sorted((measure("pipelinectl (mixed list, both corpora)", [BIN, "run", mixed_yaml, mixed_list, "-o",
                                                                        os.path.join(table_dir, f"mixed-{r}"), "--progress", "none"],
                            n, check_output=f"{n} items: {n} ok") for r in range(ROUNDS)), key=lambda m: m.wall)[ROUNDS // 2]

    # Shrink-on-load against a full decode on every file of both corpora, both PNG (lossless).
    sol = {}
    for name, shrink in (("sol", True), ("full", False)):
        path = os.path.join(table_dir, name + ".yaml")
        pipeline(path, encoder="png", shrink=shrink)
        with open(path) as f:
            text = f.read().replace('name: "{stem}.{ext}"', 'name: "{index}.{ext}"')
        with open(path, "w") as f:
            f.write(text)
        subprocess.run([BIN, "run", path, mixed_list, "-o", os.path.join(table_dir, name), "--progress", "none"], check=True,
                       stdout=subprocess.DEVNULL)
    sol_values = {}
    for index, path in enumerate(everything, start=1):
        a, b = (os.path.join(table_dir, x, f"{index}.png") for x in ("sol", "full"))
        sol_values[path] = psnr(a, b)
    return rows, mixed, sol_values


def format_lines(rows, mixed, sol_values):
    lines = ["| group | files | pipelinectl wall s | cpu s / wall s | vipsthumbnail wall s (config) | vs vips | "
             "codec alone s | ours / codec | PSNR min / mean dB (ours) | PSNR min / mean dB (vips) | our worst image |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---|---|---|"]
    targets = []
    for r in rows:
        ours, vips = r["ours"], r["vips"]
        ratio = vips.wall / ours.wall
        config = "VIPS_CONCURRENCY=1" if r["vips_config"] == "vips" else "default threads"
        floor_text = "" if r["floor"] is None else f"{r['floor']:.2f}"
        over_floor = "" if r["floor"] is None else f"{ours.wall / r['floor']:.2f}x"
        lines.append(f"| {r['label']} | {r['n']} | {ours.wall:.2f} | {ours.cpu / ours.wall:.2f} | {vips.wall:.2f} ({config}) | "
                     f"{ratio:.2f}x | {floor_text} | {over_floor} | {r['ours_psnr'][0]:.2f} / {r['ours_psnr'][1]:.2f} | {r['vips_psnr'][0]:.2f} / {r['vips_psnr'][1]:.2f} | {r['worst']} |")
        targets.append((f"{r['label']}: >= 1.25x vipsthumbnail", ratio, 1.25, ">="))
        # Issue 34's bar: 1.1x vipsthumbnail, or within 1.1x of the codec alone.
        targets.append((f"{r['label']}: max(vs vips, 1.1 x codec alone / ours) >= 1.1",
                        max(ratio, 1.1 * r["floor"] / ours.wall if r["floor"] else 0), 1.1, ">="))
        targets.append((f"{r['label']}: min PSNR no worse than vipsthumbnail's (dB difference)",
                        r["ours_psnr"][0] - r["vips_psnr"][0], 0.0, ">="))
    worst = min(sol_values, key=sol_values.get)
    lines += ["", "codec alone: each format's own command-line decoder, two at a time, output discarded (process start-up "
              "included): djpeg or dwebp at the same reduced size; pngtopnm, gif2rgb, tifftopnm, avifdec and heif-convert "
              "(YUV out) the whole picture. What the decode alone costs; 1.25x vipsthumbnail is out of reach where it is "
              "above 0.8x vipsthumbnail's wall."]
    lines += ["", f"Mixed run, all {mixed.images} files of both corpora in one interleaved list: {mixed.wall:.2f} s wall, "
              f"{mixed.cpu:.2f} s cpu, {mixed.cpu / mixed.wall:.2f} cores busy of {os.cpu_count()}, peak RSS {mixed.rss_kb / 1024:.0f} MiB.",
              f"Shrink-on-load vs full decode over the same {len(sol_values)} files: PSNR min {sol_values[worst]:.2f} dB "
              f"({os.path.basename(worst)}), mean {statistics.mean(min(v, 100) for v in sol_values.values()):.2f} dB."]
    targets += [("mixed run: cores busy", mixed.cpu / mixed.wall, 1.6, ">="),
                ("mixed run: peak RSS MiB", mixed.rss_kb / 1024, 300, "<="),
                (f"shrink-on-load min PSNR >= 40 dB over all {len(sol_values)} files", sol_values[worst], 40, ">=")]
    return lines, targets


def machine():
    cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
    mem = next((l.split()[1] for l in open("/proc/meminfo") if l.startswith("MemTotal")), "0")
    def version(cmd):
        try:
            return subprocess.run(cmd, capture_output=True, text=True).stdout.strip().splitlines()[0]
        except (OSError, IndexError):
            return "?"
    return {
        "cpu": f"{os.cpu_count()} x {cpu}",
        "memory": f"{int(mem) / 1024 / 1024:.1f} GiB",
        "imagemagick": version(["convert", "-version"]),
        "vips": version(["vipsthumbnail", "--vips-version"]),
        "curl": version(["curl", "--version"]),
        "kernel": os.uname().release,
    }


def main():
    corpus = subprocess.run(["bash", os.path.join(ROOT, "bench/corpus.sh")], capture_output=True, text=True,
                            check=True).stdout.strip().splitlines()[-1]
    files = sorted(f for f in os.listdir(corpus) if f.lower().endswith((".jpg", ".png")))
    names = [os.path.splitext(f)[0] for f in files]
    n = len(files)
    work = tempfile.mkdtemp(prefix="pipelinectl-bench-")
    servers = []
    try:
        print(f"corpus: {corpus} ({n} files); work: {work}", flush=True)
        refs = os.path.join(work, "ref")
        os.makedirs(refs)
        print("references (full decode, Lanczos) ...", flush=True)
        subprocess.run(f"ls {corpus} | grep -E '\\.(jpg|png)$' | xargs -P 2 -I{{}} sh -c "
                       f"'convert \"{corpus}/{{}}[0]\" -filter Lanczos -resize {SIZE}x{SIZE} PNG48:\"{refs}/$(basename {{}} | sed s/\\\\.[a-z]*$//).png\"'",
                       shell=True, check=True)

        local_list = os.path.join(work, "local.txt")
        with open(local_list, "w") as f:
            f.write("\n".join(os.path.join(corpus, x) for x in files) + "\n")
        server, port = start_server(corpus, LATENCY_MS)
        servers.append(server)
        url_list = os.path.join(work, "urls.txt")
        with open(url_list, "w") as f:
            f.write("\n".join(f"http://127.0.0.1:{port}/{x}" for x in files) + "\n")

        if os.environ.get("BENCH_ONLY") == "huge":
            print("huge images:", flush=True)
            lines, targets = huge_table(work, corpus)
            write_report(["## Machine", *[f"- {k}: {v}" for k, v in machine().items()], "",
                          f"## One 160 MP image at a time (fit {SIZE}x{SIZE}, JPEG quality {QUALITY}, median of {ROUNDS})", *lines],
                         targets, "huge.md")
            return
        if os.environ.get("BENCH_ONLY") == "formats":
            print("per-format table:", flush=True)
            table, mixed, sol = format_table(work, corpus)
            lines, targets = format_lines(table, mixed, sol)
            write_report(["## Machine", *[f"- {k}: {v}" for k, v in machine().items()], "",
                          f"## Every format group (fit {SIZE}x{SIZE}, JPEG quality {QUALITY}, {ROUNDS} interleaved rounds, median)",
                          *lines], targets, "formats.md")
            return
        results = {}
        print("runs:", flush=True)
        bench_yaml = os.path.join(work, "bench.yaml")
        pipeline(bench_yaml)
        out = lambda name: os.path.join(work, "out-" + name)
        ok = f"{n} items: {n} ok"

        # Warm the page cache and the binary once, untimed, so the first timed run is not penalised.
        subprocess.run([BIN, "run", bench_yaml, local_list, "-o", out("warmup"), "--progress", "none"], check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

        half = (n + 1) // 2
        vips_env = dict(os.environ, VIPS_CONCURRENCY="1")
        def vips_command(directory, output):
            listed = [os.path.join(directory, x) for x in files]
            first = " ".join(f"'{p}'" for p in listed[:half])
            second = " ".join(f"'{p}'" for p in listed[half:])
            target = f"'{output}/%s.jpg[Q={QUALITY}]'"
            return (f"mkdir -p '{output}' && (vipsthumbnail -s {SIZE}x{SIZE} -o {target} {first} & "
                    f"vipsthumbnail -s {SIZE}x{SIZE} -o {target} {second} & wait)")

        def convert_command(output, define):
            return (f"mkdir -p '{output}' && cd '{corpus}' && ls | grep -E '\\.(jpg|png)$' | "
                    f"xargs -P 2 -I{{}} sh -c 'convert {define} \"{{}}[0]\" -thumbnail {SIZE}x{SIZE} -quality {QUALITY} "
                    f"\"{output}/$(echo {{}} | sed s/\\\\.[a-z]*$//).jpg\"'")

        downloads = os.path.join(work, "downloads")
        curl_config = os.path.join(work, "curl.cfg")
        with open(curl_config, "w") as f:
            for x in files:
                f.write(f'url = "http://127.0.0.1:{port}/{x}"\noutput = "{downloads}/{x}"\n')

        def curl_vips(env):
            # Downloads again every time: the script does not keep what it fetched.
            shutil.rmtree(downloads, ignore_errors=True)
            os.makedirs(downloads)
            result = measure(f"curl --parallel then vipsthumbnail ({LATENCY_MS} ms latency)",
                             f"curl -sS --fail --parallel --parallel-max 16 -K '{curl_config}' && "
                             + vips_command(downloads, out("curl-vips")), n, shell=True, env=env)
            result.config = "VIPS_CONCURRENCY=1" if env else "default threads"
            return result

        # The side-by-side runs, in interleaved rounds so that a slow moment of this shared machine
        # falls on every contender alike; each figure is the run with the median wall time. The
        # script's vipsthumbnail step runs in the configuration that was faster in the same round.
        rounds = {}

        def ours_local(this):
            this["ours-local"] = measure("pipelinectl run (local files)",
                                         [BIN, "run", bench_yaml, local_list, "-o", out("ours-local"), "--progress", "none"], n,
                                         check_output=ok)

        def ours_http(this):
            this["ours-http"] = measure(f"pipelinectl run (HTTP, {LATENCY_MS} ms latency)",
                                        [BIN, "run", bench_yaml, url_list, "-o", out("ours-http"), "--progress", "none"], n,
                                        check_output=ok)

        def vips_runs(this):
            this["vips"] = measure("vipsthumbnail (2 processes, VIPS_CONCURRENCY=1)",
                                   vips_command(corpus, out("vips")), n, shell=True, env=vips_env)
            this["vips-threads"] = measure("vipsthumbnail (2 processes, default threads)",
                                           vips_command(corpus, out("vips-threads")), n, shell=True)
            this["curl-vips"] = curl_vips(vips_env if this["vips"].wall <= this["vips-threads"].wall else None)

        def convert_runs(this):
            this["convert"] = measure("convert -thumbnail (2 at a time)", convert_command(out("convert"), ""), n,
                                      shell=True)
            this["convert-size"] = measure("convert -define jpeg:size -thumbnail (2 at a time)",
                                           convert_command(out("convert-size"), f"-define jpeg:size={2 * SIZE}x{2 * SIZE}"),
                                           n, shell=True)

        # Each round starts with a different contender, so none always runs first or after the same one.
        contenders = [ours_local, ours_http, vips_runs, convert_runs]
        for round_number in range(ROUNDS):
            print(f" round {round_number + 1} of {ROUNDS}", flush=True)
            this = {}
            shift = round_number % len(contenders)
            for run in contenders[shift:] + contenders[:shift]:
                run(this)
            for key, value in this.items():
                rounds.setdefault(key, []).append(value)
        for key, values in rounds.items():
            results[key] = sorted(values, key=lambda m: m.wall)[len(values) // 2]
            results[key].spread = (min(m.wall for m in values), max(m.wall for m in values))

        cache_yaml = os.path.join(work, "cache.yaml")
        pipeline(cache_yaml, cache=os.path.join(work, "cache"))
        results["cold"] = measure("pipelinectl run, store: all, empty cache (cold)",
                                  [BIN, "run", cache_yaml, local_list, "-o", out("cold"), "--progress", "none"], n, check_output=ok)
        results["warm"] = measure("pipelinectl run, store: all, same list again (warm)",
                                  [BIN, "run", cache_yaml, local_list, "-o", out("warm"), "--progress", "none"], n,
                                  check_output=f"{n} processed hit")
        cache_http_yaml = os.path.join(work, "cache-http.yaml")
        pipeline(cache_http_yaml, cache=os.path.join(work, "cache-http"))
        results["cold-http"] = measure("pipelinectl run, store: all, HTTP, empty cache (cold)",
                                       [BIN, "run", cache_http_yaml, url_list, "-o", out("cold-http"), "--progress", "none"], n,
                                       check_output=ok)
        results["warm-http"] = measure("pipelinectl run, store: all, HTTP again (warm)",
                                       [BIN, "run", cache_http_yaml, url_list, "-o", out("warm-http"), "--progress", "none"], n,
                                       check_output=f"{n} processed hit")

        # Long lists: the small images of the corpus, repeated with distinct query strings, no latency.
        small = [x for x in files if os.path.getsize(os.path.join(corpus, x)) < 200_000]
        fast_server, fast_port = start_server(corpus, 0)
        servers.append(fast_server)
        long_yaml = os.path.join(work, "long.yaml")
        pipeline(long_yaml)
        for count in (SHORT_LIST, LONG_LIST):
            path = os.path.join(work, f"list-{count}.txt")
            with open(path, "w") as f:
                for i in range(count):
                    f.write(f"http://127.0.0.1:{fast_port}/{small[i % len(small)]}?n={i}\n")
            name = f"list-{count}"
            # {stem} repeats across the list: write {index}-named outputs instead.
            with open(long_yaml) as f:
                text = f.read().replace('name: "{stem}.{ext}"', 'name: "{index}.{ext}"')
            with open(long_yaml, "w") as f:
                f.write(text)
            results[name] = measure(f"pipelinectl run, {count}-line URL list ({len(small)} small images repeated)",
                                    [BIN, "run", long_yaml, path, "-o", out(name), "--progress", "none"], count,
                                    check_output=f"{count} items: {count} ok")
            shutil.rmtree(out(name), ignore_errors=True)

        # The long runs leave thousands of files to write back: flush them first, so validate is
        # timed on an idle disk, and take the median of five (the first also pays for loading).
        os.sync()
        validate = sorted((measure("pipelinectl validate pipelines/thumbnails.yaml",
                                   [BIN, "validate", os.path.join(ROOT, "pipelines/thumbnails.yaml")], 1)
                           for _ in range(5)), key=lambda m: m.wall)[2]

        print("quality (PSNR against the full-decode Lanczos reference) ...", flush=True)
        for key in ["ours-local", "ours-http", "vips", "convert", "convert-size"]:
            results[key].psnr = quality(out(key), refs, names, ".jpg")

        # Shrink-on-load against a full decode, both PNG (lossless) so only decoding differs.
        sol_yaml = os.path.join(work, "sol.yaml")
        full_yaml = os.path.join(work, "full.yaml")
        pipeline(sol_yaml, encoder="png")
        pipeline(full_yaml, encoder="png", shrink=False)
        for yaml_path, name in [(sol_yaml, "sol"), (full_yaml, "full")]:
            subprocess.run([BIN, "run", yaml_path, local_list, "-o", out(name), "--progress", "none"], check=True,
                           stdout=subprocess.DEVNULL)
        jpegs = [x for x in names if x + ".jpg" in files]
        pngs = [x for x in names if x + ".png" in files]
        shrink_values = {kind: [psnr(os.path.join(out("sol"), x + ".png"), os.path.join(out("full"), x + ".png")) for x in group]
                         for kind, group in (("JPEG", jpegs), ("PNG", pngs))}

        print("per-format table:", flush=True)
        table, mixed, sol = format_table(work, corpus)
        report(results, validate, shrink_values, n, machine(), format_lines(table, mixed, sol))
    finally:
        for server in servers:
            server.send_signal(signal.SIGTERM)
        if os.environ.get("BENCH_KEEP") != "1":
            shutil.rmtree(work, ignore_errors=True)


def report(results, validate, shrink_values, n, facts, formats=None):
    # The reference is vipsthumbnail's best configuration in this run (of the two measured).
    vips = results["vips"] if results["vips"].wall <= results["vips-threads"].wall else results["vips-threads"]
    vips_psnr = results["vips"].psnr
    rows = [
        ("1. pipelinectl, local files", "ours-local"),
        (f"2. pipelinectl, HTTP +{LATENCY_MS} ms/request", "ours-http"),
        ("3. vipsthumbnail, 2 processes, VIPS_CONCURRENCY=1", "vips"),
        ("3'. vipsthumbnail, 2 processes, default threads", "vips-threads"),
        ("4. convert -thumbnail, 2 at a time", "convert"),
        ("4'. convert -define jpeg:size -thumbnail, 2 at a time", "convert-size"),
        (f"4b. curl --parallel (+{LATENCY_MS} ms) then vipsthumbnail, {results['curl-vips'].config}", "curl-vips"),
        ("5. pipelinectl, store: all, cold (local)", "cold"),
        ("5. pipelinectl, store: all, warm (local)", "warm"),
        ("5. pipelinectl, store: all, cold (HTTP)", "cold-http"),
        ("5. pipelinectl, store: all, warm (HTTP)", "warm-http"),
        (f"6. pipelinectl, {SHORT_LIST}-line list", f"list-{SHORT_LIST}"),
        (f"6. pipelinectl, {LONG_LIST}-line list", f"list-{LONG_LIST}"),
    ]
    lines = ["| run | images | wall s | wall range s | cpu s | cpu s / wall s | peak RSS MiB | images/s | vs vips | PSNR min / mean dB |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    for label, key in rows:
        m = results[key]
        quality_text = f"{m.psnr[0]:.2f} / {m.psnr[1]:.2f}" if m.psnr else ""
        ratio = f"{m.rate / vips.rate:.2f}x" if key not in ("warm", "warm-http") and not key.startswith("list") else ""
        spread = f"{m.spread[0]:.2f}-{m.spread[1]:.2f}" if m.spread else ""
        lines.append(f"| {label} | {m.images} | {m.wall:.2f} | {spread} | {m.cpu:.2f} | {m.cpu / m.wall:.2f} | {m.rss_kb / 1024:.0f} | {m.rate:.1f} | {ratio} | {quality_text} |")
    ours, http = results["ours-local"], results["ours-http"]
    short, long = results[f"list-{SHORT_LIST}"], results[f"list-{LONG_LIST}"]
    targets = [
        ("local throughput >= 1.25x vipsthumbnail (its faster configuration)", ours.rate / vips.rate, 1.25, ">="),
        ("local min PSNR no worse than vipsthumbnail's (difference, dB)", ours.psnr[0] - vips_psnr[0], 0.0, ">="),
        (f"HTTP wall <= 1.15x local wall", http.wall / ours.wall, 1.15, "<="),
        ("HTTP >= 1.5x faster than curl + vipsthumbnail", results["curl-vips"].wall / http.wall, 1.5, ">="),
        ("corpus peak RSS <= 300 MiB (local run)", ours.rss_kb / 1024, 300, "<="),
        ("corpus peak RSS <= 300 MiB (HTTP run)", http.rss_kb / 1024, 300, "<="),
        (f"{LONG_LIST}-line peak RSS <= 1.2x {SHORT_LIST}-line", long.rss_kb / short.rss_kb, 1.2, "<="),
        ("warm re-run >= 20x faster than cold (local)", results["cold"].wall / results["warm"].wall, 20, ">="),
        ("warm re-run >= 20x faster than cold (HTTP)", results["cold-http"].wall / results["warm-http"].wall, 20, ">="),
        ("validate < 100 ms (seconds, median of 5)", validate.wall, 0.1, "<"),
        *[(f"shrink-on-load min PSNR >= 40 dB over {len(v)} {kind}s", min(v), 40, ">=") for kind, v in shrink_values.items()],
    ]
    sections = ["## Machine", *[f"- {k}: {v}" for k, v in facts.items()], "",
                f"## Runs ({n} corpus files, fit {SIZE}x{SIZE}, JPEG quality {QUALITY})", *lines, "",
                f"vs vips: against {vips.name} (the faster vipsthumbnail configuration in this run).",
                f"Runs 1-4b: {ROUNDS} interleaved rounds; each row is the round with the median wall time"
                " (wall range: fastest and slowest round).", "",
                *[f"Shrink-on-load vs full decode (PNG outputs, {len(v)} {kind} sources): PSNR min {min(v):.2f} dB, "
                  f"mean {statistics.mean(v):.2f} dB (identical outputs count as 100)." for kind, v in shrink_values.items()]]
    if formats:
        format_rows, format_targets = formats
        sections += ["", f"## Every format group (both corpora; {ROUNDS} interleaved rounds, median; alpha flattened on black as "
                     "vipsthumbnail does)", *format_rows]
        targets = targets + format_targets
    write_report(sections, targets, "latest.md")


def write_report(sections, targets, filename):
    target_lines = ["| target | measured | needed | met |", "|---|---:|---:|---|"]
    met_all = True
    for label, value, needed, op in targets:
        met = {">=": value >= needed, "<=": value <= needed, "<": value < needed}[op]
        met_all &= met
        target_lines.append(f"| {label} | {value:.2f} | {op} {needed} | {'yes' if met else 'NO'} |")
    text = "\n".join([*sections, "", "## Targets", *target_lines, ""])
    print()
    print(text)
    os.makedirs(os.path.join(ROOT, "bench/results"), exist_ok=True)
    with open(os.path.join(ROOT, "bench/results", filename), "w") as f:
        f.write(f"# bench/run.sh, {time.strftime('%Y-%m-%d %H:%M')}\n\n" + text)
    print("every target met" if met_all else "some targets NOT met", flush=True)


if __name__ == "__main__":
    main()
