#!/usr/bin/env python3
"""scaling_model.py: a MODEL (not a measurement) of DDP step time and scaling efficiency at
2/4/8 ranks, built from the measured rows of bench/results/allreduce.json
(bench/allreduce/).

For one measured DDP run (a "ddp_step" record: per-rank batch, step time, backward time,
and the ready profile = when, after backward started, each part of the gradient was final)
it replays every bucket size against the measured ready times:

  bucket i is ready at r_i   = the first profile time whose offset <= the bucket's begin
  its all-reduce takes  t_i  = alpha * 2(n-1) + 2(n-1)/n * S_i / B      (ring all-reduce)
  all-reduces run one after another in bucket order (as on the comm's thread / stream):
      s_i = max(r_i, e_{i-1}),  e_i = s_i + t_i
  exposed(n) = max(0, e_last - T_backward)            (what the step waits for)
  step(n)    = compute + exposed(n), compute = measured step - measured exposed
  efficiency = compute / step(n)  (per-rank batch fixed: throughput n*batch/step(n)
               against n times one rank's compute-only throughput)

B (bus bandwidth) comes from the measured busbw of the largest fp32 messages at world >= 2
on the same device and backend, alpha from a straight-line fit of the measured message
times (the smallest message's time less its bandwidth term). When only world 1 was measurable (one GPU: NCCL moves nothing between GPUs), B is the
nominal NVLink figure of the device (table NOMINAL below, with its source) and alpha an
assumption; both are printed as such, with a sensitivity table.

usage: bench/scaling_model.py [--json bench/results/allreduce.json] [--device SUBSTR]
           [--backend nccl|shm] [--worlds 2,4,8] [--alpha-us A] [--busbw-GBps B]
           [--markdown OUT.md]
Plain python3, no third-party modules.
"""
import argparse
import json
import statistics
import sys

# Nominal NVLink bandwidth per GPU, GB/s in each direction (the datasheets give the
# bidirectional total; a ring all-reduce sends and receives at once, so it is bounded by
# one direction). Matched against the device name in order; first match wins.
NOMINAL = [
    ("H100 PCIe", 300.0, "NVIDIA H100 datasheet: H100 PCIe with NVLink bridge 600 GB/s bidirectional"),
    ("H100 NVL", 300.0, "NVIDIA H100 datasheet: H100 NVL NVLink bridge 600 GB/s bidirectional"),
    ("H100", 450.0, "NVIDIA H100 datasheet: H100 SXM5 NVLink (4th gen) 900 GB/s bidirectional"),
    ("H200", 450.0, "NVIDIA H200 datasheet: H200 SXM NVLink 900 GB/s bidirectional"),
    ("A100", 300.0, "NVIDIA A100 datasheet: A100 SXM NVLink (3rd gen) 600 GB/s bidirectional"),
]
DEFAULT_ALPHA_US = 2.0   # per ring step, assumed when no multi-rank measurement exists


def load(path):
    with open(path) as f:
        return json.load(f)["rows"]


