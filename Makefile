# hallpass: build, install and package for lab machines (README, "Installing").
#
#   make deps         Debian packages needed to build and run (root)
#   make              release build of filterctl, filter-control, filter-data, hallpass-proxy
#   make install      install them, the systemd unit, filter-data's system user
#                     (_hallpass, made by systemd-sysusers), the man pages, filterctl's
#                     completions, hallpass's own protection lists (what
#                     filterctl adds to every store), the configuration
#                     example (only if no configuration exists) and the rule
#                     folder (root)
#   make uninstall    remove what install put there, keeping the configuration,
#                     the installed rules and filter-data's user (Debian never
#                     removes a system user: what it owned would pass to the next)
#   make build-server        release build of hallpass-server, the school's server
#   make install-server      install it, its systemd unit, its system user
#                     (_hallpass-server, made by systemd-sysusers), its man page
#                     and docs/server.md, and the commented server.yaml (only if
#                     none exists) (root); then `hallpass-server init` as that user
#   make uninstall-server    remove what install-server put there, keeping
#                     server.yaml, /var/lib/hallpass-server and the user
#   make deb          dist/hallpass_VERSION_amd64.deb (the lab machine's package)
#                     and dist/hallpass-server_VERSION_amd64.deb (the school's
#                     server), built by debian/rules (debhelper); VERSION comes
#                     from debian/changelog
#
# DESTDIR stages an install into a folder (for packaging); PREFIX moves the
# programs (default /usr/local).

PREFIX     ?= /usr/local
SYSCONFDIR ?= /etc
STATEDIR   ?= /var/lib/hallpass
UNITDIR    ?= /etc/systemd/system
# systemd-sysusers reads /etc, /run and /usr/lib/sysusers.d (not /usr/local);
# the package installs into /usr/lib/sysusers.d.
SYSUSERSDIR ?= $(SYSCONFDIR)/sysusers.d
ZSHCOMPDIR ?= $(PREFIX)/share/zsh/site-functions
DESTDIR    ?=
SWIFT      ?= swift
# The Swift runtime is linked into the programs, so a lab machine needs no Swift installation.
SWIFTFLAGS ?= -c release --static-swift-stdlib

# scripts/test.sh packages its debug build (one build in CI): the programs
# are linked again with the Swift runtime inside, which takes seconds and
# compiles nothing. The objects were compiled against the shared Foundation,
# whose link entries do not name the static archives that the static
# Foundation needs besides itself; they are named here, in a group because
# they refer to one another. (The list is the difference of
# swift-autolink-extract between a file importing Foundation compiled with
# and without -static-stdlib.)
STATIC_RELINK = --static-swift-stdlib -Xlinker --start-group \
	$(foreach lib,Foundation FoundationEssentials FoundationInternationalization CoreFoundation \
	  _FoundationICU _FoundationCShims _FoundationCollections swiftSynchronization,-Xlinker -l$(lib)) \
	-Xlinker --end-group

BINDIR  = $(DESTDIR)$(PREFIX)/bin
SBINDIR = $(DESTDIR)$(PREFIX)/sbin
DOCDIR  = $(DESTDIR)$(PREFIX)/share/doc/hallpass
# hallpass's own protection lists: filterctl reads them from ../share/hallpass/bypass beside its bin folder.
PROTECTIONDIR = $(DESTDIR)$(PREFIX)/share/hallpass/bypass
MANDIR  = $(DESTDIR)$(PREFIX)/share/man
BASHCOMP = $(DESTDIR)$(PREFIX)/share/bash-completion/completions/filterctl
ZSHCOMP  = $(DESTDIR)$(ZSHCOMPDIR)/_filterctl
CONFIG  = $(DESTDIR)$(SYSCONFDIR)/hallpass/hallpass.yaml
SERVER_CONFIG  = $(DESTDIR)$(SYSCONFDIR)/hallpass/server.yaml
SERVER_DOCDIR  = $(DESTDIR)$(PREFIX)/share/doc/hallpass-server
# The same protection lists for the server's publisher, in a folder of its own
# (../share/hallpass-server/bypass beside its sbin folder), so that the two
# packages own no file in common and install on one host.
SERVER_PROTECTIONDIR = $(DESTDIR)$(PREFIX)/share/hallpass-server/bypass
# The lab machine's man pages; hallpass-server.8 goes with the server.
MACHINE_MAN8 = filterctl.8 filter-control.8 filter-data.8
# Asked once, when first used (swift build takes seconds to answer).
BUILT   = $(eval BUILT := $$(shell $(SWIFT) build $(SWIFTFLAGS) --show-bin-path))$(BUILT)

