/* test_dist_launchers.c: the runner started by other launchers, as docs/multi-host.md
 * documents it: each process gets exactly the environment torchrun or srun give their
 * tasks (one host with 2 ranks, and 2 "hosts" of 1 rank each, all on this machine, CPU,
 * shm) and becomes that rank. Every variant ends with the same bits as the runner's own
 * launcher (params of last.ckpt), in one run directory, with both ranks exiting 0.
 * The Slurm variants set no RANK/WORLD_SIZE (srun does not) and, like
 * experiments/slurm/ddp_2nodes.sbatch, export MASTER_ADDR (a host name) and MASTER_PORT. */
#include "tests/dist/dist_util.h"

#include <sys/wait.h>

static char tmp[512], exp_path[700], ref[4096];

/* Every variable either launcher sets, cleared before a variant sets its own. */
static const char *const launcher_vars[] = {
    "RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK", "GROUP_WORLD_SIZE", "ROLE_RANK",
    "ROLE_NAME", "ROLE_WORLD_SIZE", "NODE_RANK", "MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_RESTART_COUNT",
    "TORCHELASTIC_MAX_RESTARTS", "TORCHELASTIC_RUN_ID", "TORCHELASTIC_USE_AGENT_STORE", "OMP_NUM_THREADS",
    "SLURM_PROCID", "SLURM_LOCALID", "SLURM_NODEID", "SLURM_NTASKS", "SLURM_NPROCS", "SLURM_NTASKS_PER_NODE",
    "SLURM_TASKS_PER_NODE", "SLURM_NNODES", "SLURM_JOB_NUM_NODES", "SLURM_JOB_ID", "SLURM_STEP_ID",
    "SLURM_LAUNCH_NODE_IPADDR", "SLURM_JOB_NODELIST", "RUNNER_RUN_DIR", "RUNNER_RESUME_FROM", "RUNNER_TTY"};

/* Starts `runner EXP --set output.root=ROOT` with the NULL-terminated "K=V" list env on
 * top of this process's environment (launcher variables cleared first); output to log. */
static pid_t spawn_with_env(const char *root, const char *log, const char *const *env) {
    pid_t pid = fork();
    if (pid == 0) {
        for (size_t i = 0; i < sizeof launcher_vars / sizeof launcher_vars[0]; i++) unsetenv(launcher_vars[i]);
        for (int i = 0; env[i]; i++) putenv((char *)env[i]);
        int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        dup2(fd, 1);
        dup2(fd, 2);
        char set[800];
        snprintf(set, sizeof set, "output.root=%s", root);
        execl(test_runner_exe(), "runner", exp_path, "--set", set, "--set", "parallel.timeout_s=60", (char *)NULL);
        _exit(127);
    }
    return pid;
}

/* Runs the two ranks of variant `name` (env0, env1) and checks the run against ref. */
static void run_variant(const char *name, const char *const *env0, const char *const *env1) {
    char root[800], l0[800], l1[800];
    snprintf(root, sizeof root, "%s/%s", tmp, name);
    snprintf(l0, sizeof l0, "%s/%s-rank0.log", tmp, name);
    snprintf(l1, sizeof l1, "%s/%s-rank1.log", tmp, name);
    pid_t r1 = spawn_with_env(root, l1, env1);   /* rank 1 first: it must wait for the store */
    pid_t r0 = spawn_with_env(root, l0, env0);
    int rc0 = cli_wait(r0), rc1 = cli_wait(r1);
    CHECK_INT(rc0, 0);
    CHECK_INT(rc1, 0);
    const char *d = only_run_dir(root, "launch");
    CHECK(d != NULL);   /* exactly one run directory, rank 0's */
    if (rc0 || rc1 || !d) {
        char *o0 = test_read_file(l0, NULL), *o1 = test_read_file(l1, NULL);
        fprintf(stderr, "%s rank 0:\n%s\n%s rank 1:\n%s\n", name, o0 ? o0 : "", name, o1 ? o1 : "");
        free(o0);
        free(o1);
        return;
    }
    char dir[4096];
    snprintf(dir, sizeof dir, "%s", d);
    CHECK_INT(cli_json_number(dir, "summary.json", "steps"), 5);
    CHECK_INT(cli_json_number(dir, "summary.json", "world_size"), 2);
    double m;
    CHECK_INT(dist_compare_section(dir, ref, "params", 0, 0, &m), 0);
    CHECK(m == 0);
    char *o1 = test_read_file(l1, NULL);
    CHECK_CONTAINS(o1, "[rank 1/2] ");
    CHECK_CONTAINS(o1, "finished at step 5");
    free(o1);
}

static void reference_with_own_launcher(void) {
    const char *d = dist_run(exp_path, tmp, "--set parallel.timeout_s=60", 0);
    CHECK(d != NULL);
    if (d) snprintf(ref, sizeof ref, "%s", d);
}

