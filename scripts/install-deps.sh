#!/usr/bin/env bash
# Installs the Debian 12 packages hallpass needs to build and test.
# Idempotent: installs only what is missing. Needs root.
set -euo pipefail

packages=(
    # build: the C libraries filter-data talks to the kernel with
    pkg-config libnetfilter-queue-dev libmnl-dev libseccomp-dev
    # run: kernel rules and network namespaces
    iptables iproute2
)

missing=()
for package in "${packages[@]}"; do
    dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed" || missing+=("$package")
done
if [ "${#missing[@]}" -gt 0 ]; then
    if [ "$(id -u)" != 0 ]; then
        echo "install-deps: these Debian packages are missing: ${missing[*]}; run as root to install them" >&2
        exit 1
    fi
    echo "install-deps: installing ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
command -v swift >/dev/null || { echo "install-deps: swift is not on PATH (Swift 6.1 or later is needed)" >&2; exit 1; }