def link_params(rows, rec, args):
    """(B bytes/s, alpha s, description lines, measured?) for the record's device/backend."""
    notes = []
    backend = rec["backend"]
    msgs = [r for r in rows if r["kind"] == "message" and r["device"] == rec["device"]
            and r["backend"] == backend and r["dtype"] == "fp32" and r["world"] >= 2]
    if args.busbw_GBps:
        B = args.busbw_GBps * 1e9
        notes.append("B = %.1f GB/s: given on the command line (--busbw-GBps)" % args.busbw_GBps)
        alpha = (args.alpha_us if args.alpha_us is not None else DEFAULT_ALPHA_US) * 1e-6
        notes.append("alpha = %.2f us per ring step: %s" % (alpha * 1e6, "given" if args.alpha_us is not None
                                                            else "assumed (not measured)"))
        return B, alpha, notes, False
    if msgs:
        world = max(r["world"] for r in msgs)
        msgs = [r for r in msgs if r["world"] == world]
        big = [r["busbw_GBps"] for r in msgs if r["fp32_mib"] >= 25]
        which = "the fp32 messages >= 25 MiB"
        if not big:
            big, which = [r["busbw_GBps"] for r in msgs], "all fp32 messages (none >= 25 MiB)"
        B = statistics.median(big) * 1e9
        small = min(msgs, key=lambda r: r["bytes"])
        f = 2.0 * (world - 1)
        alpha = max(0.0, small["seconds"] - f / world * small["bytes"] / B) / f
        if args.alpha_us is not None:
            alpha = args.alpha_us * 1e-6
        notes.append("B = %.2f GB/s: MEASURED, median busbw of %s, %s world %d, %s (%s)" % (
            B / 1e9, which, backend, world, rec["device"], msgs[0].get("when", "?")))
        notes.append("alpha = %.2f us per ring step: %s" % (
            alpha * 1e6, "given on the command line" if args.alpha_us is not None else
            "from the smallest measured message (%g MiB, %.3f ms): what the bandwidth term above leaves "
            "of its time, / 2(n-1)" % (small["fp32_mib"], small["seconds"] * 1e3)))
        return B, alpha, notes, True
    for key, gbps, src in NOMINAL:
        if key in rec["device"]:
            B = gbps * 1e9
            notes.append("B = %.0f GB/s: ASSUMED, nominal NVLink bandwidth per direction (%s); no multi-GPU "
                         "measurement exists for this device (one GPU: NCCL world 1 moves no data between GPUs)"
                         % (gbps, src))
            break
    else:
        sys.exit("scaling_model: no world >= 2 message rows for %s / %s and no nominal figure for the device; "
                 "pass --busbw-GBps" % (rec["device"], backend))
    alpha = (args.alpha_us if args.alpha_us is not None else DEFAULT_ALPHA_US) * 1e-6
    notes.append("alpha = %.2f us per ring step: ASSUMED (not measured; sensitivity below)" % (alpha * 1e6))
    return B, alpha, notes, False


def ready_time(profile, begin, t_bwd):
    """When every gradient at offset >= begin was final: the first call with ready_from <= begin."""
    for off, t in profile:
        if off <= begin:
            return t
    return t_bwd


def simulate(rec, buckets, n, B, alpha, bytes_per_elem, extra_s=0.0):
    """Returns dict(comm, exposed, step, eff, ips, hidden, last_end) for world n."""
    profile = rec["ready_profile"]
    t_bwd = rec["backward_seconds"]
    compute = rec["step_seconds"] - rec["exposed_seconds_per_step"] + extra_s
    end, comm = 0.0, 0.0
    for b, e in buckets:
        S = (e - b) * bytes_per_elem
        t = alpha * 2 * (n - 1) + 2.0 * (n - 1) / n * S / B
        start = max(ready_time(profile, b, t_bwd), end)
        end = start + t
        comm += t
    exposed = max(0.0, end - t_bwd)
    step = compute + exposed
    base = rec["step_seconds"] - rec["exposed_seconds_per_step"]
    return {"comm": comm, "exposed": exposed, "step": step, "eff": base / step,
            "ips": n * rec["batch_per_rank"] / step, "hidden": 1 - exposed / comm if comm > 0 else 1.0,
            "last_end": end}


def compress_overhead(rows, rec, mb):
    """Measured extra seconds of fp16 compression (scale + casts) at world 1 on this device, or 0."""
    def sec(dt):
        for r in rows:
            if (r["kind"] == "buckets" and r["device"] == rec["device"] and r["backend"] == rec["backend"]
                    and r["world"] == 1 and r["dtype"] == dt and r["bucket_mb"] == mb):
                return r["seconds"]
        return None
    a, b = sec("fp32"), sec("fp16")
    return max(0.0, b - a) if a is not None and b is not None else None


def timeline_hidden(rec):
    """Hidden share of the last measured step's all-reduce time, from ddp_last_timeline (host clock):
    ops run FIFO on the comm thread, so op i ran from max(started_i, end_{i-1}) for op_s."""
    tl = rec.get("bucket_timeline_last_step")
    if not tl or rec["backend"] != "shm":
        return None
    end, total, hidden = 0.0, 0.0, 0.0
    t_bwd = tl["finish_enter_s"]
    for b in tl["buckets"]:
        s = max(b["started_s"], end)
        end = s + b["op_s"]
        total += b["op_s"]
        hidden += max(0.0, min(end, t_bwd) - s)
    return hidden / total if total > 0 else None


