/* shm.c: collectives between processes on one host through one POSIX shared-memory
 * segment (comm_shm_create in comm.h).
 *
 * Segment: a header (barrier counter used as a futex word, per-rank arrival counters,
 * failure flag and per-rank failure messages) followed by two sets of world slots of
 * SHM_SLOT_BYTES each. Operations move data in chunks of at most one slot per rank,
 * alternating between the two sets, so one chunk's copy-out and the next chunk's copy-in
 * never touch the same memory and a chunk needs one or two barriers.
 *
 * All-reduce of a chunk: every rank copies its part into its slot; barrier; rank r sums
 * the r-th 1/world of the chunk over slots 0, 1, ..., world-1 in that order (fp32
 * accumulation; 16-bit inputs are widened and the sum rounded once) and writes it into
 * slot 0; barrier; every rank copies the reduced chunk out. This is a reduce-scatter +
 * all-gather through memory: each rank does 1/world of the arithmetic, and every element
 * is computed once, so results are bit-identical on every rank and in every run.
 *
 * Waiting: a short spin, then futex waits in slices of at most 50 ms, checking the
 * failure flag and the deadline (the comm's timeout), and every few slices whether the
 * process of a rank that has not arrived is still alive (pids are recorded in the header
 * with their pid namespace; a dead or zombie peer fails the collective at once, naming
 * it). A timeout names the ranks whose arrival counter is behind, raises the failure
 * flag and fails.
 *
 * It does not: work across hosts, or on device memory (use nccl there).
 */
#include "comm/comm.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/futex.h>
#include <signal.h>
#include <stdbool.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "util/clock.h"
#include "util/half.h"

enum { SHM_MAX_RANKS = 64, SHM_SLOT_BYTES = 1 << 19, SHM_MSG = 256 };
#define SHM_MAGIC 0x31534D48434E5552ull /* "RUNCHMS1" */

typedef struct shm_hdr {
    uint64_t magic;
    int32_t world;
    uint32_t slot_bytes;
    _Atomic uint32_t bar;                    /* arrivals at barriers, all ranks (futex) */
    _Atomic int32_t failed;                  /* 0, or failing rank + 1 */
    char pad0[40];
    _Atomic uint64_t arrive[SHM_MAX_RANKS];  /* barriers each rank has reached */
    char fail_msg[SHM_MAX_RANKS][SHM_MSG];
    int32_t pid[SHM_MAX_RANKS];              /* each rank's process id ... */
    uint64_t pid_ns[SHM_MAX_RANKS];          /* ... valid in this pid namespace (inode) */
} shm_hdr_t;

typedef struct shm_comm {
    comm_t base;
    shm_hdr_t *hdr;
    unsigned char *data;    /* 2 sets x world slots */
    size_t map_bytes;
    uint64_t seq;           /* barriers this rank passed */
    int set;                /* slot set of the next chunk */
} shm_comm_t;

static unsigned char *slot(shm_comm_t *s, int set, int rank) {
    return s->data + ((size_t)set * (size_t)s->base.world + (size_t)rank) * s->hdr->slot_bytes;
}

/* Raises the failure flag with msg (the first rank to fail wins) and wakes all waiters. */
static void shm_fail(shm_comm_t *s, const char *msg) {
    snprintf(s->hdr->fail_msg[s->base.rank], SHM_MSG, "%.*s", SHM_MSG - 1, msg);
    int32_t zero = 0;
    atomic_compare_exchange_strong(&s->hdr->failed, &zero, s->base.rank + 1);
    atomic_fetch_add(&s->hdr->bar, 0x40000000u);   /* change the futex word: wake everyone */
    syscall(SYS_futex, &s->hdr->bar, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
}

static void shm_abort(comm_t *c, const char *msg) { shm_fail((shm_comm_t *)c, msg); }

/* The inode of this process's pid namespace (0 if unknown). */
static uint64_t pid_namespace(void) {
    struct stat st;
    return stat("/proc/self/ns/pid", &st) == 0 ? (uint64_t)st.st_ino : 0;
}

/* True if process pid is gone or a zombie (exited, not yet reaped). */
static bool process_dead(pid_t pid) {
    if (kill(pid, 0) < 0) return errno == ESRCH;
    char path[64], buf[512];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return false;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0) return false;
    buf[n] = '\0';
    const char *paren = strrchr(buf, ')');   /* the state follows the command name */
    return paren && paren[1] == ' ' && (paren[2] == 'Z' || paren[2] == 'X');
}

