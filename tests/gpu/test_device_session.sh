#!/usr/bin/env bash
# test_device_session.sh: tests/gpu/device_session.sh without a GPU (SESSION_DRYRUN=cpu): a
# fake nvidia-smi names an "NVIDIA H200", the benchmarks and epochs run small on the CPU
# backend, Fashion-MNIST 1 epoch of 1 seed on a 128/128-image subset (PyTorch too, when
# /usr/bin/python3 has it), and the result files must come out complete: at most 8 files
# in $OUT, gpu_tests.json with the fake device and driver, the commit of the commit file
# (SESSION_COMMIT_FILE, as .deps/commit.txt) and every gpu test counted, gpu_e2e.json
# with the seven configurations (the default, which is train.cuda_graphs auto, graphs
# false, DDP world 1, fp16, and bf16 / DDP world 1 / fp16 with train.cuda_fusion [],
# each row saying its cuda_fusion) and the checks, gpu_resnet50_cifar.json with the runner's row
# (the default's rate: the whole step replayed on the cpu recorder; host time, profile),
# the fusion stage's bench rows (one per option list; its GPU tests skipped), the Fashion-MNIST JSON
# with the runner's seed; then the bench and the optional families stage in one call (a row per
# architecture, each row once in bench.jsonl).
# Also bash -n and (where installed) shellcheck on the session
# scripts.
# Usage: test_device_session.sh BUILD_DIR     (a CPU-capable build with runner and
# bench_gpu_bench; ctest: test_device_session, label e2e; about 3 minutes on 2 cores)
set -u
build=$(cd "${1:?build dir}" && pwd)
root=$(cd "$(dirname "$0")/../.." && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fails=0
check() { if eval "$1"; then echo "ok   $2"; else echo "FAIL $2 ($1)"; fails=$((fails + 1)); fi; }

for s in device_session.sh pack-gpu-deps.sh; do
    check "bash -n '$root/tests/gpu/$s'" "bash -n $s"
    if command -v shellcheck >/dev/null; then
        check "shellcheck -S warning '$root/tests/gpu/$s' >'$tmp/sc.log' 2>&1 || { cat '$tmp/sc.log'; false; }" "shellcheck $s"
    fi
done

mkdir -p "$tmp/bin" "$tmp/fm" "$tmp/out"
cat >"$tmp/bin/nvidia-smi" <<'EOF'
#!/bin/sh
case "$*" in
    *name*) echo "NVIDIA H200" ;;
    *driver_version*) echo "580.159.04" ;;
    *) echo "GPU 0: NVIDIA H200 (fake)" ;;
esac
EOF
chmod +x "$tmp/bin/nvidia-smi"
# a Fashion-MNIST subset in the idx .gz format pack-deps.sh writes
python3 - "$tmp/fm" <<'PY'
import gzip, struct, sys
src, dst = "/usr/share/datasets/fashion-mnist/", sys.argv[1] + "/"
for split, n in (("train", 128), ("t10k", 128)):
    for kind, hdr in (("images-idx3-ubyte.gz", 16), ("labels-idx1-ubyte.gz", 8)):
        raw = gzip.open(src + f"{split}-{kind}").read()
        head = bytearray(raw[:hdr]); struct.pack_into(">I", head, 4, n)
        per = (len(raw) - hdr) // struct.unpack(">I", raw[4:8])[0]
        with gzip.open(dst + f"{split}-{kind}", "wb") as f:
            f.write(bytes(head) + raw[hdr:hdr + n * per])
PY

echo "0123456789ab-packed" >"$tmp/commit.txt"
PATH="$tmp/bin:$PATH" SESSION_DRYRUN=cpu SESSION_DRYRUN_FASHION="$tmp/fm" RUNNER_BUILD_DIR="$build" \
    SESSION_COMMIT_FILE="$tmp/commit.txt" OUT="$tmp/out" BUDGET=900 E2E_CANDIDATE="[all, vec16]" E2E_NONDET=1 E2E_HEUR=1 bash "$root/tests/gpu/device_session.sh" \
    >"$tmp/session.out" 2>&1
