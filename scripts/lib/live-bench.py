#!/usr/bin/env python3
"""The live channel under a fleet, for scripts/bench-live.sh.

--sims simulated machines (scripts/lib/fleet-sim.py's Machine: each its own
Ed25519 key, every request signed as a real machine signs it) enrol with
--sim-token and each holds POST /api/v1/machine/live open, as filter-control
does, for the whole run. Meanwhile, --rounds times, a teacher's room rule
goes to --room through the API (POST /api/v1/rooms/ROOM/rules, a block of a
name of its own for 10 minutes) and is then ended (DELETE); on each real
lab machine (--labs: network namespaces with filter-control running) a
probe (scripts/lib/live-probe.py, as --uid) asks for the name every 10 ms
and notes when it was first refused, and, after the end, when it was
first served again. The latency of a sample is that moment minus the
moment just before the API request was sent (one clock: every namespace
shares this machine's).

Then, --request-rounds times, a person on a real machine (a machine each
round) asks for a blocked name on the block page (its form, with the page's
token and a reason, as a browser posts it); the time until GET
/api/v1/requests lists it (the console's request list asks the same every second); the
teacher approves it for the room; the time until the probe is served the
site, and until the student's waiting page would load it (it reloads
itself every 2 s from the moment it was shown).

Prints one JSON object: the samples' p50, p99 and max for the rule and for
its end, how many probes timed out, the simulated machines' held polls
(answers with a state, empty answers, failures) and the server's resident
memory (VmRSS, VmHWM of --server-pid) with every poll held.
"""
import argparse
import asyncio
import base64
import importlib.util
import json
import math
import re
import os
import random
import ssl
import sys
import time

import aiohttp

here = os.path.dirname(os.path.abspath(__file__))
# The block page's refresh while a request waits (BlockPageRenderer.pendingRefreshSeconds).
PAGE_REFRESH = 2.0
spec = importlib.util.spec_from_file_location("fleet_sim", os.path.join(here, "fleet-sim.py"))
fleet_sim = importlib.util.module_from_spec(spec)
spec.loader.exec_module(fleet_sim)


class Holders:
    def __init__(self):
        self.states = 0
        self.empty = 0
        self.failures: dict[str, int] = {}
        self.holding = 0

    def fail(self, kind):
        self.failures[kind] = self.failures.get(kind, 0) + 1


async def hold(session, server, machine, holders, stop):
    """One simulated machine's live poll, held again as soon as it returns."""
    after = 0
    path = "/api/v1/machine/live"
    while not stop.is_set():
        body = json.dumps({"after": after, "wait": 25}).encode()
        holders.holding += 1
        try:
            async with session.post(server + path, data=body, headers=machine.headers("POST", path, body)) as response:
                text = await response.read()
                if response.status == 200:
                    envelope = json.loads(text)
                    payload = json.loads(base64.b64decode(envelope["payload"]))
                    after = payload["sequence"]
                    holders.states += 1
                elif response.status == 204:
                    holders.empty += 1
                else:
                    holders.fail("live %d" % response.status)
                    await asyncio.sleep(1 + random.random())
        except (aiohttp.ClientError, asyncio.TimeoutError, ValueError, KeyError) as error:
            holders.fail("live " + type(error).__name__)
            await asyncio.sleep(1 + random.random())
        finally:
            holders.holding -= 1


async def probe(args, namespace, name, until):
    """Starts a probe in `namespace`; returns (process, awaitable of its answer) once it is ready."""
    process = await asyncio.create_subprocess_exec(
        "ip", "netns", "exec", namespace, "setpriv", "--reuid=%d" % args.uid, "--regid=%d" % args.uid, "--clear-groups",
        "/usr/bin/python3", os.path.join(here, "live-probe.py"), "--address", args.nginx, "--name", name, "--until", until,
        "--timeout", "30", stdout=asyncio.subprocess.PIPE)
    first = (await process.stdout.readline()).decode().strip()
    return process, first