/* Checks the ranks that have not reached barrier k: if one's process has died (and shares
 * our pid namespace, so its pid means something here), fails naming it. */
static int check_peers_alive(shm_comm_t *s, uint64_t k, const char *what, err_t *e) {
    shm_hdr_t *h = s->hdr;
    uint64_t ns = h->pid_ns[s->base.rank];
    for (int r = 0; r < s->base.world; r++) {
        if (atomic_load(&h->arrive[r]) >= k || !ns || h->pid_ns[r] != ns || h->pid[r] <= 0) continue;
        if (!process_dead((pid_t)h->pid[r])) continue;
        err_set(e, ERR_RUNTIME, "shm %s on rank %d: rank %d (pid %d) exited without joining it "
                "(see its log)", what, s->base.rank, r, (int)h->pid[r]);
        shm_fail(s, e ? e->msg : "a rank exited");
        return -1;
    }
    return 0;
}

/* Error for a raised failure flag. */
static int failed_error(shm_comm_t *s, const char *what, err_t *e) {
    int f = atomic_load(&s->hdr->failed);
    return err_set(e, ERR_RUNTIME, "shm %s on rank %d stopped: rank %d failed: %.*s", what,
                   s->base.rank, f - 1, SHM_MSG, s->hdr->fail_msg[f - 1]);
}

/* Waits until every rank reached this rank's next barrier k (every arrival counter >= k).
 * The last rank to arrive sees everyone on its first check and wakes the sleepers; every
 * arrival and a raised failure flag also change the futex word so no wake-up is lost. */
