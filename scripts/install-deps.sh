#!/usr/bin/env bash
# Installs the Debian 12 packages hallpass needs to build and test.
# Idempotent: installs only what is missing. Needs root.
#   scripts/install-deps.sh           build, run and test (what CI needs)
#   scripts/install-deps.sh --build   build and run only (what `make install` needs)
set -euo pipefail

packages=(
    # build: the C libraries filter-data talks to the kernel with, and make for `make install`
    pkg-config libnetfilter-queue-dev libmnl-dev libseccomp-dev make
    # run: kernel rules
    iptables iproute2
)
tests=1
case "${1:-}" in
    --build) tests=0 ;;
    "") ;;
    *) echo "install-deps: unknown option '$1' (use --build, or nothing)" >&2; exit 64 ;;
esac
if [ "$tests" = 1 ]; then
    # integration tests: real servers and clients inside test namespaces
    packages+=(nginx-light curl openssl dnsmasq-base bind9-dnsutils)
    # scripts/check-install.sh: systemd-analyze checks the unit
    packages+=(systemd)
    # the block page in a real browser: Chromium, certutil for its NSS database, CJK fonts for the Korean screenshots
    packages+=(chromium libnss3-tools fonts-noto-cjk)
fi

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
    # Keep packaged services (nginx) from starting on the host: tests start their own.
    policy=/usr/sbin/policy-rc.d
    created_policy=0
    if [ ! -e "$policy" ]; then
        printf '#!/bin/sh\nexit 101\n' >"$policy" && chmod +x "$policy" && created_policy=1
    fi
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
    [ "$created_policy" = 1 ] && rm -f "$policy"
fi
command -v swift >/dev/null || { echo "install-deps: swift is not on PATH (Swift 6.2 or later is needed: the parsers use Span)" >&2; exit 1; }
[ "$tests" = 1 ] || exit 0
# The QUIC peer of the integration tests: aioquic from PyPI, in a virtualenv under .build.
venv=.build/test-venv
if [ ! -x "$venv/bin/python" ] || ! "$venv/bin/python" -c "import aioquic" 2>/dev/null; then
    echo "install-deps: preparing $venv with aioquic"
    python3 -m venv "$venv"
    "$venv/bin/pip" install -q --disable-pip-version-check "aioquic>=1.2,<2"
fi