rc=$?
check "[ $rc -eq 0 ]" "device_session.sh exit 0"
o=$tmp/out
n=$(find "$o" -type f | wc -l)
check "[ $n -le 8 ]" "at most 8 files in \$OUT ($n)"
for f in session.log gpu_tests.json gpu_resnet50_cifar.json gpu_e2e.json fashion_mnist_gpu_vs_torch.json bench.jsonl logs.tgz; do
    check "[ -s '$o/$f' ]" "$f written"
done
py() { python3 -c "import json, sys; r = json.load(open(sys.argv[1])); sys.exit(0 if ($2) else 1)" "$1"; }
check "py '$o/gpu_tests.json' 'r[\"device\"] == \"NVIDIA H200\" and r[\"driver\"] == \"580.159.04\" and r[\"failed\"] == 0 and r[\"passed\"] + r[\"skipped\"] >= 17 and r[\"ctest_complete\"]'" \
    "gpu_tests.json: fake device and driver, every gpu test counted, none failed"
check "py '$o/gpu_tests.json' 'all(k in r for k in (\"cuda\", \"cudnn\", \"nccl\", \"commit\", \"date\", \"sanitizer_errors\"))'" \
    "gpu_tests.json: versions, commit, date, sanitizer_errors"
check "py '$o/gpu_tests.json' 'r[\"commit\"] == \"0123456789ab-packed\"'" "gpu_tests.json: the commit file's commit, not git describe's"
check "py '$o/gpu_e2e.json' 'sorted(x[\"config\"] for x in r[:-1] if x.get(\"status\") == \"completed\") == [\"e2e_bf16_default\", \"e2e_bf16_fusion_candidate\", \"e2e_bf16_fusion_none\", \"e2e_bf16_graphs_false\", \"e2e_bf16_heur_b\", \"e2e_bf16_nondeterministic\", \"e2e_ddp1_nccl_bf16_default\", \"e2e_ddp1_nccl_bf16_fusion_none\", \"e2e_fp16_default\", \"e2e_fp16_fusion_none\"] and \"checks\" in r[-1]'" \
    "gpu_e2e.json: ten configurations completed (default, graphs false, DDP world 1, fp16; fusion none of bf16, DDP world 1, fp16; bf16 with the candidate options; bf16 non-deterministic; bf16 with heur_b), the checks"
check "py '$o/gpu_e2e.json' 'sorted(x[\"config\"] for x in r[:-1] if \"all\" not in str(x.get(\"cuda_fusion\"))) == [\"e2e_bf16_fusion_none\", \"e2e_ddp1_nccl_bf16_fusion_none\", \"e2e_fp16_fusion_none\"] and [x[\"config\"] for x in r[:-1] if \"vec16\" in str(x.get(\"cuda_fusion\"))] == [\"e2e_bf16_fusion_candidate\"]'" \
    "gpu_e2e.json: the rows say their cuda_fusion (the default all, but in the three fusion-none rows; the candidate row its list)"
check "py '$o/gpu_e2e.json' 'r[-1][\"checks\"][\"flagship_cuda_graphs\"] == \"auto\" and r[-1][\"checks\"][\"speedup_vs_graphs_false\"] > 0'" \
    "gpu_e2e.json: the default is auto, compared with false"
check "py '$o/gpu_e2e.json' 'r[-1][\"checks\"][\"ddp1_vs_single\"] is not None and r[-1][\"checks\"][\"flagship_seconds_per_epoch\"] > 0'" \
    "gpu_e2e.json: flagship seconds and the DDP/single ratio"
check "py '$o/gpu_resnet50_cifar.json' 'r[0][\"runner_img_per_s\"] > 0 and r[0][\"host_ms\"] > 0 and r[0][\"batch\"] == 8 and \"step_ms\" in r[0] and \"graphs_step_ms\" in r[0] and \"mfu\" in r[0]'" \
    "gpu_resnet50_cifar.json: the runner row with rate, step_ms, graphs_step_ms, host_ms, mfu"
check "py '$o/gpu_resnet50_cifar.json' 'r[0][\"default_graphs\"] is True and r[0][\"graphs_scope\"] == \"step\" and r[0][\"runner_img_per_s\"] == r[0][\"runner_graphs_img_per_s\"] and r[0][\"commit\"] == \"0123456789ab-packed\"'" \
    "gpu_resnet50_cifar.json: the default's rate is the whole step's replay"
