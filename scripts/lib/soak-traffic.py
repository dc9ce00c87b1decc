"""Traffic for scripts/soak.sh, run in the client namespace: one process per
protocol (http, https, quic, dns) sends one request after another, cycling
through the classes of names in the plan, until a given time. Each attempt
is one line of its output file, tab-separated:

    start end proto class name outcome local_port detail

start and end are seconds since the epoch; outcome is one of
    ok         the server's own answer: `ok NAME` over HTTP, HTTPS and QUIC,
               the server's address over DNS
    refused    the connection was reset (TCP) or refused with ICMP (QUIC):
               how hallpass blocks a flow
    blockpage  DNS answered with the block page's address (127.0.0.1)
    timeout    nothing within the deadline (what closed mode does while
               filter-data is down)
    error      anything else, said in detail
The generator does not judge: scripts/lib/soak-report.py knows from the
reload log which names were blocked when.

`soak-traffic.py lookup --plan PLAN DIR` writes the lookup folder's files
for the plan's pool classes instead.
"""
import argparse
import errno
import itertools
import json
import os
import socket
import ssl
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "Tests", "IntegrationTests", "Helpers"))

DEADLINE = 3.0
POOL = 50


def names(plan, proto):
    """Endless (class, name) pairs, one class after the other."""
    counter = itertools.count(1)
    letter = proto[0] if proto != "https" else "s"
    for entry in itertools.cycle(plan["classes"]):
        n = next(counter)
        kind = entry.get("names", "sub")
        if kind == "pool":
            name = f"q{n % POOL}.{entry['base']}"
        elif kind == "fresh":
            name = f"{letter}{n}-{plan['run']}.{entry['base']}"
        else:
            name = f"{letter}{n}.{entry['base']}"
        yield entry["class"], name


def classify_error(error):
    if isinstance(error, (socket.timeout, TimeoutError)):
        return "timeout", ""
    if isinstance(error, (ConnectionResetError, ConnectionRefusedError)):
        return "refused", type(error).__name__
    if isinstance(error, OSError) and error.errno in (errno.ECONNRESET, errno.ECONNREFUSED):
        return "refused", errno.errorcode.get(error.errno, "")
    if isinstance(error, ssl.SSLError) and "reset" in str(error).lower():
        return "refused", str(error)
    return "error", f"{type(error).__name__}: {error}"


def http(server, name, tls):
    """One HTTP/1.1 request (new connection) for `name`."""
    port = 0
    raw = socket.socket(socket.AF_INET6 if ":" in server else socket.AF_INET, socket.SOCK_STREAM)
    try:
        with raw:
            raw.settimeout(DEADLINE)
            try:
                raw.connect((server, 443 if tls else 80))
            finally:
                # The local port even when the connection is refused (the kernel chose it).
                port = raw.getsockname()[1]
            conn = raw
            if tls:
                context = ssl.create_default_context()
                context.check_hostname = False
                context.verify_mode = ssl.CERT_NONE
                conn = context.wrap_socket(raw, server_hostname=name)
            conn.sendall(f"GET / HTTP/1.1\r\nHost: {name}\r\nConnection: close\r\n\r\n".encode())
            answer = b""
            while True:
                chunk = conn.recv(4096)
                if not chunk:
                    break
                answer += chunk
        body = answer.split(b"\r\n\r\n", 1)[-1].decode(errors="replace").strip()
        if body == f"ok {name}":
            return "ok", port, ""
        if not answer:
            return "error", port, "closed without an answer"
        return "error", port, "answer: " + body[:60]
    except Exception as error:  # noqa: BLE001 - every failure is an outcome to record
        outcome, detail = classify_error(error)
        return outcome, port, detail


def quic(server, name):
    import quic_client

    status, text, port = quic_client.request(server, name, deadline=DEADLINE)
    if status == 0:
        return ("ok", port, "") if text == f"ok {name}" else ("error", port, "answer: " + text[:60])
    return {3: "refused", 2: "timeout"}.get(status, "error"), port, "" if status in (2, 3) else text


def dns(server, name):
    result = subprocess.run(
        ["dig", "+short", "+time=2", "+tries=1", f"@{server}", name, "A"], capture_output=True, text=True, timeout=DEADLINE + 2
    )
    answer = result.stdout.strip()
    if result.returncode == 9:
        return "timeout", 0, ""
    if result.returncode != 0:
        return "error", 0, f"dig exit {result.returncode}: {answer[:60]}"
    if answer == server:
        return "ok", 0, ""
    if answer in ("127.0.0.1", "::1"):
        return "blockpage", 0, ""
    return "error", 0, "answer: " + answer.replace("\n", " ")[:60]


def generate(arguments):
    with open(arguments.plan) as file:
        plan = json.load(file)
    attempt = {
        "http": lambda name: http(arguments.server, name, tls=False),
        "https": lambda name: http(arguments.server, name, tls=True),
        "quic": lambda name: quic(arguments.server, name),
        "dns": lambda name: dns(arguments.server, name),
    }[arguments.proto]
    with open(arguments.out, "a") as out:
        for klass, name in names(plan, arguments.proto):
            start = time.time()
            if start >= arguments.until:
                break
            outcome, port, detail = attempt(name)
            end = time.time()
            detail = detail.replace("\t", " ").replace("\n", " ")
            out.write(f"{start:.6f}\t{end:.6f}\t{arguments.proto}\t{klass}\t{name}\t{outcome}\t{port}\t{detail}\n")
            out.flush()
            time.sleep(arguments.pause)


def lookup(arguments):
    with open(arguments.plan) as file:
        plan = json.load(file)
    os.makedirs(arguments.folder, exist_ok=True)
    for entry in plan["classes"]:
        if entry.get("names") != "pool":
            continue
        for n in range(POOL):
            with open(os.path.join(arguments.folder, f"q{n}.{entry['base']}"), "w") as file:
                file.write(f"{entry['lookup']}\nttl {plan['lookupTTL']}\n")


def main():
    parser = argparse.ArgumentParser()
    commands = parser.add_subparsers(dest="command", required=True)
    run = commands.add_parser("run")
    run.add_argument("--proto", required=True, choices=["http", "https", "quic", "dns"])
    run.add_argument("--server", required=True)
    run.add_argument("--plan", required=True)
    run.add_argument("--out", required=True)
    run.add_argument("--until", type=float, required=True)
    run.add_argument("--pause", type=float, default=0.05)
    files = commands.add_parser("lookup")
    files.add_argument("--plan", required=True)
    files.add_argument("folder")
    arguments = parser.parse_args()
    if arguments.command == "run":
        generate(arguments)
    else:
        lookup(arguments)


if __name__ == "__main__":
    main()
