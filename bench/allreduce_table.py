#!/usr/bin/env python3
"""allreduce_table.py: the MEASURED rows of bench/results/allreduce.json (bench/allreduce/) as
Markdown tables, for docs/benchmarks.md: per device and backend, all-reduce time and
bandwidth of single messages and of the ResNet-50 gradient in DDP buckets, and the DDP
step record (hidden communication, bucket timeline).

usage: bench/allreduce_table.py [--json bench/results/allreduce.json] [--device SUBSTR]
Plain python3, no third-party modules.
"""
import argparse
import json


def ms(s):
    return "%.3f" % (s * 1e3) if s < 0.01 else "%.2f" % (s * 1e3)


def tables(rows, device, backend, world, w):
    sel = [r for r in rows if r["device"] == device and r["backend"] == backend and r["world"] == world]
    if not sel:
        return
    first = sel[0]
    w("#### %s, %s, world %d (MEASURED %s, commit %s)" % (device, backend, world, first.get("when", "?"),
                                                            first.get("commit", "?")))
    w("")
    if world == 1:
        w("World 1: no data moves between ranks; these times are the per-call cost only and busbw is 0 "
          "by definition.")
        w("")
    msgs = [r for r in sel if r["kind"] == "message"]
    bw = "algbw" if world == 1 else "busbw"
    if msgs:
        w("Single all-reduce (avg) of an fp32 gradient of the given size, sent as fp32 or compressed to "
          "16 bits (same elements, half the bytes); median time in ms (%s GB/s); %s:" % (
              bw, msgs[0].get("timer", "")))
        w("")
        combos = []
        for r in msgs:
            c = (r["dtype"], r.get("staging"))
            if c not in combos:
                combos.append(c)
        sizes = sorted({r["fp32_mib"] for r in msgs})
        w("| fp32 MiB | " + " | ".join(d + (", " + st if st else "") for d, st in combos) + " |")
        w("|---:|" + "---:|" * len(combos))
        for mib in sizes:
            cells = []
            for d, st in combos:
                m = [r for r in msgs if r["fp32_mib"] == mib and r["dtype"] == d and r.get("staging") == st]
                cells.append("%s (%.2f)" % (ms(m[0]["seconds"]), m[0][bw + "_GBps"]) if m else "-")
            w("| %g | %s |" % (mib, " | ".join(cells)))
        w("")
    bk = [r for r in sel if r["kind"] == "buckets"]
    if bk:
        w("The whole %s gradient (%d values, %.1f MiB fp32) through comm/ddp.c, every bucket ready at once "
          "(no overlap), median wall time:" % (bk[0]["arch"], bk[0]["elements"], bk[0]["elements"] * 4 / 2 ** 20))
        w("")
        dts = []
        for r in bk:
            if r["dtype"] not in dts:
                dts.append(r["dtype"])
        mbs = sorted({r["bucket_mb"] for r in bk})
        w("| bucket MiB | buckets | " + " | ".join("%s ms (%s GB/s)" % (d, bw) for d in dts) + " |")
        w("|---:|---:|" + "---:|" * len(dts))
        for mb in mbs:
            cells = []
            nb = "-"
            for d in dts:
                m = [r for r in bk if r["bucket_mb"] == mb and r["dtype"] == d]
                if m:
                    nb = m[0]["n_buckets"]
                    cells.append("%s (%.2f)" % (ms(m[0]["seconds"]), m[0][bw + "_GBps"]))
                else:
                    cells.append("-")
            w("| %g | %s | %s |" % (mb, nb, " | ".join(cells)))
        w("")
    for r in [r for r in sel if r["kind"] == "ddp_step"]:
        w("DDP steps: %s, batch %d per rank, %s, bucket %g MiB, %d steps after %d warm-up (%s):" % (
            r["arch"], r["batch_per_rank"], r["precision"], r["bucket_mb"], r["steps"], r["warmup"], r["clock"]))
        w("")
        w("| step (ms) | forward (ms) | backward (ms) | wait in finish_step (ms) | all-reduce / step (ms) | "
          "exposed / step (ms) | hidden (1 - exposed / all-reduce) | comm_exposed_fraction |")
        w_note = ("Step, forward, backward and the wait in ddp_finish_step are medians over the steps; "
                  "all-reduce and exposed are means (totals / steps, as summary.json sums them). Exposed is "
                  "the time in ddp_finish_step plus ddp_sync_buffers (BN buffer broadcast), waiting for "
                  "the slower rank included.")
        w("|---:|---:|---:|---:|---:|---:|---:|---:|")
        hid = r.get("hidden_fraction")
        w("| %.2f | %.2f | %.2f | %.2f | %.2f | %.2f | %s | %.3f |" % (
            r["step_seconds"] * 1e3, r["forward_seconds"] * 1e3, r["backward_seconds"] * 1e3,
            r["finish_wait_seconds"] * 1e3, r["allreduce_seconds_per_step"] * 1e3,
            r["exposed_seconds_per_step"] * 1e3, "-" if hid is None else "%.0f%%" % (100 * hid),
            r["comm_exposed_fraction"]))
        w("")
        w(w_note)
        w("")
        tl = r.get("bucket_timeline_last_step")
        if tl:
            w("Bucket timeline of the last step (ddp_last_timeline; %s; backward returned at %.2f ms):" % (
                tl["clock"], tl["finish_enter_s"] * 1e3))
            w("")
            w("| bucket | values | ready (ms) | handed to comm (ms) | all-reduce ran (ms) | wait returned (ms) |")
            w("|---:|---:|---:|---:|---:|---:|")
            for i, b in enumerate(tl["buckets"]):
                w("| %d | %d | %.2f | %.2f | %.2f | %.2f |" % (i, b["end"] - b["begin"], b["ready_s"] * 1e3,
                                                              b["started_s"] * 1e3, b["op_s"] * 1e3,
                                                              b["done_s"] * 1e3))
            w("")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--json", default="bench/results/allreduce.json")
    ap.add_argument("--device", help="substring of the device name (default: all)")
    args = ap.parse_args()
    with open(args.json) as f:
        rows = json.load(f)["rows"]
    if args.device:
        rows = [r for r in rows if args.device in r["device"]]
    seen = []
    for r in rows:
        k = (r["device"], r["backend"], r["world"])
        if k not in seen:
            seen.append(k)
    out = []
    for k in seen:
        tables(rows, k[0], k[1], k[2], out.append)
    print("\n".join(out))


if __name__ == "__main__":
    main()
