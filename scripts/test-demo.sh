#!/usr/bin/env bash
# The README's first command as a newcomer sees it: runs scripts/demo.sh
# with the programs of the debug build (HALLPASS_BIN, by default the one
# `swift build` made, which scripts/test.sh makes first; nothing is built
# here) and fails when
#   - the demo fails,
#   - a line of its output has the word "warning" or "error" (in any case,
#     as a word: the counters "netlink errors 0" and "0 file errors" of the
#     status are not messages): a first run shows none. The output has
#     every line filter-control logged from its start to its stop (the demo
#     shows them after the queue is bound, after the status and after the
#     stop), so what it says late is checked too,
#   - the packets figure of the `filterctl status` the demo shows is not a
#     number above zero: the figure a newcomer sees after the demo's
#     requests. That is all this proves: a health reply during the demo
#     (once a second) can make it non-zero too. That the status counts the
#     traffic just made is proven by
#     Tests/IntegrationTests/StatusIntegrationTests.swift.
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
# "   packets:     N seen, ..." in the status the demo shows after its
# requests: N must be above zero (see above for what that proves).
packets=$(awk '$1 == "packets:" { print $2; exit }' "$output")
if ! [[ "$packets" =~ ^[0-9]+$ ]] || [ "$packets" = 0 ]; then
    echo "test-demo: the filterctl status the demo shows says '${packets:-no packets line}' packets seen, not a number above zero" >&2
    failed=1
fi
if [ "$failed" = 1 ]; then
    echo "--- the demo's output:" >&2
    cat "$output" >&2
    exit 1
fi
echo "test-demo: scripts/demo.sh ran clean (filter-control's log included, up to its stop); the status it shows says $packets packets seen"
