#!/usr/bin/env python3
"""A fleet of simulated lab machines against one hallpass-server.

Each simulated machine enrols with its own Ed25519 key (POST /api/v1/enrol,
one token with enough uses), then, for --duration seconds, checks in every
--checkin-interval seconds (each machine at its own offset in the interval,
as real machines started at different times do) and posts audit records in
order, numbered from 1, at its share of --records-per-second, in batches of
what it made since its last post (at most 1,000). Every request is signed
as docs/server.md describes (the Hallpass-* headers). A record counts as
ingested when the server's storedThrough covers it.

Each machine also holds its live request (POST /api/v1/machine/live, signed
the same way, --live-wait seconds at a time; docs/server.md, "The live
channel") on a connection of its own, as filter-control does, checks each
live state's signature with the key the envelope names and that the state
is its own and newer than the one it holds, and counts the states received.

It prints one JSON object: what was sent, what the server stored, the
rate, the live states received, the failures by kind and the latency of
the posts. The machines'
identities are kept in --state (a JSON file) so that a second run against
the same server skips the enrolment.

Used by scripts/bench-server.sh; run it with the venv that script makes
(aiohttp, cryptography).
"""
import argparse
import asyncio
import base64
import hashlib
import json
import os
import random
import ssl
import sys
import time

import aiohttp
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from cryptography.hazmat.primitives import serialization

KINDS = ["tls", "http", "dns", "quic"]
HOSTS = ["casino.example", "games.example", "news.example", "video.example", "search.example"]
CATEGORIES = ["gambling", "games", None, "video", None]


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


class Machine:
    def __init__(self, index: int, seed: bytes | None = None, machine_id: str | None = None, next_sequence: int = 1):
        self.index = index
        self.key = Ed25519PrivateKey.from_private_bytes(seed) if seed else Ed25519PrivateKey.generate()
        self.id = machine_id
        self.next_sequence = next_sequence
        self.stored_through = next_sequence - 1
        self.pending = 0  # records made and not yet posted

    def seed(self) -> bytes:
        return self.key.private_bytes(serialization.Encoding.Raw, serialization.PrivateFormat.Raw,
                                      serialization.NoEncryption())

    def public_key(self) -> bytes:
        return self.key.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)

    def headers(self, method: str, path: str, body: bytes) -> dict:
        date = str(int(time.time()))
        signed = "\n".join(["hallpass-request-v1", method, path, date, hashlib.sha256(body).hexdigest()]).encode()
        return {
            "Hallpass-Machine": self.id,
            "Hallpass-Date": date,
            "Hallpass-Signature": "ed25519 " + b64(self.key.sign(signed)),
            "Content-Type": "application/json",
        }

    def record(self, sequence: int, now: float) -> dict:
        pick = (self.index + sequence) % len(HOSTS)
        record = {
            "sequence": sequence,
            "time": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(now)) + ".%03dZ" % int((now % 1) * 1000),
            "uid": 1000 + self.index % 30,
            "user": "student%d" % (self.index % 30),
            "group": "year%d" % (7 + self.index % 5),
            "kind": KINDS[sequence % len(KINDS)],
            "host": HOSTS[pick],
            "destination": "192.0.2.%d" % (1 + pick),
            "port": 443,
            "action": "block" if CATEGORIES[pick] else "allow",
            "reason": "category" if CATEGORIES[pick] else "unknown",
            "rulesVersion": 1,
        }
        if CATEGORIES[pick]:
            record["category"] = CATEGORIES[pick]
            record["rule"] = HOSTS[pick]
        return record


class Stats:
    def __init__(self):
        self.sent = 0
        self.stored = 0
        self.checkins = 0
        self.live_polls = 0
        self.live_states = 0
        self.live_items = 0
        self.failures: dict[str, int] = {}
        self.post_latencies: list[float] = []
        self.checkin_latencies: list[float] = []

    def fail(self, kind: str):
        self.failures[kind] = self.failures.get(kind, 0) + 1


