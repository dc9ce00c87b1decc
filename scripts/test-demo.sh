#!/usr/bin/env bash
# The README's first command as a newcomer sees it: runs scripts/demo.sh
# with the programs of the debug build (HALLPASS_BIN, by default the one
# `swift build` made, which scripts/test.sh makes first; nothing is built
# here) and fails when
#   - the demo fails,
#   - a line of its output has the word "warning" or "error" (in any case,
#     as a word: the counters "netlink errors 0" and "0 file errors" of the
#     status are not messages): a first run shows none,
#   - its `filterctl status` does not count the packets of the requests the
#     demo has just made.
# Root, Debian 12 (as scripts/demo.sh); about 15 seconds.
set -euo pipefail
cd "$(dirname "$0")/.."

bin=${HALLPASS_BIN:-$(swift build --show-bin-path)}
for program in filterctl filter-control filter-data; do
    [ -x "$bin/$program" ] || { echo "test-demo: no $program in $bin (build first: swift build)" >&2; exit 66; }
done
output=$(mktemp /tmp/hallpass-test-demo.XXXXXX)
trap 'rm -f "$output"' EXIT

status=0
HALLPASS_BIN=$bin scripts/demo.sh </dev/null >"$output" 2>&1 || status=$?
failed=0
if [ "$status" != 0 ]; then
    echo "test-demo: scripts/demo.sh exited $status" >&2
    failed=1
fi
if grep -i -n -w -E 'warning|error' "$output" >&2; then
    echo "test-demo: the lines above of the demo's output say warning or error" >&2
    failed=1
fi
# "   packets:     N seen, ..." in the status the demo shows after its requests.
packets=$(awk '$1 == "packets:" { print $2; exit }' "$output")
if ! [[ "$packets" =~ ^[0-9]+$ ]] || [ "$packets" = 0 ]; then
    echo "test-demo: filterctl status shows '${packets:-no packets line}' packets after the demo's requests" >&2
    failed=1
fi
if [ "$failed" = 1 ]; then
    echo "--- the demo's output:" >&2
    cat "$output" >&2
    exit 1
fi
echo "test-demo: scripts/demo.sh ran clean; filterctl status counted $packets packets"