check "grep -q 'fusion: dry run: the exactness tests need a GPU' '$o/session.log' && grep -qE '^fusion +ok' '$o/session.log'" \
    "the fusion stage: the exactness tests skipped without a GPU, the stage ok"
check "python3 -c 'import json, sys; f = [json.loads(l).get(\"fusion\") for l in open(sys.argv[1]) if \"\\\"fusion\\\"\" in l]; sys.exit(0 if f[-5:] == [\"none\", \"graph_conv,dgrad_accum,bn_remask,bn_wide_final,bn_fold_running,pdl,bn_mask_bits,bn_dual_add\", \"graph_conv,dgrad_accum,bn_remask,bn_wide_final,bn_fold_running,pdl,bn_mask_bits,bn_dual_add,bn_persist\", \"graph_conv,dgrad_accum,bn_remask,bn_wide_final,bn_fold_running,pdl,bn_mask_bits,bn_dual_add,bn_one_pass\", \"graph_conv,dgrad_accum,bn_remask,bn_wide_final,bn_fold_running,pdl,bn_mask_bits,bn_dual_add,bn_apply_tune\"] else 1)' '$o/bench.jsonl'" \
    "the fusion stage: one bench row per option list (none, the default all, all + bn_persist, all + bn_one_pass, all + bn_apply_tune)"
check "grep -q 'bnsweep: dry run: the sweep needs a GPU' '$o/session.log' && grep -qE '^bnsweep +ok' '$o/session.log'" \
    "the bnsweep stage: skipped without a GPU, the stage ok"
check "grep -q 'patterns: dry run: the probe needs a GPU' '$o/session.log' && grep -qE '^patterns +ok' '$o/session.log'" \
    "the patterns stage (last by default): skipped without a GPU, the stage ok"
check "grep -q '\"profile\": {' '$o/bench.jsonl' && grep -q '\"conv_engines\": \[' '$o/bench.jsonl'" \
    "bench.jsonl: the profile and the conv engines"
check "py '$o/fashion_mnist_gpu_vs_torch.json' 'len(r[\"runner\"]) == 1 and r[\"runner\"][0][\"status\"] == \"completed\" and r[\"epochs\"] == 1'" \
    "fashion_mnist_gpu_vs_torch.json: the runner's seed"
check "tar tzf '$o/logs.tgz' | grep -q ctest.log && ! tar tzf '$o/logs.tgz' | grep -q '\\.ckpt'" \
    "logs.tgz: the ctest log, no checkpoints"
check "tail -n 9 '$o/session.log' | grep -q '^e2e .*ok'" "the summary table last"
# the optional families stage (issue 24) after the bench stage, in one call: a row per
# architecture in gpu_resnet50_cifar.json under its arch, and no ResNet-50 target on them
mkdir -p "$tmp/out2"
PATH="$tmp/bin:$PATH" SESSION_DRYRUN=cpu RUNNER_BUILD_DIR="$build" SESSION_COMMIT_FILE="$tmp/commit.txt" \
    OUT="$tmp/out2" BUDGET=300 STAGES="bench families" bash "$root/tests/gpu/device_session.sh" >"$tmp/session2.out" 2>&1
rc=$?
check "[ $rc -eq 0 ] && grep -qE '^families +ok' '$tmp/out2/session.log'" "the families stage: exit 0, stage ok"
check "py '$tmp/out2/gpu_resnet50_cifar.json' 'sorted(x[\"arch\"] for x in r if (x.get(\"runner_img_per_s\") or 0) > 0 and x[\"batch\"] == 4 and x[\"target\"] is None) == [\"mobilenet_v2\", \"preact_resnet18\", \"resnext29_8x64d\", \"vgg16_bn\", \"wrn16_8\"]'" \
    "the families stage: one runner row per architecture, under its arch, without issue 22's target"
check "[ \"\$(sort '$tmp/out2/bench.jsonl' | uniq -d | wc -l)\" -eq 0 ] && [ \"\$(grep -c runner_img_per_s '$tmp/out2/bench.jsonl')\" -eq 6 ]" \
    "bench and families in one call: bench.jsonl holds each row once (1 bench + 5 family rows)"
if [ $fails -ne 0 ]; then echo "--- session output:"; tail -n 80 "$tmp/session.out"; tail -n 30 "$tmp/session2.out"; fi
echo "$fails failed"
[ $fails -eq 0 ]
