#!/usr/bin/env bash
# The tests' OpenID provider: django-oidc-provider in a small Django project
# (this folder), served over HTTPS on 127.0.0.1 by gunicorn, with a CA and a
# server certificate made here. Prints one line
#   oidc-provider ready: issuer https://127.0.0.1:PORT/openid
# once it answers, and runs in the foreground until SIGTERM (the process is
# gunicorn's master itself: stop it by this script's PID).
#
#   run.sh --port PORT --folder DIR --redirect-uri URI [--redirect-uri URI]...
#          [--client-id hallpass] [--client-secret SECRET] [--password PASSWORD]
#
# DIR gets the provider's state: ca.pem (the CA to trust: the client's
# caFile), client-secret (0600), provider.sqlite3, the TLS pair. People: ada
# (groups teacher-lab2, staff), dora (dsl, staff), ian (admins, staff), sam
# (year9-pupils); their password is PASSWORD (default: school-password).
# Needs the virtualenv scripts/install-deps.sh makes (.build/oidc-provider-venv),
# or HALLPASS_OIDC_PYTHON naming a Python with Django, django-oidc-provider and gunicorn.
set -euo pipefail
# Whatever stops it says where: the tests show this script's output when the provider does not start.
trap 'echo "oidc-provider: stopped at line $LINENO of run.sh (status $?)" >&2' ERR
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../../.." && pwd)
python=${HALLPASS_OIDC_PYTHON:-$root/.build/oidc-provider-venv/bin/python}

port= folder= client_id=hallpass client_secret= password=school-password
redirects=()
while [ $# -gt 0 ]; do
    case "$1" in
        --port) port=$2; shift 2 ;;
        --folder) folder=$2; shift 2 ;;
        --redirect-uri) redirects+=(--redirect-uri "$2"); shift 2 ;;
        --client-id) client_id=$2; shift 2 ;;
        --client-secret) client_secret=$2; shift 2 ;;
        --password) password=$2; shift 2 ;;
        *) echo "oidc-provider: unknown option '$1'" >&2; exit 64 ;;
    esac
done
if [ -z "$port" ] || [ -z "$folder" ] || [ "${#redirects[@]}" = 0 ]; then
    echo "oidc-provider: give --port, --folder and at least one --redirect-uri" >&2
    exit 64
fi
[ -x "$python" ] || { echo "oidc-provider: no Python at $python; run scripts/install-deps.sh" >&2; exit 1; }
mkdir -p "$folder"
folder=$(cd "$folder" && pwd)
[ -n "$client_secret" ] || client_secret=$("$python" -c 'import secrets; print(secrets.token_urlsafe(32))')
(umask 077 && printf '%s\n' "$client_secret" >"$folder/client-secret")

# A CA of this run, and the provider's certificate for 127.0.0.1 from it.
if [ ! -f "$folder/ca.pem" ]; then
    openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 -subj "/CN=hallpass test provider CA" \
        -keyout "$folder/ca-key.pem" -out "$folder/ca.pem" 2>/dev/null
    openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj /CN=127.0.0.1 \
        -keyout "$folder/tls-key.pem" -out "$folder/tls.csr" 2>/dev/null
    printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n' >"$folder/tls.ext"
    openssl x509 -req -in "$folder/tls.csr" -CA "$folder/ca.pem" -CAkey "$folder/ca-key.pem" -CAcreateserial -days 2 \
        -extfile "$folder/tls.ext" -out "$folder/tls.pem" 2>/dev/null
fi

export HALLPASS_OIDC_STATE=$folder HALLPASS_OIDC_PORT=$port PYTHONDONTWRITEBYTECODE=1
cd "$here"
"$python" manage.py migrate --no-input -v 0
"$python" manage.py setup_school --client-id "$client_id" --client-secret "$client_secret" --password "$password" "${redirects[@]}"
exec "$python" -m gunicorn -c "$here/gunicorn.conf.py" --bind "127.0.0.1:$port" \
    --certfile "$folder/tls.pem" --keyfile "$folder/tls-key.pem" school_provider.wsgi:application
