"""pycheck.py: the check helper of the Python tests in tests/gpu (each run as a script,
so this file is importable from its own folder): check(cond, what) counts and prints a
failed check, finish() prints the verdict and exits 1 if any failed, else 0."""
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
