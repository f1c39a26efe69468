#!/usr/bin/env python3
"""Runs every test that needs a GPU, quickly, and says how it went in one line.

Called by `tools/run_tests.sh gpu` after it built BUILD_DIR for this machine's
GPU. What it runs:
- the GoogleTest suites of every test file that checks for a GPU (uses
  STRATA_SKIP_WITHOUT_GPU or asks cuda::device_count()), in a few processes
  side by side (gtest sharding) rather than a process per test: each process
  pays CUDA's start-up once;
- the ctest tests whose names end in `_gpu` (the command-line GPU tests:
  data parallel over nccl, pipeline and tensor parallelism, the timeline),
  at the same time.
It ends with one line, `GPU tests: N ran, P passed, F failed, S skipped`, and
before it the failed tests and every skipped test with its reason (on a
machine with a GPU a skip is worth reading). Exit status 1 when a test failed
or none ran.

Usage: gpu_tests.py BUILD_DIR [--shards N] [--timeout SECONDS] [--out DIR]
"""
import argparse
import glob
import os
import re
import signal
import subprocess
import sys
import time
import xml.etree.ElementTree as ET

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GPU_CHECK = re.compile(r"STRATA_SKIP_WITHOUT_GPU|cuda::device_count\(\)")
TEST_MACRO = re.compile(r"^\s*(?:TEST|TEST_F|TEST_P|TYPED_TEST|TYPED_TEST_P)\(\s*(\w+)\s*,", re.M)


def gpu_suites():
    """The gtest suites of the test files that check for a GPU, and the files."""
    suites, files = set(), []
    for path in sorted(glob.glob(os.path.join(ROOT, "tests", "*_test.cpp"))):
        text = open(path, encoding="utf-8").read()
        if not GPU_CHECK.search(text):
            continue
        files.append(os.path.basename(path))
        suites.update(TEST_MACRO.findall(text))
    return sorted(suites), files


def gtest_results(xml_path):
    """[(name, 'passed'|'failed'|'skipped', message)] from a gtest XML report."""
    out = []
    try:
        root = ET.parse(xml_path).getroot()
    except (OSError, ET.ParseError) as e:
        return [(os.path.basename(xml_path), "failed", f"no report ({e}): the shard crashed or was killed")]
    for case in root.iter("testcase"):
        name = f"{case.get('classname')}.{case.get('name')}"
        failure = case.find("failure")
        skipped = case.find("skipped")
        if failure is not None:
            out.append((name, "failed", (failure.get("message") or "").split("\n")[0]))
        elif skipped is not None or case.get("result") == "skipped" or case.get("status") == "notrun":
            # gtest's message begins with the GTEST_SKIP's file:line; the reason follows.
            message = (skipped.get("message") if skipped is not None else "") or ""
            lines = [line for line in message.split("\n") if line and not re.match(r"^\S+:\d+$", line)]
            out.append((name, "skipped", " ".join(lines)))
        else:
            out.append((name, "passed", ""))
    return out


def ctest_results(junit_path, log_path, progress_dir):
    out = []
    try:
        root = ET.parse(junit_path).getroot()
    except (OSError, ET.ParseError):
        # ctest was stopped: what it started and did not finish, from its log.
        text = open(log_path, encoding="utf-8", errors="replace").read() if os.path.exists(log_path) else ""
        started = re.findall(r"Start\s+\d+: (\S+)", text)
        for name in started:
            m = re.search(r"Test\s+#\d+: " + re.escape(name) + r" \.+\s*(\*{0,3}\w+)", text)
            if m and m.group(1) == "Passed":
                out.append((name, "passed", ""))
            elif m and "Skipped" in m.group(1):
                out.append((name, "skipped", "exit code 77"))
            elif m:
                out.append((name, "failed", f"see {log_path}"))
            else:
                tail = progress_tail(progress_dir, name)
                out.append((name, "failed", "did not finish in the time given" + (f"; its last lines:\n{tail}"
                                                                                 if tail else "")))
        return out or [("ctest", "failed", f"no report; see {log_path}")]
    for case in root.iter("testcase"):
        status = case.get("status", "")
        name = case.get("name")
        if status == "fail" or case.find("failure") is not None:
            out.append((name, "failed", f"see {log_path}"))
        elif status in ("notrun", "disabled") or case.find("skipped") is not None:
            out.append((name, "skipped", "exit code 77: the test's own check found no usable GPU or backend"))
        else:
            out.append((name, "passed", ""))
    return out


