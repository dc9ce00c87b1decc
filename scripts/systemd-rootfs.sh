#!/usr/bin/env bash
# Prints the path of a minimal Debian 12 root file system with a real
# systemd (what scripts/test-systemd.sh boots with systemd-nspawn), making it
# first when there is none yet. It is cached under .build/systemd-rootfs/,
# keyed by the suite and the package list below: changing either makes a new
# one (about 2 minutes, from the host's Debian archive) and removes the old.
# The test never changes it (it boots an overlay of it).
#
# On purpose it holds no library hallpass links: `apt-get install
# ./hallpass_*.deb` in the test must pull those through the package's
# Depends. (systemd and iptables bring libseccomp2 and libmnl0 with them;
# libnetfilter-queue1 comes only from hallpass's Depends.)
# Run as root.
set -euo pipefail
cd "$(dirname "$0")/.."

suite=bookworm
packages=systemd,systemd-sysv,dbus,iptables,iproute2,ca-certificates
# Bump when the way the root is made changes (not only the list).
recipe=1

key=$(printf '%s\n' "$suite" "$packages" "$recipe" | sha256sum | cut -c1-12)
cache=$PWD/.build/systemd-rootfs
root=$cache/$suite-$key
if [ -d "$root" ]; then
    echo "$root"
    exit 0
fi

[ "$(id -u)" = 0 ] || { echo "systemd-rootfs: needs root (debootstrap)" >&2; exit 77; }
command -v debootstrap >/dev/null || { echo "systemd-rootfs: debootstrap is missing (scripts/install-deps.sh installs it)" >&2; exit 1; }

# The host's Debian mirror (deb822 or one-line sources), else Debian's own.
mirror=$(sed -n 's/^URIs:[[:space:]]*\([^[:space:]]*\/debian\)\/\{0,1\}[[:space:]]*$/\1/p' /etc/apt/sources.list.d/*.sources 2>/dev/null | head -1)
[ -n "$mirror" ] || mirror=$(sed -n "s/^deb[[:space:]]\{1,\}\(\[[^]]*\][[:space:]]\{1,\}\)\{0,1\}\([^[:space:]]*\)[[:space:]]\{1,\}$suite[[:space:]].*/\2/p" /etc/apt/sources.list 2>/dev/null | head -1)
[ -n "$mirror" ] || mirror=http://deb.debian.org/debian

mkdir -p "$cache"
partial=$root.partial
rm -rf "$partial"
log=$cache/debootstrap.log
echo "systemd-rootfs: making a $suite root file system with $packages from $mirror (about 2 minutes; log $log)" >&2
if ! debootstrap --variant=minbase --include="$packages" "$suite" "$partial" "$mirror" >"$log" 2>&1; then
    tail -20 "$log" >&2
    echo "systemd-rootfs: debootstrap failed (full log: $log)" >&2
    rm -rf "$partial"
    exit 1
fi
# Nothing downloaded needs to stay: the test updates the package lists itself.
rm -rf "$partial"/var/cache/apt/archives/*.deb "$partial"/var/lib/apt/lists/*_Packages
# Only the newest root stays.
for old in "$cache"/*/; do
    old=${old%/}
    [ "$old" = "$partial" ] || rm -rf "$old"
done
mv "$partial" "$root"
echo "$root"