async def enrol(session, server, token_secret, machine, stats):
    body = json.dumps({"token": token_secret, "publicKey": b64(machine.public_key()),
                       "hostname": "sim-%05d" % machine.index, "version": "fleet-sim"}).encode()
    async with session.post(server + "/api/v1/enrol", data=body, headers={"Content-Type": "application/json"}) as response:
        text = await response.text()
        if response.status != 201:
            stats.fail("enrol %d" % response.status)
            raise RuntimeError("enrolment refused (%d): %s" % (response.status, text[:200]))
        machine.id = json.loads(text)["machine"]


async def post_records(session, server, machine, stats, now):
    count = min(machine.pending, 1000)
    if count == 0:
        return
    first = machine.next_sequence
    records = [machine.record(first + offset, now) for offset in range(count)]
    body = json.dumps({"records": records, "dropped": 0}, separators=(",", ":")).encode()
    path = "/api/v1/machine/records"
    started = time.monotonic()
    try:
        async with session.post(server + path, data=body, headers=machine.headers("POST", path, body)) as response:
            text = await response.text()
            if response.status != 200:
                stats.fail("records %d" % response.status)
                return
            through = json.loads(text)["storedThrough"]
    except (aiohttp.ClientError, asyncio.TimeoutError) as error:
        stats.fail("records " + type(error).__name__)
        return
    stats.post_latencies.append(time.monotonic() - started)
    stats.sent += count
    if through >= first + count - 1:
        stats.stored += count
        machine.next_sequence = first + count
        machine.pending -= count
        machine.stored_through = through
    else:
        stats.fail("records storedThrough short")


async def check_in(session, server, machine, stats):
    body = json.dumps({"version": "fleet-sim", "rulesVersion": 1, "rulesSince": "2026-11-28T08:00:00Z",
                       "filterData": "running", "filterDataRestarts": 0, "failMode": "closed",
                       "queueDrops": 0, "recordsWaiting": machine.pending, "recordsDropped": 0,
                       "users": ["student%d" % (machine.index % 30)]}).encode()
    path = "/api/v1/machine/checkin"
    started = time.monotonic()
    try:
        async with session.post(server + path, data=body, headers=machine.headers("POST", path, body)) as response:
            await response.read()
            if response.status != 200:
                stats.fail("checkin %d" % response.status)
                return
    except (aiohttp.ClientError, asyncio.TimeoutError) as error:
        stats.fail("checkin " + type(error).__name__)
        return
    stats.checkin_latencies.append(time.monotonic() - started)
    stats.checkins += 1


async def hold_live(session, server, machine, stats, args, stop):
    """The machine's long poll, until the run's end: one request held at a time."""
    sequence = 0
    path = "/api/v1/machine/live"
    while True:
        left = stop - time.monotonic()
        if left < 1:
            return
        body = json.dumps({"after": sequence, "wait": int(min(args.live_wait, left))}).encode()
        try:
            async with session.post(server + path, data=body, headers=machine.headers("POST", path, body)) as response:
                text = await response.text()
                stats.live_polls += 1
                if response.status == 204:
                    continue
                if response.status != 200:
                    stats.fail("live %d" % response.status)
                    await asyncio.sleep(1)
                    continue
        except (aiohttp.ClientError, asyncio.TimeoutError) as error:
            stats.fail("live " + type(error).__name__)
            await asyncio.sleep(1)
            continue
        envelope = json.loads(text)
        payload = base64.b64decode(envelope["payload"])
        try:
            key = envelope["key"]
            Ed25519PublicKey.from_public_bytes(base64.b64decode(key[len("ed25519:"):])).verify(
                base64.b64decode(envelope["signature"]), payload)
        except (InvalidSignature, ValueError, KeyError):
            stats.fail("live signature")
            continue
        state = json.loads(payload)
        if state["machine"] != machine.id or state["sequence"] <= sequence:
            stats.fail("live state not this machine's or not newer")
            continue
        sequence = state["sequence"]
        stats.live_states += 1
        stats.live_items += len(state["items"])