def progress_tail(progress_dir, test_name, lines=12):
    """The end of what a CLI test wrote to STRATA_TEST_PROGRESS_DIR (cli.x_gpu -> x_gpu*.log)."""
    stem = test_name.split(".", 1)[-1]
    text = []
    for path in sorted(glob.glob(os.path.join(progress_dir, stem + "*.log"))):
        last = open(path, encoding="utf-8", errors="replace").read().splitlines()[-lines:]
        text += [f"        {os.path.basename(path)}: {line}" for line in last]
    return "\n".join(text)


def stop(proc, grace_s=10):
    """SIGTERM to the runner's whole session (a CLI test's ranks too), then SIGKILL."""
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    except ProcessLookupError:
        pass


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("build", help="the build folder (configured for this GPU)")
    p.add_argument("--shards", type=int, default=max(1, min(6, (os.cpu_count() or 2) // 2)))
    p.add_argument("--timeout", type=int, default=420, help="seconds for the whole run")
    p.add_argument("--out", default=None, help="folder for the reports and logs (default BUILD/gpu-tests)")
    a = p.parse_args()
    build = os.path.abspath(a.build)
    out = os.path.abspath(a.out or os.path.join(build, "gpu-tests"))
    os.makedirs(out, exist_ok=True)
    binary = os.path.join(build, "tests", "strata_tests")
    if not os.path.exists(binary):
        print(f"gpu_tests.py: {binary} does not exist: build the tests first", file=sys.stderr)
        return 2
    suites, files = gpu_suites()
    gfilter = ":".join(f"{s}.*:*/{s}.*" for s in suites)
    print(f"    gtest: {len(suites)} suites from {len(files)} files that check for a GPU, {a.shards} processes")
    t0 = time.time()
    procs = []
    for i in range(a.shards):
        env = dict(os.environ, GTEST_TOTAL_SHARDS=str(a.shards), GTEST_SHARD_INDEX=str(i))
        log = open(os.path.join(out, f"gtest-shard{i}.log"), "w")
        xml = os.path.join(out, f"gtest-shard{i}.xml")
        if os.path.exists(xml):
            os.remove(xml)
        procs.append((subprocess.Popen([binary, f"--gtest_filter={gfilter}", f"--gtest_output=xml:{xml}"],
                                       stdout=log, stderr=subprocess.STDOUT, env=env, cwd=build,
                                       start_new_session=True), xml, log))
    ctest_log = os.path.join(out, "ctest.log")
    junit = os.path.join(out, "ctest.xml")
    progress = os.path.join(out, "progress")
    os.makedirs(progress, exist_ok=True)
    for stale in [junit] + glob.glob(os.path.join(progress, "*.log")):
        if os.path.exists(stale):
            os.remove(stale)
    with open(ctest_log, "w") as log:
        # The CLI tests write their progress (and their ranks' output) under
        # STRATA_TEST_PROGRESS_DIR as they go: a test stopped for time still
        # shows where it was.
        ctest = subprocess.Popen(["ctest", "-R", "_gpu$", "-j", "3", "--output-on-failure", "--timeout",
                                  str(a.timeout), "--output-junit", junit], stdout=log, stderr=subprocess.STDOUT,
                                 cwd=build, start_new_session=True,
                                 env=dict(os.environ, STRATA_TEST_PROGRESS_DIR=progress))
    deadline = t0 + a.timeout
    for proc in [p for p, _, _ in procs] + [ctest]:
        try:
            proc.wait(timeout=max(1, deadline - time.time()))
        except subprocess.TimeoutExpired:
            print(f"    out of time after {a.timeout} s: stopping {' '.join(proc.args[:2])} and what it started")
            stop(proc)
    results = []
    for _, xml, log in procs:
        log.close()
        results += gtest_results(xml)
    results += ctest_results(junit, ctest_log, progress)
    elapsed = time.time() - t0
    failed = [r for r in results if r[1] == "failed"]
    skipped = [r for r in results if r[1] == "skipped"]
    passed = [r for r in results if r[1] == "passed"]
    if skipped:
        reasons = {}
        for name, _, why in skipped:
            reasons.setdefault(why or "(no reason given)", []).append(name)
        print(f"    skipped on this GPU machine ({len(skipped)}):")
        for why, names in sorted(reasons.items(), key=lambda kv: -len(kv[1])):
            shown = ", ".join(names[:4]) + (f" and {len(names) - 4} more" if len(names) > 4 else "")
            print(f"      {len(names)} x {why}: {shown}")
    for name, _, why in failed:
        print(f"    FAILED {name}: {why}")
    if failed:
        print(f"    logs: {out}")
    print(f"GPU tests: {len(results)} ran, {len(passed)} passed, {len(failed)} failed, {len(skipped)} skipped "
          f"in {elapsed:.0f} s")
    return 1 if failed or not results else 0


if __name__ == "__main__":
    sys.exit(main())
