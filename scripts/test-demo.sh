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
#   - the packets figure of the first `filterctl status` the demo shows is
#     not a number above zero: the figure a newcomer sees after the demo's
#     requests. That is all this proves: a health reply during the demo
#     (once a second) can make it non-zero too. That the status counts the
#     traffic just made is proven by
#     Tests/IntegrationTests/StatusIntegrationTests.swift,
#   - the records the demo reads back from the server are not blocked
#     records of both lab machines,
#   - www.distracting.example is not allowed on both machines before the
#     policy change and blocked on both after it,
#   - the update did not cost each machine the new policy file, or cost it
#     the store (a policy-only change fetches the policy and the manifest),
#   - the demo does not write the admin's digest PDF to test-artifacts/digest.pdf
#     (HTTP 200), or pdftotext does not find ben, the student whose poker
#     site raised an alert, in it,
#   - the console's part: the demo does not print the console's address, or
#     curl, run on the host, does not sign in as the admin (a 303 to the
#     console) and get the dashboard (200, which only a session gets: without
#     one it is a 303 to the sign-in page) showing the two machines and blocks
#     of the last hour, or does not sign in as the teacher and get the policy
#     page refused (403, the refusal's page),
#   - the filtering test the admin runs in the console is not answered by
#     both machines, or lets a name through, or the review's PDF is not in
#     test-artifacts/review.pdf with, in pdftotext's reading, the group
#     students and the test's result.
# Root, Debian 12 (as scripts/demo.sh); about 30 seconds.
set -euo pipefail
cd "$(dirname "$0")/.."

bin=${HALLPASS_BIN:-$(swift build --show-bin-path)}
for program in filterctl filter-control filter-data hallpass-server; do
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
# "   records at the server: N blocked, from lab1-pc01 and lab2-pc01"
if ! grep -q -E '^   records at the server: [1-9][0-9]* blocked, from lab1-pc01 and lab2-pc01$' "$output"; then
    echo "test-demo: the demo does not show blocked records of both lab machines at the server" >&2
    failed=1
fi
# The site's verdict on each machine before the change (the browsing) and after it.
section() { awk -v start="$1" -v stop="$2" 'index($0, start) == 1 { on = 1; next } on && index($0, stop) == 1 { exit } on' "$output"; }
before=$(section "== ada (a student) on lab1" "== the block page answers")
after=$(section "== the change is in force on both machines" "== filterctl status on lab2")
for lab in "lab1 ada" "lab2 ben"; do
    if ! grep -q -E "^   $lab +http://www.distracting.example/ +allowed:" <<<"$before"; then
        echo "test-demo: before the change, www.distracting.example is not shown allowed on ${lab% *}" >&2
        failed=1
    fi
    if ! grep -q -E "^   $lab +http://www.distracting.example/ +blocked:" <<<"$after"; then
        echo "test-demo: after the change, www.distracting.example is not shown blocked on ${lab% *}" >&2
        failed=1
    fi
done
# "   lab1: N bytes: manifest N, manifest.sig N, policy.yaml N"
for lab in lab1 lab2; do
    cost=$(grep -E "^   $lab: [0-9]+ bytes: " "$output" | tail -1)
    if [[ "$cost" != *"policy.yaml "[0-9]* ]] || [[ "$cost" == *"rules.hpstore "[0-9]* ]]; then
        echo "test-demo: the update's cost on $lab is '${cost:-not shown}': not the new policy without the store" >&2
        failed=1
    fi
done
# The console, reached from the host: its address, then one line for the
# admin's dashboard and one for the teacher's refused policy page.
if ! grep -q -F '== the console: https://10.82.0.2:8443/console/ ' "$output"; then
    echo "test-demo: the demo does not print the console's address" >&2
    failed=1
fi
console=$(section "== curl signs in as admin" "== stopping the demo")
if ! grep -q -E '^   sign-in: 303 https://10\.82\.0\.2:8443/console/; GET /console/: HTTP 200, the dashboard: 2 machines \(' <<<"$console" \
    || ! grep -q -E '^   sign-in: .*GET /console/: HTTP 200, .*; blocks in the last hour: [^n]' <<<"$console"; then
    echo "test-demo: curl did not sign in as the console's admin and get a dashboard with both machines and the last hour's blocks" >&2
    failed=1
fi
if ! grep -q -E '^   sign-in: 303 https://10\.82\.0\.2:8443/console/; GET /console/policy: HTTP 403, a page that says the role does not allow it$' <<<"$console"; then
    echo "test-demo: the teacher was not signed in and refused the policy page (403)" >&2
    failed=1
fi
# The teacher's room rule, set and ended in the console: in force on both machines, then gone.
focus=$(section "== ben (teacher of room lab) focuses the room" "== ben ends the room's rules")
ended=$(section "== ben ends the room's rules" "== ada asks for www.chess.com")
if ! grep -q -E '^   POST /console/rooms/lab/rules: 303 ' <<<"$focus" || ! grep -q -E '^   POST /console/rooms/lab/end: 303 ' <<<"$ended"; then
    echo "test-demo: the teacher's focus was not set and ended through the console's forms (303)" >&2
    failed=1
