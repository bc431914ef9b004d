#!/usr/bin/env python3
"""Builds the marked-region test set (Tests/PluginsTests/RegionCropTests.swift), with exiftool.

Every picture is the same upright 600x400 scene: a grey noise background, a fine checkerboard on
the left (where a `smart` crop goes) and a red square at (470, 250, 60, 60) on the right, which
the regions mark. Each file stores the scene for an EXIF orientation (the pixels turned so that
a viewer that applies the orientation shows the scene upright) and marks the square in XMP as
exiftool writes it:

  mwg-O.jpg        O = 1..8: MWG mwg-rs:Regions (Type Focus, normalized centre), in upright terms
  mwg-stored-6.jpg orientation 6, the region drawn on the stored (unturned) picture, with
                   AppliedToDimensions saying so (tools that do not turn regions write this)
  iptc-O.jpg       O = 1, 6: IPTC Image Region, a rectangle in upright pixels, type human
  iptc-circle.png  a PNG (XMP in iTXt) with an IPTC circle in relative units
  mwg.webp         a WebP with the MWG region
  face-O.jpg       O = 1, 6: the square marked as an MWG Face (no face a detector could find)
Bad metadata, each with the scene upright and no usable region, or one good and one bad:
  malformed.webp   an XMP packet that is not well-formed XML (in a WebP: ImageMagick drops such a
                   packet from a JPEG or PNG itself, so it would not reach the region reader)
  malformed-jpeg.jpg the same in a JPEG
  outside.jpg      one region far outside the picture and the square
  many.png         10,000 regions (the square first), in a PNG: over what a JPEG segment holds
  entities.webp    a packet with a DTD that would expand entities a billion times
  no-area.jpg      an MWG region without an Area, and an IPTC one in 'furlong' units

Usage: make-region-set.py OUT_DIR. Writes OUT_DIR/* and OUT_DIR/truth.json (the square's box).
"""
import json
import os
import random
import subprocess
import sys

from PIL import Image, ImageDraw

W, H = 600, 400
SQUARE = (470, 250, 60, 60)
# What a viewer applies for each orientation, inverted: the stored picture of an upright one.
STORED = {
    1: None,
    2: Image.Transpose.FLIP_LEFT_RIGHT,
    3: Image.Transpose.ROTATE_180,
    4: Image.Transpose.FLIP_TOP_BOTTOM,
    5: Image.Transpose.TRANSPOSE,
    6: Image.Transpose.ROTATE_90,
    7: Image.Transpose.TRANSVERSE,
    8: Image.Transpose.ROTATE_270,
}


