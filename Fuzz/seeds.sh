#!/usr/bin/env bash
# Seed corpora for the fuzz targets (Fuzz/run.sh), made as the tests make their fixtures: from
# ImageMagick's built-in images (rose:, plasma:, gradient:, logo:) in every variant the decode
# paths branch on, small enough for libFuzzer's -max_len. Usage: Fuzz/seeds.sh DIR
set -euo pipefail
out=$1
mkdir -p "$out"/{sniffer,header-probe,png,jpeg,webp,heif,tiff,gif,svg,icc,exif,xmp-regions,jxl,video}
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
im() { convert "$@" 2>/dev/null || true; }
src="$tmp/src.png"; im -size 48x32 plasma:fractal -seed 7 "$src"; im rose: -resize 48x32 "$src"
alpha="$tmp/alpha.png"; im -size 48x32 xc:none -fill red -draw "rectangle 12,8 36,24" "$alpha"

# PNG: every colour type, 16 bits, palette with tRNS, interlaced, a profile, cut short.
im "$src" "$out/png/rgb.png"; im "$alpha" "$out/png/rgba.png"
im "$src" -colorspace Gray "$out/png/grey.png"; im "$alpha" -colorspace Gray "$out/png/grey-alpha.png"
im "$src" -depth 16 "PNG48:$out/png/rgb16.png"; im "$src" -colors 16 "PNG8:$out/png/palette.png"
im "$alpha" -colors 8 "PNG8:$out/png/palette-trns.png"; im "$src" -interlace PNG "$out/png/interlaced.png"
[ -f /usr/share/color/icc/ghostscript/srgb.icc ] && im "$src" -profile /usr/share/color/icc/ghostscript/srgb.icc "$out/png/icc.png"
head -c 600 "$out/png/rgb.png" > "$out/png/truncated.png"

# JPEG: baseline, progressive, grey, CMYK, EXIF orientations, restart markers, 4:4:4, cut short.
im "$src" -quality 85 "$out/jpeg/baseline.jpg"; im "$src" -interlace JPEG "$out/jpeg/progressive.jpg"
im "$src" -colorspace Gray "$out/jpeg/grey.jpg"; im "$src" -colorspace CMYK "$out/jpeg/cmyk.jpg"
im "$src" -orient RightTop "$out/jpeg/orient6.jpg"; im "$src" -define jpeg:restart-interval=1 "$out/jpeg/restart.jpg"
im "$src" -sampling-factor 1x1 "$out/jpeg/444.jpg"
[ -f /usr/share/color/icc/ghostscript/srgb.icc ] && im "$src" -profile /usr/share/color/icc/ghostscript/srgb.icc "$out/jpeg/icc.jpg"
head -c 700 "$out/jpeg/baseline.jpg" > "$out/jpeg/truncated.jpg"

# WebP: lossy, lossless, alpha, animated.
im "$src" -quality 80 "$out/webp/lossy.webp"; im "$src" -define webp:lossless=true "$out/webp/lossless.webp"
im "$alpha" "$out/webp/alpha.webp"; im -delay 10 "$src" "$alpha" -loop 0 "$out/webp/animated.webp"

# HEIF and AVIF (libheif's encoders, as the HEIF tests make theirs).
if command -v heif-enc >/dev/null; then
  heif-enc -q 50 -o "$out/heif/still.heic" "$src" >/dev/null 2>&1 || true
  heif-enc -q 50 -o "$out/heif/alpha.heic" "$alpha" >/dev/null 2>&1 || true
  heif-enc -A -q 50 -o "$out/heif/still.avif" "$src" >/dev/null 2>&1 || true
fi
command -v avifenc >/dev/null && avifenc -s 10 -q 50 "$alpha" "$out/heif/alpha.avif" >/dev/null 2>&1 || true

# TIFF: each compression, 16 bits, alpha, palette, grey, CMYK, BigTIFF, tiles, two pages.
im "$src" -compress Zip "$out/tiff/deflate.tif"; im "$src" -compress LZW "$out/tiff/lzw.tif"
im "$src" -compress JPEG "$out/tiff/jpeg.tif"; im "$src" -depth 16 "$out/tiff/rgb16.tif"
im "$alpha" "$out/tiff/alpha.tif"; im "$src" -colors 16 -type Palette "$out/tiff/palette.tif"
im "$src" -colorspace Gray "$out/tiff/grey.tif"; im "$src" -colorspace CMYK "$out/tiff/cmyk.tif"
im "$src" "TIFF64:$out/tiff/bigtiff.tif"; im "$src" -define tiff:tile-geometry=16x16 "$out/tiff/tiled.tif"
im "$src" "$alpha" "$out/tiff/pages.tif"; im "$src" -orient RightTop "$out/tiff/orient6.tif"

