#!/usr/bin/env python3
"""What a lab machine's person meets, asked every few milliseconds: run in a
lab machine's namespace as a person's uid, it opens HTTP connections to
--address with Host: --name until the answer flips (--until blocked: no
"ok NAME" any more; --until reachable: "ok NAME" again) and prints the wall
clock time of the first flipped answer (Unix seconds), or "timeout".

Used by scripts/lib/live-bench.py (scripts/bench-live.sh). It prints
"ready" once it has seen the answer as it is before the change, and
"already" (and ends) when even the first answer was flipped.
"""
import argparse
import socket
import sys
import time


def reachable(address, name):
    request = ("GET / HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n" % name).encode()
    try:
        with socket.create_connection((address, 80), timeout=2) as connection:
            connection.sendall(request)
            answer = b""
            while len(answer) < 4096:
                chunk = connection.recv(4096)
                if not chunk:
                    break
                answer += chunk
    except OSError:
        return False
    return (b"ok " + name.encode()) in answer


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--address", required=True)
    parser.add_argument("--name", required=True)
    parser.add_argument("--until", choices=["blocked", "reachable"], required=True)
    parser.add_argument("--timeout", type=float, default=30)
    parser.add_argument("--interval", type=float, default=0.01)
    arguments = parser.parse_args()
    want_reachable = arguments.until == "reachable"
    # "ready" only once an answer has been seen unflipped, so that the change
    # the caller makes next is what a flip measures.
    if reachable(arguments.address, arguments.name) == want_reachable:
        print("already", flush=True)
        return
    print("ready", flush=True)
    deadline = time.monotonic() + arguments.timeout
    while time.monotonic() < deadline:
        if reachable(arguments.address, arguments.name) == want_reachable:
            print("%.6f" % time.time(), flush=True)
            return
        time.sleep(arguments.interval)
    print("timeout", flush=True)
    sys.exit(1)


if __name__ == "__main__":
    main()