def model(rows, rec, args, out):
    B, alpha, notes, measured_link = link_params(rows, rec, args)
    worlds = [int(w) for w in args.worlds.split(",")]
    w = out.append
    w("### MODEL, NOT A MEASUREMENT: %s DDP scaling on %s (%s)" % (rec["arch"], rec["device"], rec["backend"]))
    w("")
    w("Generated by `bench/scaling_model.py` from `%s`. Only the inputs marked MEASURED were "
      "measured; every number in the tables is computed." % args.json)
    w("")
    w("Inputs:")
    w("")
    w("- MEASURED DDP run (`bench_allreduce --backend %s`, %s, commit %s): %s, batch %d per rank, %s, "
      "world %d, bucket %g MiB: step %.2f ms, backward %.2f ms, exposed communication %.2f ms/step "
      "(all-reduce %.2f ms/step), ready profile of %d gradient-ready points." % (
          rec["backend"], rec.get("when", "?"), rec.get("commit", "?"), rec["arch"], rec["batch_per_rank"],
          rec["precision"], rec["world"], rec["bucket_mb"], rec["step_seconds"] * 1e3,
          rec["backward_seconds"] * 1e3, rec["exposed_seconds_per_step"] * 1e3,
          rec["allreduce_seconds_per_step"] * 1e3, len(rec["ready_profile"])))
    for n in notes:
        w("- " + n)
    w("")
    w("Assumptions (all of them):")
    w("")
    w("1. Ring all-reduce time t(S, n) = alpha * 2(n-1) + 2(n-1)/n * S / B for a bucket of S bytes on n "
      "ranks, with the B and alpha above; NCCL's algorithm choice (tree, NVLS), protocol switches and "
      "channel counts are not modelled.")
    w("2. One rank's compute (forward, backward, optimizer) is the same at every n: compute = measured "
      "step - measured exposed communication = %.2f ms (per-rank batch fixed: weak scaling); the ranks "
      "are perfectly balanced (no waiting for a slower peer), and communication does not slow compute "
      "down (no contention for SMs, memory bandwidth or, on the CPU, cores)." % (
          (rec["step_seconds"] - rec["exposed_seconds_per_step"]) * 1e3))
    w("3. Buckets become ready at the measured times (ready profile, %s) and are all-reduced one after "
      "another in bucket order, each starting when it is ready and the previous one has finished; the "
      "bucket layouts are the ones comm/ddp.c makes (ddp_plan_buckets, first bucket 1 MiB)." % (
          "CUDA events" if "CUDA" in rec.get("clock", "") else "host clock"))
    w("4. Communication still running when backward ends is exposed; the buffer broadcast and the "
      "loss/accuracy all-reduce of a step are not modelled.")
    w("5. fp16 compression halves S; its scale/cast kernels cost what was measured at world 1 on this "
      "device where that exists (else 0).")
    if not measured_link:
        w("6. All n GPUs are in one NVLink/NVSwitch domain (one node) and every link runs at B.")
    w("")
    w("| ranks | bucket MiB | grad dtype | buckets | all-reduce / step (ms) | exposed (ms) | hidden | "
      "step (ms) | images/s (all ranks) | scaling efficiency |")
    w("|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|")
    configs = [(mb, "fp32") for mb in sorted(rec["buckets_by_mb"], key=float)]
    if rec["backend"] != "shm":
        configs.append(("25", "fp16"))
    base = rec["step_seconds"] - rec["exposed_seconds_per_step"]
    w("| 1 | - | - | - | - | - | - | %.2f | %.0f | 1.000 |" % (base * 1e3, rec["batch_per_rank"] / base))
    for n in worlds:
        for mb, dt in configs:
            buckets = rec["buckets_by_mb"][mb]
            extra = 0.0
            if dt == "fp16":
                extra = compress_overhead(rows, rec, float(mb)) or 0.0
            r = simulate(rec, buckets, n, B, alpha, 4 if dt == "fp32" else 2, extra)
            w("| %d | %s | %s | %d | %.2f | %.2f | %.0f%% | %.2f | %.0f | %.3f |" % (
                n, mb, dt, len(buckets), r["comm"] * 1e3, r["exposed"] * 1e3, 100 * r["hidden"],
                r["step"] * 1e3, r["ips"], r["eff"]))
    w("")
    # sensitivity: the bucket size of the measured run, fp32
    mb = "%g" % rec["bucket_mb"]
    if mb in rec["buckets_by_mb"]:
        w("Sensitivity (MODEL), bucket %s MiB, fp32: scaling efficiency at each n for other B and alpha:" % mb)
        w("")
        variants = [(B, alpha, "B, alpha as above"), (B / 2, alpha, "B / 2"), (B, 0.0, "alpha = 0"),
                    (B, 10e-6, "alpha = 10 us"), (B / 2, 10e-6, "B / 2, alpha = 10 us")]
        if rec["world"] >= 2 and rec["allreduce_seconds_per_step"] > 0:
            # the bandwidth the all-reduces actually got inside the measured DDP run (contention,
            # waiting for the other rank and all): sum of ring bytes / measured all-reduce time
            n0 = rec["world"]
            ring = sum(2.0 * (n0 - 1) / n0 * (e - b) * 4 for b, e in rec["buckets_by_mb"][mb])
            variants.append((ring / rec["allreduce_seconds_per_step"], 0.0,
                             "B as the all-reduces got inside the measured DDP run, alpha = 0"))
        w("| variant | " + " | ".join("n = %d" % n for n in worlds) + " |")
        w("|---|" + "---:|" * len(worlds))
        for b_, a_, label in variants:
            effs = [simulate(rec, rec["buckets_by_mb"][mb], n, b_, a_, 4)["eff"] for n in worlds]
            w("| %s (%.3g GB/s, %.1f us) | " % (label, b_ / 1e9, a_ * 1e6) + " | ".join("%.3f" % x for x in effs) + " |")
        w("")
    # self-check against the measured run where it had more than one rank
    if rec["world"] >= 2 and mb in rec["buckets_by_mb"]:
        r = simulate(rec, rec["buckets_by_mb"][mb], rec["world"], B, alpha, 4)
        th = timeline_hidden(rec)
        w("Check against the measured run (world %d, bucket %s MiB): model exposed %.2f ms/step and hidden "
          "%.0f%%; MEASURED exposed %.2f ms/step (includes the BN buffer broadcast and waiting for the "
          "other rank), all-reduce %.2f ms/step, hidden %.0f%% by summary.json's definition "
          "(1 - exposed / all-reduce)%s." % (
              rec["world"], mb, r["exposed"] * 1e3, 100 * r["hidden"], rec["exposed_seconds_per_step"] * 1e3,
              rec["allreduce_seconds_per_step"] * 1e3, 100 * (rec["hidden_fraction"] or 0),
              "" if th is None else ", %.0f%% by the last step's bucket timeline" % (100 * th)))
        w("")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--json", default="bench/results/allreduce.json")
    ap.add_argument("--device", help="substring of the device name (default: every device with a DDP record)")
    ap.add_argument("--backend", help="nccl or shm (default: nccl records, and shm ones)")
    ap.add_argument("--worlds", default="2,4,8")
    ap.add_argument("--alpha-us", type=float, default=None)
    ap.add_argument("--busbw-GBps", type=float, default=None)
    ap.add_argument("--markdown", help="also write the tables to this file")
    args = ap.parse_args()
    rows = load(args.json)
    recs = [r for r in rows if r["kind"] == "ddp_step" and r["backend"] in ("nccl", "shm")]
    if args.device:
        recs = [r for r in recs if args.device in r["device"]]
    if args.backend:
        recs = [r for r in recs if r["backend"] == args.backend]
    if not recs:
        sys.exit("scaling_model: no matching ddp_step record in %s" % args.json)
    out = []
    for rec in recs:
        model(rows, rec, args, out)
    text = "\n".join(out) + "\n"
    sys.stdout.write(text)
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write(text)


if __name__ == "__main__":
    main()