async def run_machine(session, server, machine, stats, args, start, stop):
    rate = args.records_per_second / args.machines  # records a second for this machine
    checkin_at = start + random.uniform(0, args.checkin_interval)
    post_at = start + random.uniform(0, args.post_interval)
    made_until = start
    while True:
        now = time.monotonic()
        if now >= stop:
            break
        if now >= checkin_at:
            await check_in(session, server, machine, stats)
            checkin_at += args.checkin_interval
        if now >= post_at:
            # The records this machine made since the last post, at its rate.
            machine.pending += int((now - start) * rate) - int((made_until - start) * rate)
            made_until = now
            await post_records(session, server, machine, stats, time.time())
            post_at += args.post_interval
        await asyncio.sleep(max(0.0, min(checkin_at, post_at, stop) - time.monotonic()))


def percentile(values, fraction):
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


async def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--server", required=True, help="https://127.0.0.1:PORT")
    parser.add_argument("--token", required=True, help="an enrolment token (hp1....) with enough uses")
    parser.add_argument("--machines", type=int, default=100)
    parser.add_argument("--records-per-second", type=float, default=1000, help="for the whole fleet")
    parser.add_argument("--duration", type=float, default=60)
    parser.add_argument("--checkin-interval", type=float, default=60)
    parser.add_argument("--post-interval", type=float, default=1, help="how often each machine posts what it made")
    parser.add_argument("--connections", type=int, default=256, help="open connections at most")
    parser.add_argument("--state", help="JSON file keeping the machines' identities between runs")
    parser.add_argument("--live-wait", type=int, default=30, help="seconds each live request is held (0: no live requests)")
    args = parser.parse_args()

    token_secret = args.token.split(".", 2)[2]
    machines: list[Machine] = []
    if args.state and os.path.exists(args.state):
        with open(args.state) as file:
            for index, entry in enumerate(json.load(file)):
                machines.append(Machine(index, base64.b64decode(entry["seed"]), entry["id"], entry["next"]))
    machines = machines[:args.machines]
    stats = Stats()
    # Loopback to a server this benchmark started with its own self-signed certificate:
    # the pinning of real machines is tested elsewhere; here only the server's load counts.
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    connector = aiohttp.TCPConnector(limit=args.connections, ssl=context)
    timeout = aiohttp.ClientTimeout(total=60)
    # The live requests are held: on connections of their own, as many as machines,
    # so that they never wait for the posts' connections or keep them.
    live_connector = aiohttp.TCPConnector(limit=0, ssl=context)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session, \
            aiohttp.ClientSession(connector=live_connector, timeout=timeout) as live_session:
        enrol_started = time.monotonic()
        new = [Machine(index) for index in range(len(machines), args.machines)]
        for chunk in range(0, len(new), 200):
            await asyncio.gather(*(enrol(session, args.server, token_secret, machine, stats) for machine in new[chunk:chunk + 200]))
        machines.extend(new)
        enrol_seconds = time.monotonic() - enrol_started
        start = time.monotonic()
        stop = start + args.duration
        live = [hold_live(live_session, args.server, machine, stats, args, stop) for machine in machines] if args.live_wait > 0 else []
        await asyncio.gather(*(run_machine(session, args.server, machine, stats, args, start, stop) for machine in machines), *live)
        elapsed = time.monotonic() - start
    if args.state:
        with open(args.state, "w") as file:
            json.dump([{"seed": b64(m.seed()), "id": m.id, "next": m.next_sequence} for m in machines], file)
    made = sum(m.next_sequence - 1 + m.pending for m in machines)
    result = {
        "machines": args.machines,
        "enrolled": len(new),
        "enrolSeconds": round(enrol_seconds, 2),
        "seconds": round(elapsed, 2),
        "recordsMade": made,
        "recordsStored": stats.stored,
        "recordsWaiting": sum(m.pending for m in machines),
        "storedPerSecond": round(stats.stored / elapsed, 1),
        "checkins": stats.checkins,
        "livePolls": stats.live_polls,
        "liveStates": stats.live_states,
        "liveItems": stats.live_items,
        "failures": stats.failures,
        "postP50ms": round(1000 * percentile(stats.post_latencies, 0.50), 1) if stats.post_latencies else None,
        "postP95ms": round(1000 * percentile(stats.post_latencies, 0.95), 1) if stats.post_latencies else None,
        "checkinP95ms": round(1000 * percentile(stats.checkin_latencies, 0.95), 1) if stats.checkin_latencies else None,
    }
    print(json.dumps(result))
    return 0 if not stats.failures else 1


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
