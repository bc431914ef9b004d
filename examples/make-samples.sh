#!/usr/bin/env bash
# Makes the sample images examples/urls.txt refers to, from ImageMagick's built-in images and
# generators (nothing is downloaded, nothing committed). Usage: examples/make-samples.sh [DIR]
set -eu
dir=${1:-"$(dirname "$0")/images"}
mkdir -p "$dir"
[ -f "$dir/.complete" ] && exit 0
convert rose: "$dir/rose.jpg"
convert logo: "$dir/logo.png"
convert wizard: "$dir/wizard.jpg"
convert -size 4000x3000 -seed 7 plasma:fractal -quality 90 "$dir/plasma-4000x3000.jpg"
convert -size 3000x4000 -seed 11 plasma:tomato-steelblue -quality 90 "$dir/plasma-portrait.jpg"
convert -size 1600x1200 xc:none -fill 'rgba(220,40,40,0.9)' -draw 'circle 800,600 800,150' \
        -fill 'rgba(40,90,220,0.6)' -draw 'rectangle 100,100 700,500' "$dir/alpha.png"
convert -size 640x480 gradient:navy-gold -fill white -draw 'rectangle 270,190 370,290' "$dir/banner.gif"
touch "$dir/.complete"
