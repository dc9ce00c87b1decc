extension Configuration {
    /// The commented example that `filterctl config example` prints. A test
    /// parses it, so it always matches what the parser accepts.
    public static let example = """
        # hallpass configuration (/etc/hallpass/hallpass.yaml).
        # Every key is optional; the value shown is the default unless marked "example".
        # filter-control reads this file at start; 'filterctl reload' (or SIGHUP) reads rules.*, policy.*,
        # the block page's wording and its CA again, 'systemctl restart hallpass' applies the rest.

        queue:
          # The NFQUEUE number the kernel rules send undecided flows to.
          number: 0
          # What happens while the filter cannot judge traffic (filter-data restarting, queue full):
          #   open:   traffic passes uninspected (nobody is cut off; some traffic goes unfiltered)
          #   closed: nothing new leaves the machine until the filter is back
          failMode: open
          # How many bytes of a flow are read, at most, looking for its name (TLS, HTTP, QUIC).
          # A flow that shows no name within this many bytes gets policy.noName; a TLS ClientHello
          # is read whole past it (up to 64 KiB; a larger one is blocked with bypass.tunnels).
          peekBytes: 16384
          # The system user filter-data runs as once sandboxed: the package's own (systemd-sysusers
          # makes it), shared with no other service, which could otherwise signal and so kill it.
          # A user the machine does not have: filter-data runs as nobody (uid 65534), logged as an
          # error. Never root.
          user: _hallpass

        proxy:
          # The inspection proxy, hallpass-proxy (docs/inspection.md): the kernel sends TCP 443 to the
          # addresses of the names the school's policy inspects (inspect:) here, on 127.0.0.1 and ::1.
          # Keep it below 1024: only root can listen there, so no local user takes it while it restarts.
          port: 1023
          # The system user it runs as once sandboxed (systemd-sysusers makes it). Never root.
          user: _hallpass-proxy
          # The most connections it relays at once; more are refused with a reset.
          connections: 4096
          # A relayed connection quiet both ways for this long is closed.
          idleTimeout: 10m
          # The interception CA, which filter-control makes when the policy first inspects a name
          # (key 0600, root's) and hands to the proxy at its start. 'filterctl browser-policies install'
          # puts its certificate into the browsers; run it again when the CA is made again (the log says so).
          ca: /var/lib/hallpass/inspect-ca
          # What the servers of inspected names are checked against (hallpass's own CAs are left out).
          trustFile: /etc/ssl/certs/ca-certificates.crt

        rules:
          # The shared rule folder: one subfolder per installed version and a 'current' link.
          directory: /var/lib/hallpass
          # Where signed bundles come from: an https:// folder URL, or file:/// for offline installs.
          # Plain http:// is refused. Leave it out to keep whatever is installed; while it is
          # not set and no rules are installed, systemd does not start hallpass. (example)
          # source: https://rules.example.org/hallpass/
          # With school.bundleKeys (an enrolment with a server that publishes) and no source here, the rules come
          # from the school's server: <school.server>bundle/, its certificate accepted by school.fingerprint alone,
          # signed by school.bundleKeys (unless trustedKeys names others); caFile and pins do not apply to it.
          # Public keys allowed to sign bundles ('filterctl bundle keygen' prints one).
          # List two during a key rotation. (example)
          # trustedKeys: [ "ed25519:11qYAYKxCrfVS/7TyWQHOg7hcvPapiMlrwIaaPcHURo=" ]
          # An extra certificate authority for the rule server, besides the system store. (example)
          # caFile: /etc/hallpass/rules-ca.pem
          # SPKI pins of the rule server: 'sha256/' + base64 SHA-256 of its public key. (example)
          # pins: [ "sha256/47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU=" ]
          # How often to look for new rules (s, m, h, d); each machine adds up to 10% either way.
          refresh: 30m
          # The largest bundle accepted, in bytes (manifest, signature and files together).
          # A manifest asking for more is refused before anything is downloaded.
          maxBundleBytes: 268435456

        policy:
          # Categories to block: a list of category names from the rules, or 'all'. (example)
          block: [ adult, gambling ]
          # The local allow list: wins over categories. Entries as in rule lists:
          #   example.org (and subdomains), =www.example.org (exactly), *.example.org (only subdomains),
          #   192.0.2.0/24, example.org/path (plain HTTP only). (example)
          allow: [ "khanacademy.org" ]
          # The local deny list: wins over categories; the most specific of allow/deny wins. (example)
          deny: [ "games.example.com" ]
          # Names no rule knows: allow | block | ask (hold the flow and ask filter-control,
          # which looks the name up at <rules.source>lookup/<name>; see README "needRules").
          unknown: allow
          # With 'unknown: ask': what a flow gets when no answer comes within askTimeout,
          # or when the lookup service does not know the name either: allow | block.
          askDefault: allow
          askTimeout: 2s
          # Flows that never show a name (or use a bare IP address): allow | block.
          noName: allow
          # DNS queries for blocked names: rewrite (the answer points at the block page) | drop.
          blockedDNS: rewrite
          # SafeSearch locked on for these engines: google, youtube-strict or youtube-moderate,
          # bing, duckduckgo; or none (docs/bypass.md). (example)
          safeSearch: [ google, youtube-strict ]
          # Ways around the filter, each block | allow: DNS over HTTPS/TLS/QUIC and the canary
          # names, ECH, VPN tunnels and proxies, QUIC that cannot be read, SSH (ssh -D is a
          # proxy); quic: block stops every QUIC flow (browsers fall back to TCP). These are
          # the defaults.
          bypass:
            encryptedDNS: block
            ech: block
            tunnels: block
            unreadableQUIC: block
            quic: allow
            ssh: block
            # The school's own web proxies (ADDRESS[/LENGTH][:PORT]; an IPv6 address with a port in
            # quotes and brackets, "[2001:db8::8]:3128"): SOCKS and CONNECT to them are not
            # tunnels; a connection's first request is judged by the name it asks for. (example)
            # proxy: [ 10.0.0.8:3128 ]
            # The school's own SSH servers (same form): SSH to them is allowed whatever ssh says,
            # and judged like any flow without a name (noName). (example)
            # sshServers: [ 10.0.0.5:22 ]

        blockPage:
          # Where filter-control serves the block page (local addresses); blocked names
          # resolve to these with blockedDNS: rewrite.
          address: 127.0.0.1
          address6: "::1"
          # The page itself (http://127.0.0.1/?url=..., the desktop notice's link), and where browsers
          # sent by a rewritten DNS answer arrive (HTTPS only with the local CA: 'filterctl ca init').
          # Each belongs below net.ipv4.ip_unprivileged_port_start (1024), so that no local user can
          # listen there while filter-control is down; port and httpPort may be the same (one listener).
          # One at or above it is an error in 'filterctl config check' and in the log, and filtering goes
          # on: such a port: (0.1.0's 8080) is not listened on and the page is served on httpPort.
          port: 80
          httpPort: 80
          httpsPort: 443
          # The local CA's folder; its key is read by filter-control only. A new CA here is
          # used without a restart (at 'filterctl reload', or within a minute while serving).
          ca: /etc/hallpass/ca
          # The name shown on the page. (example)
          organization: "Example School"
          # The link a student follows to ask for access; leave requestAccess out for no link.
          # {url} {host} {category} {user} {org} are filled in, URL-encoded. (example)
          # url: builtin shows a form instead (a reason of 1 to 500 characters is required); 'filterctl
          # requests' lists what students asked for, and an enrolled machine sends each request to the
          # school's console. perUser bounds the form for each person: requests waiting at once, and
          # requests made in 24 hours (the defaults below; a request beyond them is refused with a page
          # that says why).
          requestAccess:
            text: "Ask for access"
            url: "https://help.example.org/unblock?url={url}"
            perUser:
              pending: 5
              perDay: 20
          # Custom templates and strings (docs/block-page.md), and the fallback language.
          # templates: /etc/hallpass/block-page   (example)
          language: en

        admin:
          # filterctl talks to filter-control here; only root and the admin group may connect.
          socket: /run/hallpass/control.sock
          # group: hallpass-admin   (example)

        log:
          # The audit records: one per blocked flow (and, with allowed: all, per first decision of an
          # allowed flow) with time, machine, uid, user, group, kind, host, url (plain HTTP only),
          # destination, port, action, category, rule, reason and rulesVersion ('filterctl log' reads them).
          # JSON lines, mode 0640 in a 0750 folder; 'none' writes no file. Rotated past maxFileSize
          # (audit.jsonl.1 is the newest of keepFiles) and on SIGUSR1 (reopened after logrotate moved it).
          file: /var/log/hallpass/audit.jsonl
          maxFileSize: 16M
          keepFiles: 10
          # Rotated files older than this are removed; the file in use is rotated once its first record is
          # retentionDays / keepFiles old (at least a day), so a record is kept at least retentionDays.
          retentionDays: 365
          # The systemd journal, with fields HALLPASS_HOST=, HALLPASS_ACTION=, ... (journalctl HALLPASS_ACTION=block).
          journald: true
          # The school's collector: RFC 5424 over udp://, tcp:// (RFC 6587 octet counting) or tls://
          # (system CAs plus caFile), port 514 (udp, tcp) or 6514 (tls) unless given. While it cannot be
          # reached, up to syslogBuffer records wait (the oldest go first, counted in 'filterctl status'). (example)
          # syslog: tcp://logs.school.example:514
          syslog: none
          # An extra CA for a tls:// collector's certificate, besides the system store (tls:// only). (example)
          # caFile: /etc/hallpass/logs-ca.pem
          # The syslog facility of the records: user, daemon, auth, authpriv, local0 ... local7.
          facility: local0
          syslogBuffer: 10000
          # What records say about the person: name (login name and uid) | pseudonym (a keyed hash of the
          # name, the same on every machine holding the school's pseudonymKey; no uid) | none (no name, no uid).
          # 'group' is the school's policy group in every mode; without policy groups it is the person's primary
          # group with 'name' only (a Debian account's primary group is named after the person).
          users: name
          # The per-school key of users: pseudonym (32 random bytes, made at first use when missing; copy the
          # same file to every machine of the school). Default: <rules.directory>/pseudonym.key. (example)
          # pseudonymKey: /etc/hallpass/pseudonym.key
          # Allowed flows recorded besides every blocked one: none | all. With none, an allowed flow the
          # school's safeguarding rules look at (docs/school-policy.md, "Safeguarding") is recorded all the same.
          allowed: none
          # The machine's name in the records (default: its host name). (example)
          # machine: lab2-pc07

        # A desktop notice (org.freedesktop.Notifications on the person's session bus) when a flow of theirs is
        # blocked where no block page can show (HTTPS without the local CA, QUIC, programs that are not browsers):
        # the name, the reason, blockPage.organization and how to ask for access. 'notify: false' turns it off.
        notify:
          enabled: true
          # At most one notice per person and name in this time.
          interval: 10m

        # Prometheus metrics at http://address:port/metrics (hallpass_decisions_total{action,category,kind},
        # hallpass_audit_dropped_total, ...: docs/fleet.md); none while 'metrics' is left out. 127.0.0.1 keeps them
        # on the machine; for a central Prometheus, this machine's school-network address, with the port open to
        # the Prometheus server only. (example)
        # metrics:
        #   address: 127.0.0.1
        #   port: 9733

        # The school's server (hallpass-server; docs/fleet.md): 'filterctl enroll https://SERVER TOKEN' enrols this
        # machine and writes server, fingerprint and bundleKeys here. filter-control then sends the server every audit record
        # (from a queue in <rules.directory>/outbox that survives restarts and a server down for days) and checks
        # in every minute (rules version, filter-data's health, fail mode, who is logged in). Only the server whose
        # certificate key has this SHA-256 (its SubjectPublicKeyInfo) is accepted. None while 'school' is left out. (example)
        # school:
        #   server: https://school.example:8443/
        #   fingerprint: 5f2d8e0c9b7a6f41e3d2c1b0a9f8e7d6c5b4a3928170f6e5d4c3b2a190817263
        #   # The keys the server's bundles are signed with (enroll writes them when the server publishes). Without
        #   # rules.source the rules come from the server, and a check-in answer naming a newer publication than
        #   # the rules in force makes the machine fetch it at once, not at the next rules.refresh.
        #   bundleKeys: [ "ed25519:11qYAYKxCrfVS/7TyWQHOg7hcvPapiMlrwIaaPcHURo=" ]
        #   # Records waiting for the server: at most this many bytes, and none older than queueMaxAge; past either,
        #   # the oldest go, counted and reported to the server.
        #   queueMaxSize: 256M
        #   queueMaxAge: 30d

        """
}