.PHONY: all build build-server deps install uninstall install-server uninstall-server deb deb-from-debug

all: build

deps:
	scripts/install-deps.sh --build

build:
	$(SWIFT) build $(SWIFTFLAGS) --product filterctl
	$(SWIFT) build $(SWIFTFLAGS) --product filter-control
	$(SWIFT) build $(SWIFTFLAGS) --product filter-data
	$(SWIFT) build $(SWIFTFLAGS) --product hallpass-proxy

# Apart from build: a lab machine does not need the server's dependencies
# (Hummingbird, the database drivers) built.
build-server:
	$(SWIFT) build $(SWIFTFLAGS) --product hallpass-server

install: build
	install -d -m 0755 $(BINDIR) $(SBINDIR) $(DOCDIR) $(DESTDIR)$(UNITDIR) $(DESTDIR)$(SYSUSERSDIR) $(MANDIR)/man5 $(MANDIR)/man8 \
	    $(dir $(BASHCOMP)) $(dir $(ZSHCOMP))
	# -s: without their debug symbols the programs are a fraction of the size.
	install -s -m 0755 $(BUILT)/filterctl $(BINDIR)/filterctl
	# filter-control starts the filter-data and the hallpass-proxy next to it.
	install -s -m 0755 $(BUILT)/filter-control $(BUILT)/filter-data $(BUILT)/hallpass-proxy $(SBINDIR)/
	sed -e 's|/usr/local/|$(PREFIX)/|g' -e 's|/etc/hallpass/|$(SYSCONFDIR)/hallpass/|g' \
	    -e 's|/var/lib/hallpass|$(STATEDIR)|g' packaging/hallpass.service > $(DESTDIR)$(UNITDIR)/hallpass.service
	chmod 0644 $(DESTDIR)$(UNITDIR)/hallpass.service
	# filter-data's own user. Into a staging folder (DESTDIR, the package) only the
	# file: the package's postinst runs systemd-sysusers (dh_installsysusers).
	install -m 0644 packaging/hallpass.sysusers $(DESTDIR)$(SYSUSERSDIR)/hallpass.conf
	if [ -z "$(DESTDIR)" ]; then systemd-sysusers $(SYSUSERSDIR)/hallpass.conf; fi
	install -m 0644 $(addprefix docs/man/,$(MACHINE_MAN8)) $(MANDIR)/man8/
	install -m 0644 docs/man/*.5 $(MANDIR)/man5/
	# A completion is sourced, not run: no #! line.
	$(BUILT)/filterctl --generate-completion-script bash | sed -e '1{/^#!/d}' > $(BASHCOMP)
	$(BUILT)/filterctl --generate-completion-script zsh > $(ZSHCOMP)
	chmod 0644 $(BASHCOMP) $(ZSHCOMP)
	install -m 0644 README.md $(DOCDIR)/
	install -m 0644 docs/*.md $(DOCDIR)/
	# The DoH list is GPL-3.0 data: its licence text goes with it.
	install -d -m 0755 $(PROTECTIONDIR)/doh $(PROTECTIONDIR)/ech-front
	install -m 0644 rules/bypass/doh/domains rules/bypass/doh/COPYING.GPL-3.0 $(PROTECTIONDIR)/doh/
	install -m 0644 rules/bypass/ech-front/domains $(PROTECTIONDIR)/ech-front/
	install -d -m 0755 $(DESTDIR)$(SYSCONFDIR)/hallpass
	# An existing configuration is never overwritten.
	if [ ! -e $(CONFIG) ]; then \
	    $(BUILT)/filterctl config example | sed -e 's|/var/lib/hallpass|$(STATEDIR)|g' > $(CONFIG).new && \
	    chmod 0644 $(CONFIG).new && mv $(CONFIG).new $(CONFIG) && echo "installed the example configuration $(CONFIG)"; \
	else \
	    echo "kept the existing configuration $(CONFIG)"; \
	fi
	install -d -m 0755 $(DESTDIR)$(STATEDIR)
	if [ -z "$(DESTDIR)" ] && [ -d /run/systemd/system ]; then systemctl daemon-reload; fi
	@echo
	@echo "Next: set rules.source and rules.trustedKeys in $(SYSCONFDIR)/hallpass/hallpass.yaml,"
	@echo "check it with 'filterctl config check', then 'systemctl enable --now hallpass'."

uninstall:
	if [ -z "$(DESTDIR)" ] && [ -d /run/systemd/system ]; then systemctl disable --now hallpass || true; fi
	rm -f $(BINDIR)/filterctl $(SBINDIR)/filter-control $(SBINDIR)/filter-data $(SBINDIR)/hallpass-proxy $(DESTDIR)$(UNITDIR)/hallpass.service
	rm -f $(DESTDIR)$(SYSUSERSDIR)/hallpass.conf
	rm -f $(MANDIR)/man8/filterctl.8 $(MANDIR)/man8/filter-control.8 $(MANDIR)/man8/filter-data.8 $(MANDIR)/man5/hallpass.yaml.5
	rm -f $(BASHCOMP) $(ZSHCOMP)
	rm -rf $(DOCDIR) $(PROTECTIONDIR)
	rmdir $(dir $(PROTECTIONDIR)) 2>/dev/null || true
	if [ -z "$(DESTDIR)" ] && [ -d /run/systemd/system ]; then systemctl daemon-reload; fi
	@echo "kept $(SYSCONFDIR)/hallpass and $(STATEDIR) (the configuration and the installed rules), and the user _hallpass"

# The school's server (docs/server.md). Its state folder is fixed:
# /var/lib/hallpass-server (the unit's StateDirectory=, the program's defaults).
install-server: build-server
	install -d -m 0755 $(SBINDIR) $(SERVER_DOCDIR) $(DESTDIR)$(UNITDIR) $(DESTDIR)$(SYSUSERSDIR) $(MANDIR)/man8 \
	    $(DESTDIR)$(SYSCONFDIR)/hallpass
	install -s -m 0755 $(BUILT)/hallpass-server $(SBINDIR)/
	sed -e 's|/usr/local/|$(PREFIX)/|g' -e 's|/etc/hallpass/|$(SYSCONFDIR)/hallpass/|g' \
	    packaging/hallpass-server.service > $(DESTDIR)$(UNITDIR)/hallpass-server.service
	chmod 0644 $(DESTDIR)$(UNITDIR)/hallpass-server.service
	install -m 0644 packaging/hallpass-server.sysusers $(DESTDIR)$(SYSUSERSDIR)/hallpass-server.conf
	if [ -z "$(DESTDIR)" ]; then systemd-sysusers $(SYSUSERSDIR)/hallpass-server.conf; fi
	install -m 0644 docs/man/hallpass-server.8 $(MANDIR)/man8/
	install -m 0644 docs/server.md $(SERVER_DOCDIR)/
	install -d -m 0755 $(SERVER_PROTECTIONDIR)/doh $(SERVER_PROTECTIONDIR)/ech-front
	install -m 0644 rules/bypass/doh/domains rules/bypass/doh/COPYING.GPL-3.0 $(SERVER_PROTECTIONDIR)/doh/
	install -m 0644 rules/bypass/ech-front/domains $(SERVER_PROTECTIONDIR)/ech-front/
	if [ ! -e $(SERVER_CONFIG) ]; then \
	    install -m 0644 packaging/server.yaml $(SERVER_CONFIG) && echo "installed the commented configuration $(SERVER_CONFIG)"; \
	else \
	    echo "kept the existing configuration $(SERVER_CONFIG)"; \
	fi
	# The database, the TLS pair and the bundle signing key, made as the service's user (what the package's postinst does).
	if [ -z "$(DESTDIR)" ]; then \
	    install -d -o _hallpass-server -g _hallpass-server -m 0750 /var/lib/hallpass-server && \
	    runuser -u _hallpass-server -- $(PREFIX)/sbin/hallpass-server init --config $(SYSCONFDIR)/hallpass/server.yaml; \
	fi
	if [ -z "$(DESTDIR)" ] && [ -d /run/systemd/system ]; then systemctl daemon-reload; fi
	@echo
	@echo "Next: 'systemctl enable --now hallpass-server', then 'hallpass-server token create --room ROOM'."

uninstall-server:
	if [ -z "$(DESTDIR)" ] && [ -d /run/systemd/system ]; then systemctl disable --now hallpass-server || true; fi
	rm -f $(SBINDIR)/hallpass-server $(DESTDIR)$(UNITDIR)/hallpass-server.service $(DESTDIR)$(SYSUSERSDIR)/hallpass-server.conf
	rm -f $(MANDIR)/man8/hallpass-server.8
	rm -rf $(SERVER_DOCDIR) $(SERVER_PROTECTIONDIR)
	rmdir $(dir $(SERVER_PROTECTIONDIR)) 2>/dev/null || true
	if [ -z "$(DESTDIR)" ] && [ -d /run/systemd/system ]; then systemctl daemon-reload; fi
	@echo "kept $(SYSCONFDIR)/hallpass/server.yaml, /var/lib/hallpass-server (the database and the TLS pair) and the user _hallpass-server"

# The package is built the way dpkg-buildpackage builds a binary package
# (debian/rules clean, build, binary), but the .deb lands in dist/ rather
# than in the folder above the clone, and no .changes is made (nothing is
# uploaded from here). `dpkg-buildpackage -b --no-sign` works too, the Debian way.
deb:
	dpkg-checkbuilddeps
	debian/rules clean
	HALLPASS_SWIFTFLAGS='$(SWIFTFLAGS)' debian/rules build
	HALLPASS_SWIFTFLAGS='$(SWIFTFLAGS)' HALLPASS_DEB_DESTDIR=dist debian/rules binary
	debian/rules clean
	@echo "built dist/hallpass_$$(dpkg-parsechangelog -S Version)_$$(dpkg-architecture -qDEB_HOST_ARCH).deb" \
	    "and dist/hallpass-server_$$(dpkg-parsechangelog -S Version)_$$(dpkg-architecture -qDEB_HOST_ARCH).deb"

# The package from the debug build scripts/test.sh made (see STATIC_RELINK).
# The debug build is brought up to date first: a source changed since would
# otherwise be compiled here with the static runtime's link entries, and the
# next plain debug build would fail to link (cannot find -l_FoundationCShims)
# until those objects are removed.
deb-from-debug:
	$(SWIFT) build --product filterctl
	$(SWIFT) build --product filter-control
	$(SWIFT) build --product filter-data
	$(SWIFT) build --product hallpass-proxy
	$(SWIFT) build --product hallpass-server
	HALLPASS_DEB_COMPRESSION='-Zgzip -z1' $(MAKE) deb SWIFTFLAGS='$(STATIC_RELINK)'
