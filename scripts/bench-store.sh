#!/usr/bin/env bash
# Rule store and check benchmarks for BENCHMARKS.md (release build).
#   scripts/bench-store.sh [DOMAINS]     (default 5000000)
# Measures, on a synthetic list of DOMAINS names and on the UT1 lists in
# ../shared/testdata/ut1: compile time and peak memory, store bytes per
# name, open time, per-name lookup latency (median, p99) and
# 'filterctl check -' throughput. Writes everything to bench-out/.
set -euo pipefail
cd "$(dirname "$0")/.."
domains=${1:-5000000}
testdata=${HALLPASS_TESTDATA:-../shared/testdata}

scripts/install-deps.sh
command -v /usr/bin/time >/dev/null || { DEBIAN_FRONTEND=noninteractive apt-get install -y -qq time >/dev/null; }
swift build -c release --product filterctl 2>&1 | tail -1
swift build -c release --product hallpass-bench 2>&1 | tail -1
bin=$(swift build -c release --show-bin-path)
out=bench-out
rm -rf "$out" && mkdir -p "$out"

echo "# machine: $(nproc) cores, $(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo), $(uname -r), $(swift --version 2>&1 | head -1)"

measure_compile() {  # name, output store, sources...
    local name=$1 store=$2; shift 2
    /usr/bin/time -f "%e %M" -o "$out/$name.time" "$bin/filterctl" compile --quiet --out "$store" "$@" 2>"$out/$name.compile.log"
    read -r seconds kilobytes <"$out/$name.time"
    echo "compile $name: ${seconds} s wall, peak RSS $((kilobytes / 1024)) MiB"
    grep -E "names with domain rules|bytes per name|^wrote" "$out/$name.compile.log" | sed "s/^/  /"
}

measure_check() {  # name, store, queries
    local name=$1 store=$2 queries=$3
    local count; count=$(wc -l <"$queries")
    # Best of three runs of the whole batch.
    local best=""
    for _ in 1 2 3; do
        local start end
        start=$(date +%s%N)
        "$bin/filterctl" check --store "$store" - <"$queries" >/dev/null
        end=$(date +%s%N)
        local elapsed=$((end - start))
        if [ -z "$best" ] || [ "$elapsed" -lt "$best" ]; then best=$elapsed; fi
    done
    echo "check - $name: $count targets in $((best / 1000000)) ms = $((count * 1000000000 / best)) targets/s (best of 3)"
}

echo "## synthetic: $domains domains"
"$bin/hallpass-bench" generate --domains "$domains" --queries 1000000 --out "$out"
measure_compile synthetic "$out/synthetic.hpstore" "synthetic=$out/domains.txt"
"$bin/hallpass-bench" lookup --store "$out/synthetic.hpstore" --queries "$out/queries.txt"
measure_check synthetic "$out/synthetic.hpstore" "$out/queries.txt"

echo "## UT1 (current tree + the historical malware and phishing lists)"
cat "$testdata"/ut1/blacklists/*/domains >"$out/ut1-names.txt"
mkdir -p "$out/ut1q"
"$bin/hallpass-bench" generate --from "$out/ut1-names.txt" --domains 0 --queries 1000000 --out "$out/ut1q"
measure_compile ut1 "$out/ut1.hpstore" "$testdata/ut1/blacklists" "$testdata/ut1/historical-2025-07-13/blacklists"
"$bin/hallpass-bench" lookup --store "$out/ut1.hpstore" --queries "$out/ut1q/queries.txt"
measure_check ut1 "$out/ut1.hpstore" "$out/ut1q/queries.txt"
