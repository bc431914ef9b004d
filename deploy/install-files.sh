#!/usr/bin/env bash
# Installs pipelinectl, its man page and its shell completions under a prefix: `make install` and
# the Debian package (deploy/build-deb.sh) both use it.
#
#   deploy/install-files.sh BINARY DESTDIR PREFIX
#
# BINARY is stripped on the way in. The man page is generated from the command's own help by
# swift-argument-parser's generate-manual (MANUAL_TOOL); completions by the binary itself. zsh's
# directory is Debian's vendor-completions under /usr and site-functions elsewhere, where zsh
# looks by default.
set -euo pipefail
binary=$1 destdir=${2%/} prefix=${3%/}
manual_tool=${MANUAL_TOOL:?set MANUAL_TOOL to swift-argument-parser\'s generate-manual}
root="$destdir$prefix"
zsh_dir=share/zsh/site-functions
[ "$prefix" = /usr ] && zsh_dir=share/zsh/vendor-completions
install -d "$root/bin" "$root/share/man/man1" "$root/share/bash-completion/completions" "$root/$zsh_dir" \
    "$root/share/fish/vendor_completions.d"

install -m 0755 "$binary" "$root/bin/pipelinectl"
strip --strip-unneeded --remove-section=.comment --remove-section=.note "$root/bin/pipelinectl"

# The manual, from the command's help. mdoc warns of empty lines (made paragraph breaks here) and
# takes a line starting with ' as a macro (escaped).
work=$(mktemp -d "${TMPDIR:-/tmp}/pipelinectl-man.XXXXXX")
trap 'rm -rf "$work"' EXIT
"$manual_tool" "$root/bin/pipelinectl" --date "$(date +%Y-%m-%d)" -o "$work"
sed -e 's/^$/.Pp/' -e "s/^'/\\\\\\&'/" "$work/pipelinectl.1" | gzip -9n > "$root/share/man/man1/pipelinectl.1.gz"

# bash sources its completions: no #! line.
"$root/bin/pipelinectl" --generate-completion-script bash | sed '1{/^#!/d}' > "$root/share/bash-completion/completions/pipelinectl"
"$root/bin/pipelinectl" --generate-completion-script zsh > "$root/$zsh_dir/_pipelinectl"
"$root/bin/pipelinectl" --generate-completion-script fish > "$root/share/fish/vendor_completions.d/pipelinectl.fish"
chmod 0644 "$root/share/bash-completion/completions/pipelinectl" "$root/$zsh_dir/_pipelinectl" \
    "$root/share/fish/vendor_completions.d/pipelinectl.fish"
