#!/usr/bin/env bash
# gpu_dryrun.sh: the GPU tests' own checks, shown to catch planted defects, on the CPU.
# Runs test_gpu_ops' soft cross-entropy case, test_gpu_net, test_gpu_fusion's whole-step
# same-bits cases (on the cpu graph recorder) and test_gpu_bn_fusion's node cases with
# RUNNER_GPU_TEST_DRYRUN=cpu
# (the "gpu" side is a second CPU backend on another convolution engine,
# gpu_test_util.h) without a defect (must pass) and with each defect of gpu_plant.h
# (must fail, in the check meant for it):
#   xent_soft_tie_high@both  both sides count ties to the higher label: only the hits
#                            expected from the host can see it
#   xent_soft_drop_row       the gpu side drops the last row's hit
#   conv_dw_sign             one layer's weight gradient negated: the half-precision
#                            steps fail per tensor, the fp32 step and the SGD steps too
#   sgd_no_wd                the gpu side's SGD ignores weight decay: the teacher-forced
#                            steps' updates differ
#   bn_remask_unrounded      the BN backward ops take the mask of a recomputed output not
#                            rounded to the dtype: fp16 (relu, relu6) and bf16 (relu6, 5.999
#                            rounding to 6) differ from the same backend reading y; fp32
#                            (nothing to round) still passes
#   mask_bit_flip            (test_gpu_bn_fusion's stand-ins) a mask bit flipped: its bits differ
#                            from y's mask
#   dual_dz_unmasked         (the same) the shortcut BN summed from the unmasked dy: its
#                            sum_dy_xhat2 differs from the separate ops'
#   persist_stats_order      (the same) bn_fwd_fused's last mean one ulp off: its mean
#                            differs from the separate ops'
# With `images BINARY`: test_gpu_cli_images' GPU-vs-CPU cases with RUNNER_GPU_CLI_DRYRUN=cpu
# (the "gpu" side is the runner on the CPU's Winograd engine) without a defect (must pass)
# and with the test's own planted defects (must fail the case meant for them):
#   img_flip_off, img_label_swap  the forward case (lr 1e-30)
#   img_grad_scale                the training case (gradients 1.5x)
# exit 77 when the images fixtures cannot be made (no PIL/numpy or Fashion-MNIST).
# Usage: gpu_dryrun.sh TEST_GPU_OPS TEST_GPU_NET TEST_GPU_FUSION  (ctest: test_gpu_dryrun, label unit)
#        gpu_dryrun.sh images TEST_GPU_CLI_IMAGES  (ctest: test_gpu_dryrun_images, label e2e)
set -u
fails=0
log=$(mktemp)
trap 'rm -f "$log"' EXIT

# expect WANT_RC PATTERN DEFECT CASES BINARY: runs BINARY's CASES with DEFECT planted
expect() {
    local want=$1 pattern=$2 defect=$3 cases=$4 bin=$5
    RUNNER_GPU_TEST_DRYRUN=cpu RUNNER_GPU_CLI_DRYRUN=cpu RUNNER_GPU_TEST_PLANT=$defect RUNNER_TEST_ONLY=$cases \
        "$bin" >"$log" 2>&1
    local rc=$?
    if [ "$rc" -eq "$want" ] && grep -q -- "$pattern" "$log"; then
        echo "ok   ${defect:-no defect}: $(basename "$bin") $cases exit $rc ($pattern)"
    else
        echo "FAIL ${defect:-no defect}: $(basename "$bin") $cases exit $rc, expected $want with '$pattern':"
        sed 's/^/     /' "$log"
        fails=$((fails + 1))
    fi
}

