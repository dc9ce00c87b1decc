"""The verdict of a scripts/soak.sh run: reads the raw logs it left in its
output folder (attempts.tsv, reloads.tsv, kills.tsv, samples.tsv,
status.jsonl, status-final.json, control-deaths.tsv, filter-control.log with
a time on each line, plan.json), prints the summary, writes summary.txt and
summary.json beside them, and exits 1 when a goal with a definite answer
failed (0 otherwise).

How each goal is counted:
- Which names are blocked when: plan.json says, per class of names, what
  bundle A (odd versions, policy A) and bundle B (even versions, policy B)
  do with them. The version filter-data uses is the one filter-control
  last logged for it ("filter-data now uses rules version N" after a swap,
  "filter-data PID is filtering with rules version N" after a start).
  Names whose fate is the same in both are judged at every moment; names
  that flip only when the attempt lies wholly outside [start - margin,
  end + margin] of every reload and margin seconds either side of every
  change of version.
- Kill windows: from each SIGKILL until filter-control logs the next
  filter-data's hello ("filter-data PID is filtering with rules version"),
  plus the margin.
- Blocked got through: an attempt on a name blocked at that moment that got
  the server's own answer (HTTP/HTTPS/QUIC `ok NAME`, DNS the server's
  address). Counted inside kill windows too: the soak runs in closed mode.
- Allowed failed: an attempt on a name allowed at that moment that did not
  get the server's answer, outside the kill windows (those inside are
  counted apart).
- Crashes other than the kills: every "filter-data exited (...)" whose
  process was not one the soak killed with SIGKILL, every "has not
  answered ... killing it", every death of filter-control.
- Reloads: every `filterctl reload` must exit 0.
- Kills: as many kills as the schedule had must have been made, and each
  must have found a filter-data to kill (kills.tsv has its pid, '-' when the
  running filter-control had none), filter-control must have seen that
  process exit "killed by signal 9", and a new filter-data must have said
  hello after it. A kill that found nothing tested nothing. The schedule is
  scripts/soak.sh's killer's: the n-th kill (n = 1, 2, ...) at start + n *
  interval + offset, made when that is before the end (no margin), so a run
  of D s has max(0, ceil((D - offset) / interval) - 1) kills. A run with
  fewer rows in kills.tsv (the killer stopped) fails, and so does a run too
  short for any kill: it tested no kill (soak.sh has no way to turn the
  kills off).
- Samples: at least one memory sample must have found filter-data and one
  filter-control (a sampler that finds neither measures nothing).
- A request whose local port an earlier request of the same protocol used
  (within --reuse-window seconds) has the same 5-tuple as that one (every
  request goes to the same server address and port); such requests are
  counted like the others and marked, with what the earlier one got.
- Memory: VmRSS and open descriptors of filter-control and filter-data, the
  mean of the samples of the last 10 minutes within 10 % (either way) of
  the mean of the samples of minutes 5-15; with less than 25 minutes the
  goal cannot be judged.
"""
import argparse
import json
import os
import re
import statistics
import sys


def read_tsv(path):
    if not os.path.exists(path):
        return []
    with open(path) as file:
        return [line.rstrip("\n").split("\t") for line in file if line.strip()]


def overlaps(start, end, windows):
    return any(start <= w_end and end >= w_start for w_start, w_end in windows)


def percentile(values, fraction):
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


