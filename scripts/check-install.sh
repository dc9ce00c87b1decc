#!/usr/bin/env bash
# Checks `make install` and `make uninstall` into a staging folder (DESTDIR),
# with the debug build scripts/test.sh already made (SWIFTFLAGS= keeps make
# from starting a release build): every file lands where the README says,
# with its mode, the unit names the installed programs, the installed
# configuration passes `filterctl config check`, a second install keeps an
# edited configuration, and uninstall removes the programs but keeps the
# configuration and the rule folder.
set -euo pipefail
cd "$(dirname "$0")/.."
stage=$(mktemp -d /tmp/hallpass-install.XXXXXX)
trap 'rm -rf "$stage"' EXIT
fail() { echo "check-install: $*" >&2; exit 1; }

make -s install SWIFTFLAGS= DESTDIR="$stage" >"$stage.log" 2>&1 || { cat "$stage.log" >&2; fail "make install failed"; }
for file in usr/local/bin/filterctl usr/local/sbin/filter-control usr/local/sbin/filter-data; do
    [ -x "$stage/$file" ] || fail "$file is missing or not executable"
done
[ "$(stat -c %a "$stage/etc/hallpass/hallpass.yaml")" = 644 ] || fail "the configuration is not mode 0644"
[ -d "$stage/var/lib/hallpass" ] || fail "the rule folder is missing"
[ -f "$stage/usr/local/share/doc/hallpass/README.md" ] || fail "the README is not installed"
unit="$stage/etc/systemd/system/hallpass.service"
grep -qx 'ExecStart=/usr/local/sbin/filter-control --config /etc/hallpass/hallpass.yaml' "$unit" || fail "the unit does not start the installed filter-control"
systemd-analyze verify "$unit" 2>&1 | grep -v "Cannot add dependency job\|/usr/local/sbin/filter-control" | grep . && fail "systemd-analyze verify complains"
"$stage/usr/local/bin/filterctl" config check "$stage/etc/hallpass/hallpass.yaml" >/dev/null || fail "the installed configuration does not pass 'filterctl config check'"

# A second install keeps what the admin wrote.
echo "# edited by the admin" >>"$stage/etc/hallpass/hallpass.yaml"
make -s install SWIFTFLAGS= DESTDIR="$stage" >"$stage.log" 2>&1 || { cat "$stage.log" >&2; fail "the second make install failed"; }
grep -q "edited by the admin" "$stage/etc/hallpass/hallpass.yaml" || fail "make install overwrote the configuration"

make -s uninstall SWIFTFLAGS= DESTDIR="$stage" >"$stage.log" 2>&1 || { cat "$stage.log" >&2; fail "make uninstall failed"; }
[ ! -e "$stage/usr/local/sbin/filter-control" ] && [ ! -e "$unit" ] || fail "uninstall left programs or the unit behind"
[ -f "$stage/etc/hallpass/hallpass.yaml" ] && [ -d "$stage/var/lib/hallpass" ] || fail "uninstall removed the configuration or the rules"
rm -f "$stage.log"
echo "check-install: make install and uninstall into a staging folder: ok"