async def run(*argv):
    """A command's exit status and standard output."""
    process = await asyncio.create_subprocess_exec(*argv, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.DEVNULL)
    output, _ = await process.communicate()
    return process.returncode, output.decode(errors="replace")


def as_person(args, namespace):
    return ["ip", "netns", "exec", namespace, "setpriv", "--reuid=%d" % args.uid, "--regid=%d" % args.uid, "--clear-groups"]


async def request_round(args, session, bearer, namespace, name):
    """One access request: asked on the block page, seen at the server, approved, in force. Returns the timings."""
    page = ["curl", "-sS", "-m", "5", "--resolve", "%s:80:127.0.0.1" % name]
    _, body = await run(*as_person(args, namespace), *page, "http://%s/" % name)
    match = re.search(r'name="token" value="([^"]+)"', body)
    if not match:
        raise RuntimeError("no request form on %s's block page for %s: %s" % (namespace, name, body[:300]))
    asked = time.time()
    status, answer = await run(
        *as_person(args, namespace), *page, "-o", "/dev/null", "-w", "%{http_code}", "--data-urlencode", "host=" + name,
        "--data-urlencode", "url=http://%s/" % name, "--data-urlencode", "reason=bench-live", "--data-urlencode", "token=" + match.group(1),
        "http://%s/request-access" % name)
    shown = time.time()  # the "received" page, which reloads itself every 2 s from here
    if answer.strip() != "200":
        raise RuntimeError("the request form was refused: %s" % answer)
    request_id = None
    while request_id is None:
        async with session.get(args.server + "/api/v1/requests?state=pending&room=" + args.room, headers=bearer) as response:
            listed = json.loads(await response.text())
        request_id = next((item["id"] for item in listed.get("requests", []) if item.get("host") == name), None)
        if request_id is None:
            if time.time() - asked > 30:
                raise RuntimeError("the request for %s did not reach the server in 30 s" % name)
            await asyncio.sleep(0.02)
    at_server = time.time()
    process, first = await probe(args, namespace, name, "reachable")
    if first != "ready":
        raise RuntimeError("the probe for %s said %s" % (name, first))
    approved = time.time()
    body = json.dumps({"scope": "room", "minutes": 10, "message": "bench-live"})
    async with session.post(args.server + "/api/v1/requests/%s/approve" % request_id, data=body, headers=bearer) as response:
        if response.status != 200:
            raise RuntimeError("the approval was refused (%d): %s" % (response.status, (await response.text())[:300]))
    enforced = float(await finish(process))
    # The student's page loads the site at its first reload after the machine has the approval.
    ticks = max(0, math.ceil((enforced - shown) / PAGE_REFRESH))
    page_loads = shown + ticks * PAGE_REFRESH
    return at_server - asked, enforced - approved, page_loads - approved


async def finish(process):
    line = (await process.stdout.readline()).decode().strip()
    await process.wait()
    return line


def percentile(values, fraction):
    if not values:
        return None
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, int(fraction * len(ordered)))], 4)


def summary(values):
    return {"samples": len(values), "p50": percentile(values, 0.5), "p99": percentile(values, 0.99),
            "max": round(max(values), 4) if values else None}


def memory(pid):
    fields = {}
    with open("/proc/%d/status" % pid) as status:
        for line in status:
            key, _, value = line.partition(":")
            if key in ("VmRSS", "VmHWM"):
                fields[key] = round(int(value.split()[0]) / 1024, 1)
    return fields


