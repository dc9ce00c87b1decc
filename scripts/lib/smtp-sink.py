#!/usr/bin/python3
"""The SMTP server of scripts/bench-alerts.sh: Debian's aiosmtpd on an
address and port, writing one JSON line a message to OUT as it is
received: the time (Unix seconds, this machine's clock, the one the
benchmark's probes read), the envelope's recipients and the Subject.

  smtp-sink.py --port PORT --out FILE [--address 127.0.0.1]
"""
import argparse
import email
import email.policy
import json
import signal
import threading
import time

from aiosmtpd.controller import Controller


class Sink:
    def __init__(self, out):
        self.out = out

    async def handle_DATA(self, server, session, envelope):
        received = time.time()
        message = email.message_from_bytes(envelope.content, policy=email.policy.default)
        line = {"time": received, "to": list(envelope.rcpt_tos), "subject": str(message.get("Subject", ""))}
        with open(self.out, "a", encoding="utf-8") as out:
            out.write(json.dumps(line) + "\n")
        return "250 OK"


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--address", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--out", required=True)
    options = parser.parse_args()
    controller = Controller(Sink(options.out), hostname=options.address, port=options.port)
    controller.start()
    print("smtp ready", flush=True)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    stop.wait()
    controller.stop()


if __name__ == "__main__":
    main()
