#!/usr/bin/python3
"""The alerts' webhook receiver of AlertDeliveryIntegrationTests: an HTTP
server on loopback that answers every POST 204 and appends it to a file,
one JSON object a line (the path, the Hallpass-* and Content-Type headers,
the body as text), for the test to read and check the signature of.

  webhook_receiver.py --port PORT --out FILE
"""
import argparse
import http.server
import json


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--out", required=True)
    options = parser.parse_args()

    class Receiver(http.server.BaseHTTPRequestHandler):
        def do_POST(self):
            length = int(self.headers.get("Content-Length", "0"))
            body = self.rfile.read(length)
            record = {
                "path": self.path,
                "contentType": self.headers.get("Content-Type"),
                "timestamp": self.headers.get("Hallpass-Timestamp"),
                "signature": self.headers.get("Hallpass-Signature"),
                "body": body.decode("utf-8"),
            }
            with open(options.out, "a", encoding="utf-8") as out:
                out.write(json.dumps(record) + "\n")
            self.send_response(204)
            self.end_headers()

        def log_message(self, format, *args):
            print("webhook:", format % args, flush=True)

    server = http.server.HTTPServer(("127.0.0.1", options.port), Receiver)
    print("webhook ready", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