def scene():
    rng = random.Random(7)
    image = Image.new("RGB", (W, H))
    image.putdata([(g, g, g) for g in (rng.randint(110, 140) for _ in range(W * H))])
    draw = ImageDraw.Draw(image)
    for y in range(40, 360, 4):
        for x in range(20, 260, 4):
            if (x // 4 + y // 4) % 2 == 0:
                draw.rectangle([x, y, x + 3, y + 3], fill=(0, 0, 0))
            else:
                draw.rectangle([x, y, x + 3, y + 3], fill=(255, 255, 255))
    x, y, w, h = SQUARE
    draw.rectangle([x, y, x + w - 1, y + h - 1], fill=(230, 20, 20))
    return image


def save(image, path, orientation):
    stored = image.transpose(STORED[orientation]) if STORED[orientation] is not None else image
    exif = Image.Exif()
    exif[0x0112] = orientation
    if path.endswith(".png"):
        stored.save(path)
    elif path.endswith(".webp"):
        stored.save(path, quality=95)
    else:
        stored.save(path, quality=95, exif=exif.tobytes())


def exiftool(path, *arguments):
    subprocess.run(["exiftool", "-q", "-q", "-overwrite_original", *arguments, path], check=True)


def mwg(kind="Focus", box=SQUARE, size=(W, H)):
    x, y, w, h = box
    cx, cy = (x + w / 2) / size[0], (y + h / 2) / size[1]
    return ("-XMP-mwg-rs:RegionInfo={AppliedToDimensions={W=%d,H=%d,Unit=pixel},RegionList=[{Area={X=%.6f,Y=%.6f,W=%.6f,H=%.6f,Unit=normalized},Name=Square,Type=%s}]}"
            % (size[0], size[1], cx, cy, w / size[0], h / size[1], kind))


def iptc_rectangle():
    x, y, w, h = SQUARE
    return ("-XMP-iptcExt:ImageRegion=[{RegionBoundary={RbShape=rectangle,RbUnit=pixel,RbX=%d,RbY=%d,RbW=%d,RbH=%d},"
            "RId=square,RCtype=[{Identifier=[http://cv.iptc.org/newscodes/imageregiontype/human],Name=Human}]}]" % (x, y, w, h))


def packet(body, dtd=""):
    return ("<?xpacket begin='' id='W5M0MpCehiHzreSzNTczkc9d'?>" + dtd +
            "<x:xmpmeta xmlns:x='adobe:ns:meta/'><rdf:RDF xmlns:rdf='http://www.w3.org/1999/02/22-rdf-syntax-ns#'>"
            "<rdf:Description rdf:about='' xmlns:mwg-rs='http://www.metadataworkinggroup.com/schemas/regions/' "
            "xmlns:stArea='http://ns.adobe.com/xmp/sType/Area#' xmlns:Iptc4xmpExt='http://iptc.org/std/Iptc4xmpExt/2008-02-29/'>"
            + body + "</rdf:Description></rdf:RDF></x:xmpmeta><?xpacket end='w'?>")


def mwg_item(x, y, w, h, extra=""):
    # The short form: the structure's fields as attributes (as Picasa writes them).
    return ("<rdf:li><rdf:Description mwg-rs:Type='Focus'%s><mwg-rs:Area stArea:x='%g' stArea:y='%g' stArea:w='%g' stArea:h='%g' "
            "stArea:unit='normalized'/></rdf:Description></rdf:li>" % (extra, x, y, w, h))


def raw(path, text):
    xmp = path + ".xmp"
    with open(xmp, "w") as f:
        f.write(text)
    exiftool(path, "-XMP<=" + xmp)
    os.remove(xmp)


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    image = scene()
    for orientation in range(1, 9):
        path = os.path.join(out, "mwg-%d.jpg" % orientation)
        save(image, path, orientation)
        exiftool(path, mwg())
    path = os.path.join(out, "mwg-stored-6.jpg")
    save(image, path, 6)
    # The square in the stored picture (turned back a quarter): x' = y, y' = W - x - w.
    x, y, w, h = SQUARE
    exiftool(path, mwg(box=(y, W - x - w, h, w), size=(H, W)))
    for orientation in (1, 6):
        path = os.path.join(out, "iptc-%d.jpg" % orientation)
        save(image, path, orientation)
        exiftool(path, iptc_rectangle())
        path = os.path.join(out, "face-%d.jpg" % orientation)
        save(image, path, orientation)
        exiftool(path, mwg(kind="Face"))
    path = os.path.join(out, "iptc-circle.png")
    save(image, path, 1)
    exiftool(path, "-XMP-iptcExt:ImageRegion=[{RegionBoundary={RbShape=circle,RbUnit=relative,RbX=%.6f,RbY=%.6f,RbRx=%.6f}}]"
             % ((x + w / 2) / W, (y + h / 2) / H, (w / 2) / W))
    path = os.path.join(out, "mwg.webp")
    save(image, path, 1)
    exiftool(path, mwg())

    centre = ((x + w / 2) / W, (y + h / 2) / H, w / W, h / H)
    for path in (os.path.join(out, "malformed.webp"), os.path.join(out, "malformed-jpeg.jpg")):
        save(image, path, 1)
        raw(path, packet("<mwg-rs:Regions rdf:parseType='Resource'><mwg-rs:RegionList><rdf:Bag>" + mwg_item(*centre)).replace("</rdf:Description></rdf:RDF>", "</rdf:RDF>"))
    path = os.path.join(out, "outside.jpg")
    save(image, path, 1)
    raw(path, packet("<mwg-rs:Regions rdf:parseType='Resource'><mwg-rs:RegionList><rdf:Bag>" + mwg_item(1.7, 2.5, 0.1, 0.1)
                     + mwg_item(*centre) + "</rdf:Bag></mwg-rs:RegionList></mwg-rs:Regions>"))
    path = os.path.join(out, "many.png")
    save(image, path, 1)
    items = mwg_item(*centre) + "".join(mwg_item(0.05 + (i % 90) / 100, 0.05 + (i // 90 % 90) / 100, 0.01, 0.01) for i in range(9999))
    raw(path, packet("<mwg-rs:Regions rdf:parseType='Resource'><mwg-rs:RegionList><rdf:Bag>" + items + "</rdf:Bag></mwg-rs:RegionList></mwg-rs:Regions>"))
    path = os.path.join(out, "entities.webp")
    save(image, path, 1)
    dtd = "<!DOCTYPE x [<!ENTITY a 'aaaaaaaaaa'>" + "".join(
        "<!ENTITY %s '%s'>" % (chr(98 + i), ("&%s;" % chr(97 + i)) * 10) for i in range(9)) + "]>"
    raw(path, packet("<mwg-rs:Regions rdf:parseType='Resource'><mwg-rs:RegionList><rdf:Bag>" + mwg_item(*centre, extra=" mwg-rs:Name='&j;'")
                     + "</rdf:Bag></mwg-rs:RegionList></mwg-rs:Regions>", dtd))
    path = os.path.join(out, "no-area.jpg")
    save(image, path, 1)
    raw(path, packet("<mwg-rs:Regions rdf:parseType='Resource'><mwg-rs:RegionList><rdf:Bag><rdf:li><rdf:Description mwg-rs:Type='Face'/></rdf:li>"
                     "</rdf:Bag></mwg-rs:RegionList></mwg-rs:Regions><Iptc4xmpExt:ImageRegion><rdf:Bag><rdf:li rdf:parseType='Resource'>"
                     "<Iptc4xmpExt:RegionBoundary rdf:parseType='Resource'><Iptc4xmpExt:rbShape>rectangle</Iptc4xmpExt:rbShape>"
                     "<Iptc4xmpExt:rbUnit>furlong</Iptc4xmpExt:rbUnit><Iptc4xmpExt:rbX>1</Iptc4xmpExt:rbX><Iptc4xmpExt:rbY>1</Iptc4xmpExt:rbY>"
                     "<Iptc4xmpExt:rbW>1</Iptc4xmpExt:rbW><Iptc4xmpExt:rbH>1</Iptc4xmpExt:rbH></Iptc4xmpExt:RegionBoundary></rdf:li></rdf:Bag>"
                     "</Iptc4xmpExt:ImageRegion>"))
    with open(os.path.join(out, "truth.json"), "w") as f:
        json.dump({"width": W, "height": H, "square": list(SQUARE)}, f)


if __name__ == "__main__":
    main()
