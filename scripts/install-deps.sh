#!/usr/bin/env bash
# Installs the Debian 12 packages hallpass needs to build and test.
# Idempotent: installs only what is missing. Needs root.
#   scripts/install-deps.sh           build, run and test (what CI needs)
#   scripts/install-deps.sh --build   build and run only (what `make install` and `make deb` need)
#   scripts/install-deps.sh --bypass-matrix   the tests' set and the servers and clients of scripts/bypass-matrix.sh
set -euo pipefail

packages=(
    # build: the C libraries filter-data talks to the kernel with, make for `make install`,
    # debhelper and dpkg-dev for `make deb`
    pkg-config libnetfilter-queue-dev libmnl-dev libseccomp-dev make debhelper dpkg-dev
    # build: libzstd for bundle deltas (filterctl and hallpass-server make them, filter-control applies them)
    libzstd-dev
    # run: kernel rules, and the address sets of the inspection proxy
    iptables iproute2 ipset
)
tests=1
matrix=0
case "${1:-}" in
    --build) tests=0 ;;
    --bypass-matrix) matrix=1 ;;
    "") ;;
    *) echo "install-deps: unknown option '$1' (use --build, --bypass-matrix, or nothing)" >&2; exit 64 ;;
esac
if [ "$tests" = 1 ]; then
    # integration tests: real servers and clients inside test namespaces
    packages+=(nginx-light curl openssl dnsmasq-base bind9-dnsutils)
    # the connection-tracking entries of the inspection proxy's connections (conntrack -L)
    packages+=(conntrack)
    # scripts/check-install.sh: systemd-analyze checks the unit
    packages+=(systemd)
    # the Debian package: lintian checks it, scripts/test-systemd.sh boots a Debian root
    # (debootstrap) with systemd-nspawn and installs it there, and lists the kernel's
    # whole rule set with nft after each stop
    packages+=(lintian systemd-container debootstrap nftables)
    # the block page in a real browser: Chromium, certutil for its NSS database, CJK fonts for the Korean screenshots
    packages+=(chromium libnss3-tools fonts-noto-cjk)
    # the console in a real browser: Chromium driven through Debian's chromedriver (WebDriver)
    packages+=(chromium-driver)
    # the inspection proxy in a second real browser: Firefox ESR, driven through its own Marionette
    packages+=(firefox-esr)
    # the audit log's collector (rsyslog in a test namespace) and the desktop notice (a real
    # session bus, and a listener that owns org.freedesktop.Notifications in Debian's python3)
    packages+=(rsyslog dbus-daemon python3-dbus python3-gi)
    # a reload filter-data refuses by itself: an ACL that shuts its user out of a rules folder
    packages+=(acl)
    # a step of the wall clock under filter-control (libfaketime fakes only its wall clock)
    packages+=(faketime)
    # hallpass-server's storage suite on PostgreSQL: a cluster the tests make with
    # initdb/pg_ctl in their own folder (Debian's server; its own cluster is not used)
    packages+=(postgresql)
    # hallpass-server's reports: pdfinfo and pdftotext read back the PDFs it writes
    packages+=(poppler-utils)
    # the alerts' delivery: msmtp as the sendmail command, and a real SMTP server
    # (aiosmtpd, for Debian's python3) writing a Maildir on loopback
    packages+=(msmtp python3-aiosmtpd)
fi
if [ "$matrix" = 1 ]; then
    # scripts/bypass-matrix.sh: DoH and DoT (dnsdist, kdig), OpenVPN, WireGuard in user space (the kernel
    # may lack its module), a SOCKS5 server, an HTTP CONNECT proxy, ping through the tunnel, tcpdump for
    # --capture, an SSH server (dropbear-bin: the programs alone, no service on the host) and
    # ssh-keyscan; DoQ comes from aioquic below
    packages+=(dnsdist knot-dnsutils openvpn wireguard-tools wireguard-go microsocks tinyproxy python3-venv iputils-ping tcpdump
               dropbear-bin openssh-client)
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
if [ "$matrix" = 1 ]; then
    # The bypass matrix runs its clients as test users, who cannot reach a Python under /root
    # (pyenv): aioquic in a virtualenv of Debian's own Python.
    bypass_venv=.build/bypass-venv
    if [ ! -x "$bypass_venv/bin/python" ] || ! "$bypass_venv/bin/python" -c "import aioquic" 2>/dev/null; then
        echo "install-deps: preparing $bypass_venv with aioquic (Debian's python3)"
        mkdir -p .build
        /usr/bin/python3 -m venv "$bypass_venv"
        "$bypass_venv/bin/pip" install -q --disable-pip-version-check "aioquic>=1.2,<2"
    fi
fi
# The metrics endpoint's test: a real Prometheus scrapes it in a test namespace and promtool
# (same package) checks its text. Debian's package is unpacked under .build, not installed:
# installing it would add a system user to the host and a service (both Go programs need
# only the C library).
prometheus_root=.build/prometheus
if [ ! -x "$prometheus_root/usr/bin/prometheus" ] || [ ! -x "$prometheus_root/usr/bin/promtool" ]; then
    echo "install-deps: unpacking Debian's prometheus into $prometheus_root"
    download=$(mktemp -d)
    (cd "$download" && apt-get download -qq prometheus >/dev/null 2>&1 || { apt-get update -qq && apt-get download -qq prometheus; })
    mkdir -p "$prometheus_root"
    dpkg-deb -x "$download"/prometheus_*.deb "$prometheus_root"
    rm -rf "$download"
fi
# The console's OpenID provider for the tests (scripts/lib/oidc-provider/run.sh): Django,
# django-oidc-provider and gunicorn from PyPI, pinned, in a virtualenv under .build.
oidc_venv=.build/oidc-provider-venv
oidc_requirements=scripts/lib/oidc-provider/requirements.txt
if [ ! -x "$oidc_venv/bin/python" ] || ! cmp -s "$oidc_requirements" "$oidc_venv/requirements.txt"; then
    echo "install-deps: preparing $oidc_venv with django-oidc-provider"
    python3 -m venv "$oidc_venv"
    "$oidc_venv/bin/pip" install -q --disable-pip-version-check -r "$oidc_requirements"
    cp "$oidc_requirements" "$oidc_venv/requirements.txt"
fi
# The QUIC peer of the integration tests: aioquic from PyPI, in a virtualenv under .build.
venv=.build/test-venv
if [ ! -x "$venv/bin/python" ] || ! "$venv/bin/python" -c "import aioquic" 2>/dev/null; then
    echo "install-deps: preparing $venv with aioquic"
    python3 -m venv "$venv"
    "$venv/bin/pip" install -q --disable-pip-version-check "aioquic>=1.2,<2"
fi
