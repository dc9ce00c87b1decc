#!/usr/bin/env bash
# The whole hallpass test suite, as CI runs it (.ci/run calls this script).
# Run as root on Debian 12: it installs the packages it needs, builds once
# (debug) and runs every test target.
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/install-deps.sh
swift build --build-tests
swift test --skip-build
# make install / uninstall into a staging folder, with the debug build above.
scripts/check-install.sh
