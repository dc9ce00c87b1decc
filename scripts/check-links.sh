#!/usr/bin/env bash
# Only filter-data links the kernel's libraries: libnetfilter_queue (and its
# libnfnetlink) and libmnl for the NFQUEUE socket, libseccomp for the
# sandbox, all through the FilterDataKernel module. filterctl and
# filter-control run outside the sandbox (filter-control as root) and need
# none of them: a dependency that brings them back (FilterData importing a C
# module again, another target depending on FilterDataKernel) fails here,
# naming the program and the library. The other way round for libzstd:
# filterctl and filter-control link it, filter-data does not.
#
#   scripts/check-links.sh [BIN_DIR]     (default: the debug build's folder)
#
# Run by scripts/test.sh after the build; exits 1 on a wrong link.
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${1:-$(swift build --show-bin-path)}
kernel_libraries=(libnetfilter_queue libnfnetlink libmnl libseccomp)
# hallpass-proxy is sandboxed too (HallpassSandbox: libseccomp), with no queue.
queue_libraries=(libnetfilter_queue libnfnetlink libmnl)

needed() {  # the shared libraries a program names (readelf's NEEDED entries), one a line
    readelf -d "$1" | sed -n 's/.*(NEEDED).*\[\(.*\)\]$/\1/p'
}
links() {  # whether program $1 names library $2 (any version)
    needed "$bin/$1" | grep -q "^$2\.so"
}

status=0
for program in filterctl filter-control filter-data hallpass-proxy; do
    [ -x "$bin/$program" ] || { echo "check-links.sh: no $program in $bin (build first)" >&2; exit 66; }
done
for program in filterctl filter-control; do
    for library in "${kernel_libraries[@]}"; do
        if links "$program" "$library"; then
            echo "check-links.sh: $program links $library; only filter-data may (FilterDataKernel)" >&2
            status=1
        fi
    done
done
for library in "${queue_libraries[@]}"; do
    if links hallpass-proxy "$library"; then
        echo "check-links.sh: hallpass-proxy links $library; only filter-data may (FilterDataKernel)" >&2
        status=1
    fi
done
if ! links hallpass-proxy libseccomp; then
    echo "check-links.sh: hallpass-proxy does not link libseccomp: its sandbox is missing (HallpassSandbox)" >&2
    status=1
fi
# The other side: filter-data still links them, so the check above looks at real programs.
for library in "${kernel_libraries[@]}"; do
    if ! links filter-data "$library"; then
        echo "check-links.sh: filter-data does not link $library: is $bin a hallpass build?" >&2
        status=1
    fi
done
# libzstd, for bundle deltas (BundleDelta): filterctl makes them and filter-control
# applies them; the sandboxed filter-data reads only whole stores and never links it.
if links filter-data libzstd; then
    echo "check-links.sh: filter-data links libzstd; only filterctl and filter-control may (BundleDelta)" >&2
    status=1
fi
for program in filterctl filter-control; do
    if ! links "$program" libzstd; then
        echo "check-links.sh: $program does not link libzstd: is $bin a hallpass build?" >&2
        status=1
    fi
done
[ "$status" = 0 ] && echo "check-links.sh: filterctl and filter-control link none of ${kernel_libraries[*]}; filter-data links them; hallpass-proxy links libseccomp alone of them; only filterctl and filter-control link libzstd"
exit "$status"