async def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--server", required=True)
    parser.add_argument("--server-pid", type=int, required=True)
    parser.add_argument("--api-token", required=True, help="a bearer token that may set the room's rules")
    parser.add_argument("--sim-token", required=True, help="an enrolment token with --sims uses")
    parser.add_argument("--sims", type=int, default=3000)
    parser.add_argument("--labs", required=True, help="the real lab machines' namespaces, comma-separated")
    parser.add_argument("--room", default="lab1")
    parser.add_argument("--nginx", required=True, help="the sites' address, as the lab machines reach it")
    parser.add_argument("--uid", type=int, default=61000)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--request-rounds", type=int, default=10, help="access requests asked and approved, one lab machine each")
    args = parser.parse_args()
    labs = [name for name in args.labs.split(",") if name]

    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    connector = aiohttp.TCPConnector(limit=0, ssl=context)
    timeout = aiohttp.ClientTimeout(total=60)
    stop = asyncio.Event()
    holders = Holders()
    enrol_stats = fleet_sim.Stats()
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        machines = [fleet_sim.Machine(index) for index in range(args.sims)]
        started = time.monotonic()
        gate = asyncio.Semaphore(50)

        async def enrol(machine):
            async with gate:
                await fleet_sim.enrol(session, args.server, args.sim_token.split(".", 2)[2], machine, enrol_stats)

        await asyncio.gather(*(enrol(machine) for machine in machines))
        enrolled_in = time.monotonic() - started
        tasks = [asyncio.create_task(hold(session, args.server, machine, holders, stop)) for machine in machines]
        # Every simulated machine holds its poll before the first rule.
        for _ in range(600):
            if holders.holding >= args.sims:
                break
            await asyncio.sleep(0.1)
        held_before = holders.holding
        bearer = {"Authorization": "Bearer " + args.api_token, "Content-Type": "application/json"}
        rule_latencies, end_latencies = [], []
        timeouts = {"rule": 0, "end": 0, "already": 0}
        memory_held = memory(args.server_pid)
        for round_number in range(args.rounds):
            name = "live-%d-%d.test" % (os.getpid(), round_number)
            for until, latencies, kind in (("blocked", rule_latencies, "rule"), ("reachable", end_latencies, "end")):
                probes = await asyncio.gather(*(probe(args, namespace, name, until) for namespace in labs))
                ready = [process for process, first in probes if first == "ready"]
                for process, first in probes:
                    if first != "ready":
                        timeouts["already"] += 1
                        await process.wait()
                sent = time.time()
                if kind == "rule":
                    body = json.dumps({"action": "block", "targets": [name], "minutes": 10, "reason": "bench-live"})
                    async with session.post(args.server + "/api/v1/rooms/%s/rules" % args.room, data=body, headers=bearer) as response:
                        answer = await response.text()
                        if response.status != 201:
                            raise RuntimeError("the room rule was refused (%d): %s" % (response.status, answer[:300]))
                        rule_id = json.loads(answer)["id"]
                else:
                    async with session.delete(args.server + "/api/v1/rooms/%s/rules/%s" % (args.room, rule_id), headers=bearer) as response:
                        answer = await response.text()
                        if response.status // 100 != 2:
                            raise RuntimeError("ending the rule was refused (%d): %s" % (response.status, answer[:300]))
                for line in await asyncio.gather(*(finish(process) for process in ready)):
                    try:
                        latencies.append(float(line) - sent)
                    except ValueError:
                        timeouts[kind] += 1
            memory_held = max(memory_held, memory(args.server_pid), key=lambda fields: fields.get("VmRSS", 0))
        to_server, to_enforced, to_page = [], [], []
        for round_number in range(args.request_rounds):
            name = "req-%d.test" % round_number
            server_s, enforced_s, page_s = await request_round(args, session, bearer, labs[round_number % len(labs)], name)
            to_server.append(server_s)
            to_enforced.append(enforced_s)
            to_page.append(page_s)
        stop.set()
        result = {
            "sims": args.sims, "labs": len(labs), "rounds": args.rounds, "enrolledSeconds": round(enrolled_in, 1),
            "heldBeforeFirstRule": held_before,
            "rule": summary(rule_latencies), "end": summary(end_latencies), "probeFailures": timeouts,
            "request.toServer": summary(to_server), "request.approvalToSite": summary(to_enforced),
            "request.approvalToPage": summary(to_page),
            "sims.states": holders.states, "sims.empty": holders.empty, "sims.failures": holders.failures,
            "serverMemoryMB": memory_held,
        }
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    print(json.dumps(result))
    if timeouts["rule"] or timeouts["end"] or timeouts["already"] or holders.failures or held_before < args.sims:
        sys.exit(1)


if __name__ == "__main__":
    asyncio.run(main())
