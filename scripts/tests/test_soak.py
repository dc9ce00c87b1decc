"""Tests of the soak's judge and of how it finds filter-data (scripts/test.sh
runs them with pytest; no root, no network).

- scripts/lib/soak-report.py on crafted runs: a good run passes; a kill that
  found no filter-data, a kill whose process filter-control never saw die,
  fewer kills than the schedule had (none at all, or a killer that stopped),
  a run too short for any kill, and memory samples that never found
  filter-data each fail the run, with the reason in the summary. The
  schedule is counted as scripts/soak.sh's killer makes it.
- bench_data_pid (scripts/lib/bench-network.sh), which the soak's kills and
  samples use, against a real parent process: it finds the child that is
  filter-data when the folder it was given reaches the program through a
  link, and not a child that only calls itself filter-data. Each test ends
  the processes it started, the children's own children included, and fails
  when one is left.
"""
import importlib.util
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import unittest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
REPORT = os.path.join(ROOT, "scripts", "lib", "soak-report.py")
BENCH_NETWORK = os.path.join(ROOT, "scripts", "lib", "bench-network.sh")

START = 1_700_000_000.0
END = START + 120


def load_report():
    spec = importlib.util.spec_from_file_location("soak_report", REPORT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class Run:
    """The raw logs of a soak run of two minutes with one kill at 60 s (kills
    every 60 s, offset 0: one is scheduled), as scripts/soak.sh leaves them;
    each part can be changed before `judge`."""

    def __init__(self, folder):
        self.folder = folder
        self.kill_interval, self.kill_offset = 60, 0
        self.log = [
            (START - 2, "filter-control: filter-data started (pid 100)"),
            (START - 1.9, "filter-control: filter-data 100 is filtering with rules version 1"),
            (START + 60.01, "filter-control: filter-data exited (killed by signal 9); restarting"),
            (START + 60.07, "filter-control: filter-data started (pid 101)"),
            (START + 60.12, "filter-control: filter-data 101 is filtering with rules version 1"),
        ]
        self.kills = [(START + 60, "100")]
        # minute time control_pid rss fds data_pid rss fds
        self.samples = [
            ("1", START + 60.5, "50", "30000", "40", "101", "12000", "14"),
            ("2", START + 120, "50", "30100", "40", "101", "12100", "14"),
        ]
        self.attempts = [
            (START + 10, START + 10.01, "http", "good", "a.good.test", "ok", "40000"),
            (START + 20, START + 20.01, "http", "never", "a.never.test", "refused", "40001"),
        ]

    def kill_at(self, *seconds):
        """Kills at these seconds after the start, each as a good one: filter-data
        100, 101, ... killed, filter-control saw it die, a new one said hello."""
        self.log = self.log[:2]
        self.kills = []
        for n, second in enumerate(seconds):
            t = START + second
            self.log += [
                (t + 0.01, "filter-control: filter-data exited (killed by signal 9); restarting"),
                (t + 0.07, f"filter-control: filter-data started (pid {101 + n})"),
                (t + 0.12, f"filter-control: filter-data {101 + n} is filtering with rules version 1"),
            ]
            self.kills.append((t, str(100 + n)))

    def judge(self):
        """Runs soak-report.py: (exit status, summary text, summary.json)."""
        plan = {"run": "1", "classes": [{"class": "good", "base": "good.test", "A": "allow", "B": "allow"},
                                        {"class": "never", "base": "never.test", "A": "block", "B": "block"}]}
        with open(os.path.join(self.folder, "plan.json"), "w") as file:
            json.dump(plan, file)
        tables = {
            "filter-control.log": [f"{t:.6f} {text}" for t, text in self.log],
            "kills.tsv": ["\t".join(f"{v:.6f}" if isinstance(v, float) else v for v in row) for row in self.kills],
            "samples.tsv": ["\t".join(f"{v:.6f}" if isinstance(v, float) else v for v in row) for row in self.samples],
            "attempts.tsv": ["\t".join(f"{v:.6f}" if isinstance(v, float) else v for v in row) for row in self.attempts],
        }
        for name, lines in tables.items():
            with open(os.path.join(self.folder, name), "w") as file:
                file.write("".join(line + "\n" for line in lines))
        result = subprocess.run(
            [sys.executable, REPORT, self.folder, "--start", str(START), "--end", str(END), "--kill-interval", str(self.kill_interval),
             "--kill-offset", str(self.kill_offset), "--sample-interval", "60"],
            capture_output=True, text=True)
        with open(os.path.join(self.folder, "summary.json")) as file:
            summary = json.load(file)
        return result.returncode, result.stdout, summary


class SoakReportTests(unittest.TestCase):
    def setUp(self):
        self.folder = tempfile.mkdtemp(prefix="hallpass-soak-report-")
        self.addCleanup(shutil.rmtree, self.folder)
        self.run_ = Run(self.folder)

    def test_a_good_run_passes(self):
        status, text, summary = self.run_.judge()
        self.assertEqual(status, 0, text)
        self.assertIn("result: PASS", text)
        self.assertIn("kills: 1 of 1 scheduled; filter-data back (hello) after 120 ms", text)
        self.assertIn("kills that found filter-data, ended it and saw a new one: 1 of 1 scheduled (goal all) PASS", text)
        self.assertTrue(summary["goals"]["kills"]["ok"])
        self.assertTrue(summary["goals"]["samples"]["ok"])

    def test_a_kill_that_found_no_filter_data_fails(self):
        # What the soak logged when its search by path found nothing.
        self.run_.kills = [(START + 60, "-")]
        self.run_.log = self.run_.log[:2]
        status, text, summary = self.run_.judge()
        self.assertEqual(status, 1, text)
        self.assertIn("result: FAIL (kills)", text)
        self.assertIn("at 60.0 s: found no filter-data to kill", text)
        self.assertFalse(summary["goals"]["kills"]["ok"])

    def test_a_kill_whose_process_never_died_fails(self):
        self.run_.kills = [(START + 60, "999")]
        self.run_.log = self.run_.log[:2]
        status, text, _ = self.run_.judge()
        self.assertEqual(status, 1, text)
        self.assertIn("sent SIGKILL to 999, but filter-control saw no filter-data 999 die of it", text)

    def test_a_killed_filter_data_that_never_came_back_fails(self):
        self.run_.log = self.run_.log[:4]
        status, text, _ = self.run_.judge()
        self.assertEqual(status, 1, text)
        self.assertIn("filter-data 100 died and no new one said hello", text)

    def test_samples_that_never_found_filter_data_fail(self):
        self.run_.samples = [row[:5] + ("-", "-", "-") for row in self.run_.samples]
        status, text, summary = self.run_.judge()
        self.assertEqual(status, 1, text)
        self.assertIn("result: FAIL (samples)", text)
        self.assertIn("no sample found filter-data (2 samples taken)", text)
        self.assertEqual(summary["goals"]["samples"]["value"]["filter-data"], 0)

    def test_a_run_without_samples_fails(self):
        self.run_.samples = []
        status, text, _ = self.run_.judge()
        self.assertEqual(status, 1, text)
        self.assertIn("no sample found filter-data (0 samples taken)", text)

    def test_the_run_that_passed_by_accident_fails(self):
        # Three kills that found nothing, no exit, no filter-data in the samples.
        self.run_.kill_interval = 30
        self.run_.kills = [(START + 30, "-"), (START + 60, "-"), (START + 90, "-")]
        self.run_.log = self.run_.log[:2]
        self.run_.samples = [row[:5] + ("-", "-", "-") for row in self.run_.samples]
        status, text, _ = self.run_.judge()
        self.assertEqual(status, 1, text)
        self.assertIn("result: FAIL (kills, samples)", text)


    def test_a_run_whose_kills_were_never_made_fails(self):
        # Kills every 30 s: at 30, 60 and 90 s (not at 120, the end). The
        # killer made none (it died, say): kills.tsv is empty. 0 of 0 is no pass.
        self.run_.kill_interval = 30
        self.run_.kill_at()
        status, text, summary = self.run_.judge()
        self.assertEqual(status, 1, text)
        self.assertIn("result: FAIL (kills)", text)
        self.assertIn("kills: 0 of 3 scheduled", text)
        self.assertIn("saw a new one: 0 of 3 scheduled (goal all) FAIL", text)
        for second in (30, 60, 90):
            self.assertIn(f"at {second}.0 s: a kill was scheduled and none was made (0 made of 3 scheduled: did the killer stop?)", text)
        kills = summary["goals"]["kills"]
        self.assertEqual((kills["scheduled"], kills["made"], kills["ok"]), (3, 0, False))

    def test_a_killer_that_stopped_early_fails(self):
        # Kills every 30 s from 60 s on: at 60 and 90 s; only the first was made.
        self.run_.kill_interval, self.run_.kill_offset = 30, 30
        self.run_.kill_at(60)
        status, text, _ = self.run_.judge()
        self.assertEqual(status, 1, text)
        self.assertIn("at 90.0 s: a kill was scheduled and none was made (1 made of 2 scheduled", text)
        self.assertIn("saw a new one: 1 of 2 scheduled (goal all) FAIL", text)

    def test_every_scheduled_kill_made_passes(self):
        # Kills every 40 s: at 40 and 80 s; the one due at 120 s, the end, is not made.
        self.run_.kill_interval = 40
        self.run_.kill_at(40, 80)
        status, text, summary = self.run_.judge()
        self.assertEqual(status, 0, text)
        self.assertIn("saw a new one: 2 of 2 scheduled (goal all) PASS", text)
        self.assertEqual(summary["goals"]["kills"]["scheduled"], 2)

    def test_more_kills_than_scheduled_fail(self):
        # The report was told another schedule than the run's.
        self.run_.kill_interval = 40
        self.run_.kill_at(30, 60, 90)
        status, text, _ = self.run_.judge()
        self.assertEqual(status, 1, text)
        self.assertIn("3 kills made, 2 scheduled: the report's --kill-interval 40 and --kill-offset 0 are not the run's", text)

    def test_a_run_too_short_for_any_kill_fails(self):
        # The defaults (every 300 s, offset 30) in a run of two minutes: the first
        # kill would come at 330 s. Nothing was killed, and nothing should have
        # been, but a soak that kills nothing tested no kill.
        self.run_.kill_interval, self.run_.kill_offset = 300, 30
        self.run_.kill_at()
        status, text, summary = self.run_.judge()
        self.assertEqual(status, 1, text)
        self.assertIn("result: FAIL (kills)", text)
        self.assertIn("no kill scheduled: the first would come at 330 s, not before the end of a 120 s run", text)
        self.assertFalse(summary["goals"]["kills"]["ok"])


class KillScheduleTests(unittest.TestCase):
    """kill_schedule against scripts/soak.sh's killer: the n-th kill (n = 1, 2,
    ...) at start + n * interval + offset while that is before the end."""

    def setUp(self):
        self.schedule = load_report().kill_schedule

    def count(self, duration, interval=300, offset=30, start=1_764_316_800.123457):
        # start as $EPOCHREALTIME gives it, end as soak.sh reckons it (awk, %.6f).
        return len(self.schedule(start, float(f"{start + duration:.6f}"), interval, offset))

    def test_the_runs_of_benchmarks_md(self):
        self.assertEqual(self.count(3600), 11)  # 1 h: 5:30, 10:30, ... 55:30
        self.assertEqual(self.count(2400), 7)   # 40 min
        self.assertEqual(self.count(360), 1)    # 6 min
        self.assertEqual(self.count(75, interval=20, offset=5), 3)  # 25, 45, 65 s

    def test_the_end_of_the_run(self):
        self.assertEqual(self.count(330), 0)  # the first kill would be due at the end: not made
        self.assertEqual(self.count(331), 1)
        self.assertEqual(self.count(630), 1)
        self.assertEqual(self.count(631), 2)
        self.assertEqual(self.count(90), 0)

    def test_the_times(self):
        self.assertEqual(self.schedule(1000.0, 1120.0, 40, 0), [1040.0, 1080.0])
        self.assertEqual(self.schedule(1000.5, 1100.0, 20, 5), [1025.5, 1045.5, 1065.5, 1085.5])


class DataProcessFinderTests(unittest.TestCase):
    """bench_data_pid against a real parent (a shell) and real children."""

    def setUp(self):
        self.folder = tempfile.mkdtemp(prefix="hallpass-finder-")
        self.addCleanup(shutil.rmtree, self.folder)
        # The programs' folder, and a link to it as HALLPASS_BIN would give it
        # (.build/release is such a link).
        self.real = os.path.join(self.folder, "x86_64-unknown-linux-gnu", "release")
        os.makedirs(self.real)
        self.link = os.path.join(self.folder, "release")
        os.symlink(self.real, self.link)
        # "filter-data": a program of that name (a copy of sleep).
        shutil.copy(shutil.which("sleep"), os.path.join(self.real, "filter-data"))
        # Not filter-data: a script that calls itself filter-data (its process
        # has that name, but its program is the shell).
        self.impostor = os.path.join(self.folder, "impostor", "filter-data")
        os.makedirs(os.path.dirname(self.impostor))
        with open(self.impostor, "w") as file:
            file.write("#!/bin/bash\nsleep 30\n")
        os.chmod(self.impostor, 0o755)

    def parent(self, children):
        """A shell whose children run `children` (shell words), once each is
        there; in a session of its own, which `stop` ends whole."""
        script = "".join(f"{child} & " for child in children) + "wait"
        process = subprocess.Popen(["bash", "-c", script], start_new_session=True)
        self.addCleanup(self.stop, process)
        def command(pid):
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as file:
                    return file.read()
            except OSError:
                return None
        for _ in range(100):
            found = subprocess.run(["pgrep", "-P", str(process.pid)], capture_output=True, text=True).stdout.split()
            # Each child has run its program (until then it is a copy of the shell).
            if len(found) == len(children) and all(command(pid) not in (None, command(process.pid)) for pid in found):
                return process, found
            time.sleep(0.05)
        self.fail(f"the children of {process.pid} did not start")

    def stop(self, process):
        """Kills the shell and every process of its session (the impostor's
        own `sleep` included, a grandchild that `pkill -P` would leave behind),
        and fails the test when any of them is still there after 10 s."""
        try:
            os.killpg(process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        process.wait()
        for _ in range(200):
            left = self.session(process.pid)
            if not left:
                return
            time.sleep(0.05)
        self.fail(f"processes the test started are still there: {left}")

    @staticmethod
    def session(sid):
        """The live processes of session `sid`, 'pid state command' each; not
        zombies, which are dead and wait for whoever reaps orphans (pid 1 or a
        subreaper, at its own pace)."""
        found = []
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                with open(f"/proc/{entry}/stat") as file:
                    stat = file.read()
            except OSError:
                continue
            command, _, rest = stat.partition("(")[2].rpartition(")")
            fields = rest.split()
            if int(fields[3]) == sid and fields[0] not in ("Z", "X"):  # state ppid pgrp session ...
                found.append(f"{entry} {fields[0]} {command}")
        return found

    def find(self, control_pid, by_variable=False):
        """bench_data_pid as the soak calls it: bin the link, pid as argument or $control_pid."""
        call = "control_pid=$1; bench_data_pid" if by_variable else 'control_pid=""; bench_data_pid "$1"'
        result = subprocess.run(
            ["bash", "-c", f'source "$0"; bin={self.link}; bench_queue=8; {call}', BENCH_NETWORK, str(control_pid)],
            capture_output=True, text=True)
        return result.returncode, result.stdout.strip()

    def test_finds_filter_data_started_by_the_resolved_path(self):
        # filter-control starts filter-data by the folder's resolved path,
        # among other children.
        process, children = self.parent(["sleep 30", f"{self.real}/filter-data 30", self.impostor])
        data = [pid for pid in children if os.readlink(f"/proc/{pid}/exe") == f"{self.real}/filter-data"]
        self.assertEqual(len(data), 1)
        for by_variable in (False, True):
            self.assertEqual(self.find(process.pid, by_variable), (0, data[0]))

    def test_a_child_that_only_calls_itself_filter_data_is_not_found(self):
        process, _ = self.parent(["sleep 30", self.impostor])
        self.assertEqual(self.find(process.pid), (1, ""))

    def test_no_filter_control_no_filter_data(self):
        self.assertEqual(self.find(""), (1, ""))


if __name__ == "__main__":
    unittest.main()
