"""Tests of the soak's judge and of how it finds filter-data (scripts/test.sh
runs them with pytest; no root, no network).

- scripts/lib/soak-report.py on crafted runs: a good run passes; a kill that
  found no filter-data, a kill whose process filter-control never saw die,
  and memory samples that never found filter-data each fail the run, with
  the reason in the summary.
- bench_data_pid (scripts/lib/bench-network.sh), which the soak's kills and
  samples use, against a real parent process: it finds the child that is
  filter-data when the folder it was given reaches the program through a
  link, and not a child that only calls itself filter-data. Each test ends
  the processes it started, the children's own children included, and fails
  when one is left.
"""
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


class Run:
    """The raw logs of a soak run of two minutes with one kill at 60 s, as
    scripts/soak.sh leaves them; each part can be changed before `judge`."""

    def __init__(self, folder):
        self.folder = folder
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
            [sys.executable, REPORT, self.folder, "--start", str(START), "--end", str(END), "--kill-interval", "60", "--sample-interval", "60"],
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
        self.assertIn("filter-data back (hello) after 120 ms", text)
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
        self.run_.kills = [(START + 30, "-"), (START + 60, "-"), (START + 90, "-")]
        self.run_.log = self.run_.log[:2]
        self.run_.samples = [row[:5] + ("-", "-", "-") for row in self.run_.samples]
        status, text, _ = self.run_.judge()
        self.assertEqual(status, 1, text)
        self.assertIn("result: FAIL (kills, samples)", text)


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