static int shm_barrier_wait(shm_comm_t *s, const char *what, err_t *e) {
    shm_hdr_t *h = s->hdr;
    uint64_t k = ++s->seq;
    atomic_store(&h->arrive[s->base.rank], k);
    atomic_fetch_add(&h->bar, 1);   /* changes the futex word under any sleeper */
    double deadline = 0;
    for (int spin = 0;; spin++) {
        /* read the futex word BEFORE checking, so an arrival after the check makes the
         * futex wait return at once instead of being missed */
        uint32_t v = atomic_load(&h->bar);
        if (atomic_load(&h->failed)) return failed_error(s, what, e);
        bool all = true;
        for (int r = 0; r < s->base.world && all; r++)
            all = atomic_load(&h->arrive[r]) >= k;
        if (all) {
            if (spin == 0) syscall(SYS_futex, &h->bar, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
            return 0;
        }
        if (spin < 200) continue;
        if (deadline == 0) deadline = now_s() + s->base.timeout_s;
        double left = deadline - now_s();
        if (left <= 0) break;
        if (spin % 8 == 0 && check_peers_alive(s, k, what, e) < 0) return -1;
        struct timespec ts = { 0, (long)((left < 0.05 ? left : 0.05) * 1e9) };
        syscall(SYS_futex, &h->bar, FUTEX_WAIT, v, &ts, NULL, 0);
    }
    char missing[512] = "";
    size_t used = 0;
    for (int r = 0; r < s->base.world && used + 16 < sizeof missing; r++)
        if (atomic_load(&h->arrive[r]) < k)
            used += (size_t)snprintf(missing + used, sizeof missing - used, "%s%d",
                                     used ? ", " : "", r);
    err_set(e, ERR_RUNTIME, "shm %s timed out after %g s on rank %d: rank(s) %s never arrived "
            "(crashed or stuck; raise parallel.timeout_s if they are just slow)", what,
            s->base.timeout_s, s->base.rank, missing);
    shm_fail(s, e ? e->msg : "collective timed out");
    return -1;
}

static int shm_barrier(comm_t *c, err_t *e) {
    return shm_barrier_wait((shm_comm_t *)c, "barrier", e);
}

/* Sums rank slots 0..world-1 over elements [lo, hi) of a chunk into slot 0. */
static void reduce_range(shm_comm_t *s, int set, size_t lo, size_t hi, dtype_t dt,
                         comm_op_t op) {
    int w = s->base.world;
    float div = (float)w;
    if (dt == DT_F32) {
        float *out = (float *)slot(s, set, 0);
        for (int r = 1; r < w; r++) {
            const float *in = (const float *)slot(s, set, r);
            for (size_t i = lo; i < hi; i++) out[i] += in[i];
        }
        if (op == COMM_AVG)
            for (size_t i = lo; i < hi; i++) out[i] /= div;
        return;
    }
    uint16_t *out = (uint16_t *)slot(s, set, 0);
    for (size_t i = lo; i < hi; i++) {
        float acc = dt == DT_F16 ? f16_to_f32(out[i]) : bf16_to_f32(out[i]);
        for (int r = 1; r < w; r++) {
            uint16_t x = ((const uint16_t *)slot(s, set, r))[i];
            acc += dt == DT_F16 ? f16_to_f32(x) : bf16_to_f32(x);
        }
        if (op == COMM_AVG) acc /= div;
        out[i] = dt == DT_F16 ? f32_to_f16(acc) : f32_to_bf16(acc);
    }
}

static int shm_allreduce(comm_t *c, void *buf, size_t count, dtype_t dt, comm_op_t op,
                         err_t *e) {
    shm_comm_t *s = (shm_comm_t *)c;
    if (dt != DT_F32 && dt != DT_F16 && dt != DT_BF16)
        return err_set(e, ERR_RUNTIME, "shm allreduce: unsupported dtype %d", (int)dt);
    size_t es = dt == DT_F32 ? 4 : 2;
    size_t per_chunk = s->hdr->slot_bytes / es;
    int w = c->world;
    unsigned char *p = buf;
    for (size_t done = 0; done < count;) {
        size_t n = count - done < per_chunk ? count - done : per_chunk;
        int set = s->set;
        s->set ^= 1;
        memcpy(slot(s, set, c->rank), p + done * es, n * es);
        if (shm_barrier_wait(s, "allreduce", e) < 0) return -1;
        /* this rank's share, in 16-element (64-byte) units so ranks do not share lines */
        size_t units = (n + 15) / 16;
        size_t lo = units * (size_t)c->rank / (size_t)w * 16;
        size_t hi = units * (size_t)(c->rank + 1) / (size_t)w * 16;
        if (hi > n) hi = n;
        if (lo < hi) reduce_range(s, set, lo, hi, dt, op);
        if (shm_barrier_wait(s, "allreduce", e) < 0) return -1;
        memcpy(p + done * es, slot(s, set, 0), n * es);
        done += n;
    }
    return 0;
}

static int shm_broadcast(comm_t *c, void *buf, size_t bytes, int root, err_t *e) {
    shm_comm_t *s = (shm_comm_t *)c;
    unsigned char *p = buf;
    for (size_t done = 0; done < bytes;) {
        size_t n = bytes - done < s->hdr->slot_bytes ? bytes - done : s->hdr->slot_bytes;
        int set = s->set;
        s->set ^= 1;
        if (c->rank == root) memcpy(slot(s, set, root), p + done, n);
        if (shm_barrier_wait(s, "broadcast", e) < 0) return -1;
        if (c->rank != root) memcpy(p + done, slot(s, set, root), n);
        done += n;
    }
    return 0;
}

static int shm_allgather(comm_t *c, const void *send, void *recv, size_t bytes, err_t *e) {
    shm_comm_t *s = (shm_comm_t *)c;
    const unsigned char *in = send;
    unsigned char *out = recv;
    for (size_t done = 0; done < bytes;) {
        size_t n = bytes - done < s->hdr->slot_bytes ? bytes - done : s->hdr->slot_bytes;
        int set = s->set;
        s->set ^= 1;
        memcpy(slot(s, set, c->rank), in + done, n);
        if (shm_barrier_wait(s, "allgather", e) < 0) return -1;
        for (int r = 0; r < c->world; r++) memcpy(out + (size_t)r * bytes + done, slot(s, set, r), n);
        done += n;
    }
    return 0;
}

static void shm_destroy(comm_t *c) {
    shm_comm_t *s = (shm_comm_t *)c;
    if (s->hdr) munmap(s->hdr, s->map_bytes);
    free(s);
}

static const comm_ops_t shm_ops = {
    .name = "shm",
    .destroy = shm_destroy,
    .allreduce = shm_allreduce,
    .broadcast = shm_broadcast,
    .allgather = shm_allgather,
    .barrier = shm_barrier,
    .abort = shm_abort,
};

comm_t *comm_shm_create(store_t *st, err_t *e) {
    int rank = store_rank(st), world = store_world(st);
    if (world > SHM_MAX_RANKS) {
        err_set(e, ERR_INPUT, "parallel.world_size %d is more than the shm backend supports "
                "(%d); use fewer ranks or parallel.backend: nccl", world, SHM_MAX_RANKS);
        return NULL;
    }
    int id = store_next_id(st);
    char key[64], name[128];
    snprintf(key, sizeof key, "comm%d/shm_name", id);
    size_t hdr_bytes = (sizeof(shm_hdr_t) + 4095) & ~(size_t)4095;
    size_t bytes = hdr_bytes + 2 * (size_t)world * SHM_SLOT_BYTES;
    int fd = -1;
    if (rank == 0) {
        struct timespec t;
        clock_gettime(CLOCK_REALTIME, &t);
        snprintf(name, sizeof name, "/runner-comm-%d-%d-%lx", (int)getpid(), id,
                 (unsigned long)t.tv_nsec);
        fd = shm_open(name, O_CREAT | O_EXCL | O_RDWR, 0600);
        if (fd < 0) { err_errno(e, ERR_RUNTIME, "shm_open(%s)", name); goto fail_flag; }
        int r = posix_fallocate(fd, 0, (off_t)bytes);
        if (r != 0) {
            errno = r;
            err_errno(e, ERR_RUNTIME, "cannot allocate %zu bytes of shared memory in /dev/shm "
                      "(in a container, raise --shm-size)", bytes);
            close(fd);
            shm_unlink(name);
            goto fail_flag;
        }
    } else {
        size_t len = 0;
        memset(name, 0, sizeof name);
        if (store_get(st, key, name, sizeof name - 1, &len, -1, e) < 0) {
            err_wrap(e, "shm comm setup (rank %d)", rank);
            return NULL;
        }
        fd = shm_open(name, O_RDWR, 0600);
        if (fd < 0) { err_errno(e, ERR_RUNTIME, "rank %d: shm_open(%s)", rank, name); goto fail_flag; }
    }
    void *m = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (m == MAP_FAILED) {
        err_errno(e, ERR_RUNTIME, "mmap of %zu bytes of shared memory", bytes);
        if (rank == 0) shm_unlink(name);
        goto fail_flag;
    }
    shm_comm_t *s = calloc(1, sizeof *s);
    if (!s) { munmap(m, bytes); err_set(e, ERR_RUNTIME, "out of memory"); goto fail_flag; }
    comm_base_init(&s->base, &shm_ops, rank, world, store_timeout(st), false);
    s->hdr = m;
    s->data = (unsigned char *)m + hdr_bytes;
    s->map_bytes = bytes;
    s->hdr->pid[rank] = (int32_t)getpid();
    s->hdr->pid_ns[rank] = pid_namespace();
    if (rank == 0) {
        s->hdr->world = world;
        s->hdr->slot_bytes = SHM_SLOT_BYTES;
        s->hdr->magic = SHM_MAGIC;   /* fallocate zeroed the rest */
        if (store_set(st, key, name, strlen(name) + 1, e) < 0) {
            shm_unlink(name);
            shm_destroy(&s->base);
            return NULL;
        }
    } else if (s->hdr->magic != SHM_MAGIC || s->hdr->world != world) {
        err_set(e, ERR_RUNTIME, "rank %d: shared memory segment %s is not this run's (world %d, "
                "expected %d)", rank, name, s->hdr->world, world);
        shm_destroy(&s->base);
        return NULL;
    }
    /* Everyone attached: rank 0 unlinks, so nothing is left in /dev/shm after the run. */
    snprintf(key, sizeof key, "comm%d/attached", id);
    int rc = store_barrier(st, key, e);
    if (rank == 0) shm_unlink(name);
    if (rc < 0) {
        err_wrap(e, "shm comm setup (rank %d)", rank);
        shm_destroy(&s->base);
        return NULL;
    }
    return &s->base;
fail_flag:
    store_set_failed(st, e ? e->msg : "shm comm setup failed");
    return NULL;
}