if [ "$1" = images ]; then
    img=$2 fwd=folder_forward_gpu_vs_cpu train=folder_training_gpu_vs_cpu
    export RUNNER_TEST_PYTHON=${RUNNER_TEST_PYTHON:-/usr/bin/python3}
    RUNNER_GPU_CLI_DRYRUN=cpu RUNNER_TEST_ONLY=$fwd "$img" >"$log" 2>&1
    rc=$?
    [ $rc -eq 77 ] && { grep skipped "$log"; exit 77; }
    if [ $rc -eq 0 ] && grep -q "ok   $fwd" "$log"; then echo "ok   no defect: $fwd"; else
        echo "FAIL no defect: $fwd exit $rc:"; sed 's/^/     /' "$log"; fails=$((fails + 1)); fi
    expect 0 "ok   $train" "" $train "$img"
    expect 1 "CHECK failed: g <= FWD_TOL" img_flip_off $fwd "$img"
    expect 1 "CHECK failed: g <= FWD_TOL" img_label_swap $fwd "$img"
    expect 1 "CHECK failed: g <= tol_loss" img_grad_scale $train "$img"
    echo "$fails failed"
    [ "$fails" -eq 0 ]
    exit
fi
ops=$1 net=$2 fusion=$3 bn=$4
expect 0 "ok   test_softmax_xent_soft" "" test_softmax_xent_soft "$ops"
expect 1 "got\[0\]\[0\] == .*expected want\[0\]" xent_soft_tie_high@both test_softmax_xent_soft "$ops"
expect 1 "got\[1\]\[0\] == .*expected want\[0\]" xent_soft_drop_row test_softmax_xent_soft "$ops"
expect 0 "4 passed, 0 failed" "" test_step_fp32,test_step_fp16,test_step_bf16,test_three_sgd_steps "$net"
expect 1 "FAIL test_step_fp16" conv_dw_sign test_step_fp16 "$net"
expect 1 "FAIL test_step_bf16" conv_dw_sign test_step_bf16 "$net"
expect 1 "FAIL test_step_fp32" conv_dw_sign test_step_fp32 "$net"
expect 1 "FAIL test_three_sgd_steps" sgd_no_wd test_three_sgd_steps "$net"
rm_cases=test_remask_node_fp32,test_remask_node_fp16,test_remask_node_bf16
expect 0 "3 passed, 0 failed" "" $rm_cases "$bn"
expect 1 "bn_remask fp16 relu: dx differs (from y: DIFFERS" bn_remask_unrounded $rm_cases "$bn"
expect 1 "bn_remask bf16 relu6: dx differs (from y: DIFFERS" bn_remask_unrounded $rm_cases "$bn"
expect 1 "ok   test_remask_node_fp32" bn_remask_unrounded $rm_cases "$bn"
# the whole-step cases on the cpu recorder (RUNNER_CPU_GRAPHS=1): a step, and the step
# recorded and replayed, repeat a step without the option (the replay's BN statistics put
# back first: without that the replay "differed" on the H100 run of 2026-11-26)
RUNNER_CPU_GRAPHS=1 expect 0 "2 passed, 0 failed" "" test_remask_net,test_fold_running_net "$fusion"
# bn_mask_bits and bn_dual_add's node checks on the dry run's stand-ins (the ops' contract
# on the CPU's ops): pass as they are, fail on a flipped mask bit and on an unmasked dz
nb_cases=test_mask_bits_node_fp32,test_mask_bits_node_bf16,test_dual_node_fp32,test_dual_node_bf16
expect 0 "4 passed, 0 failed" "" $nb_cases "$bn"
expect 1 "bits differ from y's mask" mask_bit_flip test_mask_bits_node_bf16 "$bn"
expect 1 "sum_dy_xhat2 differs (separate ops: DIFFERS" dual_dz_unmasked test_dual_node_fp32 "$bn"
# bn_persist's node checks on the stand-ins: pass as they are, fail on a mean one ulp off
expect 0 "2 passed, 0 failed" "" test_persist_node_fp32,test_persist_node_bf16 "$bn"
expect 1 "kind 0 m 1024 c 256 geometry 1: mean differs" persist_stats_order test_persist_node_bf16 "$bn"
echo "$fails failed"
[ "$fails" -eq 0 ]
