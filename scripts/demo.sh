#!/usr/bin/env bash
# The main job on the embedded default rules: build hallpass, compile rules/
# into a store, publish it as a signed bundle with a fresh key, verify the
# bundle as a lab machine would, and show the verdicts for a few URLs under
# a demo policy. Run as root on Debian 12 (it installs what it needs).
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/install-deps.sh
echo "== building hallpass (debug)"
swift build --product filterctl
filterctl="$(swift build --show-bin-path)/filterctl"

work=$(mktemp -d /tmp/hallpass-demo.XXXXXX)
trap 'rm -rf "$work"' EXIT

echo "== compiling rules/ into a store"
"$filterctl" compile --out "$work/rules.hpstore" --quiet rules/ut1 rules/demo

echo "== publishing a signed bundle (a school's server does this)"
key=$("$filterctl" bundle keygen --out "$work/signing-key.pem")
echo "public key for rules.trustedKeys: $key"
"$filterctl" bundle build --key "$work/signing-key.pem" --version 1 --expires 30d --out "$work/bundle" rules/ut1 rules/demo 2>/dev/null

echo "== verifying the bundle as a lab machine would"
"$filterctl" bundle verify "$work/bundle" --trusted-key "$key"

cat > "$work/hallpass.yaml" <<YAML
policy:
  block: [ gambling, games, dating, doh, vpn, warez, hacking, stalkerware, cryptojacking, demo ]
  allow: [ "lichess.org" ]      # the chess club may play, though 'games' is blocked
  deny: [ "distracting.example" ]
  unknown: allow
YAML

echo "== verdicts under the demo policy (ACTION, TARGET, REASON)"
"$filterctl" check --bundle "$work/bundle" --trusted-key "$key" --config "$work/hallpass.yaml" \
    https://www.pokerstars.com/ \
    http://www.blocked.test/some/page \
    https://dns.google/dns-query \
    https://nordvpn.com/ \
    https://www.wikipedia.org/ \
    https://lichess.org/ \
    https://www.chess.com/ \
    http://www.distracting.example/ \
    https://bücher.example/
