/* launch.c: the DDP launcher (one worker process per local rank, torchrun environment,
 * per-rank logs, rank 0 teed to the terminal, failure of any rank ends the group, signal
 * forwarding) and the worker-side detection of a launcher's environment (launch.h).
 *
 * Signals are read through a signalfd (SIGINT, SIGTERM and SIGCHLD blocked while
 * launch_run runs), so there are no handlers and no global state. Each worker leads its
 * own process group and is killed by group, so anything it started dies with it;
 * PR_SET_PDEATHSIG makes a worker die if the launcher itself is killed.
 *
 * Restarts (max_restarts > 0, torchrun --max-restarts): when a rank fails (exits non-zero
 * other than 2, 75 and 130, or dies from a signal) and nobody asked to stop, the group is
 * stopped and started again, every rank from restart_resume when it exists; each restart
 * is a line in <run_dir>/restarts.jsonl and on the console.
 *
 * It does not: start processes on other hosts, or parse the CLI.
 */
#include "runner/launch.h"
#include "runner/track/track.h"
#include "util/clock.h"
#include "util/fs.h"
#include "util/json.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <netdb.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

/* ---------------------------------------------------------------- worker side */

/* Parses the whole of env var `name` as an integer in [lo, hi]. Returns 1 and *out if
 * set, 0 if unset (or empty), -1 with an ERR_INPUT message naming it if malformed. */
static int env_int(const char *name, long lo, long hi, int *out, err_t *e) {
    const char *v = getenv(name);
    if (!v || !*v) return 0;
    char *end;
    errno = 0;
    long x = strtol(v, &end, 10);
    if (errno || *end || end == v || x < lo || x > hi)
        return err_set(e, ERR_INPUT, "environment variable %s='%s' is not an integer in "
                       "[%ld, %ld]; fix or unset it (it is set by torchrun/Slurm/the runner's "
                       "launcher for worker processes)", name, v, lo, hi);
    *out = (int)x;
    return 1;
}

/* The task count of node `node` from Slurm's SLURM_TASKS_PER_NODE ("2(x3),1"). Returns
 * the count, 0 if the format does not cover node, -1 if malformed. */
static int slurm_tasks_on_node(const char *spec, int node) {
    const char *p = spec;
    int seen = 0;
    while (*p) {
        char *end;
        long n = strtol(p, &end, 10);
        if (end == p || n < 1) return -1;
        long rep = 1;
        p = end;
        if (*p == '(') {
            if (p[1] != 'x') return -1;
            rep = strtol(p + 2, &end, 10);
            if (end == p + 2 || *end != ')' || rep < 1) return -1;
            p = end + 1;
        }
        if (node < seen + rep) return (int)n;
        seen += (int)rep;
        if (*p == ',') p++;
        else if (*p) return -1;
    }
    return 0;
}

