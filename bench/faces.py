#!/usr/bin/env python3
"""Face crops (issue 61) against smart crops, in one run of this script.

1. The face set (Tests/PluginsTests/Fixtures/faces/make-face-set.py: 54 faces in 22 images built
   from public test photos): a 256x256 `fill` by `gravity: faces` and by `gravity: smart`, and the
   share of faces each keeps whole where the square can hold them (all of an image's faces when
   one square holds them, else the largest).
2. A 12 MP photo with faces of a tenth of its short side and more (the set's twelve-mp.jpg) and
   one with faces of 50-70 px (made here the same way): BENCH_FACES_ROUNDS copies of it in one
   run by each gravity, one worker; the p50 of the items' times (timings_ms) and the difference.
   The small-faces photo is also run with detect_megapixels raised, and with every pixel
   decoded (shrink_on_load: false, for both gravities). Then the 12 MP photo with a face marked
   in XMP (exiftool's MWG regions) by `smart`, `regions` and `faces` (which then does not scan).
3. Every format group of both bench corpora (no faces, the common case): the wall time of a run
   by each gravity (start-up, and the detector's model read once, included) and the sum of its
   items' times, alternating, two workers, and how many faces were reported (false alarms).

Usage: bench/faces.py   (BENCH_BIN: the binary, default .build/release/pipelinectl;
       BENCH_FACES_ROUNDS: 15; the face photos come from `make test-deps`)
"""
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import importlib.util

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "bench"))
from library import groups, run_report  # noqa: E402  (both corpora, by format group; one run and its report)

BIN = os.environ.get("BENCH_BIN", os.path.join(ROOT, ".build/release/pipelinectl"))
ROUNDS = int(os.environ.get("BENCH_FACES_ROUNDS", "15"))
PHOTOS = os.path.join(ROOT, ".build/test-data/face_recognition-1.3.0/tests/test_images")
_spec = importlib.util.spec_from_file_location("maker", os.path.join(ROOT, "Tests/PluginsTests/Fixtures/faces/make-face-set.py"))
maker = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(maker)


def pipeline(work, gravity, extra="", decoder="imagemagick"):
    path = os.path.join(work, f"{gravity}{len(extra)}{len(decoder)}.yaml")
    with open(path, "w") as f:
        f.write(f"""version: 1
name: {gravity}
decoder: {decoder}
processors:
  - resize: {{ width: 256, height: 256, mode: fill, gravity: {gravity}{extra} }}
encoder: {{ jpeg: {{ quality: 80 }} }}
output: {{ name: "{{stem}}-{{hash8}}.{{ext}}" }}
""")
    return path


def run(yaml, files, work, workers=2):
    return run_report(BIN, yaml, files, work, workers=workers, label=os.path.basename(yaml))


def kept(data, truth):
    by_file = {os.path.basename(item["source"]): item for item in data["items"]}
    kept = counted = 0
    for image in truth:
        faces = image["faces"]
        side = min(image["width"], image["height"])
        xs = [f[0] for f in faces] + [f[0] + f[2] for f in faces]
        ys = [f[1] for f in faces] + [f[1] + f[3] for f in faces]
        if max(xs) - min(xs) > side or max(ys) - min(ys) > side:
            faces = [max(faces, key=lambda f: f[2] * f[3])]
        counted += len(faces)
        if image["width"] == image["height"]:  # already square: scaled, not cropped
            kept += len(faces)
            continue
        crop = by_file[image["file"]].get("facts", {}).get("crop")
        if not crop:
            continue
        k = crop["of_width"] / image["width"]
        for x, y, w, h in faces:
            if (x * k >= crop["x"] - 1 and y * k >= crop["y"] - 1 and (x + w) * k <= crop["x"] + crop["width"] + 1
                    and (y + h) * k <= crop["y"] + crop["height"] + 1):
                kept += 1
    return kept, counted


def item_ms(data):
    item = data["items"][0]
    return sum(item.get("timings_ms", {}).values())


