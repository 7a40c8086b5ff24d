/* test_gpu_cli_plan.c: on a GPU machine, a DDP experiment that needs more GPUs than are
 * visible is refused before anything starts. Skipped (77) without a GPU, and in the CPU
 * dry run (the messages are about GPUs).
 *
 * With N visible GPUs and parallel.world_size N + 1 (2 on a one-GPU machine), device cuda,
 * mode ddp:
 *  - backend nccl: `runner plan` exits 2 with runner/plan.c's message "N+1 GPUs needed
 *    (parallel.world_size N+1) but N visible; set parallel.world_size: N, or
 *    parallel.backend: shm to share one GPU"; `runner EXP` exits 2 with the same message
 *    and creates no run directory;
 *  - backend auto (nccl on cuda): the same refusal;
 *  - backend shm: the plan is accepted (every rank on GPU 0): exit 0, `--json` says device
 *    cuda, comm_backend shm, world_size N+1, gpus_visible N;
 *  - parallel.devices [0, 0] (two ranks naming one GPU) is refused at load time (exit 2,
 *    "appears twice": parallel.devices is F_UNIQUE), and a device id >= N with exit 2
 *    naming how many GPUs are visible.
 */
#include "tests/gpu/gpu_cli_util.h"

static char exp_path[700];

static const char *exp_yaml =
    "name: plan\n"
    "device: cuda\n"
    "data:\n"
    "  dataset: synthetic\n"
    "  synthetic: {train_size: 64, val_size: 16, image: [3, 32, 32], classes: 4}\n"
    "model: {arch: resnet20}\n"
    "train: {epochs: 1, batch_size: %d}\n"
    "parallel: {mode: ddp, world_size: %d, backend: nccl}\n"
    "checkpoint: {resume: never}\n";

static void too_few_gpus_refused(void) {
    int n = gc_gpus, ws = n + 1;
    char root[800];
    snprintf(root, sizeof root, "%s/runs", gc_tmp);
    char need[160], sug[160];
    snprintf(need, sizeof need, "%d GPUs needed (parallel.world_size %d) but %d visible", ws, ws, n);
    snprintf(sug, sizeof sug, "set parallel.world_size: %d, or parallel.backend: shm to share one GPU", n);

    int rc = gc_runner("plan %s", exp_path);
    fprintf(stderr, "  runner plan (nccl, world %d, %d GPUs): exit %d: %s", ws, n, rc, gc_out);
    CHECK_INT(rc, 2);
    CHECK_CONTAINS(gc_out, need);
    CHECK_CONTAINS(gc_out, sug);

    rc = gc_runner("%s --set output.root=%s", exp_path, root);
    CHECK_INT(rc, 2);
    CHECK_CONTAINS(gc_out, need);
    CHECK(access(root, F_OK) != 0);   /* refused before a run directory was made */

    rc = gc_runner("plan %s --set parallel.backend=auto", exp_path);
    CHECK_INT(rc, 2);
    CHECK_CONTAINS(gc_out, need);
}

static void shm_shares_one_gpu(void) {
    int n = gc_gpus, ws = n + 1;
    int rc = gc_runner("plan %s --json --set parallel.backend=shm", exp_path);
    CHECK_INT(rc, 0);
    if (rc) { fprintf(stderr, "%s\n", gc_out); return; }
    CHECK_CONTAINS(gc_out, "\"device\": \"cuda\"");
    CHECK_CONTAINS(gc_out, "\"comm_backend\": \"shm\"");
    char w[64];
    snprintf(w, sizeof w, "\"world_size\": %d", ws);
    CHECK_CONTAINS(gc_out, w);
    snprintf(w, sizeof w, "\"gpus_visible\": %d", n);
    CHECK_CONTAINS(gc_out, w);
}

static void devices_list_checked(void) {
    int rc = gc_runner("plan %s --set parallel.world_size=2 --set train.batch_size=8 --set 'parallel.devices=[0, 0]'",
                       exp_path);
    CHECK_INT(rc, 2);
    CHECK_CONTAINS(gc_out, "appears twice");
    int n = gc_gpus;
    rc = gc_runner("plan %s --set parallel.world_size=1 --set train.batch_size=8 --set 'parallel.devices=[%d]'",
                   exp_path, n);
    CHECK_INT(rc, 2);
    char want[96];
    snprintf(want, sizeof want, "parallel.devices contains %d but only %d GPU", n, n);
    CHECK_CONTAINS(gc_out, want);
}

int main(void) {
    gc_setup();
    if (gc_dry) test_skip("the plan's GPU-count messages need a GPU (dry run)");
    int ws = gc_gpus + 1;
    gc_write_exp(exp_path, sizeof exp_path, "plan", exp_yaml, 8 * ws, ws);
    TEST_RUN(too_few_gpus_refused);
    TEST_RUN(shm_shares_one_gpu);
    TEST_RUN(devices_list_checked);
    return gc_finish();
}