/* torchrun --no-python --nproc_per_node=2 build/runner EXP */
static void torchrun_one_host(void) {
    if (!ref[0]) return;
    char port[32];
    snprintf(port, sizeof port, "MASTER_PORT=%d", dist_free_port());
    const char *common[] = {"WORLD_SIZE=2", "LOCAL_WORLD_SIZE=2", "GROUP_RANK=0", "GROUP_WORLD_SIZE=1",
                            "ROLE_NAME=default", "ROLE_WORLD_SIZE=2", "MASTER_ADDR=127.0.0.1",
                            "TORCHELASTIC_RESTART_COUNT=0", "TORCHELASTIC_MAX_RESTARTS=0",
                            "TORCHELASTIC_RUN_ID=none", "TORCHELASTIC_USE_AGENT_STORE=True", "OMP_NUM_THREADS=1"};
    const char *e0[20], *e1[20];
    int n = 0;
    for (size_t i = 0; i < sizeof common / sizeof common[0]; i++, n++) e0[n] = e1[n] = common[i];
    e0[n] = e1[n] = port; n++;
    e0[n] = "RANK=0"; e1[n] = "RANK=1"; n++;
    e0[n] = "LOCAL_RANK=0"; e1[n] = "LOCAL_RANK=1"; n++;
    e0[n] = "ROLE_RANK=0"; e1[n] = "ROLE_RANK=1"; n++;
    e0[n] = e1[n] = NULL;
    run_variant("torchrun1", e0, e1);
}

/* torchrun --no-python --nnodes=2 --nproc_per_node=1 --node_rank=R ... on two "hosts" */
static void torchrun_two_hosts(void) {
    if (!ref[0]) return;
    char port[32];
    snprintf(port, sizeof port, "MASTER_PORT=%d", dist_free_port());
    const char *e0[] = {"RANK=0", "LOCAL_RANK=0", "WORLD_SIZE=2", "LOCAL_WORLD_SIZE=1", "GROUP_RANK=0",
                        "GROUP_WORLD_SIZE=2", "ROLE_RANK=0", "ROLE_WORLD_SIZE=2", "MASTER_ADDR=127.0.0.1", port,
                        "TORCHELASTIC_RESTART_COUNT=0", "OMP_NUM_THREADS=1", NULL};
    const char *e1[] = {"RANK=1", "LOCAL_RANK=0", "WORLD_SIZE=2", "LOCAL_WORLD_SIZE=1", "GROUP_RANK=1",
                        "GROUP_WORLD_SIZE=2", "ROLE_RANK=1", "ROLE_WORLD_SIZE=2", "MASTER_ADDR=127.0.0.1", port,
                        "TORCHELASTIC_RESTART_COUNT=0", "OMP_NUM_THREADS=1", NULL};
    run_variant("torchrun2", e0, e1);
}

/* srun --ntasks-per-node=2 build/runner EXP inside an allocation of one node */
static void slurm_one_node(void) {
    if (!ref[0]) return;
    char port[32];
    snprintf(port, sizeof port, "MASTER_PORT=%d", dist_free_port());
    const char *e0[] = {"SLURM_PROCID=0", "SLURM_LOCALID=0", "SLURM_NODEID=0", "SLURM_NTASKS=2", "SLURM_NPROCS=2",
                        "SLURM_NTASKS_PER_NODE=2", "SLURM_TASKS_PER_NODE=2", "SLURM_NNODES=1",
                        "SLURM_JOB_NUM_NODES=1", "SLURM_JOB_ID=4242", "SLURM_STEP_ID=0",
                        "SLURM_LAUNCH_NODE_IPADDR=127.0.0.1", "SLURM_JOB_NODELIST=localhost",
                        "MASTER_ADDR=localhost", port, NULL};
    const char *e1[] = {"SLURM_PROCID=1", "SLURM_LOCALID=1", "SLURM_NODEID=0", "SLURM_NTASKS=2", "SLURM_NPROCS=2",
                        "SLURM_NTASKS_PER_NODE=2", "SLURM_TASKS_PER_NODE=2", "SLURM_NNODES=1",
                        "SLURM_JOB_NUM_NODES=1", "SLURM_JOB_ID=4242", "SLURM_STEP_ID=0",
                        "SLURM_LAUNCH_NODE_IPADDR=127.0.0.1", "SLURM_JOB_NODELIST=localhost",
                        "MASTER_ADDR=localhost", port, NULL};
    run_variant("slurm1", e0, e1);
}

/* srun over two nodes with one task each (no SLURM_NTASKS_PER_NODE: only the task list) */
static void slurm_two_nodes(void) {
    if (!ref[0]) return;
    char port[32];
    snprintf(port, sizeof port, "MASTER_PORT=%d", dist_free_port());
    const char *e0[] = {"SLURM_PROCID=0", "SLURM_LOCALID=0", "SLURM_NODEID=0", "SLURM_NTASKS=2",
                        "SLURM_TASKS_PER_NODE=1(x2)", "SLURM_NNODES=2", "SLURM_JOB_NUM_NODES=2",
                        "SLURM_JOB_ID=4243", "SLURM_LAUNCH_NODE_IPADDR=127.0.0.1", "MASTER_ADDR=127.0.0.1", port,
                        NULL};
    const char *e1[] = {"SLURM_PROCID=1", "SLURM_LOCALID=0", "SLURM_NODEID=1", "SLURM_NTASKS=2",
                        "SLURM_TASKS_PER_NODE=1(x2)", "SLURM_NNODES=2", "SLURM_JOB_NUM_NODES=2",
                        "SLURM_JOB_ID=4243", "SLURM_LAUNCH_NODE_IPADDR=127.0.0.1", "MASTER_ADDR=127.0.0.1", port,
                        NULL};
    run_variant("slurm2", e0, e1);
}

int main(void) {
    if (test_tmpdir(tmp, sizeof tmp)) return 1;
    dist_write_exp(exp_path, sizeof exp_path, tmp, "launch", true, "{random_crop: {size: 8, padding: 1}}", 1);
    TEST_RUN(reference_with_own_launcher);
    TEST_RUN(torchrun_one_host);
    TEST_RUN(torchrun_two_hosts);
    TEST_RUN(slurm_one_node);
    TEST_RUN(slurm_two_nodes);
    return test_main_end();
}