int launch_worker_env(launch_env_t *out, err_t *e) {
    memset(out, 0, sizeof *out);
    const char *rv = getenv("RANK"), *wv = getenv("WORLD_SIZE");
    bool have_rank = rv && *rv, have_world = wv && *wv;
    if (have_rank != have_world)
        return err_set(e, ERR_INPUT, "%s is set but %s is not: a worker needs both (torchrun "
                       "sets them); set the missing one or unset %s", have_rank ? "RANK" : "WORLD_SIZE",
                       have_rank ? "WORLD_SIZE" : "RANK", have_rank ? "RANK" : "WORLD_SIZE");
    bool torch = have_rank && have_world;
    bool slurm = !torch && getenv("SLURM_PROCID") && getenv("SLURM_NTASKS");
    if (!torch && !slurm) return 0;
    int r;
    out->slurm = slurm;
    const char *rank_v = torch ? "RANK" : "SLURM_PROCID";
    const char *world_v = torch ? "WORLD_SIZE" : "SLURM_NTASKS";
    if (env_int(world_v, 1, 1 << 20, &out->world_size, e) <= 0) {
        if (e && !e->code) err_set(e, ERR_INPUT, "%s is empty", world_v);
        return -1;
    }
    if (env_int(rank_v, 0, out->world_size - 1, &out->rank, e) <= 0) {
        if (e && !e->code) err_set(e, ERR_INPUT, "%s is empty", rank_v);
        if (e) err_wrap(e, "%s=%s does not fit %s=%s", rank_v, getenv(rank_v), world_v,
                        getenv(world_v));
        return -1;
    }
    if (torch) {
        out->local_world_size = out->world_size;
        if (env_int("LOCAL_WORLD_SIZE", 1, out->world_size, &out->local_world_size, e) < 0) return -1;
        out->local_rank = out->rank % out->local_world_size;
        if (env_int("LOCAL_RANK", 0, out->local_world_size - 1, &out->local_rank, e) < 0) return -1;
        r = env_int("GROUP_RANK", 0, out->world_size - 1, &out->node_rank, e);
        if (r < 0) return -1;
        if (r == 0 && env_int("NODE_RANK", 0, out->world_size - 1, &out->node_rank, e) < 0)
            return -1;
    } else {
        if (env_int("SLURM_NODEID", 0, out->world_size - 1, &out->node_rank, e) < 0) return -1;
        int lw = 0;
        r = env_int("SLURM_NTASKS_PER_NODE", 1, out->world_size, &lw, e);
        if (r < 0) return -1;
        const char *tpn = getenv("SLURM_TASKS_PER_NODE");
        if (r == 0 && tpn && *tpn) {
            lw = slurm_tasks_on_node(tpn, out->node_rank);
            if (lw <= 0 || lw > out->world_size)
                return err_set(e, ERR_INPUT, "SLURM_TASKS_PER_NODE='%s' is not a Slurm task "
                               "list covering node %d (expected e.g. '4(x2)')", tpn,
                               out->node_rank);
        }
        out->local_world_size = lw > 0 ? lw : out->world_size;
        out->local_rank = out->rank % out->local_world_size;
        if (env_int("SLURM_LOCALID", 0, out->local_world_size - 1, &out->local_rank, e) < 0)
            return -1;
    }
    const char *ma = getenv("MASTER_ADDR");
    if ((!ma || !*ma) && slurm) ma = getenv("SLURM_LAUNCH_NODE_IPADDR");
    if (!ma || !*ma) ma = "127.0.0.1";
    if (strlen(ma) >= sizeof out->master_addr || strpbrk(ma, " \t\n/"))
        return err_set(e, ERR_INPUT, "MASTER_ADDR='%.200s' is not a host name or IP address",
                       ma);
    snprintf(out->master_addr, sizeof out->master_addr, "%s", ma);
    out->master_port = 29500;
    if (env_int("MASTER_PORT", 1, 65535, &out->master_port, e) < 0) return -1;
    return 1;
}

/* ---------------------------------------------------------------- launcher side */

