#!/usr/bin/env bash
# Runs hallpass's libFuzzer targets (docs/fuzzing.md).
#
#   scripts/fuzz.sh [TARGET|all] [SECONDS]      fuzz each target for SECONDS (default 60)
#   scripts/fuzz.sh --runs N [TARGET|all]       fuzz each target for N executions instead
#   scripts/fuzz.sh --list                      the targets
#   scripts/fuzz.sh --build                     only build the fuzzer
#
# One fuzzer at a time, under nice -n 10, with a 2 GiB memory limit, so the
# machine stays usable. Corpora grow in fuzz-out/corpus/TARGET (seeded from
# ../shared/testdata and the built-in seeds on the first run), crash inputs
# land in fuzz-out/crashes/TARGET, logs in fuzz-out/logs. A summary line per
# target (executions, exec/s, coverage, crashes) goes to fuzz-out/summary.txt.
# Extra libFuzzer flags: HALLPASS_FUZZ_FLAGS="-only_ascii=1 ...".
set -euo pipefail
cd "$(dirname "$0")/.."

targets=(ip tls http stream quic dns capture control store manifest configuration blockpage templates policy tunnel gquic dnsbypass inspect)
testdata=$(cd "${HALLPASS_TESTDATA:-../shared/testdata}" 2>/dev/null && pwd || true)
out=fuzz-out
binary=.build-fuzz/release/hallpass-fuzz

runs=""
case "${1:-}" in
    --list) printf '%s\n' "${targets[@]}"; exit 0 ;;
    --runs) runs=${2:?--runs takes a number}; shift 2 ;;
esac
build_only=0
if [ "${1:-}" = "--build" ]; then build_only=1; fi

build() {
    # A scratch path of its own: the sanitizers instrument every module, dependencies included.
    (cd Fuzz && swift build -c release --scratch-path ../.build-fuzz -Xswiftc -sanitize=fuzzer,address 2>&1 | tail -3)
    [ -x "$binary" ] || { echo "fuzz.sh: the build did not produce $binary" >&2; exit 1; }
}
build
[ "$build_only" = 1 ] && exit 0

selected=${1:-all}
seconds=${2:-60}
if [ "$selected" = all ]; then selected_targets=("${targets[@]}"); else selected_targets=("$selected"); fi
mkdir -p "$out/logs"

# Inputs longer than the default 4 KiB for the formats that need them.
max_len() {
    case "$1" in
        capture) echo 65536 ;;
        store|configuration|templates) echo 16384 ;;
        *) echo 4096 ;;
    esac
}

for target in "${selected_targets[@]}"; do
    printf '%s\n' "${targets[@]}" | grep -qx "$target" || { echo "fuzz.sh: no target '$target' (--list)" >&2; exit 64; }
    corpus="$out/corpus/$target"
    crashes="$out/crashes/$target"
    mkdir -p "$corpus" "$crashes"
    # Leak checks are off: the Swift runtime and Foundation keep caches for the life of the process.
    # Swift's own backtracer is off: libFuzzer and ASan report a crash themselves, and the backtracer,
    # reading the crashed process's memory under ASan, was seen to hang, holding what the fuzzer held open.
    environment=(ASAN_OPTIONS="detect_leaks=0${ASAN_OPTIONS:+:$ASAN_OPTIONS}" SWIFT_BACKTRACE="enable=no" HALLPASS_FUZZ_TARGET="$target"
                 HALLPASS_TESTDATA="$testdata")
    # The first run writes the seeds into the corpus (the driver reads HALLPASS_FUZZ_SEEDS).
    if [ -z "$(ls -A "$corpus")" ]; then environment+=(HALLPASS_FUZZ_SEEDS="$corpus"); fi
    if [ -n "$runs" ]; then limit=(-runs="$runs"); else limit=(-max_total_time="$seconds"); fi
    log="$out/logs/$target.log"
    if [ -n "$runs" ]; then echo "== $target ($runs runs)"; else echo "== $target ($seconds s)"; fi
    status=0
    env "${environment[@]}" nice -n 10 "$binary" \
        -rss_limit_mb=2048 -timeout=10 -detect_leaks=0 -max_len="$(max_len "$target")" -print_final_stats=1 \
        -artifact_prefix="$crashes/" "${limit[@]}" ${HALLPASS_FUZZ_FLAGS:-} "$corpus" >"$log" 2>&1 || status=$?
    executions=$(awk '/stat::number_of_executed_units/ {print $2}' "$log" | tail -1 || true)
    rate=$(awk '/stat::average_exec_per_sec/ {print $2}' "$log" | tail -1 || true)
    coverage=$(grep -oE 'cov: [0-9]+ ft: [0-9]+' "$log" | tail -1 || true)
    # The scratch folders of fuzzers that are gone (one stopped by a signal or a crash skips its own removal).
    for scratch in /dev/shm/hallpass-fuzz-*; do
        [ -d "$scratch" ] && ! kill -0 "${scratch##*-}" 2>/dev/null && rm -rf "$scratch"
    done
    found=$(find "$crashes" -type f | wc -l)
    line="$target: ${executions:-?} executions, ${rate:-?} exec/s, ${coverage:-cov: ? ft: ?}, $found crash inputs, exit $status"
    echo "$line"
    echo "$(date -u +%FT%TZ) $line" >>"$out/summary.txt"
    if [ "$status" != 0 ]; then
        echo "fuzz.sh: $target stopped with status $status; the input is in $crashes, the report in $log" >&2
    fi
done
