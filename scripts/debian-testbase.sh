#!/usr/bin/env bash
# debian-testbase.sh: make (once) and print the path of a merged-/usr
# Debian minbase root filesystem, as an uncompressed tar layer, for the
# upstream fidelity corpus (ports/buildertest RunUpstreamCorpus).
#
# The tar is built with debootstrap --variant=minbase from Debian's own
# packages and cached; later runs print the cached path at once. Like the
# slim Debian container images, it leaves out apt's package cache and
# lists, documentation, man pages and locales. Needs root and a Debian
# mirror; installs debootstrap with apt-get when it is missing. About a
# minute on a fresh machine.
#
# Environment:
#   CUBE_TEST_DEBIAN_SUITE   suite (default bookworm)
#   CUBE_TEST_DEBIAN_MIRROR  mirror (default http://deb.debian.org/debian)
#   CUBE_TEST_CACHE_DIR      cache directory (default
#                            ${XDG_CACHE_HOME:-/var/cache}/cube-templatecenter)
set -euo pipefail

suite=${CUBE_TEST_DEBIAN_SUITE:-bookworm}
mirror=${CUBE_TEST_DEBIAN_MIRROR:-http://deb.debian.org/debian}
cache=${CUBE_TEST_CACHE_DIR:-${XDG_CACHE_HOME:-/var/cache}/cube-templatecenter}
arch=$(dpkg --print-architecture 2>/dev/null || echo amd64)
out="$cache/debian-$suite-minbase-$arch.tar"

if [[ -s $out ]]; then
	echo "$out"
	exit 0
fi
if [[ $(id -u) != 0 ]]; then
	echo "debian-testbase: debootstrap needs root" >&2
	exit 1
fi
if ! command -v debootstrap >/dev/null; then
	echo "debian-testbase: installing debootstrap" >&2
	DEBIAN_FRONTEND=noninteractive apt-get install -y -q debootstrap >&2 ||
		{ apt-get update -q >&2 && DEBIAN_FRONTEND=noninteractive apt-get install -y -q debootstrap >&2; }
fi

mkdir -p "$cache"
work=$(mktemp -d "$cache/.debootstrap-XXXXXX")
trap 'rm -rf "$work"' EXIT
echo "debian-testbase: debootstrap $suite from $mirror (about a minute)" >&2
if ! debootstrap --variant=minbase --merged-usr "$suite" "$work/root" "$mirror" >"$work/log" 2>&1; then
	tail -n 30 "$work/log" >&2
	exit 1
fi
root="$work/root"
rm -rf "$root"/var/cache/apt/* "$root"/var/lib/apt/lists/* "$root"/var/log/*.log \
	"$root"/usr/share/doc/* "$root"/usr/share/man/* "$root"/usr/share/info/* "$root"/usr/share/locale/*
# Numeric owners, names sorted, xattrs kept: the layer an image builder
# would have written.
tar --numeric-owner --xattrs --xattrs-include='*' --sort=name -C "$root" -cf "$work/base.tar" .
mv "$work/base.tar" "$out"
echo "$out"
