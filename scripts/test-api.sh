#!/usr/bin/env bash
# hallpass-server against its own contract: Schemathesis (PyPI) generates
# requests from docs/api/openapi.yaml and sends them to a real hallpass-server
# on SQLite in a temporary folder, with an API token of role admin, and checks
# every answer against the file: no 5xx, a status the file lists, its content
# type, its headers and its body's schema; that what the file forbids is refused
# with a 4xx, that the routes with a token refuse a request without one, and
# that a method the file does not list for a path is answered 405 with Allow.
#
# The machine routes (/api/v1/machine/...) are left out: each request there
# must carry an Ed25519 signature over its own method, path, date and body
# (docs/server.md, "How a machine authenticates"), which Schemathesis cannot
# make; Tests/SchoolServerTests/APITests.swift drives them with signed requests.
# Enrolment is tested (every generated token is refused), and so are
# /api/v1/machines, /api/v1/records, the policy and publishing routes (with a
# signing key, so generated lists and policies are published and served under
# /bundle/), /metrics and /health.
#
# usage: scripts/test-api.sh [SERVER_BINARY]
#   SERVER_BINARY  default: hallpass-server of the debug build (swift build --show-bin-path)
#   SCHEMATHESIS_EXAMPLES  examples per operation and phase (default 100)
#   SCHEMATHESIS_SEED      the random seed (default 28: the same requests every run)
#   SCHEMATHESIS_CHECKS    the checks, comma-separated (default: the list below)
set -euo pipefail
cd "$(dirname "$0")/.."

server=${1:-$(swift build --show-bin-path)/hallpass-server}
[ -x "$server" ] || { echo "test-api: no server binary at $server (swift build first)" >&2; exit 1; }
examples=${SCHEMATHESIS_EXAMPLES:-100}
seed=${SCHEMATHESIS_SEED:-28}

# Schemathesis in a virtualenv of its own under .build, pinned; made once.
version=4.32.5
venv=.build/schemathesis-venv
if ! "$venv/bin/schemathesis" --version 2>/dev/null | grep -q "$version"; then
    echo "test-api: preparing $venv with schemathesis $version"
    rm -rf "$venv"
    python3 -m venv "$venv"
    "$venv/bin/pip" install -q --disable-pip-version-check "schemathesis==$version"
fi

# What each answer is checked for. Left out: positive_data_acceptance (it expects a 2xx
# for any value the file allows, but a cursor is a token only the server makes: the file
# can say its length, not which tokens are real), and the stateful checks
# (use_after_free, ensure_resource_availability: no operation here creates a resource
# the file links to another).
checks=not_a_server_error,status_code_conformance,content_type_conformance,response_headers_conformance
checks+=,response_schema_conformance,negative_data_rejection,missing_required_header,ignored_auth
checks+=,unsupported_method,allow_header_conformance
checks=${SCHEMATHESIS_CHECKS:-$checks}

folder=$(mktemp -d /tmp/hallpass-test-api.XXXXXX)
server_pid=
stop() {
    if [ -n "$server_pid" ] && kill -0 "$server_pid" 2>/dev/null; then
        kill -TERM "$server_pid"
        wait "$server_pid" 2>/dev/null || true
    fi
    rm -rf "$folder"
}
trap stop EXIT

# A free port on loopback (the kernel's choice, released just before the server takes it).
port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
cat >"$folder/server.yaml" <<EOF
listen:
  address: 127.0.0.1
  port: $port
  plainHTTP: true
database: $folder/server.db
machines:
  # Schemathesis enrols thousands of times from one address: the limit would answer most with 429.
  enrolRate: 100000
EOF
# A bundle signing key where `init` would make it (beside the database), so that
# publishing and the bundle routes are exercised too: openssl writes Ed25519 as
# the same PKCS#8 PEM as BundleSigningKey.
(umask 077 && openssl genpkey -algorithm ed25519 -out "$folder/bundle-signing.key")

token=$("$server" api-token create --role admin --config "$folder/server.yaml")
"$server" serve --config "$folder/server.yaml" >"$folder/server.log" 2>&1 &
server_pid=$!
url=http://127.0.0.1:$port
for _ in $(seq 1 100); do
    curl -fsS -o /dev/null "$url/health" 2>/dev/null && break
    kill -0 "$server_pid" 2>/dev/null || { cat "$folder/server.log" >&2; echo "test-api: the server stopped" >&2; exit 1; }
    sleep 0.2
done
curl -fsS -o /dev/null "$url/health" || { cat "$folder/server.log" >&2; echo "test-api: the server does not answer" >&2; exit 1; }

status=0
# Run from the temporary folder: Schemathesis keeps a cache of past failures in
# .schemathesis/ of where it runs, which would replay them in later runs.
repo=$PWD
# One worker: with two, hypothesis parses its lambdas' source in two threads at
# once and Python 3.11's ast module fails with "AST constructor recursion depth
# mismatch" (a fresh-clone run at 2a4bb55), an error of the tool, not the server.
(cd "$folder" && "$repo/$venv/bin/schemathesis" run "$repo/docs/api/openapi.yaml" --url "$url" \
    -H "Authorization: Bearer $token" \
    --exclude-path-regex '^/api/v1/machine/' \
    --checks "$checks" \
    --max-examples "$examples" --seed "$seed" \
    --generation-database none --no-color --workers 1) || status=$?
if [ "$status" != 0 ]; then
    echo "test-api: the server's log:" >&2
    tail -n 50 "$folder/server.log" >&2
    exit "$status"
fi
echo "test-api: hallpass-server conforms to docs/api/openapi.yaml"
