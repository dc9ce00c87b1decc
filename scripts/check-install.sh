#!/usr/bin/env bash
# Checks `make install` and `make uninstall` into a staging folder (DESTDIR),
# with the debug build scripts/test.sh already made (SWIFTFLAGS= keeps make
# from starting a release build): every file lands where the README says,
# with its mode, the unit names the installed programs (and removes the
# kernel rules after filter-control), filter-data's user is in sysusers.d
# (and systemd-sysusers makes it from that file), the man pages and completions are
# there, hallpass's own protection lists are where the installed filterctl finds
# them, the installed configuration passes `filterctl config check`, a
# second install keeps an edited configuration, and uninstall removes the
# programs, man pages and completions but keeps the configuration and the
# rule folder; and the same for make install-server / uninstall-server (the
# school's server: its program, unit, user, man page, document and server.yaml).
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
# filter-data's user: the file systemd-sysusers reads (a staged install runs nothing), and what it makes.
sysusers="$stage/etc/sysusers.d/hallpass.conf"
[ "$(stat -c %a "$sysusers" 2>/dev/null)" = 644 ] || fail "filter-data's user is not in etc/sysusers.d/hallpass.conf (mode 0644)"
mkdir -p "$stage/sysroot/etc"
: >"$stage/sysroot/etc/passwd"
: >"$stage/sysroot/etc/group"
systemd-sysusers --root="$stage/sysroot" "$sysusers" >/dev/null 2>&1 || fail "systemd-sysusers refuses $sysusers"
grep -q '^_hallpass:x:[1-9][0-9]*:[1-9][0-9]*:[^:]*:/nonexistent:/usr/sbin/nologin$' "$stage/sysroot/etc/passwd" ||
    fail "systemd-sysusers did not make _hallpass as a system user with no home and no shell: $(cat "$stage/sysroot/etc/passwd")"
rm -rf "$stage/sysroot"
for file in usr/local/share/man/man8/filterctl.8 usr/local/share/man/man8/filter-control.8 usr/local/share/man/man8/filter-data.8 \
    usr/local/share/man/man5/hallpass.yaml.5 usr/local/share/bash-completion/completions/filterctl usr/local/share/zsh/site-functions/_filterctl; do
    [ -f "$stage/$file" ] || fail "$file is missing"
done
grep -q "^_filterctl()" "$stage/usr/local/share/bash-completion/completions/filterctl" || fail "the bash completion does not define _filterctl"
"$stage/usr/local/bin/filterctl" config check "$stage/etc/hallpass/hallpass.yaml" >/dev/null || fail "the installed configuration does not pass 'filterctl config check'"
# hallpass's own protection lists, where the installed filterctl reads them (docs/bypass.md): a store of UT1 lists alone gets them.
for file in doh/domains doh/COPYING.GPL-3.0 ech-front/domains; do
    [ "$(stat -c %a "$stage/usr/local/share/hallpass/bypass/$file" 2>/dev/null)" = 644 ] || fail "share/hallpass/bypass/$file is missing or not mode 0644"
done
compiled=$("$stage/usr/local/bin/filterctl" compile --quiet --out "$stage/ut1.hpstore" rules/ut1 2>&1) || fail "the installed filterctl cannot compile rules/ut1: $compiled"
grep -qF "with hallpass's own protections ($stage/usr/local/share/hallpass/bypass)" <<<"$compiled" ||
    fail "the installed filterctl does not add the lists of share/hallpass/bypass: $compiled"
rm -f "$stage/ut1.hpstore"

# A second install keeps what the admin wrote.
echo "# edited by the admin" >>"$stage/etc/hallpass/hallpass.yaml"
make -s install SWIFTFLAGS= DESTDIR="$stage" >"$stage.log" 2>&1 || { cat "$stage.log" >&2; fail "the second make install failed"; }
grep -q "edited by the admin" "$stage/etc/hallpass/hallpass.yaml" || fail "make install overwrote the configuration"

make -s uninstall SWIFTFLAGS= DESTDIR="$stage" >"$stage.log" 2>&1 || { cat "$stage.log" >&2; fail "make uninstall failed"; }
[ ! -e "$stage/usr/local/sbin/filter-control" ] && [ ! -e "$unit" ] && [ ! -e "$sysusers" ] || fail "uninstall left programs, the unit or the sysusers file behind"
[ ! -e "$stage/usr/local/share/hallpass" ] || fail "uninstall left share/hallpass behind"
[ -z "$(find "$stage/usr/local/share/man" "$stage/usr/local/share/bash-completion" "$stage/usr/local/share/zsh" -type f)" ] ||
    fail "uninstall left man pages or completions behind"