int launch_free_port(const char *addr, err_t *e) {
    struct addrinfo hints, *res = NULL;
    memset(&hints, 0, sizeof hints);
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    int g = getaddrinfo(addr && *addr ? addr : "127.0.0.1", "0", &hints, &res);
    if (g != 0 || !res)
        return err_set(e, ERR_INPUT, "master address '%s' cannot be resolved (%s); set "
                       "parallel.master_addr / --master-addr", addr, gai_strerror(g));
    int fd = socket(res->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    int port = -1;
    if (fd >= 0 && bind(fd, res->ai_addr, res->ai_addrlen) == 0) {
        struct sockaddr_storage sa;
        socklen_t l = sizeof sa;
        getsockname(fd, (struct sockaddr *)&sa, &l);
        port = sa.ss_family == AF_INET6 ? ntohs(((struct sockaddr_in6 *)&sa)->sin6_port)
                                        : ntohs(((struct sockaddr_in *)&sa)->sin_port);
    } else {
        err_errno(e, ERR_INPUT, "cannot bind a port on master address '%s' (it must be an "
                  "address of this host when nnodes is 1)", addr);
    }
    if (fd >= 0) close(fd);
    freeaddrinfo(res);
    return port;
}

typedef struct rank_proc {
    pid_t pid;
    int global_rank;
    int log_fd;
    bool alive;
    int status;              /* wait status once exited */
    char **env;              /* built before fork */
    char log_path[PATH_MAX];
} rank_proc_t;

/* "exited with status 3" / "was killed by signal 9 (Killed)" */
static void describe_status(int st, char *buf, size_t len) {
    if (WIFEXITED(st)) snprintf(buf, len, "exited with status %d", WEXITSTATUS(st));
    else if (WIFSIGNALED(st))
        snprintf(buf, len, "was killed by signal %d (%s)", WTERMSIG(st), strsignal(WTERMSIG(st)));
    else snprintf(buf, len, "stopped (wait status 0x%x)", st);
}

/* Appends the last (up to) 10 lines of path to buf, each cut at 160 characters. */
static void append_log_tail(const char *path, char *buf, size_t len) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return;
    char tail[4096];
    off_t size = lseek(fd, 0, SEEK_END);
    off_t from = size > (off_t)sizeof tail - 1 ? size - (off_t)sizeof tail + 1 : 0;
    ssize_t n = pread(fd, tail, sizeof tail - 1, from);
    close(fd);
    if (n <= 0) {
        size_t used = strlen(buf);
        snprintf(buf + used, len - used, "; its log %s is empty", path);
        return;
    }
    tail[n] = '\0';
    while (n > 0 && tail[n - 1] == '\n') tail[--n] = '\0';
    int lines = 0;
    char *start = tail + n;
    while (start > tail && lines < 10) {
        start--;
        if (*start == '\n' && ++lines == 10) { start++; break; }
    }
    size_t used = strlen(buf);
    used += (size_t)snprintf(buf + used, len - used, "; last lines of %s:", path);
    for (char *line = start; line && *line && used + 8 < len;) {
        char *nl = strchr(line, '\n');
        int ll = nl ? (int)(nl - line) : (int)strlen(line);
        used += (size_t)snprintf(buf + used, len - used, "\n  %.*s", ll > 160 ? 160 : ll, line);
        if (used >= len) break;
        line = nl ? nl + 1 : NULL;
    }
}

/* Builds rank's environment: the launcher's, minus the keys set here, plus them. */
static char **build_env(const launch_opts_t *o, int local, int port, int global, bool tty) {
    static const char *const keys[] = { "RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE",
                                        "MASTER_ADDR", "MASTER_PORT", "GROUP_RANK", "NODE_RANK",
                                        "ROLE_RANK", "ROLE_WORLD_SIZE", "RUNNER_TTY" };
    enum { NK = sizeof keys / sizeof keys[0] };
    size_t n_env = 0, n_extra = 0;
    while (environ[n_env]) n_env++;
    while (o->extra_env && o->extra_env[n_extra]) n_extra++;
    char **env = calloc(n_env + n_extra + NK + 1, sizeof *env);
    if (!env) return NULL;
    size_t k = 0;
    for (size_t i = 0; i < n_env; i++) {
        bool skip = false;
        for (int j = 0; j < NK && !skip; j++) {
            size_t l = strlen(keys[j]);
            skip = !strncmp(environ[i], keys[j], l) && environ[i][l] == '=';
        }
        if (!skip) env[k++] = strdup(environ[i]);
    }
    int world = o->nproc_per_node * o->nnodes;
    const char *addr = o->master_addr[0] ? o->master_addr : "127.0.0.1";
    int vals[] = { global, local, world, o->nproc_per_node, 0, port, o->node_rank, o->node_rank,
                   global, world, 1 };
    for (int j = 0; j < NK; j++) {
        char buf[512];
        if (j == 4) snprintf(buf, sizeof buf, "%s=%s", keys[j], addr);
        else if (j == NK - 1 && !tty) continue;   /* RUNNER_TTY only when teed to a tty */
        else snprintf(buf, sizeof buf, "%s=%d", keys[j], j == NK - 1 ? 1 : vals[j]);
        env[k++] = strdup(buf);
    }
    for (size_t i = 0; i < n_extra; i++) env[k++] = strdup(o->extra_env[i]);
    env[k] = NULL;
    for (size_t i = 0; i < k; i++)
        if (!env[i]) return NULL;   /* leaks on OOM; the launcher is failing anyway */
    return env;
}