fi
for check in "focus:lab1 ada +http://lichess.org/ +blocked:" "focus:lab2 ben +http://www.chess.com/ +blocked:" \
    "focus:lab1 ada +http://www.wikipedia.org/ +allowed:" "ended:lab1 ada +http://lichess.org/ +allowed:" "ended:lab2 ben +http://www.chess.com/ +allowed:"; do
    part=${check%%:*}
    if ! grep -q -E "^   ${check#*:}" <<<"${!part}"; then
        echo "test-demo: with the room's focus ${part/focus/set}, not shown: ${check#*:}" >&2
        failed=1
    fi
done
if grep -q 'not in force on' <<<"$focus$ended"; then
    echo "test-demo: a room rule was not in force on a machine within 10 s" >&2
    failed=1
fi
# A student's request from the block page, approved in the console: the site loads for her.
asked=$(section "== ada asks for www.chess.com" "== stopping the demo")
if ! grep -q -E '^   POST http://www.chess.com/request-access as ada: HTTP 200$' <<<"$asked" \
    || ! grep -q -E '^   on ben.s room page: rq-' <<<"$asked" \
    || ! grep -q -E '^   POST /console/requests/rq-[a-z0-9]+/approve .*: 303 .*done=request-approved' <<<"$asked" \
    || ! grep -q -E '^   lab1 ada +http://www.chess.com/ +allowed:' <<<"$asked"; then
    echo "test-demo: the student's request was not taken, listed on the teacher's room page, approved there and in force on lab1" >&2
    failed=1
fi
# The annual review: the filtering test run in the console, answered by both machines with nothing let
# through, and the review's PDF in test-artifacts/, whose text names a group and the test's result.
review=$(section "== the annual review: the admin runs the filtering test" "== stopping the demo")
if ! grep -q -E '^   POST /console/filtering-tests: 303 .*/console/filtering-tests/ft-[a-z2-7]+\?done=filtering-test-started$' <<<"$review" \
    || ! grep -q -E '^   run [0-9]+ on bundle [0-9]+: 2 machine\(s\) answered, [1-9][0-9]* check\(s\)' <<<"$review" \
    || ! grep -q -E '^   checks that let through a name the policy blocks: 0$' <<<"$review"; then
    echo "test-demo: the filtering test was not started in the console, answered by both machines, or let a name through" >&2
    failed=1
fi
if ! grep -q -E '^   GET /console/review.pdf: HTTP 200, [1-9][0-9]* bytes$' <<<"$review" || [ ! -s test-artifacts/review.pdf ]; then
    echo "test-demo: the review's PDF was not written to test-artifacts/review.pdf" >&2
    failed=1
elif ! command -v pdftotext >/dev/null; then
    echo "test-demo: pdftotext is missing (poppler-utils; scripts/install-deps.sh installs it)" >&2
    failed=1
else
    text=$(pdftotext -layout test-artifacts/review.pdf - 2>&1 || true)
    if ! grep -q -E '^ *students +' <<<"$text" || ! grep -q -E 'Run [0-9]+, .*: 2 machine\(s\) answered; 0 check\(s\) let through' <<<"$text"; then
        echo "test-demo: the review's PDF does not name the group students and the filtering test's result:" >&2
        echo "$text" | head -60 >&2
        failed=1
    fi
fi
# The digest of the demo school, as a newcomer opens it: a PDF that names ben (his poker site is a gambling alert).
if ! grep -q -E '^   HTTP 200: [0-9]+ bytes in .*/test-artifacts/digest\.pdf$' "$output" || [ ! -s test-artifacts/digest.pdf ]; then
    echo "test-demo: the demo did not write the admin's digest PDF to test-artifacts/digest.pdf" >&2
    failed=1
elif ! pdftotext -layout test-artifacts/digest.pdf - | grep -q -w ben; then
    echo "test-demo: pdftotext does not find the student ben in test-artifacts/digest.pdf" >&2
    failed=1
fi
if [ "$failed" = 1 ]; then
    echo "--- the demo's output:" >&2
    cat "$output" >&2
    exit 1
fi
echo "test-demo: scripts/demo.sh ran clean (both filter-controls' logs included, up to their stop); the status it shows says $packets packets seen;"
echo "test-demo: both machines' records reached the server, and the policy change, which cost each the policy and the manifest, is in force on both;"
echo "test-demo: on the console, reached from the host, the admin signed in and got the dashboard, and the teacher was refused the policy page;"
echo "test-demo: the teacher's focus on the room, set in the console, was in force on both machines, and ending it let the sites through again;"
echo "test-demo: a student's request from the block page reached the teacher's room page and, approved there, opened the site for her"
echo "test-demo: the filtering test, run in the console, was answered by both machines with nothing let through, and the review's PDF names a group and the result"
echo "test-demo: the demo school's digest is in test-artifacts/digest.pdf and names the student whose poker site raised an alert"