[ -f "$stage/etc/hallpass/hallpass.yaml" ] && [ -d "$stage/var/lib/hallpass" ] || fail "uninstall removed the configuration or the rules"

# The school's server: make install-server / uninstall-server into the same staging folder.
make -s install-server SWIFTFLAGS= DESTDIR="$stage" >"$stage.log" 2>&1 || { cat "$stage.log" >&2; fail "make install-server failed"; }
[ -x "$stage/usr/local/sbin/hallpass-server" ] || fail "install-server did not install usr/local/sbin/hallpass-server"
for file in etc/hallpass/server.yaml etc/sysusers.d/hallpass-server.conf etc/systemd/system/hallpass-server.service \
    usr/local/share/man/man8/hallpass-server.8 usr/local/share/doc/hallpass-server/server.md; do
    [ "$(stat -c %a "$stage/$file" 2>/dev/null)" = 644 ] || fail "install-server: $file is missing or not mode 0644"
done
server_unit="$stage/etc/systemd/system/hallpass-server.service"
grep -qx 'ExecStart=/usr/local/sbin/hallpass-server serve --config /etc/hallpass/server.yaml' "$server_unit" || fail "the server's unit does not start the installed hallpass-server"
complaints=$({ systemd-analyze verify --man=no "$server_unit" 2>&1 || true; } |
    grep -v "Cannot add dependency job\|Command /usr/local/sbin/hallpass-server is not executable" || true)
[ -z "$complaints" ] || fail "systemd-analyze verify complains about the server's unit: $complaints"
mkdir -p "$stage/sysroot/etc"
: >"$stage/sysroot/etc/passwd"
: >"$stage/sysroot/etc/group"
systemd-sysusers --root="$stage/sysroot" "$stage/etc/sysusers.d/hallpass-server.conf" >/dev/null 2>&1 || fail "systemd-sysusers refuses hallpass-server.conf"
grep -q '^_hallpass-server:x:[1-9][0-9]*:[1-9][0-9]*:[^:]*:/nonexistent:/usr/sbin/nologin$' "$stage/sysroot/etc/passwd" ||
    fail "systemd-sysusers did not make _hallpass-server as a system user with no home and no shell: $(cat "$stage/sysroot/etc/passwd")"
rm -rf "$stage/sysroot"
# The commented server.yaml is every default: the installed program takes it (and finds no TLS pair in this empty state).
out=$("$stage/usr/local/sbin/hallpass-server" fingerprint --config "$stage/etc/hallpass/server.yaml" 2>&1) && fail "fingerprint found a TLS pair it should not: $out"
grep -q "server configuration" <<<"$out" && fail "the installed server.yaml does not parse: $out"
echo "# edited by the admin" >>"$stage/etc/hallpass/server.yaml"
make -s install-server SWIFTFLAGS= DESTDIR="$stage" >"$stage.log" 2>&1 || { cat "$stage.log" >&2; fail "the second make install-server failed"; }
grep -q "edited by the admin" "$stage/etc/hallpass/server.yaml" || fail "make install-server overwrote server.yaml"
make -s uninstall-server SWIFTFLAGS= DESTDIR="$stage" >"$stage.log" 2>&1 || { cat "$stage.log" >&2; fail "make uninstall-server failed"; }
[ ! -e "$stage/usr/local/sbin/hallpass-server" ] && [ ! -e "$server_unit" ] && [ ! -e "$stage/etc/sysusers.d/hallpass-server.conf" ] &&
    [ ! -e "$stage/usr/local/share/man/man8/hallpass-server.8" ] && [ ! -e "$stage/usr/local/share/doc/hallpass-server" ] ||
    fail "uninstall-server left the program, the unit, the sysusers file, the man page or the document behind"
[ -f "$stage/etc/hallpass/server.yaml" ] || fail "uninstall-server removed server.yaml"
rm -f "$stage.log"
echo "check-install: make install and uninstall, install-server and uninstall-server into a staging folder: ok"