static void free_env(char **env) {
    if (!env) return;
    for (char **p = env; *p; p++) free(*p);
    free(env);
}

/* Sends sig to the process group of every rank still alive (all groups when all). */
static void signal_ranks(rank_proc_t *r, int n, int sig, bool all) {
    for (int i = 0; i < n; i++)
        if (r[i].pid > 0 && (r[i].alive || all)) kill(-r[i].pid, sig);
}

/* The child side of fork: own process group, default signals, output redirected, exec.
 * Only async-signal-safe calls; on failure writes a line to the log and exits 127. */
static void exec_rank(const char *exe, char *const argv[], char **env, int out_fd,
                      const sigset_t *old_mask, pid_t parent, int lock_fd) {
    setpgid(0, 0);
    if (lock_fd > 2) fcntl(lock_fd, F_SETFD, 0);   /* the run directory's lock goes with the rank */
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(127);
    signal(SIGINT, SIG_DFL);
    signal(SIGTERM, SIG_DFL);
    signal(SIGPIPE, SIG_DFL);
    sigprocmask(SIG_SETMASK, old_mask, NULL);
    dup2(out_fd, 1);
    dup2(out_fd, 2);
    int devnull = open("/dev/null", O_RDONLY);
    if (devnull >= 0) { dup2(devnull, 0); close(devnull); }
    execve(exe, argv, env);
    const char msg[] = "launcher: cannot execute the worker program\n";
    ssize_t w = write(2, msg, sizeof msg - 1);
    (void)w;
    _exit(127);
}

/* Writes all of buf to fd (a log). */
static void write_all(int fd, const char *buf, size_t n) {
    while (n) {
        ssize_t w = write(fd, buf, n);
        if (w <= 0) return;
        buf += w;
        n -= (size_t)w;
    }
}

void launch_tee_split(const char *buf, size_t n, int *state, char *log_out, size_t *log_n, char *tty_out,
                      size_t *tty_n) {
    *log_n = *tty_n = 0;
    for (size_t i = 0; i < n; i++) {
        char c = buf[i];
        if (*state == 1) {   /* after TRACK_TEE_START: the destination */
            *state = c == TRACK_TEE_TERMINAL || c == TRACK_TEE_LOG ? c : 0;
            continue;
        }
        if (c == TRACK_TEE_START) { *state = 1; continue; }
        if (c == TRACK_TEE_END) { *state = 0; continue; }
        if (*state != TRACK_TEE_TERMINAL) log_out[(*log_n)++] = c;
        if (*state != TRACK_TEE_LOG) tty_out[(*tty_n)++] = c;
    }
}

/* Copies what rank 0 wrote into its log and the tee stream, each getting the frames
 * meant for it (launch_tee_split; *state carries a frame across reads). Returns bytes
 * read, 0 at EOF, -1 when nothing was available. */
static ssize_t pump_tee(int pipe_fd, int log_fd, FILE *tee, int *state) {
    char buf[8192], to_log[8192], to_tty[8192];
    ssize_t n = read(pipe_fd, buf, sizeof buf);
    if (n > 0) {
        size_t nl, nt;
        launch_tee_split(buf, (size_t)n, state, to_log, &nl, to_tty, &nt);
        write_all(log_fd, to_log, nl);
        fwrite(to_tty, 1, nt, tee);
        fflush(tee);
    }
    return n;
}

/* What one attempt (one start of every local rank) ended with. */
typedef struct group_outcome {
    int rc;                  /* launch_run's return value for this attempt */
    bool restartable;        /* a rank failed (not bad input) and nobody asked to stop */
    int fail_rank, fail_pid, fail_status;
    char fail_log[PATH_MAX];
} group_outcome_t;

/* The checkpoint a restarted group resumes from: what restart_checkpoint finds in
 * restart_resume when set, else restart_resume itself when readable. 1 and the path in
 * out, or 0 (none yet). */