def main():
    if not os.path.exists(BIN):
        sys.exit(f"no binary at {BIN}: build it (swift build -c release --product pipelinectl) or set BENCH_BIN")
    if not os.path.exists(os.path.join(PHOTOS, "obama.jpg")):
        sys.exit(f"no face photos at {PHOTOS}: run make test-deps")
    work = tempfile.mkdtemp(prefix="bench-faces-", dir="/dev/shm" if os.path.isdir("/dev/shm") else None)
    skimage = subprocess.run([sys.executable, "-c", "import os, skimage.data; print(os.path.dirname(skimage.data.__file__))"],
                             capture_output=True, text=True, check=True).stdout.strip()
    face_set = os.path.join(work, "set")
    subprocess.run([sys.executable, os.path.join(ROOT, "Tests/PluginsTests/Fixtures/faces/make-face-set.py"), PHOTOS, skimage, face_set],
                   check=True)
    with open(os.path.join(face_set, "truth.json")) as f:
        truth = json.load(f)
    faces, smart = pipeline(work, "faces"), pipeline(work, "smart")

    # 1. The face set.
    files = [os.path.join(face_set, t["file"]) for t in truth]
    _, by_faces = run(faces, files, work)
    _, by_smart = run(smart, files, work)
    kf, n = kept(by_faces, truth)
    ks, _ = kept(by_smart, truth)
    print(f"face set: {len(truth)} images, {sum(len(t['faces']) for t in truth)} faces, {n} the square can hold")
    print(f"  gravity faces: {kf}/{n} kept whole ({kf / n:.1%}); gravity smart: {ks}/{n} ({ks / n:.1%})\n")

    # 2. 12 MP photos, one item at a time.
    small = os.path.join(work, "twelve-mp-small.jpg")
    image, _ = maker.composite(maker.background("coffee.png", skimage, 4000, 3000),
                               [("obama", 60, 1500, 1200), ("biden", 50, 1650, 1250), ("astronaut", 70, 1800, 1150)], PHOTOS, skimage)
    image.save(small, quality=90)
    print("| 12 MP photo | smart p50 | faces p50 | faces - smart | faces found |")
    print("|---|---|---|---|---|")
    full = "{ imagemagick: { shrink_on_load: false } }"
    for label, photo, extra, decoder in [
            ("faces >= 1/10 of short side", os.path.join(face_set, "twelve-mp.jpg"), "", "imagemagick"),
            ("faces of 50-70 px, defaults", small, "", "imagemagick"),
            ("faces of 50-70 px, detect_megapixels: 24", small, ", detect_megapixels: 24", "imagemagick"),
            ("faces of 50-70 px, detect_megapixels: 24, shrink_on_load: false", small, ", detect_megapixels: 24", full)]:
        # ROUNDS copies of the photo in one run, one worker: the time of each item, as a long
        # run or a service sees it (the detector's model is read once per process).
        copies = []
        for r in range(ROUNDS):
            copy = os.path.join(work, f"copy-{r}.jpg")
            shutil.copyfile(photo, copy)
            copies.append(copy)
        faces_extra = pipeline(work, "faces", extra, decoder)
        smart_same = pipeline(work, "smart", "", decoder)
        times, found = {}, 0
        for name, yaml in [("smart", smart_same), ("faces", faces_extra)]:
            _, data = run(yaml, copies, work, workers=1)
            times[name] = [sum(i.get("timings_ms", {}).values()) for i in data["items"]]
            if name == "faces":
                found = len(data["items"][0].get("facts", {}).get("faces", {}).get("boxes", []))
        ps, pf = statistics.median(times["smart"]), statistics.median(times["faces"])
        print(f"| {label} | {ps:.1f} ms | {pf:.1f} ms | {pf - ps:+.1f} ms | {found} |")

    # 2b. The same 12 MP photo with a face marked in XMP (MWG, as exiftool writes it): what
    # reading the regions costs, and what a marked face saves `gravity: faces` (no scan).
    marked = os.path.join(work, "twelve-mp-marked.jpg")
    shutil.copyfile(os.path.join(face_set, "twelve-mp.jpg"), marked)
    subprocess.run(["exiftool", "-q", "-overwrite_original",
                    "-XMP-mwg-rs:RegionInfo={RegionList=[{Area={X=0.5,Y=0.4,W=0.1,H=0.13,Unit=normalized},Type=Face}]}", marked], check=True)
    copies = []
    for r in range(ROUNDS):
        copy = os.path.join(work, f"marked-{r}.jpg")
        shutil.copyfile(marked, copy)
        copies.append(copy)
    p50 = {}
    for gravity in ["smart", "regions", "faces"]:
        _, data = run(pipeline(work, gravity), copies, work, workers=1)
        p50[gravity] = statistics.median(sum(i.get("timings_ms", {}).values()) for i in data["items"])
        rule = data["items"][0].get("facts", {}).get("crop", {}).get("rule")
        print(f"| 12 MP photo, a face marked in XMP | gravity {gravity} p50 {p50[gravity]:.1f} ms | "
              f"{p50[gravity] - p50['smart']:+.1f} ms over smart | rule {rule} |")

    # 3. The corpora: no faces.
    print("\n| group | images | smart: wall, items | faces: wall, items | faces / smart (wall, items) | faces reported |")
    print("|---|---|---|---|---|---|")
    worst = 0.0
    for index, (label, files) in enumerate(groups()):
        walls, items = {}, {}
        order = [("smart", smart), ("faces", faces)] if index % 2 == 0 else [("faces", faces), ("smart", smart)]
        for name, yaml in order:
            walls[name], data = run(yaml, files, work)
            items[name] = sum(sum(i.get("timings_ms", {}).values()) for i in data["items"]) / 1000
            if name == "faces":
                reported = sum(len(i.get("facts", {}).get("faces", {}).get("boxes", [])) for i in data["items"])
        worst = max(worst, items["faces"] / items["smart"])
        print(f"| {label} | {len(files)} | {walls['smart']:.2f} s, {items['smart']:.2f} s | {walls['faces']:.2f} s, {items['faces']:.2f} s | "
              f"{walls['faces'] / walls['smart']:.2f}x, {items['faces'] / items['smart']:.2f}x | {reported} |")
    print(f"\nworst group by items' time: {worst:.2f}x")
    shutil.rmtree(work)


if __name__ == "__main__":
    main()
