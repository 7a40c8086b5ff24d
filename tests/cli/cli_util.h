/* cli_util.h: helpers shared by the end-to-end tests (run the binary, write tiny
 * experiments, read checkpoint sections). */
#ifndef RUNNER_TESTS_CLI_UTIL_H
#define RUNNER_TESTS_CLI_UTIL_H

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "runner/checkpoint.h"
#include "tests/test.h"

/* Runs `runner ARGS` (shell syntax) with output captured; returns the exit status. */
static inline int run_runner(const char *args, char *out, size_t cap) {
    char cmd[8192];
    snprintf(cmd, sizeof cmd, "%s %s", test_runner_exe(), args);
    return test_run_cmd(cmd, out, cap);
}

/* Starts `runner EXP --set output.root=ROOT` in the background with stdout and stderr to
 * log; returns its pid. */
static inline pid_t cli_spawn_runner(const char *exp, const char *root, const char *log) {
    pid_t pid = fork();
    if (pid == 0) {
        int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        dup2(fd, 1);
        dup2(fd, 2);
        char set[800];
        snprintf(set, sizeof set, "output.root=%s", root);
        execl(test_runner_exe(), "runner", exp, "--set", set, (char *)NULL);
        _exit(127);
    }
    return pid;
}

/* Waits for pid; its exit status, or 128 + the signal that ended it. */
static inline int cli_wait_exit(pid_t pid) {
    int st = 0;
    waitpid(pid, &st, 0);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

/* The single run directory under root/name (NULL if none or several). */
static inline char *only_run_dir(const char *root, const char *name) {
    static char path[4096];
    char cmd[4200], out[4096];
    snprintf(cmd, sizeof cmd, "ls -d %s/%s/*/ 2>/dev/null", root, name);
    if (test_run_cmd(cmd, out, sizeof out) != 0) return NULL;
    char *nl = strchr(out, '\n');
    if (!nl || strchr(nl + 1, '/')) return NULL;
    *nl = '\0';
    if (nl > out && nl[-1] == '/') nl[-1] = '\0';
    snprintf(path, sizeof path, "%s", out);
    return path;
}

/* Reads a checkpoint section into a malloc'd buffer. */
static inline void *ckpt_section_copy(const char *path, const char *name, size_t *size) {
    err_t e = {0};
    ckpt_t *c = ckpt_read(path, &e);
    if (!c) { fprintf(stderr, "%s\n", e.msg); return NULL; }
    const ckpt_section_t *s = ckpt_find(c, name);
    void *b = NULL;
    if (s) {
        b = malloc(s->size ? s->size : 1);
        memcpy(b, s->data, s->size);
        *size = s->size;
    }
    ckpt_free(c);
    return b;
}

#endif
