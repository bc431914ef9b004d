#!/usr/bin/env bash
# `make image`: the pipelinectl OCI image, built without a container engine from Debian's own tools.
#
#   deploy/build-image.sh BINARY OUTDIR
#
# mmdebstrap extracts the packages of deploy/runtime-packages and what they depend on (no shell, no
# package manager, no docs) into a root filesystem; we add the stripped binary, the example
# pipelines, a non-root user (10001, home /work) and what Debian's maintainer scripts would have made
# (the CA bundle, the dynamic linker's cache), then umoci packs it as one layer with the image
# config. Written to OUTDIR:
#   oci/                          an OCI image layout, tagged VERSION
#   pipelinectl-VERSION.oci.tar   the same as an OCI archive (podman load, skopeo, crane)
#   pipelinectl-VERSION.docker.tar  for `docker load`, named pipelinectl:VERSION
# The packages come from the Debian mirror apt uses (MIRROR overrides it).
set -euo pipefail
binary=$(realpath "$1")
out=$(realpath -m "$2")
repo=$(cd "$(dirname "$0")/.." && pwd)
mirror=${MIRROR:-$(sed -n 's/^URIs: *//p' /etc/apt/sources.list.d/debian.sources 2>/dev/null | head -1)}
mirror=${mirror:-http://deb.debian.org/debian}

version=$("$binary" --version | sed -n '1s/^pipelinectl //p')
revision=$("$binary" --version | sed -n 's/^revision *//p')
[ -n "$version" ] || { echo "build-image: $binary --version printed no version" >&2; exit 1; }
name="pipelinectl:$version"

work=$(mktemp -d "${TMPDIR:-/tmp}/pipelinectl-image.XXXXXX")
trap 'rm -rf "$work"' EXIT
rootfs="$work/rootfs"
packages=$(grep -v '^[[:space:]]*\(#\|$\)' "$repo/deploy/runtime-packages" | paste -sd, -)

echo "build-image: extracting $packages"
mmdebstrap --quiet --variant=extract --include="$packages" \
    --dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-include=/usr/share/doc/*/copyright' \
    --dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/info/*' \
    --dpkgopt='path-exclude=/usr/share/locale/*' --dpkgopt='path-exclude=/usr/share/lintian/*' \
    --skip=cleanup/apt/cache \
    bookworm "$rootfs" "$mirror"

# What the packages' maintainer scripts would have done (extract runs none), and a package list in
# distroless's format (var/lib/dpkg/status.d) so that image scanners see what is installed.
mkdir -p "$rootfs/var/lib/dpkg/status.d"
for deb in "$rootfs"/var/cache/apt/archives/*.deb; do
    package=$(dpkg-deb --field "$deb" Package)
    { dpkg-deb --field "$deb"; echo "Status: install ok installed"; } > "$rootfs/var/lib/dpkg/status.d/$package"
done
rm -rf "$rootfs"/var/cache/apt "$rootfs"/var/lib/apt "$rootfs"/etc/apt "$rootfs"/var/log/* \
       "$rootfs"/etc/resolv.conf "$rootfs"/etc/hostname "$rootfs"/usr/share/doc/*/changelog* \
       "$rootfs"/usr/share/man "$rootfs"/usr/share/info "$rootfs"/usr/share/locale "$rootfs"/usr/share/lintian
mkdir -p "$rootfs/etc/ssl/certs"
cat "$rootfs"/usr/share/ca-certificates/mozilla/*.crt > "$rootfs/etc/ssl/certs/ca-certificates.crt"
ldconfig -r "$rootfs"
printf 'root:x:0:0:root:/root:/usr/sbin/nologin\npipelinectl:x:10001:10001:pipelinectl:/work:/usr/sbin/nologin\nnobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n' > "$rootfs/etc/passwd"
printf 'root:x:0:\npipelinectl:x:10001:\nnogroup:x:65534:\n' > "$rootfs/etc/group"
printf 'passwd: files\ngroup: files\nhosts: files dns\n' > "$rootfs/etc/nsswitch.conf"
printf '127.0.0.1 localhost\n::1 localhost\n' > "$rootfs/etc/hosts"
mkdir -p "$rootfs"/{proc,sys,dev,root,work} && chmod 1777 "$rootfs/tmp" && chmod 700 "$rootfs/root"

install -m 0755 "$binary" "$rootfs/usr/bin/pipelinectl"
strip --strip-unneeded --remove-section=.comment "$rootfs/usr/bin/pipelinectl"
cp -r "$repo/pipelines" "$rootfs/work/pipelines"
chown -R 10001:10001 "$rootfs/work"

echo "build-image: packing $name"
oci="$work/oci"
created=$(date -u +%Y-%m-%dT%H:%M:%SZ)
umoci init --layout "$oci"
umoci new --image "$oci:$version"
umoci insert --image "$oci:$version" --history.created "$created" --history.created_by "deploy/build-image.sh" "$rootfs" /
umoci config --image "$oci:$version" --created "$created" --author "PipelineKit developers" \
    --os linux --architecture "$(dpkg --print-architecture)" \
    --config.user 10001:10001 --config.workingdir /work \
    --config.env PATH=/usr/local/bin:/usr/bin:/bin --config.env HOME=/work \
    --config.entrypoint /usr/bin/pipelinectl --config.cmd --help \
    --config.label org.opencontainers.image.title=pipelinectl \
    --config.label "org.opencontainers.image.description=Image pipelines declared in YAML: batch runs, an on-demand service" \
    --config.label org.opencontainers.image.version="$version" \
    --config.label org.opencontainers.image.revision="$revision" \
    --config.label org.opencontainers.image.created="$created" \
    --config.label org.opencontainers.image.base.name=debian:bookworm \
    --history.created "$created" --history.created_by "deploy/build-image.sh: image config"
umoci gc --layout "$oci"

mkdir -p "$out"
rm -rf "$out/oci" "$out/pipelinectl-$version.oci.tar" "$out/pipelinectl-$version.docker.tar"
cp -r "$oci" "$out/oci"
skopeo copy --quiet "oci:$oci:$version" "oci-archive:$out/pipelinectl-$version.oci.tar:$name"
skopeo copy --quiet "oci:$oci:$version" "docker-archive:$out/pipelinectl-$version.docker.tar:$name"

size=$(du -sb "$rootfs" | cut -f1)
compressed=$(stat -c %s "$out/pipelinectl-$version.oci.tar")
echo "build-image: $name: $((size / 1048576)) MiB unpacked, $((compressed / 1048576)) MiB compressed ($out/pipelinectl-$version.oci.tar)"
echo "build-image: load it with: docker load -i $out/pipelinectl-$version.docker.tar"
