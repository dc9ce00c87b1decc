#!/usr/bin/env bash
# Writes the man pages that come from the programs' own help:
# docs/man/filterctl.8, docs/man/filter-control.8 and docs/man/hallpass-server.8, made by
# swift-argument-parser's generate-manual (a few seconds on top of a debug
# build). filter-data(8) and hallpass.yaml(5) are written by hand.
#   scripts/generate-man.sh           write them (after changing a command's help)
#   scripts/generate-man.sh --check   exit 1 when the committed pages differ (CI)
# The pages carry the date of the newest debian/changelog entry, so that the
# same help always gives the same page.
set -euo pipefail
cd "$(dirname "$0")/.."
check=0
case "${1:-}" in
    --check) check=1 ;;
    "") ;;
    *) echo "generate-man: unknown option '$1' (use --check, or nothing)" >&2; exit 64 ;;
esac

for product in generate-manual filterctl filter-control hallpass-server; do
    log=$(swift build --product "$product" 2>&1) || { echo "$log" >&2; exit 1; }
done
bin=$(swift build --show-bin-path)
date=$(date -u -d "$(dpkg-parsechangelog -S Date)" +%Y-%m-%d)
out=$(mktemp -d)
programs="filterctl filter-control hallpass-server"
trap 'rm -rf "$out"' EXIT

for program in $programs; do
    "$bin/generate-manual" "$bin/$program" --section 8 --date "$date" --output-directory "$out" >/dev/null
    page=$out/$program.8
    # What generate-manual leaves to the reader of troff: a help line that
    # starts with an apostrophe is a control line (escape it), and a blank
    # line is a paragraph break (.Pp, or mdoc warns).
    sed -i -e "s/^'/\\\\\\&'/" -e 's/^$/.Pp/' "$page"
    if [ "$program" = filter-control ]; then
        # It has no subcommands, though the generator gives every command a "help" one.
        sed -i -e '/^\.Ar subcommand$/d' -e '/^\.It Em help$/,/^\.El$/d' "$page"
    fi
done

if [ "$check" = 1 ]; then
    status=0
    for program in $programs; do
        if ! diff -u "docs/man/$program.8" "$out/$program.8" >&2; then
            echo "generate-man: docs/man/$program.8 does not match $program's help: run scripts/generate-man.sh and commit the result" >&2
            status=1
        fi
    done
    [ "$status" = 0 ] && echo "generate-man: docs/man/filterctl.8, filter-control.8 and hallpass-server.8 match the programs' help"
    exit "$status"
fi
mkdir -p docs/man
for program in $programs; do cp "$out/$program.8" docs/man/; done
echo "generate-man: wrote docs/man/filterctl.8, docs/man/filter-control.8 and docs/man/hallpass-server.8"
