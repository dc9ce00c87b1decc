#!/usr/bin/env bash
# The whole hallpass test suite, as CI runs it (.ci/run calls this script).
# Run as root on Debian 12: it installs the packages it needs, builds once
# (debug) and runs every test target and the bypass matrix; then checks make install, the man
# pages, and the Debian packages made from that same build (the machine's and
# the server's): lintian, and both under a real systemd in a container
# (scripts/test-systemd.sh).
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/install-deps.sh

# The container's Debian root (about a minute of downloads, cached in
# .build/systemd-rootfs) is made while Swift builds.
mkdir -p .build
rootfs_log=.build/systemd-rootfs.log
setsid scripts/systemd-rootfs.sh >"$rootfs_log" 2>&1 &
rootfs_pid=$!
stop_rootfs() { kill -0 "$rootfs_pid" 2>/dev/null && kill -- "-$rootfs_pid" 2>/dev/null; true; }
trap stop_rootfs EXIT

swift build --build-tests
# Only filter-data links libnetfilter_queue, libmnl and libseccomp (readelf on the build's programs).
scripts/check-links.sh
# The unit tests in two runs (the school's server's, then the rest), then the integration tests one
# at a time. Tests that block a thread while they wait on real processes leave the others' async
# work waiting: on two cores the pool has two threads, and a wait of 30 s for a stand-in server or a
# child process then ran out (the integration tests took every thread; then, within one unit run,
# the machine side's blocking tests and the server's tests starved each other now and again).
swift test --skip-build --filter '^SchoolServerTests\.'
swift test --skip-build --skip '^(SchoolServerTests|IntegrationTests)\.'
swift test --skip-build --no-parallel --filter '^IntegrationTests\.'
# hallpass-server against docs/api/openapi.yaml: Schemathesis on a real server (SQLite, a temporary folder).
scripts/test-api.sh
# The soak's judge on crafted runs and how it finds filter-data (scripts/tests; no root needed).
PYTHONDONTWRITEBYTECODE=1 python3 -m pytest -q -p no:cacheprovider scripts/tests
# The README's first command with this build: no warning or error, and its status counts its traffic.
scripts/test-demo.sh
# Every way around the filter with real clients and servers (DoH, DoT, DoQ, the canary names, ECH,
# WireGuard, OpenVPN, SOCKS, CONNECT, unknown QUIC, SafeSearch, IP literals), blocked for one
# user and allowed for another by the school's policy; exits 1 when a row differs.
scripts/bypass-matrix.sh
# make install / uninstall into a staging folder, with the debug build above.
scripts/check-install.sh
scripts/generate-man.sh --check
# Unsafe code only in the files of scripts/unsafe-allowlist.txt (those that face the kernel or the mapped store).
scripts/check-unsafe.sh

wait "$rootfs_pid" || { cat "$rootfs_log" >&2; echo "test.sh: making the container's root file system failed" >&2; exit 1; }
# The packages from the debug build above (the machine's and the server's), linked again with the Swift runtime inside.
make -s deb-from-debug >.build/deb.log 2>&1 || { cat .build/deb.log >&2; echo "test.sh: make deb-from-debug failed" >&2; exit 1; }
version=$(dpkg-parsechangelog -S Version)_$(dpkg-architecture -qDEB_HOST_ARCH)
deb=dist/hallpass_$version.deb
server_deb=dist/hallpass-server_$version.deb
echo "lintian $deb $server_deb:"
lintian --fail-on error "$deb" "$server_deb"
scripts/test-systemd.sh "$deb" "$server_deb"
