#!/usr/bin/env python3
"""test_gpu_tests_json.py: gpu_tests_json.py (which writes bench/results/gpu_tests.json in
a GPU session) on the first GPU run's ctest log (bench/results/gpu_h200_2026-11-26/ctest.log: 13
passed, 2 failed, 2 skipped), on the same log cut off mid-run, and on sanitizer logs with
errors, none, and no summary; and on the fourth run's green log (newer CTest's closing line)."""
import json
import os
import subprocess
import sys
import tempfile

here = os.path.dirname(os.path.abspath(__file__))
script = os.path.join(here, "gpu_tests_json.py")
log = os.path.join(here, "..", "..", "bench", "results", "gpu_h200_2026-11-26", "ctest.log")
from pycheck import check, finish


def run(*args):
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "gpu_tests.json")
        r = subprocess.run([sys.executable, script, "--out", out, *args], capture_output=True, text=True)
        check(r.returncode == 0, f"exit {r.returncode}: {r.stderr}")
        with open(out) as f:
            return json.load(f)


with tempfile.TemporaryDirectory() as d:
    clean, dirty, cut = (os.path.join(d, n) for n in ("clean.log", "dirty.log", "cut.log"))
    with open(clean, "w") as f:
        f.write("========= COMPUTE-SANITIZER\n1 passed, 0 failed\n========= ERROR SUMMARY: 0 errors\n")
    with open(dirty, "w") as f:
        f.write("========= Invalid __global__ read of size 4 bytes\n========= ERROR SUMMARY: 3 errors\n")
    with open(cut, "w") as f:
        f.write("========= COMPUTE-SANITIZER\n")
    versions = os.path.join(d, "versions.json")
    with open(versions, "w") as f:
        json.dump({"device": "NVIDIA H200, 143155 MiB, cc 9.0", "driver": "13.0", "cuda": "13.0",
                   "cudnn": "9.19.0", "nccl": "2.28.3"}, f)
    r = run("--ctest", log, "--sanitizer", clean, dirty, cut, "--versions", versions, "--commit", "c7960e1",
            "--date", "2026-11-26")
    check((r["passed"], r["failed"], r["skipped"]) == (13, 2, 2), f"counts {r['passed']} {r['failed']} {r['skipped']}")
    check(r["failed_tests"] == ["test_gpu_net", "test_gpu_ops"], r["failed_tests"])
    check(r["skipped_tests"] == ["test_gpu_cli_hang_nccl", "test_gpu_cli_images"], r["skipped_tests"])
    check(r["sanitizer_errors"] == 4, f"sanitizer_errors {r['sanitizer_errors']} (0 + 3 + 1 for the cut log)")
    check(r["ctest_complete"] is True, "complete")
    check(r["cudnn"] == "9.19.0" and r["commit"] == "c7960e1" and r["date"] == "2026-11-26", "fields")
    for k in ("device", "driver", "cuda", "cudnn", "nccl", "commit", "date", "passed", "failed", "skipped",
              "sanitizer_errors"):
        check(k in r, f"key {k}")
    # the log cut off while test_gpu_cli_recipe ran: it counts as failed (unfinished)
    with open(log) as f:
        lines = f.read().splitlines()
    stop = next(i for i, l in enumerate(lines) if "Test #88: test_gpu_cli_recipe" in l)
    part = os.path.join(d, "part.log")
    with open(part, "w") as f:
        f.write("\n".join(lines[:stop]) + "\n")
    r = run("--ctest", part)
    check(r["tests"].get("test_gpu_cli_recipe") == "Unfinished", r["tests"].get("test_gpu_cli_recipe"))
    check(r["ctest_complete"] is False, "cut log marked incomplete")
    check(r["sanitizer_errors"] is None and r["device"] is None, "no sanitizer logs / versions: null")
    check(r["passed"] == 6 and r["skipped"] == 1, f"cut counts {r['passed']} {r['skipped']}")

    # the fourth run's log (H200, 69bd8725f31b): every test passed but one skipped, and the GPU
    # machine's CTest closes with "100% tests passed out of 20" (no "0 tests failed")
    green = os.path.join(here, "..", "..", "bench", "results", "gpu_h200_2026-11-26c", "call1_ctest.log")
    r = run("--ctest", green)
    check((r["passed"], r["failed"], r["skipped"]) == (19, 0, 1), f"green counts {r['passed']} {r['failed']} {r['skipped']}")
    check(r["ctest_complete"] is True, "green log complete")
    check(r["skipped_tests"] == ["test_gpu_cli_hang_nccl"], r["skipped_tests"])

finish()
