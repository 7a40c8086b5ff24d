#!/usr/bin/env python3
"""gpu_tests_json.py: bench/results/gpu_tests.json from one GPU session's logs.

Reads the log of `ctest -L gpu` (ctest's own progress lines, "12/17 Test #79: test_gpu_ops
....***Failed  0.90 sec") and the logs of compute-sanitizer runs ("========= ERROR
SUMMARY: 3 errors"), plus the versions the runner's CUDA backend reports
(`bench_gpu_bench --versions`: {device, driver, cuda, cudnn, nccl}), and writes

  {device, driver, cuda, cudnn, nccl, commit, date, passed, failed, skipped,
   sanitizer_errors, tests: {name: status}, failed_tests, skipped_tests,
   sanitizer: [{log, errors}], ctest_complete}

passed/failed/skipped count ctest's result lines (Failed, Timeout, Exception, Not Run and
a test ctest started but never finished count as failed). sanitizer_errors is the sum of
the ERROR SUMMARY counts; a sanitizer log without a summary (the tool was killed or never
ran the program) counts as one error, so a cut-short check is never reported clean;
null when no sanitizer log was given. ctest_complete is false when the log lacks
ctest's closing "tests passed" line (the stage ran out of time).

Usage: gpu_tests_json.py --ctest LOG [--sanitizer LOG ...] [--versions JSON]
                         [--commit C] [--date D] [--out FILE]
Exit status 0 when the JSON was written (whatever the tests did), 2 on unreadable input.
"""
import argparse
import datetime
import json
import os
import re
import sys

RESULT = re.compile(r"^\s*\d+/\d+\s+Test\s+#\d+:\s+(\S+)\s+\.*\s*(\**)\s*"
                    r"(Passed|Failed|Skipped|Not Run|Timeout|Exception|SEGFAULT|Child aborted|"
                    r"Subprocess aborted|\w[\w ]*?)\b")
START = re.compile(r"^\s*Start\s+\d+:\s+(\S+)")
# "100% tests passed, 0 tests failed out of 186" (CTest 3.25 here) or, from newer CTest (the
# GPU machine's), "100% tests passed out of 20" when none failed
SUMMARY = re.compile(r"(\d+)% tests passed(?:, (\d+) tests? failed)? out of (\d+)")
SAN = re.compile(r"ERROR SUMMARY:\s+(\d+)\s+error")


def parse_ctest(text):
    """{name: status} from ctest's result lines; tests started but never finished are
    'Unfinished'."""
    tests, started = {}, []
    for line in text.splitlines():
        m = START.match(line)
        if m:
            started.append(m.group(1))
            continue
        m = RESULT.match(line)
        if m:
            word = m.group(3).strip()
            tests[m.group(1)] = "Skipped" if word.startswith("Skipped") else word
    for name in started:
        tests.setdefault(name, "Unfinished")
    return tests, bool(SUMMARY.search(text))


def parse_sanitizer(text):
    """Errors in one compute-sanitizer log; None when it has no ERROR SUMMARY."""
    counts = [int(m.group(1)) for m in SAN.finditer(text)]
    return sum(counts) if counts else None


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ctest", required=True)
    ap.add_argument("--sanitizer", nargs="*", default=[])
    ap.add_argument("--versions")
    ap.add_argument("--commit", default="unknown")
    ap.add_argument("--date", default=datetime.date.today().isoformat())
    ap.add_argument("--out")
    a = ap.parse_args(argv)
    try:
        with open(a.ctest, errors="replace") as f:
            tests, complete = parse_ctest(f.read())
    except OSError as e:
        print(f"gpu_tests_json: cannot read the ctest log {a.ctest}: {e.strerror}", file=sys.stderr)
        return 2
    versions = {}
    if a.versions:
        try:
            with open(a.versions) as f:
                versions = json.load(f)
        except (OSError, ValueError) as e:
            print(f"gpu_tests_json: {a.versions}: {e} (versions left null)", file=sys.stderr)
    san, san_total = [], None
    for path in a.sanitizer:
        try:
            with open(path, errors="replace") as f:
                n = parse_sanitizer(f.read())
        except OSError:
            n = None
        san.append({"log": os.path.basename(path), "errors": n})
        san_total = (san_total or 0) + (1 if n is None else n)
    passed = sorted(t for t, s in tests.items() if s == "Passed")
    skipped = sorted(t for t, s in tests.items() if s == "Skipped")
    failed = sorted(t for t, s in tests.items() if s not in ("Passed", "Skipped"))
    out = {k: versions.get(k) for k in ("device", "driver", "cuda", "cudnn", "nccl")}
    out.update({"commit": a.commit, "date": a.date, "passed": len(passed), "failed": len(failed),
                "skipped": len(skipped), "sanitizer_errors": san_total, "tests": dict(sorted(tests.items())),
                "failed_tests": failed, "skipped_tests": skipped, "sanitizer": san,
                "ctest_complete": complete})
    text = json.dumps(out, indent=1) + "\n"
    if a.out:
        with open(a.out, "w") as f:
            f.write(text)
    print(f"gpu tests: {len(passed)} passed, {len(failed)} failed {failed or ''}, {len(skipped)} skipped "
          f"{skipped or ''}; sanitizer errors: {san_total}; ctest complete: {complete}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
