"""pycheck.py: the check helper of the Python tests in tests/gpu (each run as a script,
so this file is importable from its own folder): check(cond, what) counts and prints a
failed check, finish() prints the verdict and exits 1 if any failed, else 0;
gpu_or_skip(bench) exits 77 (CTest's skipped) unless bench_gpu_bench --versions names a
driver."""
import json
import subprocess
import sys

_failures = 0


def check(cond, what):
    global _failures
    if not cond:
        _failures += 1
        print("CHECK failed:", what)


def finish():
    print("ok" if not _failures else f"{_failures} checks failed")
    sys.exit(1 if _failures else 0)


def gpu_or_skip(bench):
    v = subprocess.run([bench, "--versions"], capture_output=True, text=True)
    if v.returncode != 0 or json.loads(v.stdout or "{}").get("driver") in (None, "none"):
        print("no GPU: skipped")
        sys.exit(77)
