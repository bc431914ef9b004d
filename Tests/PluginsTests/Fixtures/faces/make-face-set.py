#!/usr/bin/env python3
"""Builds the face test set (Tests/PluginsTests/FaceCropTests.swift) from public test photos.

Sources, none committed here:
  - face_recognition 1.3.0's sdist on PyPI (MIT), tests/test_images/: obama.jpg, obama2.jpg,
    obama3.jpg, biden.jpg (official White House photographs);
  - scikit-image 0.24's bundled data: astronaut.png (NASA, public domain) and the backgrounds
    grass.png, brick.png, gravel.png, coffee.png, rocket.jpg.

The face box in each source photo was written down by hand (eyebrows to chin, ear to ear), and
every image here is made from those photos at known scales and places, so each face's box in every
image is known. Usage: make-face-set.py FACE_RECOGNITION_TEST_IMAGES SKIMAGE_DATA OUT_DIR
It writes OUT_DIR/*.jpg and OUT_DIR/truth.json: for each image its file, its upright width and
height, its EXIF orientation, and its faces as [x, y, width, height] in upright pixels.
"""
import json
import os
import sys

from PIL import Image

# The face in each source photo: (file, x, y, width, height), in its pixels.
PORTRAITS = {
    "obama": ("obama.jpg", 366, 136, 259, 259),
    "obama2": ("obama2.jpg", 164, 302, 311, 310),
    "obama3": ("obama3.jpg", 646, 302, 310, 310),
    "biden": ("biden.jpg", 439, 233, 311, 310),
    "astronaut": ("astronaut.png", 176, 77, 90, 90),
}


def source(name, faces_dir, data_dir):
    file = PORTRAITS[name][0]
    path = os.path.join(data_dir if name == "astronaut" else faces_dir, file)
    return Image.open(path).convert("RGB")


def tile(name, faces_dir, data_dir):
    """Head and shoulders around the face, and the face's box inside it."""
    image = source(name, faces_dir, data_dir)
    _, x, y, w, h = PORTRAITS[name]
    left, top = max(0, int(x - 0.4 * w)), max(0, int(y - 0.6 * h))
    right, bottom = min(image.width, int(x + 1.4 * w)), min(image.height, int(y + 2.0 * h))
    return image.crop((left, top, right, bottom)), (x - left, y - top, w, h)


def background(file, data_dir, width, height):
    return Image.open(os.path.join(data_dir, file)).convert("RGB").resize((width, height), Image.BILINEAR)


def composite(canvas, people, faces_dir, data_dir):
    """Pastes each (portrait, face side, face x, face y): the face lands at that place and size."""
    faces, pieces = [], []
    for name, side, fx, fy in people:
        piece, (x, y, w, h) = tile(name, faces_dir, data_dir)
        scale = side / w
        piece = piece.resize((max(1, round(piece.width * scale)), max(1, round(piece.height * scale))), Image.LANCZOS)
        left, top = round(fx - x * scale), round(fy - y * scale)
        face = [round(fx), round(fy), round(w * scale), round(h * scale)]
        # A later piece must not cover an earlier face, and every face is inside the picture.
        for other in faces:
            if overlaps(other, [left, top, piece.width, piece.height]):
                raise SystemExit(f"{name} at {fx},{fy} covers the face at {other}")
        if face[0] < 0 or face[1] < 0 or face[0] + face[2] > canvas.width or face[1] + face[3] > canvas.height:
            raise SystemExit(f"{name} at {fx},{fy}: the face leaves the {canvas.width}x{canvas.height} picture")
        canvas.paste(piece, (left, top))
        faces.append(face)
    return canvas, faces


def overlaps(a, b):
    return a[0] < b[0] + b[2] and b[0] < a[0] + a[2] and a[1] < b[1] + b[3] and b[1] < a[1] + a[3]


# What turns an upright image into the stored one for each EXIF orientation (the inverse of what a
# viewer applies: 6 is shown turned 90 degrees clockwise, so it is stored turned counter-clockwise).
STORED = {
    2: [Image.FLIP_LEFT_RIGHT], 3: [Image.ROTATE_180], 4: [Image.FLIP_TOP_BOTTOM], 5: [Image.TRANSPOSE],
    6: [Image.ROTATE_90], 7: [Image.TRANSVERSE], 8: [Image.ROTATE_270],
}


