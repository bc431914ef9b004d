#!/usr/bin/env bash
# Makes the example catalog: three product images from ImageMagick's generators.
set -eu
cd "$(dirname "$0")"
mkdir -p catalog
convert -size 1200x900 -seed 3 plasma:fractal catalog/SKU-1001.jpg
convert -size 800x1000 gradient:teal-khaki catalog/SKU-1002.jpg
convert wizard: catalog/SKU-1003.png
