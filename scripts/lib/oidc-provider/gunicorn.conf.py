"""gunicorn's settings for the tests' provider; run.sh passes the rest."""
import os

workers = 1
threads = 4
worker_class = "gthread"
timeout = 30
# A stop (SIGTERM from the test) ends within this, before the test would send SIGKILL.
graceful_timeout = 2
loglevel = "warning"


def when_ready(server):
    # The line run.sh's callers wait for: the provider answers from now on.
    port = os.environ["HALLPASS_OIDC_PORT"]
    print(f"oidc-provider ready: issuer https://127.0.0.1:{port}/openid", flush=True)
