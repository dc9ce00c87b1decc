"""A stand-in for a school server that has been taken over, for the live
channel's integration test: it holds the school server's own TLS key (so a
lab machine's pinned connection reaches it) and a live key the test controls,
and answers the machine's live poll with whatever state the test writes.

    rogue_live_server.py --make-key KEYFILE
        makes an Ed25519 key, writes its 32-byte seed to KEYFILE (0600) and
        prints the public key as the policy names it (ed25519:BASE64).

    rogue_live_server.py --address A --port P --cert C --key K --live-key KEYFILE --state FILE
        serves HTTPS on A:P. POST /api/v1/machine/live answers the payload in
        FILE (a JSON object, signed as written) when its sequence is not the
        machine's `after` (as the real server does), else holds the request
        until FILE changes or `wait` passes (204). Every other route answers 503, so the machine
        keeps its records for the real server.
"""

import argparse
import base64
import json
import os
import ssl
import sys
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey


def public_text(private):
    raw = private.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return "ed25519:" + base64.b64encode(raw).decode()


def make_key(path):
    private = Ed25519PrivateKey.generate()
    seed = private.private_bytes(serialization.Encoding.Raw, serialization.PrivateFormat.Raw, serialization.NoEncryption())
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "wb") as file:
        file.write(seed)
    print(public_text(private))


def serve(arguments):
    with open(arguments.live_key, "rb") as file:
        private = Ed25519PrivateKey.from_private_bytes(file.read())
    key_text = public_text(private)

    def current():
        try:
            with open(arguments.state, "rb") as file:
                data = file.read()
            return data, json.loads(data)
        except (OSError, ValueError):
            return None, None

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format, *args):
            sys.stderr.write("rogue-live: " + (format % args) + "\n")
            sys.stderr.flush()

        def answer(self, status, body=b"", kind="application/json"):
            self.send_response(status)
            if body:
                self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if body:
                self.wfile.write(body)

        def do_POST(self):
            length = int(self.headers.get("Content-Length", "0"))
            body = self.rfile.read(min(length, 1 << 20))
            if self.path.split("?")[0] != "/api/v1/machine/live":
                self.answer(503, b'{"error":"unavailable","message":"not this server"}')
                return
            try:
                request = json.loads(body or b"{}")
                after = int(request.get("after", 0))
                wait = max(0, min(30, int(request.get("wait", 0))))
            except (ValueError, TypeError):
                self.answer(400, b'{"error":"bad-request","message":"not json"}')
                return
            deadline = time.monotonic() + wait
            while True:
                data, payload = current()
                if payload is not None and int(payload.get("sequence", 0)) != after:
                    envelope = {
                        "payload": base64.b64encode(data).decode(),
                        "signature": base64.b64encode(private.sign(data)).decode(),
                        "key": key_text,
                    }
                    self.log_message("sent sequence %s to a machine that held %s", payload.get("sequence"), after)
                    self.answer(200, json.dumps(envelope).encode())
                    return
                if time.monotonic() >= deadline:
                    self.answer(204)
                    return
                time.sleep(0.1)

    server = ThreadingHTTPServer((arguments.address, arguments.port), Handler)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(arguments.cert, arguments.key)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    print("rogue-live ready", flush=True)
    server.serve_forever()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--make-key")
    parser.add_argument("--address")
    parser.add_argument("--port", type=int)
    parser.add_argument("--cert")
    parser.add_argument("--key")
    parser.add_argument("--live-key")
    parser.add_argument("--state")
    arguments = parser.parse_args()
    if arguments.make_key:
        make_key(arguments.make_key)
    else:
        serve(arguments)


if __name__ == "__main__":
    main()