static int restart_checkpoint(const launch_opts_t *o, char *out, size_t len) {
    if (!o->restart_resume) return 0;
    if (o->restart_checkpoint) return o->restart_checkpoint(o->restart_resume, out, len);
    snprintf(out, len, "%s", o->restart_resume);
    return access(out, R_OK) == 0;
}

/* Builds each rank's environment for attempt `attempt`: the options' extra variables,
 * with RUNNER_RESTARTS and (when restart_resume names a readable checkpoint)
 * RUNNER_RESUME_FROM replaced for a restart. */
static char **attempt_env(const launch_opts_t *o, int local, int port, int global, bool tty, int attempt) {
    if (attempt == 0) return build_env(o, local, port, global, tty);
    const char *over[3] = {NULL, NULL, NULL};
    char restarts[64], ck[PATH_MAX], resume[PATH_MAX + 32];
    snprintf(restarts, sizeof restarts, "RUNNER_RESTARTS=%d", attempt);
    over[0] = restarts;
    if (restart_checkpoint(o, ck, sizeof ck)) {
        snprintf(resume, sizeof resume, "RUNNER_RESUME_FROM=%s", ck);
        over[1] = resume;
    }
    size_t n_extra = 0;
    while (o->extra_env && o->extra_env[n_extra]) n_extra++;
    const char **extra = calloc(n_extra + 3, sizeof *extra);
    if (!extra) return NULL;
    size_t k = 0;
    for (size_t i = 0; i < n_extra; i++) {
        bool replaced = false;
        for (int j = 0; over[j]; j++) {
            size_t l = (size_t)(strchr(over[j], '=') - over[j]) + 1;
            replaced |= !strncmp(o->extra_env[i], over[j], l);
        }
        if (!replaced) extra[k++] = o->extra_env[i];
    }
    for (int j = 0; over[j]; j++) extra[k++] = over[j];
    extra[k] = NULL;
    launch_opts_t copy = *o;
    copy.extra_env = extra;
    char **env = build_env(&copy, local, port, global, tty);
    free(extra);
    return env;
}

