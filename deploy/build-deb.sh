#!/usr/bin/env bash
# `make deb`: pipelinectl_VERSION_amd64.deb, from the release binary.
#
#   deploy/build-deb.sh BINARY OUTDIR
#
# Depends is what dpkg-shlibdeps computes from the binary's NEEDED libraries, plus the packages of
# deploy/runtime-packages it cannot see (libheif1, opened on first use; ca-certificates); a test
# checks that the two agree. The binary, the man page and the bash, zsh and fish completions are
# installed by deploy/install-files.sh, as `make install` does. The example pipelines go to
# /usr/share/doc/pipelinectl/examples.
# MAINTAINER overrides the Maintainer field.
set -euo pipefail
binary=$(realpath "$1")
out=$(realpath -m "$2")
repo=$(cd "$(dirname "$0")/.." && pwd)
[ -n "${MANUAL_TOOL:-}" ] || { echo "build-deb: set MANUAL_TOOL to swift-argument-parser's generate-manual" >&2; exit 1; }
maintainer=${MAINTAINER:-PipelineKit developers <pipelinectl@example.com>}

version=$("$binary" --version | sed -n '1s/^pipelinectl //p')
revision=$("$binary" --version | sed -n 's/^revision *//p')
[ -n "$version" ] || { echo "build-deb: $binary --version printed no version" >&2; exit 1; }
arch=$(dpkg --print-architecture)
date=$(date -R)

work=$(mktemp -d "${TMPDIR:-/tmp}/pipelinectl-deb.XXXXXX")
trap 'rm -rf "$work"' EXIT
root="$work/pipelinectl_${version}_$arch"
doc="$root/usr/share/doc/pipelinectl"
install -d "$root/DEBIAN" "$doc/examples/pipelines"
"$repo/deploy/install-files.sh" "$binary" "$root" /usr

# The example pipelines, and the sample list with the script that makes its images: laid out as in
# the repository, so that `pipelinectl run thumbnails urls.txt` works in a copy of the directory.
install -m 0644 "$repo"/pipelines/*.yaml "$doc/examples/pipelines/"
install -m 0644 "$repo/examples/urls.txt" "$doc/examples/urls.txt"
install -m 0755 "$repo/examples/make-samples.sh" "$doc/examples/make-samples.sh"
install -m 0644 "$repo/deploy/debian/copyright" "$doc/copyright"
install -D -m 0644 "$repo/deploy/debian/lintian-overrides" "$root/usr/share/lintian/overrides/pipelinectl"
printf 'pipelinectl (%s) unstable; urgency=medium\n\n  * Release %s, built from revision %s.\n\n -- %s  %s\n' \
    "$version" "$version" "$revision" "$maintainer" "$date" | gzip -9n > "$doc/changelog.gz"

# Depends: dpkg-shlibdeps reads a debian/control of a source package.
mkdir -p "$work/src/debian"
printf 'Source: pipelinectl\n\nPackage: pipelinectl\nArchitecture: any\n' > "$work/src/debian/control"
shlibs=$(cd "$work/src" && dpkg-shlibdeps -O -e"$root/usr/bin/pipelinectl" 2>/dev/null | sed -n 's/^shlibs:Depends=//p')
[ -n "$shlibs" ] || { echo "build-deb: dpkg-shlibdeps found no dependencies" >&2; exit 1; }
extra=""
for package in $(grep -v '^[[:space:]]*\(#\|$\)' "$repo/deploy/runtime-packages"); do
    case ", $shlibs," in *", $package "*|*", $package,"*) ;; *) extra="$extra, $package" ;; esac
done

cat > "$root/DEBIAN/control" <<CONTROL
Package: pipelinectl
Version: $version
Architecture: $arch
Maintainer: $maintainer
Installed-Size: $(du -sk --exclude=DEBIAN "$root" | cut -f1)
Depends: $shlibs$extra
Section: graphics
Priority: optional
Description: image pipelines declared in YAML: batch runs and an image service
 pipelinectl validates, runs and reports on image pipelines declared in YAML:
 loader, data cache, decoder, processors, image cache and encoder, each a
 plugin. It resizes lists of URLs and paths in batch (sharded, resumable,
 with JSON reports) and serves the same pipelines on request over HTTP
 (pipelinectl serve), with ImageMagick, libcurl and Debian's codecs.
CONTROL
(cd "$root" && find usr -type f -print0 | sort -z | xargs -0 md5sum) > "$root/DEBIAN/md5sums"

mkdir -p "$out"
dpkg-deb --root-owner-group -Zxz --build "$root" "$out/pipelinectl_${version}_$arch.deb" >/dev/null
echo "build-deb: $out/pipelinectl_${version}_$arch.deb ($(( $(stat -c %s "$out/pipelinectl_${version}_$arch.deb") / 1048576 )) MiB)"
echo "build-deb: install it with: sudo apt install $out/pipelinectl_${version}_$arch.deb"
