#!/usr/bin/env bash
# Instructions per inspected packet and per parsed payload, counted by
# valgrind's callgrind (deterministic, unlike wall time on a shared machine):
#
#   scripts/bench-parsers.sh [HALLPASS_BENCH]
#
# inspect dns|http|wireguard: filter-data's inspection of one packet
# (hallpass-bench inspect, with the store in $STORE, by default
# bench-out/synthetic.hpstore from scripts/bench-store.sh); bypass
# tunnel|gquic|dns: the bypass parsers on the payloads of the shared captures
# (hallpass-bench bypass). Each is run with two round counts; the difference
# over the extra rounds leaves out start-up, building the packets and reading
# the captures. Given a hallpass-bench binary (another tree's release build),
# that one is measured, so two versions can be compared on the same inputs.
set -euo pipefail
cd "$(dirname "$0")/.."
testdata=${HALLPASS_TESTDATA:-../shared/testdata}
store=${STORE:-bench-out/synthetic.hpstore}
packets=${PACKETS:-2000}
# The same hash seed in every run: dictionary work then counts the same.
export SWIFT_DETERMINISTIC_HASHING=1

command -v valgrind >/dev/null || { DEBIAN_FRONTEND=noninteractive apt-get install -y -qq valgrind >/dev/null; }
if [ -n "${1:-}" ]; then
    bench=$1
else
    swift build -c release --product hallpass-bench 2>&1 | tail -1
    bench="$(swift build -c release --show-bin-path)/hallpass-bench"
fi
[ -f "$store" ] || { echo "bench-parsers.sh: no store at $store (scripts/bench-store.sh makes one, or set STORE)" >&2; exit 1; }
# Valgrind cannot read the Swift toolchain's debug information ("possibly corrupted debuginfo"): a stripped copy is measured.
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
strip -o "$scratch/hallpass-bench" "$bench"
bench=$scratch/hallpass-bench

# The instructions callgrind counted for one run of hallpass-bench.
instructions() {
    valgrind --tool=callgrind --callgrind-out-file=/dev/null "$bench" "$@" 2>&1 >/dev/null | awk '/Collected :/ {print $NF}'
}

# name, units per round (the count hallpass-bench prints), then its arguments without --rounds.
measure() {
    local name=$1; shift
    local units; units=$("$bench" "$@" --rounds 1 | sed -E 's/^[a-z]+ [a-z]+: ([0-9]+) .*/\1/')
    local one three
    one=$(instructions "$@" --rounds 1)
    three=$(instructions "$@" --rounds 3)
    echo "$name: $(((three - one) / (2 * units))) instructions per packet or payload ($units per round)"
}

for kind in dns http wireguard; do
    measure "inspect $kind" inspect --store "$store" --kind "$kind" --packets "$packets"
done
for kind in tunnel gquic dns; do
    measure "bypass $kind" bypass --testdata "$testdata" --kind "$kind"
done
