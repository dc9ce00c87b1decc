#!/usr/bin/env bash
# Checks `make install` and `make uninstall` into a staging folder (DESTDIR),
# with the debug build scripts/test.sh already made (SWIFTFLAGS= keeps make
# from starting a release build): every file lands where the README says,
# with its mode, the unit names the installed programs (and removes the
# kernel rules after filter-control), the man pages and completions are
# there, the installed configuration passes `filterctl config check`, a
# second install keeps an edited configuration, and uninstall removes the
# programs, man pages and completions but keeps the configuration and the
# rule folder.
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
# The programs are in the staging folder, not where the unit names them: those complaints are expected.
complaints=$({ systemd-analyze verify --man=no "$unit" 2>&1 || true; } |
    grep -v "Cannot add dependency job\|Command /usr/local/s\{0,1\}bin/filter[-a-z]* is not executable" || true)
[ -z "$complaints" ] || fail "systemd-analyze verify complains: $complaints"
for program in $(sed -n 's/^Exec[A-Za-z]*=-\{0,1\}\([^ ]*\).*/\1/p' "$unit"); do
    [ -x "$stage$program" ] || fail "the unit runs $program, which make install did not install"
done
grep -qx 'ExecStopPost=/usr/local/sbin/filter-control --remove-rules' "$unit" || fail "the unit does not remove the kernel rules after filter-control ends"
for file in usr/local/share/man/man8/filterctl.8 usr/local/share/man/man8/filter-control.8 usr/local/share/man/man8/filter-data.8 \
    usr/local/share/man/man5/hallpass.yaml.5 usr/local/share/bash-completion/completions/filterctl usr/local/share/zsh/site-functions/_filterctl; do
    [ -f "$stage/$file" ] || fail "$file is missing"
done
grep -q "^_filterctl()" "$stage/usr/local/share/bash-completion/completions/filterctl" || fail "the bash completion does not define _filterctl"
"$stage/usr/local/bin/filterctl" config check "$stage/etc/hallpass/hallpass.yaml" >/dev/null || fail "the installed configuration does not pass 'filterctl config check'"

# A second install keeps what the admin wrote.
echo "# edited by the admin" >>"$stage/etc/hallpass/hallpass.yaml"
make -s install SWIFTFLAGS= DESTDIR="$stage" >"$stage.log" 2>&1 || { cat "$stage.log" >&2; fail "the second make install failed"; }
grep -q "edited by the admin" "$stage/etc/hallpass/hallpass.yaml" || fail "make install overwrote the configuration"

make -s uninstall SWIFTFLAGS= DESTDIR="$stage" >"$stage.log" 2>&1 || { cat "$stage.log" >&2; fail "make uninstall failed"; }
[ ! -e "$stage/usr/local/sbin/filter-control" ] && [ ! -e "$unit" ] || fail "uninstall left programs or the unit behind"
[ -z "$(find "$stage/usr/local/share/man" "$stage/usr/local/share/bash-completion" "$stage/usr/local/share/zsh" -type f)" ] ||
    fail "uninstall left man pages or completions behind"
[ -f "$stage/etc/hallpass/hallpass.yaml" ] && [ -d "$stage/var/lib/hallpass" ] || fail "uninstall removed the configuration or the rules"
rm -f "$stage.log"
echo "check-install: make install and uninstall into a staging folder: ok"
