# hallpass: build and install on a lab machine (README, "Installing").
#
#   make deps         Debian packages needed to build and run (root)
#   make              release build of filterctl, filter-control, filter-data
#   make install      install them, the systemd unit, the configuration example
#                     (only if no configuration exists) and the rule folder (root)
#   make uninstall    remove what install put there, keeping the configuration
#                     and the installed rules
#
# DESTDIR stages an install into a folder (for packaging); PREFIX moves the
# programs (default /usr/local).

PREFIX     ?= /usr/local
SYSCONFDIR ?= /etc
STATEDIR   ?= /var/lib/hallpass
UNITDIR    ?= /etc/systemd/system
DESTDIR    ?=
SWIFT      ?= swift
# The Swift runtime is linked into the programs, so a lab machine needs no Swift installation.
SWIFTFLAGS ?= -c release --static-swift-stdlib

BINDIR  = $(DESTDIR)$(PREFIX)/bin
SBINDIR = $(DESTDIR)$(PREFIX)/sbin
DOCDIR  = $(DESTDIR)$(PREFIX)/share/doc/hallpass
CONFIG  = $(DESTDIR)$(SYSCONFDIR)/hallpass/hallpass.yaml
BUILT   = $(shell $(SWIFT) build $(SWIFTFLAGS) --show-bin-path)

.PHONY: all build deps install uninstall

all: build

deps:
	scripts/install-deps.sh --build

build:
	$(SWIFT) build $(SWIFTFLAGS) --product filterctl
	$(SWIFT) build $(SWIFTFLAGS) --product filter-control
	$(SWIFT) build $(SWIFTFLAGS) --product filter-data

install: build
	install -d -m 0755 $(BINDIR) $(SBINDIR) $(DOCDIR) $(DESTDIR)$(UNITDIR)
	# -s: without their debug symbols the programs are a fraction of the size.
	install -s -m 0755 $(BUILT)/filterctl $(BINDIR)/filterctl
	# filter-control starts the filter-data next to it.
	install -s -m 0755 $(BUILT)/filter-control $(BUILT)/filter-data $(SBINDIR)/
	sed -e 's|/usr/local/|$(PREFIX)/|g' -e 's|/etc/hallpass/|$(SYSCONFDIR)/hallpass/|g' \
	    -e 's|/var/lib/hallpass|$(STATEDIR)|g' packaging/hallpass.service > $(DESTDIR)$(UNITDIR)/hallpass.service
	chmod 0644 $(DESTDIR)$(UNITDIR)/hallpass.service
	install -m 0644 README.md $(DOCDIR)/
	install -m 0644 docs/*.md $(DOCDIR)/
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
	rm -f $(BINDIR)/filterctl $(SBINDIR)/filter-control $(SBINDIR)/filter-data $(DESTDIR)$(UNITDIR)/hallpass.service
	rm -rf $(DOCDIR)
	if [ -z "$(DESTDIR)" ] && [ -d /run/systemd/system ]; then systemctl daemon-reload; fi
	@echo "kept $(SYSCONFDIR)/hallpass and $(STATEDIR) (the configuration and the installed rules)"