def kill_schedule(start, end, interval, offset):
    """The times of the kills scripts/soak.sh's killer makes: the n-th (n = 1,
    2, ...) at start + (n * interval + offset), as long as that is before the
    end; reckoned as the killer does (awk, to the microsecond), so that a kill
    due exactly at the end is not counted either."""
    times = []
    if interval <= 0:
        return times
    n = 1
    while (t := float(f"{start + (n * interval + offset):.6f}")) < end:
        times.append(t)
        n += 1
    return times


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("folder")
    parser.add_argument("--start", type=float, required=True)
    parser.add_argument("--end", type=float, required=True)
    parser.add_argument("--margin", type=float, default=1.0)
    parser.add_argument("--reload-interval", type=float, default=10)
    parser.add_argument("--kill-interval", type=float, default=300)
    parser.add_argument("--kill-offset", type=float, default=30)
    parser.add_argument("--sample-interval", type=float, default=60)
    parser.add_argument("--reuse-window", type=float, default=300,
                        help="a request whose local port an earlier one used this many seconds before is marked as on a reused port")
    arguments = parser.parse_args()
    folder = arguments.folder
    margin = arguments.margin
    start, end = arguments.start, arguments.end
    duration_min = (end - start) / 60

    with open(os.path.join(folder, "plan.json")) as file:
        plan = json.load(file)
    expectation = {entry["class"]: (entry["A"], entry["B"]) for entry in plan["classes"]}

    # The log: (time, text).
    log = []
    with open(os.path.join(folder, "filter-control.log"), errors="replace") as file:
        for line in file:
            stamp, _, text = line.rstrip("\n").partition(" ")
            try:
                log.append((float(stamp), text))
            except ValueError:
                continue

    # Reloads and the bundle in force.
    reloads = []
    for row in read_tsv(os.path.join(folder, "reloads.tsv")):
        first, last, version, bundle, status = float(row[0]), float(row[1]), int(row[2]), row[3], int(row[4])
        reloads.append({"start": first, "end": last, "version": version, "bundle": bundle, "status": status, "output": row[5] if len(row) > 5 else ""})
    # What filter-data uses, as filter-control logs it: a hello after each
    # start, and every swap. This, not the reload's exit status, says which
    # bundle was in force (a restarted filter-data starts with the rules
    # filter-control last handed over, whatever became of them).
    switches = [(-1.0, "A")]
    for t, text in log:
        m = re.match(r"filter-control: filter-data (?:\d+ is filtering with|now uses) rules version (\d+)", text)
        if m:
            switches.append((t, "A" if int(m.group(1)) % 2 else "B"))
    zones = [(r["start"] - margin, r["end"] + margin) for r in reloads] + [(t - margin, t + margin) for t, _ in switches[1:]]

    def bundle_at(t):
        current = "A"
        for when, bundle in switches:
            if when <= t:
                current = bundle
        return current

    # Kills and how long filter-data took to come back.
    hellos = [(t, int(m.group(1))) for t, text in log if (m := re.match(r"filter-control: filter-data (\d+) is filtering with rules version", text))]
    kills = []
    for row in read_tsv(os.path.join(folder, "kills.tsv")):
        t, pid = float(row[0]), (int(row[1]) if row[1] != "-" else None)
        back = next((h for h, hp in hellos if h > t and hp != pid), None)
        kills.append({"time": t, "pid": pid, "back": back, "backMs": None if back is None else round((back - t) * 1000)})
    kill_windows = [(k["time"], (k["back"] if k["back"] is not None else k["time"] + 30) + margin) for k in kills]

    # Attempts.
    attempts = read_tsv(os.path.join(folder, "attempts.tsv"))
    by_proto = {}
    through, failed, failed_in_kills, slow_blocks = [], [], [], []
    unjudged = 0
    # (proto, local port) -> [(end, outcome)] of earlier attempts: a new
    # connection from a port an earlier one used has the same 5-tuple (every
    # request goes to the same server address and port).
    earlier = {}
    for row in sorted(attempts, key=lambda r: float(r[0])):
        a_start, a_end, proto, klass, name, outcome, port = float(row[0]), float(row[1]), row[2], row[3], row[4], row[5], row[6]
        detail = row[7] if len(row) > 7 else ""
        stats = by_proto.setdefault(proto, {"attempts": 0, "ok": 0, "refused": 0, "blockpage": 0, "timeout": 0, "error": 0})
        stats["attempts"] += 1
        stats[outcome] = stats.get(outcome, 0) + 1
        fate_a, fate_b = expectation[klass]
        if fate_a != fate_b and overlaps(a_start, a_end, zones):
            unjudged += 1
            fate = None
        else:
            bundle = bundle_at(a_start)
            fate = fate_a if bundle == "A" else fate_b
        record = {"start": a_start, "end": a_end, "proto": proto, "class": klass, "name": name, "outcome": outcome, "port": port,
                  "detail": detail, "bundle": bundle_at(a_start), "t": round(a_start - start, 1), "inKillWindow": overlaps(a_start, a_end, kill_windows)}
        before = [(e, o) for e, o in earlier.get((proto, port), []) if a_start - e <= arguments.reuse_window] if port != "0" else []
        if before:
            record["samePortBefore"] = {"secondsBefore": round(a_start - before[-1][0], 1), "outcome": before[-1][1]}
        if fate == "block":
            if outcome == "ok":
                through.append(record)
            elif outcome in ("timeout", "error") and not record["inKillWindow"]:
                slow_blocks.append(record)
        elif fate == "allow" and outcome != "ok":
            (failed_in_kills if record["inKillWindow"] else failed).append(record)
        if port != "0":
            earlier.setdefault((proto, port), []).append((a_end, outcome))

    # Crashes.
    started = [(t, int(m.group(1))) for t, text in log if (m := re.match(r"filter-control: filter-data started \(pid (\d+)\)", text))]
    killed = {k["pid"] for k in kills if k["pid"] is not None}
    exits, crashes = [], []
    for t, text in log:
        m = re.match(r"filter-control: filter-data exited \((.*)\); restarting", text)
        if m:
            pid = next((p for s, p in reversed(started) if s <= t), None)
            expected = pid in killed and m.group(1) == "killed by signal 9"
            exits.append({"t": round(t - start, 1), "pid": pid, "how": m.group(1), "ours": expected})
            if not expected:
                crashes.append({"t": round(t - start, 1), "what": f"filter-data {pid} exited ({m.group(1)})"})
        elif "has not answered for" in text:
            crashes.append({"t": round(t - start, 1), "what": text.removeprefix("filter-control: ")})
    for row in read_tsv(os.path.join(folder, "control-deaths.tsv")):
        crashes.append({"t": round(float(row[0]) - start, 1), "what": f"filter-control {row[1]} died (status {row[2]})"})
    final = {}
    try:
        with open(os.path.join(folder, "status-final.json")) as file:
            final = json.load(file)
    except (OSError, ValueError):
        pass
    restarts = final.get("dataProcess", {}).get("restarts")

    # Kills: as many as scheduled, and each one found filter-data, ended it,
    # and saw a new one come back.
    killed_by_signal = {e["pid"] for e in exits if e["ours"]}
    scheduled = kill_schedule(start, end, arguments.kill_interval, arguments.kill_offset)
    kill_failures = []
    if not scheduled:
        first = arguments.kill_interval + arguments.kill_offset
        kill_failures.append({"t": None, "why": f"no kill scheduled: the first would come at {first:g} s, not before the end of a "
                                                f"{end - start:.0f} s run (a soak that kills nothing tests no kill; "
                                                f"SOAK_KILL_INTERVAL and SOAK_KILL_OFFSET shorten the schedule)"})
    for due in scheduled[len(kills):]:
        kill_failures.append({"t": round(due - start, 1), "why": f"a kill was scheduled and none was made ({len(kills)} made of "
                                                                 f"{len(scheduled)} scheduled: did the killer stop?)"})
    if len(kills) > len(scheduled):
        kill_failures.append({"t": None, "why": f"{len(kills)} kills made, {len(scheduled)} scheduled: the report's --kill-interval "
                                                f"{arguments.kill_interval:g} and --kill-offset {arguments.kill_offset:g} are not the run's"})
    made_failures = 0
    for k in kills:
        t = round(k["time"] - start, 1)
        if k["pid"] is None:
            why = "found no filter-data to kill (no child of the running filter-control is filter-data)"
        elif k["pid"] not in killed_by_signal:
            why = f"sent SIGKILL to {k['pid']}, but filter-control saw no filter-data {k['pid']} die of it"
        elif k["back"] is None:
            why = f"filter-data {k['pid']} died and no new one said hello"
        else:
            continue
        kill_failures.append({"t": t, "why": why})
        made_failures += 1

    # Reloads.
    reload_failures = [r for r in reloads if r["status"] != 0]
    pending = [r for r in reloads if r["status"] == 0 and "restarting" in r["output"]]
    durations = [(r["end"] - r["start"]) * 1000 for r in reloads]

    # Memory and descriptors.
    samples = []
    for row in read_tsv(os.path.join(folder, "samples.tsv")):
        def number(value):
            return None if value in ("-", "") else int(value)
        samples.append({"minute": float(row[0]), "controlPid": number(row[2]), "controlRssKB": number(row[3]), "controlFds": number(row[4]),
                        "dataPid": number(row[5]), "dataRssKB": number(row[6]), "dataFds": number(row[7])})
    sampled = {"filter-data": sum(1 for s in samples if s["dataRssKB"] is not None),
               "filter-control": sum(1 for s in samples if s["controlRssKB"] is not None)}
    sample_failures = [f"no sample found {name} ({len(samples)} sample{'' if len(samples) == 1 else 's'} taken)"
                       for name, count in sampled.items() if count == 0]
    metrics = ["controlRssKB", "controlFds", "dataRssKB", "dataFds"]
    memory = {"judged": duration_min >= 25}
    if memory["judged"]:
        reference = [s for s in samples if 5 <= s["minute"] <= 15]
        last = [s for s in samples if s["minute"] > duration_min - 10]
        memory["metrics"] = {}
        for metric in metrics:
            ref_values = [s[metric] for s in reference if s[metric] is not None]
            last_values = [s[metric] for s in last if s[metric] is not None]
            if not ref_values or not last_values:
                memory["metrics"][metric] = {"ok": False, "why": "no samples"}
                continue
            ref_mean, last_mean = statistics.mean(ref_values), statistics.mean(last_values)
            change = (last_mean - ref_mean) / ref_mean if ref_mean else 0
            memory["metrics"][metric] = {"minutes5to15": round(ref_mean, 1), "last10": round(last_mean, 1), "change": round(change, 4),
                                         "ok": abs(change) <= 0.10}
        memory["ok"] = all(m["ok"] for m in memory["metrics"].values())

    goals = {
        "crashes": {"value": len(crashes), "goal": 0, "ok": not crashes},
        "blockedThrough": {"value": len(through), "goal": 0, "ok": not through},
        "reloadFailures": {"value": len(reload_failures), "goal": 0, "ok": not reload_failures},
        "kills": {"value": len(kills) - made_failures, "goal": len(scheduled), "scheduled": len(scheduled), "made": len(kills),
                  "ok": not kill_failures, "failures": kill_failures},
        "samples": {"value": sampled, "ok": not sample_failures, "failures": sample_failures},
        "memory": {"ok": memory.get("ok") if memory["judged"] else None},
    }
    failed_goals = [name for name, goal in goals.items() if goal["ok"] is False]
    summary = {
        "start": start, "end": end, "minutes": round(duration_min, 1), "margin": margin,
        "reloadInterval": arguments.reload_interval, "killInterval": arguments.kill_interval, "killOffset": arguments.kill_offset,
        "sampleInterval": arguments.sample_interval,
        "goals": goals, "failedGoals": failed_goals,
        "traffic": by_proto, "flipAttemptsNotJudged": unjudged,
        "blockedThrough": through, "allowedFailed": failed, "allowedFailedInKillWindows": len(failed_in_kills),
        "blockedButNotRefused": slow_blocks,
        "crashes": crashes, "dataExits": exits, "dataRestartsReported": restarts,
        "kills": [{"t": round(k["time"] - start, 1), "pid": k["pid"], "backMs": k["backMs"]} for k in kills],
        "reloads": {"count": len(reloads), "failed": [{"t": round(r["start"] - start, 1), "version": r["version"], "status": r["status"], "output": r["output"]} for r in reload_failures],
                    "pendingRestart": len(pending), "p50Ms": percentile(durations, 0.5), "p99Ms": percentile(durations, 0.99),
                    "maxMs": max(durations) if durations else None, "lastVersion": reloads[-1]["version"] if reloads else 1},
        "samples": samples, "memory": memory, "finalCounters": final.get("counters", {}),
    }

    lines = []
    say = lines.append

    def say_items(items):
        """Counts by protocol, class and outcome, telling apart those whose
        connection came from a local port an earlier one used; one example each."""
        groups = {}
        for item in items:
            reuse = item.get("samePortBefore")
            key = (item["proto"], item["class"], item["outcome"], reuse["outcome"] if reuse else "")
            groups.setdefault(key, []).append(item)
        for (proto, klass, outcome, reuse), members in sorted(groups.items(), key=lambda kv: (-len(kv[1]), kv[0])):
            example = members[0]
            where = f"e.g. {example['name']} at {example['t']} s, bundle {example['bundle']}"
            if example["inKillWindow"]:
                where += ", in a kill window"
            if reuse:
                earlier = {"ok": "an answered request", "refused": "a refused one"}.get(reuse, f"a request ({reuse})")
                where += f"; local port {example['port']} carried {earlier} {example['samePortBefore']['secondsBefore']} s before"
            say(f"    {len(members):>6}  {proto} {klass}: {outcome}{' on a reused local port' if reuse else ''} ({where})")

    say(f"soak: {duration_min:.1f} min, reload every {arguments.reload_interval:g} s, "
        f"filter-data killed every {arguments.kill_interval:g} s (+{arguments.kill_offset:g} s)")
    say("")
    say("traffic:")
    for proto, stats in sorted(by_proto.items()):
        rate = stats["attempts"] / max(1, end - start)
        rest = ", ".join(f"{k} {v}" for k, v in stats.items() if k != "attempts" and v)
        say(f"  {proto:<6} {stats['attempts']:>7} requests ({rate:.1f}/s): {rest}")
    say(f"  names that flip, not judged (within {margin:g} s of a reload): {unjudged}")
    r = summary["reloads"]
    say(f"reloads: {r['count']} (versions 2 to {r['lastVersion']}), failed {len(reload_failures)}, answered while filter-data restarted {r['pendingRestart']}, "
        f"time p50 {r['p50Ms'] or 0:.0f} ms, p99 {r['p99Ms'] or 0:.0f} ms, max {r['maxMs'] or 0:.0f} ms")
    for failure in r["failed"][:10]:
        say(f"  at {failure['t']} s, version {failure['version']}: exit {failure['status']}: {failure['output'][:200]}")
    say(f"kills: {len(kills)} of {len(scheduled)} scheduled; filter-data back (hello) after " + (", ".join(f"{k['backMs']} ms" if k["backMs"] is not None else "never" for k in kills) or "-"))
    say(f"filter-data exits: {len(exits)} ({sum(e['ours'] for e in exits)} the soak's kills); restarts in filterctl status: {restarts}")
    counters = final.get("counters", {})
    if counters:
        keys = ["packets", "questions", "answers", "askTimeouts", "roundTripP99Micros", "heldPacketsDropped", "queueDropped", "queueUserDropped", "netlinkErrors"]
        say("last filter-data's counters: " + ", ".join(f"{k} {counters[k]}" for k in keys if k in counters))
    say("")
    say(f"RSS and open descriptors (sampled every {arguments.sample_interval:g} s):")
    say(f"  {'minute':>6}  {'filter-control':>22}  {'filter-data':>30}")
    say(f"  {'':>6}  {'RSS MB':>10} {'fds':>11}  {'pid':>8} {'RSS MB':>10} {'fds':>10}")
    for s in samples:
        def mb(kb):
            return "-" if kb is None else f"{kb / 1024:.1f}"
        say(f"  {s['minute']:>6g}  {mb(s['controlRssKB']):>10} {s['controlFds'] if s['controlFds'] is not None else '-':>11}  "
            f"{s['dataPid'] or '-':>8} {mb(s['dataRssKB']):>10} {s['dataFds'] if s['dataFds'] is not None else '-':>10}")
    say("")
    say("goals:")
    say(f"  crashes other than the kills: {len(crashes)} (goal 0) {'PASS' if not crashes else 'FAIL'}")
    for crash in crashes[:10]:
        say(f"    at {crash['t']} s: {crash['what']}")
    def reused(items):
        return sum(1 for item in items if "samePortBefore" in item)

    say(f"  blocked requests that got through: {len(through)} (goal 0) {'PASS' if not through else 'FAIL'}"
        + (f"; {reused(through)} of them on a reused local port" if through else ""))
    say_items(through)
    say(f"  reloads that failed: {len(reload_failures)} (goal 0) {'PASS' if not reload_failures else 'FAIL'}")
    say(f"  kills that found filter-data, ended it and saw a new one: {len(kills) - made_failures} of {len(scheduled)} scheduled "
        f"(goal all) {'PASS' if not kill_failures else 'FAIL'}")
    for failure in kill_failures[:10]:
        say(f"    at {failure['t']} s: {failure['why']}" if failure["t"] is not None else f"    {failure['why']}")
    say(f"  samples that found filter-data: {sampled['filter-data']}, filter-control: {sampled['filter-control']}, of {len(samples)} "
        f"(goal at least 1 each) {'PASS' if not sample_failures else 'FAIL'}")
    for failure in sample_failures:
        say(f"    {failure}")
    if not memory["judged"]:
        say(f"  RSS and descriptors stable: cannot be judged in {duration_min:.0f} min (needs 25: minutes 5-15 against the last 10)")
    else:
        say(f"  RSS and descriptors, last 10 min within 10 % of minutes 5-15: {'PASS' if memory['ok'] else 'FAIL'}")
        for metric, m in memory["metrics"].items():
            if "change" in m:
                say(f"    {metric:<13} {m['minutes5to15']:>10} -> {m['last10']:>10} ({m['change'] * 100:+.1f} %) {'ok' if m['ok'] else 'OUT'}")
            else:
                say(f"    {metric:<13} {m['why']}")
    say(f"  allowed requests that failed outside the kill windows: {len(failed)} (no goal; inside kill windows: {len(failed_in_kills)})"
        + (f"; {reused(failed)} of them on a reused local port" if failed else ""))
    say_items(failed)
    if slow_blocks:
        say(f"  blocked requests that timed out instead of being refused, outside kill windows: {len(slow_blocks)} (no goal)")
    say("")
    say("result: " + ("PASS" if not failed_goals else "FAIL (" + ", ".join(failed_goals) + ")"))
    text = "\n".join(lines) + "\n"
    print(text, end="")
    with open(os.path.join(folder, "summary.txt"), "w") as file:
        file.write(text)
    with open(os.path.join(folder, "summary.json"), "w") as file:
        json.dump(summary, file, indent=1)
    return 1 if failed_goals else 0


if __name__ == "__main__":
    sys.exit(main())