/* Starts every local rank once, watches them until all have exited, and fills out. */
static int run_group(const launch_opts_t *o, const launch_opts_t *opt, char *const argv[], int port,
                     int attempt, const char *logs, group_outcome_t *out, err_t *e) {
    int nproc = o->nproc_per_node;
    double grace = o->grace_s > 0 ? o->grace_s : 5.0;
    double stop_timeout = o->stop_timeout_s > 0 ? o->stop_timeout_s : 600.0;
    FILE *tee = o->tee ? o->tee : stdout;
    const char *exe = o->exe ? o->exe : "/proc/self/exe";
    memset(out, 0, sizeof *out);
    out->fail_rank = -1;

    rank_proc_t *r = calloc((size_t)nproc, sizeof *r);
    if (!r) { err_set(e, ERR_RUNTIME, "out of memory"); return out->rc = ERR_RUNTIME; }
    int rc = ERR_RUNTIME, tee_pipe[2] = { -1, -1 }, tee_rank = -1, sfd = -1, tee_state = 0;
    for (int i = 0; i < nproc; i++) {
        r[i].global_rank = o->node_rank * nproc + i;
        r[i].log_fd = -1;
        snprintf(r[i].log_path, sizeof r[i].log_path, "%.4000s/rank%d.log", logs,
                 r[i].global_rank);
        r[i].log_fd = open(r[i].log_path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
        if (r[i].log_fd < 0) { err_errno(e, ERR_INPUT, "cannot open %s", r[i].log_path); rc = ERR_INPUT; goto done; }
        r[i].env = attempt_env(opt, i, port, r[i].global_rank, r[i].global_rank == 0 && isatty(fileno(tee)),
                               attempt);
        if (!r[i].env) { err_set(e, ERR_RUNTIME, "out of memory"); goto done; }
        if (r[i].global_rank == 0) tee_rank = i;
    }
    if (tee_rank >= 0 && pipe2(tee_pipe, O_CLOEXEC) < 0) { err_errno(e, ERR_RUNTIME, "pipe"); goto done; }

    sigset_t mask, old_mask;
    sigemptyset(&mask);
    sigaddset(&mask, SIGINT);
    sigaddset(&mask, SIGTERM);
    sigaddset(&mask, SIGUSR1);
    sigaddset(&mask, SIGCHLD);
    sigprocmask(SIG_BLOCK, &mask, &old_mask);
    sfd = signalfd(-1, &mask, SFD_CLOEXEC | SFD_NONBLOCK);
    if (sfd < 0) {
        err_errno(e, ERR_RUNTIME, "signalfd");
        sigprocmask(SIG_SETMASK, &old_mask, NULL);
        goto done;
    }
    fflush(NULL);   /* nothing buffered may be written twice by the children */
    pid_t self = getpid();
    int started = 0;
    for (int i = 0; i < nproc; i++) {
        int out_fd = i == tee_rank ? tee_pipe[1] : r[i].log_fd;
        pid_t pid = fork();
        if (pid == 0) exec_rank(exe, argv, r[i].env, out_fd, &old_mask, self, o->lock_fd);
        if (pid < 0) { err_errno(e, ERR_RUNTIME, "fork of rank %d", r[i].global_rank); break; }
        setpgid(pid, pid);   /* also in the child: whichever runs first */
        r[i].pid = pid;
        r[i].alive = true;
        started++;
        if (o->pids_out) o->pids_out[i] = pid;
    }
    if (tee_pipe[1] >= 0) { close(tee_pipe[1]); tee_pipe[1] = -1; }

    int first_fail = -1, n_alive = started, interrupts = 0, sigints = 0;
    double kill_at = 0;           /* when > 0: SIGKILL the remaining ranks at this time */
    if (started < nproc) {        /* fork failed: stop what started */
        signal_ranks(r, nproc, SIGKILL, false);
        first_fail = -2;
    }
    while (n_alive > 0 || tee_pipe[0] >= 0) {
        struct pollfd p[2] = { { sfd, POLLIN, 0 }, { tee_pipe[0], POLLIN, 0 } };
        int ms = 200;
        if (n_alive == 0) ms = 1000;   /* draining rank 0's pipe: bounded below */
        int pr = poll(p, tee_pipe[0] >= 0 ? 2 : 1, ms);
        if (pr < 0 && errno != EINTR) break;
        if (tee_pipe[0] >= 0 && (p[1].revents & (POLLIN | POLLHUP | POLLERR))) {
            if (pump_tee(tee_pipe[0], r[tee_rank].log_fd, tee, &tee_state) <= 0) {
                close(tee_pipe[0]);
                tee_pipe[0] = -1;
            }
        } else if (n_alive == 0 && pr == 0 && tee_pipe[0] >= 0) {
            close(tee_pipe[0]);   /* a grandchild holds the pipe open: stop reading */
            tee_pipe[0] = -1;
        }
        struct signalfd_siginfo si;
        while (read(sfd, &si, sizeof si) == (ssize_t)sizeof si) {
            if (si.ssi_signo == SIGCHLD) continue;   /* reaped below */
            interrupts++;
            sigints += si.ssi_signo == SIGINT;
            if (first_fail == -1 && !(si.ssi_signo == SIGINT && sigints > 1)) {
                /* forwarded as it came: the ranks finish the step, checkpoint and exit 130
                 * (SIGINT) or 75 (SIGTERM/SIGUSR1, a scheduler's preemption); a scheduler
                 * may send SIGUSR1 and then SIGTERM, which changes nothing */
                signal_ranks(r, nproc, (int)si.ssi_signo, false);
                if (kill_at == 0) kill_at = now_s() + stop_timeout;
            } else {
                signal_ranks(r, nproc, SIGKILL, false);   /* a second SIGINT, or after a failure */
            }
        }
        for (int i = 0; i < nproc; i++) {
            if (!r[i].alive) continue;
            int st;
            pid_t w = waitpid(r[i].pid, &st, WNOHANG);
            if (w != r[i].pid) continue;
            r[i].alive = false;
            r[i].status = st;
            n_alive--;
            /* 130 and 75 are stops every rank agreed on (the signal may have reached the
             * ranks without passing through this launcher) */
            bool ok = WIFEXITED(st) && (WEXITSTATUS(st) == 0 || WEXITSTATUS(st) == ERR_INTERRUPT ||
                                        WEXITSTATUS(st) == ERR_PREEMPTED);
            if (!ok && first_fail == -1) {
                first_fail = i;
                if (n_alive > 0) {
                    signal_ranks(r, nproc, SIGTERM, false);
                    kill_at = now_s() + grace;
                }
            }
        }
        if (kill_at > 0 && n_alive > 0 && now_s() >= kill_at) {
            signal_ranks(r, nproc, SIGKILL, false);
            kill_at = 0;
        }
    }
    /* Anything the ranks left in their process groups goes too. */
    signal_ranks(r, nproc, SIGKILL, true);
    {
        struct signalfd_siginfo si;
        while (read(sfd, &si, sizeof si) == (ssize_t)sizeof si) {
            if (si.ssi_signo != SIGCHLD) interrupts++, sigints += si.ssi_signo == SIGINT;
        }
    }
    close(sfd);
    sigprocmask(SIG_SETMASK, &old_mask, NULL);

    int stopped_with = 0;   /* the stop code the ranks exited with: 130 wins over 75 */
    for (int i = 0; i < nproc; i++)
        if (WIFEXITED(r[i].status) && (WEXITSTATUS(r[i].status) == ERR_INTERRUPT ||
                                       (WEXITSTATUS(r[i].status) == ERR_PREEMPTED && stopped_with == 0)))
            stopped_with = WEXITSTATUS(r[i].status);
    if (sigints >= 2) {
        err_set(e, ERR_INTERRUPT, "interrupted twice: every rank was killed at once (no "
                "checkpoint was written)");
        rc = ERR_INTERRUPT;
    } else if (first_fail >= 0) {
        char how[128];
        describe_status(r[first_fail].status, how, sizeof how);
        err_set(e, ERR_RUNTIME, "rank %d (pid %d) %s; the other ranks were stopped",
                r[first_fail].global_rank, (int)r[first_fail].pid, how);
        out->fail_rank = r[first_fail].global_rank;
        out->fail_pid = (int)r[first_fail].pid;
        out->fail_status = r[first_fail].status;
        snprintf(out->fail_log, sizeof out->fail_log, "%s", r[first_fail].log_path);
        if (e) append_log_tail(r[first_fail].log_path, e->msg, sizeof e->msg);
        rc = ERR_RUNTIME;
        /* a rank that rejected its input (exit 2) makes the run's exit code 2 as well */
        if (WIFEXITED(r[first_fail].status) && WEXITSTATUS(r[first_fail].status) == ERR_INPUT) {
            rc = ERR_INPUT;
            if (e) e->code = ERR_INPUT;
        }
        out->restartable = rc == ERR_RUNTIME && interrupts == 0 && stopped_with == 0;
    } else if (first_fail == -2) {
        rc = ERR_RUNTIME;   /* e already says which fork failed */
    } else if (stopped_with == ERR_PREEMPTED) {
        err_set(e, ERR_PREEMPTED, "preempted: every rank wrote its checkpoint and stopped; run the same "
                "command again to continue");
        rc = ERR_PREEMPTED;
    } else if (stopped_with || interrupts > 0) {
        err_set(e, ERR_INTERRUPT, "interrupted: every rank was told to stop and has exited");
        rc = ERR_INTERRUPT;
    } else {
        rc = 0;
    }
done:
    for (int i = 0; i < nproc; i++) {
        if (r[i].log_fd >= 0) close(r[i].log_fd);
        free_env(r[i].env);
    }
    if (tee_pipe[0] >= 0) close(tee_pipe[0]);
    if (tee_pipe[1] >= 0) close(tee_pipe[1]);
    free(r);
    return out->rc = rc;
}

/* Appends one line about restart k to <run_dir>/restarts.jsonl and says it on the console. */
static void record_restart(const launch_opts_t *o, int k, const group_outcome_t *g, const char *cause) {
    char ck[PATH_MAX];
    bool resumes = restart_checkpoint(o, ck, sizeof ck);
    FILE *tee = o->tee ? o->tee : stdout;
    fprintf(tee, "runner: %s; restart %d of %d: every rank starts again from %s\n", cause, k, o->max_restarts,
            resumes ? ck : "the beginning (no checkpoint yet)");
    fflush(tee);
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%.4000s/restarts.jsonl", o->run_dir);
    char *buf = NULL;
    size_t len = 0;
    FILE *m = open_memstream(&buf, &len);
    if (!m) return;
    jw_t w;
    jw_init(&w, m, false);
    jw_obj_begin(&w);
    jw_kint(&w, "restart", k);
    jw_kint(&w, "max_restarts", o->max_restarts);
    jw_kint(&w, "unix_time", (int64_t)time(NULL));
    jw_kint(&w, "node_rank", o->node_rank);
    jw_kint(&w, "rank", g->fail_rank);
    jw_kint(&w, "pid", g->fail_pid);
    if (WIFEXITED(g->fail_status)) jw_kint(&w, "exit_status", WEXITSTATUS(g->fail_status));
    else jw_knum(&w, "exit_status", NAN);
    if (WIFSIGNALED(g->fail_status)) jw_kint(&w, "signal", WTERMSIG(g->fail_status));
    else jw_knum(&w, "signal", NAN);
    jw_kstr(&w, "cause", cause);
    if (resumes) jw_kstr(&w, "resume_from", ck);
    else jw_knum(&w, "resume_from", NAN);
    jw_obj_end(&w);
    fputc('\n', m);
    fclose(m);
    int fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (fd >= 0) {
        ssize_t wr = write(fd, buf, len);
        (void)wr;
        fsync(fd);
        close(fd);
    }
    free(buf);
}

int launch_run(const launch_opts_t *o, char *const argv[], err_t *e) {
    int nproc = o->nproc_per_node, nnodes = o->nnodes > 0 ? o->nnodes : 1;
    if (nproc < 1 || nproc > LAUNCH_MAX_RANKS) {
        err_set(e, ERR_INPUT, "launch: %d processes per node is outside [1, %d]", nproc,
                LAUNCH_MAX_RANKS);
        return ERR_INPUT;
    }
    if (o->node_rank < 0 || o->node_rank >= nnodes) {
        err_set(e, ERR_INPUT, "--node-rank %d is outside [0, %d) for --nnodes %d", o->node_rank,
                nnodes, nnodes);
        return ERR_INPUT;
    }
    if (!o->run_dir || !*o->run_dir) {
        err_set(e, ERR_INPUT, "launch: no run directory given");
        return ERR_INPUT;
    }
    launch_opts_t opt = *o;
    opt.nnodes = nnodes;
    if (!opt.master_addr[0]) snprintf(opt.master_addr, sizeof opt.master_addr, "127.0.0.1");
    if (o->master_port == 0 && nnodes > 1) {
        err_set(e, ERR_INPUT, "parallel.master_port is 0 (pick a free port) but nnodes is "
                "%d: every node must be given the same port; set parallel.master_port or "
                "--master-port", nnodes);
        return ERR_INPUT;
    }
    char logs[PATH_MAX];
    snprintf(logs, sizeof logs, "%.4000s/logs", o->run_dir);
    if (mkdir_p(logs, ERR_INPUT, e) < 0) return ERR_INPUT;
    for (int attempt = 0;; attempt++) {
        /* a port picked here is picked again for a restart: the old one may linger */
        int port = o->master_port ? o->master_port : launch_free_port(opt.master_addr, e);
        if (port < 0) return ERR_INPUT;
        group_outcome_t g;
        int rc = run_group(o, &opt, argv, port, attempt, logs, &g, e);
        if (!g.restartable || attempt >= o->max_restarts) return rc;
        char how[128], cause[300];
        describe_status(g.fail_status, how, sizeof how);
        snprintf(cause, sizeof cause, "rank %d (pid %d) %s", g.fail_rank, g.fail_pid, how);
        record_restart(o, attempt + 1, &g, cause);
        err_clear(e);
    }
}