# GIF: still, transparent, interlaced, animated.
im "$src" "$out/gif/still.gif"; im "$alpha" "$out/gif/transparent.gif"
im "$src" -interlace GIF "$out/gif/interlaced.gif"; im -delay 10 "$src" "$alpha" -loop 0 "$out/gif/animated.gif"

# SVG: what the screen accepts and what it refuses.
printf '<svg xmlns="http://www.w3.org/2000/svg" width="40" height="30"><rect width="40" height="30" fill="red"/></svg>' > "$out/svg/plain.svg"
printf '<?xml version="1.0"?><!DOCTYPE svg [<!ENTITY x SYSTEM "file:///etc/passwd">]><svg xmlns="http://www.w3.org/2000/svg"><text>&x;</text></svg>' > "$out/svg/entity.svg"
printf '<svg xmlns="http://www.w3.org/2000/svg" xmlns:xlink="http://www.w3.org/1999/xlink" viewBox="0 0 10 5"><use xlink:href="#a"/><image href="text:/etc/passwd"/><rect style="fill:url(#g)"/></svg>' > "$out/svg/refs.svg"

# ICC profiles, version 2 ('desc') and 4 ('mluc'), as Ghostscript ships them.
cp /usr/share/color/icc/ghostscript/*.icc "$out/icc/" 2>/dev/null || true

# EXIF: blocks as a camera and exiftool write them (camera, dates, GPS, a thumbnail), in both byte
# orders, and TIFF files, whose first directory is their EXIF.
if command -v exiftool >/dev/null; then
  for order in II MM; do
    im "$src" "$tmp/exif-$order.jpg"
    exiftool -q -overwrite_original -ExifByteOrder=$order -Make=Canon -Model=R5 -Copyright=c -DateTimeOriginal="2026:01:02 03:04:05" \
      -GPSLatitude=48.8 -GPSLatitudeRef=N -Orientation#=6 "-ThumbnailImage<=$tmp/exif-$order.jpg" "$tmp/exif-$order.jpg" 2>/dev/null || true
    exiftool -b -EXIF "$tmp/exif-$order.jpg" > "$out/exif/camera-$order.exif" 2>/dev/null || true
  done
fi
im "$src" -resize 16x16 -compress none "$out/exif/small.tif"

# XMP regions as exiftool writes them: MWG (element and attribute forms), IPTC rectangle, circle
# and polygon in both units; an XMP-in-PNG file for the iTXt walker.
if command -v exiftool >/dev/null; then
  im "$src" "$tmp/regions.jpg"
  exiftool -q -overwrite_original '-XMP-mwg-rs:RegionInfo={AppliedToDimensions={W=48,H=32,Unit=pixel},RegionList=[{Area={X=0.5,Y=0.4,W=0.2,H=0.3,Unit=normalized},Name=A,Type=Face},{Area={X=0.1,Y=0.9,D=0.05,Unit=normalized},Type=Focus}]}' \
    '-XMP-iptcExt:ImageRegion=[{RegionBoundary={RbShape=rectangle,RbUnit=pixel,RbX=4,RbY=5,RbW=10,RbH=8},RCtype=[{Identifier=[http://cv.iptc.org/newscodes/imageregiontype/human]}]},{RegionBoundary={RbShape=circle,RbUnit=relative,RbX=0.5,RbY=0.5,RbRx=0.1}},{RegionBoundary={RbShape=polygon,RbUnit=relative,RbVertices=[{RbX=0.1,RbY=0.1},{RbX=0.3,RbY=0.2},{RbX=0.2,RbY=0.4}]}}]' \
    "$tmp/regions.jpg" 2>/dev/null || true
  exiftool -b -XMP "$tmp/regions.jpg" > "$out/xmp-regions/exiftool.xmp" 2>/dev/null || true
  im "$src" -resize 16x16 "$tmp/regions.png"
  exiftool -q -overwrite_original -tagsFromFile "$tmp/regions.jpg" '-XMP:all' "$tmp/regions.png" 2>/dev/null && cp "$tmp/regions.png" "$out/exif/xmp.png"
fi
printf '%s' "<x:xmpmeta xmlns:x='adobe:ns:meta/'><rdf:RDF xmlns:rdf='http://www.w3.org/1999/02/22-rdf-syntax-ns#'><rdf:Description xmlns:mwg-rs='http://www.metadataworkinggroup.com/schemas/regions/' xmlns:stArea='http://ns.adobe.com/xmp/sType/Area#'><mwg-rs:Regions><rdf:Description><mwg-rs:RegionList><rdf:Bag><rdf:li><rdf:Description mwg-rs:Type='Face'><mwg-rs:Area stArea:x='0.5' stArea:y='0.5' stArea:w='0.2' stArea:h='0.2'/></rdf:Description></rdf:li></rdf:Bag></mwg-rs:RegionList></rdf:Description></mwg-rs:Regions></rdf:Description></rdf:RDF></x:xmpmeta>" > "$out/xmp-regions/attributes.xmp"

# JPEG XL (libjxl's cjxl): lossy, lossless, alpha, 16-bit, a recompressed JPEG (a container with boxes).
if command -v cjxl >/dev/null; then
  cjxl "$src" "$out/jxl/lossy.jxl" -q 70 --quiet 2>/dev/null || true
  cjxl "$src" "$out/jxl/lossless.jxl" -d 0 --quiet 2>/dev/null || true
  cjxl "$alpha" "$out/jxl/alpha.jxl" -q 80 --quiet 2>/dev/null || true
  im "$src" -depth 16 "PNG48:$tmp/src16.png" && cjxl "$tmp/src16.png" "$out/jxl/sixteen.jxl" -d 0 --quiet 2>/dev/null || true
  cjxl "$out/jpeg/baseline.jpg" "$out/jxl/recompressed.jxl" --quiet 2>/dev/null || true
  [ -f "$out/jxl/lossy.jxl" ] && head -c 200 "$out/jxl/lossy.jxl" > "$out/jxl/truncated.jxl"
fi

# Video (the ffmpeg CLI): a second of each codec and container the poster path takes, tiny, one
# stored sideways, one with its index at the end, cut short.
if command -v ffmpeg >/dev/null; then
  v() { ffmpeg -hide_banner -loglevel error -y -f lavfi -i testsrc2=size=32x24:rate=10 -t 1 -g 5 -pix_fmt yuv420p "$@" 2>/dev/null || true; }
  v -c:v libx264 -preset ultrafast -movflags +faststart "$out/video/h264.mp4"
  v -c:v libx264 -preset ultrafast "$out/video/h264-index-last.mov"
  v -c:v libx265 -preset ultrafast -x265-params log-level=none "$out/video/hevc.mp4"
  v -c:v libvpx -b:v 200k "$out/video/vp8.webm"; v -c:v libvpx-vp9 -b:v 200k "$out/video/vp9.webm"
  v -c:v libaom-av1 -cpu-used 8 -b:v 200k "$out/video/av1.mkv"
  [ -f "$out/video/h264.mp4" ] && ffmpeg -hide_banner -loglevel error -y -i "$out/video/h264.mp4" -c copy -metadata:s:v:0 rotate=90 "$out/video/rotated.mp4" 2>/dev/null || true
  [ -f "$out/video/h264.mp4" ] && head -c 1500 "$out/video/h264.mp4" > "$out/video/truncated.mp4"
fi

# The sniffer and the header probe: one of everything, opt-in formats and documents too.
for f in "$out"/{png,jpeg,webp,heif,tiff,gif,svg,jxl,video}/*; do cp "$f" "$out/sniffer/"; cp "$f" "$out/header-probe/"; done
for fmt in bmp ico jp2 j2k ppm pgm pbm pam pfm tga pcx psd sgi sun; do
  im "$src" -resize 16x16 "$out/sniffer/seed.$fmt"; cp "$out/sniffer/seed.$fmt" "$out/header-probe/" 2>/dev/null || true
done
printf 'P1\n4 2\n1 0 1 0\n0 1 0 1\n' > "$out/sniffer/plain.pbm"
printf '<!doctype html><html><body>404</body></html>' > "$out/sniffer/page.html"
printf '%%PDF-1.4\n1 0 obj\n' > "$out/sniffer/doc.pdf"
printf 'push graphic-context\nviewbox 0 0 10 10\npop graphic-context\n' > "$out/sniffer/draw.mvg"
find "$out" -type f -empty -delete