def main():
    faces_dir, data_dir, out = sys.argv[1:4]
    os.makedirs(out, exist_ok=True)
    truth = []

    def save(name, image, faces, orientation=1, sources=()):
        stored = image
        for op in STORED.get(orientation, []):
            stored = stored.transpose(op)
        exif = Image.Exif()
        if orientation != 1:
            exif[0x0112] = orientation
        stored.save(os.path.join(out, name + ".jpg"), quality=90, exif=exif.tobytes())
        truth.append({"file": name + ".jpg", "width": image.width, "height": image.height,
                      "orientation": orientation, "faces": faces, "sources": list(sources)})

    # Single portraits as published: faces of 90 to 311 pixels, centred and high in the frame.
    for name in PORTRAITS:
        _, x, y, w, h = PORTRAITS[name]
        save("single-" + name, source(name, faces_dir, data_dir), [[x, y, w, h]], sources=[PORTRAITS[name][0]])

    # Groups: four faces of 110 to 150 pixels on a 1600x900 background, to one side of it.
    groups = [
        ("grass.png", [("obama", 140, 60, 260), ("biden", 120, 280, 330), ("astronaut", 130, 480, 250), ("obama2", 115, 680, 350)]),
        ("brick.png", [("obama3", 150, 720, 200), ("obama", 125, 950, 260), ("biden", 135, 1160, 220), ("astronaut", 110, 1380, 300)]),
        ("coffee.png", [("astronaut", 125, 80, 500), ("obama2", 140, 300, 460), ("obama3", 115, 520, 540), ("biden", 130, 720, 480)]),
        ("gravel.png", [("biden", 150, 700, 100), ("obama", 120, 930, 160), ("astronaut", 140, 1130, 120), ("obama3", 125, 1350, 150)]),
    ]
    for i, (file, people) in enumerate(groups, 1):
        image, faces = composite(background(file, data_dir, 1600, 900), people, faces_dir, data_dir)
        save(f"group-{i}", image, faces, sources=[file] + [PORTRAITS[p[0]][0] for p in people])

    # Small faces: 40 to 52 pixels in 480x360 pictures (found by scanning them at twice the size).
    smalls = [
        ("grass.png", [("obama", 44, 20, 60), ("biden", 40, 90, 90), ("astronaut", 48, 160, 50), ("obama2", 42, 230, 80), ("obama3", 46, 300, 70)]),
        ("brick.png", [("astronaut", 52, 150, 200), ("obama", 40, 230, 230), ("biden", 46, 300, 190), ("obama3", 44, 370, 250)]),
        ("coffee.png", [("obama2", 40, 130, 250), ("astronaut", 46, 195, 240), ("biden", 50, 265, 260), ("obama", 42, 345, 250), ("obama3", 48, 410, 230)]),
    ]
    for i, (file, people) in enumerate(smalls, 1):
        image, faces = composite(background(file, data_dir, 480, 360), people, faces_dir, data_dir)
        save(f"small-{i}", image, faces, sources=[file] + [PORTRAITS[p[0]][0] for p in people])

    # Off centre: a face at the far left of a panorama, and near the foot of a tall picture.
    image, faces = composite(background("rocket.jpg", data_dir, 2400, 800), [("obama", 170, 80, 250)], faces_dir, data_dir)
    save("panorama", image, faces, sources=["rocket.jpg", "obama.jpg"])
    image, faces = composite(background("grass.png", data_dir, 800, 2000), [("biden", 160, 560, 1500)], faces_dir, data_dir)
    save("tall", image, faces, sources=["grass.png", "biden.jpg"])

    # Every EXIF orientation (2-8) of one picture with two faces to its left: the stored pixels are
    # turned, the faces are where an upright view shows them.
    for orientation in range(2, 9):
        image, faces = composite(background("brick.png", data_dir, 1200, 800),
                                 [("obama3", 150, 60, 200), ("astronaut", 130, 280, 420)], faces_dir, data_dir)
        save(f"exif-{orientation}", image, faces, orientation=orientation, sources=["brick.png", "obama3.jpg", "astronaut.png"])

    # 12 MP: three faces of 320 to 420 pixels (a tenth of the short side and more), left of centre.
    image, faces = composite(background("coffee.png", data_dir, 4000, 3000),
                             [("obama", 420, 300, 900), ("biden", 360, 1100, 1100), ("astronaut", 320, 1900, 800)], faces_dir, data_dir)
    save("twelve-mp", image, faces, sources=["coffee.png", "obama.jpg", "biden.jpg", "astronaut.png"])

    with open(os.path.join(out, "truth.json"), "w") as f:
        json.dump(truth, f, indent=1)


if __name__ == "__main__":
    main()
