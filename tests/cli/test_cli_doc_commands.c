/* test_cli_doc_commands.c: every command the documentation shows runs.
 *
 * Where commands are read from:
 *  - README.md and docs/ *.md: fenced code blocks without a language or marked sh, bash,
 *    shell or console; a line is a command when its first word (after "$ " and VAR=value
 *    assignments) is one of COMMAND_WORDS; a line ending in "\" continues on the next; a
 *    "#" comment after the command is dropped. Other lines (output, YAML) are not commands.
 *  - experiments/ *.yaml: comment lines whose text starts with one of COMMAND_WORDS
 *    ("#   runner plan experiments/x.yaml").
 * How each runs, in a sandbox laid out like the source tree (experiments/ and scripts/
 * linked, build/runner and `runner` on PATH the binary under test, data/my_images and
 * data/imagenet tiny image folders, HOME and the index cache inside), in order, so a
 * file's commands may build on each other (the fine-tuning steps do):
 *    runner EXP [flags]          runner plan EXP [flags] --set train.max_steps=2: exit 0
 *    runner plan ...             as written: exit 0
 *    runner compare M [flags]    as written plus sets that stop it at the data check, after
 *                                the matrix and every flag were loaded and checked: exit 2
 *                                with "no member was started"
 *    runner resume|report|check|export RUN...
 *                                on tiny finished runs: exit 0 (check: 0 or 1, a verdict)
 *    torchrun|srun|mpirun ... runner ARGS
 *                                runner ARGS as above (the launcher's options are its own)
 *    scripts/ *.sh               with --help (they install and build): exit 0
 *    anything else               as written, after SUBSTITUTIONS: exit 0
 * Placeholders: an argument under runs/ or RUN / RUN_DIR is a tiny finished run (a copy per
 * distinct placeholder); exp.yaml and experiments/x.yaml a tiny experiment.
 * SUBSTITUTIONS replace what needs a network, each with its reason; SKIPPED lists the
 * commands not run, with theirs. A failure names the file and line, what ran, its exit
 * code and output: fix the doc (or the runner), or add the command to one of the tables
 * with a reason.
 * Skipped (77) without /usr/bin/python3 with torch and torchvision (the fine-tuning steps).
 */
#include <ctype.h>
#include <dirent.h>
#include <sys/stat.h>

#include "tests/cli/cli_util.h"

static char tmp[1024], sandbox[1200], tiny_src[4096];
static char out[1 << 16];

static const char *const COMMAND_WORDS[] = {"runner", "build/runner", "./build/runner", "torchrun", "srun",
                                            "mpirun", "python3", "/usr/bin/python3", "mkdir", "tensorboard",
                                            "wandb", "scripts/setup.sh", "scripts/test.sh", "scripts/fuzz.sh",
                                            "scripts/deps.sh"};

static const struct { const char *text, *with, *why; } SUBSTITUTIONS[] = {
    {"weights='IMAGENET1K_V2'", "weights=None",
     "torchvision downloads the ImageNet weights (network); the untrained model has the same tensors"},
    {"~/.cache/torch/hub/checkpoints/resnet50-11ad3fa6.pth", "weights/resnet50.pth",
     "the file torchvision's download leaves there; the state dict the command before saved stands in"},
    {"/path/to/imagenet", "data/imagenet", "a placeholder for the user's ImageNet folder"},
};

/* A plan refusal that is the machine's, not the command's: it comes after every flag and
 * key was read and checked, and a machine with GPUs plans the command (exit 0). */
static const struct { const char *says, *why; } MACHINE_REFUSALS[] = {
    {"parallel.backend: shm works within one host; with parallel.nnodes: 2 use nccl (GPUs)",
     "several hosts need NCCL, so GPUs; a machine without them stops at this cross-key check"},
    {"of memory on this host",
     "a recipe sized for GPU hosts (ImageNet at 224 px on 8 ranks); planned on the CPU it needs more host memory "
     "than this machine has"},
};

static const struct { const char *prefix, *why; } SKIPPED[] = {
    {"tensorboard ", "TensorBoard's viewer, a third-party program not installed for the tests; the event files "
                     "it reads are checked by tests/track"},
    {"wandb ", "the W&B client, a third-party program not installed for the tests; the offline files it syncs "
               "are checked by tests/track"},
};

typedef struct doc_cmd {
    char file[256];
    int line;
    char text[4096];
} doc_cmd_t;

enum { MAX_CMDS = 256 };
static doc_cmd_t cmds[MAX_CMDS];
static int n_cmds;

/* The first word of s after "$ " and VAR=value assignments (into w), and where it starts. */
static const char *first_word(const char *s, char *w, size_t cap) {
    while (*s == ' ') s++;
    if (!strncmp(s, "$ ", 2)) s += 2;
    for (;;) {
        size_t n = strcspn(s, " ");
        const char *eq = memchr(s, '=', n);
        if (!eq || eq == s || !isupper((unsigned char)s[0])) break;
        s += n;
        while (*s == ' ') s++;
    }
    size_t n = strcspn(s, " ");
    snprintf(w, cap, "%.*s", (int)n, s);
    return s;
}

static bool is_command(const char *s) {
    char w[256];
    first_word(s, w, sizeof w);
    for (size_t i = 0; i < sizeof COMMAND_WORDS / sizeof *COMMAND_WORDS; i++)
        if (!strcmp(w, COMMAND_WORDS[i])) return true;
    return false;
}

/* s without a trailing "# comment" (outside quotes) and trailing spaces, in place. */
static void drop_comment(char *s) {
    char q = 0;
    for (char *p = s; *p; p++) {
        if (q) { if (*p == q) q = 0; continue; }
        if (*p == '\'' || *p == '"') q = *p;
        else if (*p == '#' && (p == s || p[-1] == ' ')) { *p = '\0'; break; }
    }
    size_t n = strlen(s);
    while (n && (s[n - 1] == ' ' || s[n - 1] == '\n' || s[n - 1] == '\r')) s[--n] = '\0';
}

static void add_cmd(const char *file, int line, const char *text) {
    CHECK(n_cmds < MAX_CMDS);
    if (n_cmds >= MAX_CMDS) return;
    doc_cmd_t *c = &cmds[n_cmds++];
    snprintf(c->file, sizeof c->file, "%s", file);
    c->line = line;
    const char *s = text;
    while (*s == ' ') s++;
    if (!strncmp(s, "$ ", 2)) s += 2;
    snprintf(c->text, sizeof c->text, "%s", s);
}

static void read_markdown(const char *rel) {
    char path[2048];
    snprintf(path, sizeof path, "%s/%s", test_source_dir(), rel);
    FILE *f = fopen(path, "r");
    CHECK(f != NULL);
    if (!f) return;
    char line[4096], cmd[4096] = "";
    bool in_block = false, shell = false;
    int n = 0, start = 0;
    while (fgets(line, sizeof line, f)) {
        n++;
        if (!strncmp(line, "```", 3)) {
            char lang[64] = "";
            sscanf(line + 3, "%63s", lang);
            in_block = !in_block;
            shell = in_block && (!lang[0] || !strcmp(lang, "sh") || !strcmp(lang, "bash") ||
                                 !strcmp(lang, "shell") || !strcmp(lang, "console"));
            continue;
        }
        if (!in_block || !shell) continue;
        if (!cmd[0] && !is_command(line)) continue;
        if (!cmd[0]) start = n;
        size_t l = strlen(line);
        while (l && (line[l - 1] == '\n' || line[l - 1] == '\r')) line[--l] = '\0';
        bool more = l && line[l - 1] == '\\';
        if (more) line[--l] = '\0';
        size_t k = strlen(cmd);
        snprintf(cmd + k, sizeof cmd - k, "%s%s", k ? " " : "", line);
        if (more) continue;
        drop_comment(cmd);
        add_cmd(rel, start, cmd);
        cmd[0] = '\0';
    }
    fclose(f);
}

static void read_experiment(const char *rel) {
    char path[2048];
    snprintf(path, sizeof path, "%s/%s", test_source_dir(), rel);
    FILE *f = fopen(path, "r");
    CHECK(f != NULL);
    if (!f) return;
    char line[4096];
    for (int n = 1; fgets(line, sizeof line, f); n++) {
        if (line[0] != '#') continue;
        char *s = line + 1;
        while (*s == ' ') s++;
        if (!is_command(s)) continue;
        drop_comment(s);
        add_cmd(rel, n, s);
    }
    fclose(f);
}

static int cmp_name(const void *a, const void *b) {
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* The names in dir/ ending in ext, sorted, as "prefix/name" into names (at most 64). */
static int list(const char *dir, const char *prefix, const char *ext, char names[64][256]) {
    char path[2048];
    snprintf(path, sizeof path, "%s/%s", test_source_dir(), dir);
    DIR *d = opendir(path);
    if (!d) return 0;
    char *tmpn[64];
    int n = 0;
    struct dirent *de;
    while ((de = readdir(d)) && n < 64) {
        size_t l = strlen(de->d_name), el = strlen(ext);
        if (l > el && !strcmp(de->d_name + l - el, ext)) tmpn[n++] = strdup(de->d_name);
    }
    closedir(d);
    qsort(tmpn, (size_t)n, sizeof *tmpn, cmp_name);
    for (int i = 0; i < n; i++) {
        snprintf(names[i], 256, "%s/%s", prefix, tmpn[i]);
        free(tmpn[i]);
    }
    return n;
}

/* ---- the sandbox ---- */

static int sh(const char *fmt, const char *a, const char *b) {
    char cmd[8192];
    snprintf(cmd, sizeof cmd, fmt, a, b);
    int rc = test_run_cmd(cmd, out, sizeof out);
    if (rc) fprintf(stderr, "%s: exit %d\n%s\n", cmd, rc, out);
    return rc;
}

static int make_sandbox(void) {
    snprintf(sandbox, sizeof sandbox, "%s/sandbox", tmp);
    char src[1200];
    snprintf(src, sizeof src, "%s", test_source_dir());
    if (sh("mkdir -p %s/build %s/bin", sandbox, sandbox) ||
        sh("ln -s %s/experiments %s/experiments", src, sandbox) || sh("ln -s %s/scripts %s/scripts", src, sandbox) ||
        sh("ln -s %s %s/build/runner", test_runner_exe(), sandbox) ||
        sh("ln -s %s %s/bin/runner", test_runner_exe(), sandbox))
        return -1;
    /* two tiny image folders (a 12x9 JPEG of the fuzz corpus, whose first 5 bytes are the
     * harness's options): finetune_folder.yaml's and imagenet_resnet50.yaml's data */
    char cmd[8192];
    snprintf(cmd, sizeof cmd,
             "cd %s && tail -c +6 %s/tests/fuzz/corpus/image/seed-rgb.jpg > x.jpg && "
             "for d in data/my_images/train/cat data/my_images/train/dog data/my_images/val/cat data/my_images/val/dog "
             "data/imagenet/train/n01440764 data/imagenet/train/n01443537 data/imagenet/val/n01440764 "
             "data/imagenet/val/n01443537; do mkdir -p $d && for i in 1 2 3 4; do cp x.jpg $d/$i.jpg; done; done",
             sandbox, src);
    if (test_run_cmd(cmd, out, sizeof out)) { fprintf(stderr, "%s\n", out); return -1; }
    /* the tiny experiment exp.yaml stands for, DDP so the multi-host flags apply */
    char p[1300];
    snprintf(p, sizeof p, "%s/exp.yaml", sandbox);
    test_write_file(p, "name: exp\ndevice: auto\ndata: {dataset: synthetic, synthetic: {train_size: 32, val_size: 16, "
                       "image: [3, 8, 8], classes: 4}, workers: 0}\nmodel: {arch: resnet20}\n"
                       "train: {epochs: 1, batch_size: 16}\nparallel: {mode: ddp, world_size: 2}\n");
    /* a finished run the run-directory placeholders become (copies of it) */
    snprintf(p, sizeof p, "%s/tiny.yaml", tmp);
    test_write_file(p, "name: tiny\ndevice: cpu\ndata: {dataset: synthetic, synthetic: {train_size: 16, val_size: 8, "
                       "image: [3, 8, 8], classes: 3}, workers: 0}\nmodel: {arch: resnet20}\n"
                       "train: {epochs: 1, batch_size: 8}\nparallel: {mode: single}\n");
    char root[1300];
    snprintf(root, sizeof root, "%s/tiny_runs", tmp);
    const char *d = cli_run(p, root, NULL, 0, out, sizeof out);
    if (!d) return -1;
    snprintf(tiny_src, sizeof tiny_src, "%s", d);
    return 0;
}

/* ---- running one command ---- */

/* Placeholders of run directories seen so far and their copies. */
static char ph_name[32][256], ph_dir[32][1400];
static int n_ph;

static const char *run_copy(const char *placeholder) {
    for (int i = 0; i < n_ph; i++)
        if (!strcmp(ph_name[i], placeholder)) return ph_dir[i];
    if (n_ph == 32) return tiny_src;
    snprintf(ph_name[n_ph], sizeof ph_name[0], "%s", placeholder);
    snprintf(ph_dir[n_ph], sizeof ph_dir[0], "%s/run%02d", tmp, n_ph);
    char cmd[8192];
    snprintf(cmd, sizeof cmd, "cp -r %s %s", tiny_src, ph_dir[n_ph]);
    if (test_run_cmd(cmd, NULL, 0)) return tiny_src;
    return ph_dir[n_ph++];
}

static bool is_run_placeholder(const char *t) {
    return !strncmp(t, "runs/", 5) || !strcmp(t, "RUN") || !strcmp(t, "RUN_DIR");
}

/* Applies SUBSTITUTIONS to s (in place, cap bytes). */
static void substitute(char *s, size_t cap) {
    for (size_t i = 0; i < sizeof SUBSTITUTIONS / sizeof *SUBSTITUTIONS; i++) {
        char *p;
        while ((p = strstr(s, SUBSTITUTIONS[i].text))) {
            char rest[4096];
            snprintf(rest, sizeof rest, "%s", p + strlen(SUBSTITUTIONS[i].text));
            snprintf(p, cap - (size_t)(p - s), "%s%s", SUBSTITUTIONS[i].with, rest);
        }
    }
}

enum { EXPECT_0, EXPECT_0_OR_1, EXPECT_COMPARE_STOP };

/* The form of a runner command that is run (into run) and what it must give. tokens:
 * the words after the runner binary. */
static int runner_form(char **tok, int n, char *run, size_t cap, int *expect) {
    static const char *const verbs[] = {"plan", "resume", "compare", "report", "check", "export"};
    const char *verb = "run";
    int i = 0;
    if (n > 0 && !strcmp(tok[0], "run")) i = 1;
    for (size_t k = 0; n > 0 && k < sizeof verbs / sizeof *verbs; k++)
        if (!strcmp(tok[0], verbs[k])) verb = verbs[k], i = 1;
    size_t o = (size_t)snprintf(run, cap, "%s %s", test_runner_exe(), !strcmp(verb, "run") ? "plan" : verb);
    for (; i < n && o < cap; i++) {
        const char *t = tok[i];
        if (is_run_placeholder(t)) t = run_copy(t);
        else if (!strcmp(t, "exp.yaml") || !strcmp(t, "experiments/x.yaml")) t = "exp.yaml";
        o += (size_t)snprintf(run + o, cap - o, " %s", t);
    }
    *expect = EXPECT_0;
    if (!strcmp(verb, "run") && o < cap) o += (size_t)snprintf(run + o, cap - o, " --set train.max_steps=2");
    if (!strcmp(verb, "check")) *expect = EXPECT_0_OR_1;
    if (!strcmp(verb, "compare") && o < cap) {
        snprintf(run + o, cap - o, " --set data.dataset=cifar10 --set data.root=absent_data --set data.download=false");
        *expect = EXPECT_COMPARE_STOP;
    }
    return 0;
}

/* Runs command c as its cheap form (see the top); 0 when it gave what it must. */
static int run_doc_command(const doc_cmd_t *c) {
    for (size_t i = 0; i < sizeof SKIPPED / sizeof *SKIPPED; i++)
        if (!strncmp(c->text, SKIPPED[i].prefix, strlen(SKIPPED[i].prefix))) {
            printf("  skipped %s:%d: %s\n    (%s)\n", c->file, c->line, c->text, SKIPPED[i].why);
            return 0;
        }
    char text[4096], run[8192], env[1024] = "";
    snprintf(text, sizeof text, "%s", c->text);
    substitute(text, sizeof text);
    char word[256];
    const char *body = first_word(text, word, sizeof word);
    snprintf(env, sizeof env, "%.*s", (int)(body - text), text);
    int expect = EXPECT_0;
    const char *base = strrchr(word, '/') ? strrchr(word, '/') + 1 : word;
    if (!strcmp(base, "runner") || !strcmp(word, "torchrun") || !strcmp(word, "srun") || !strcmp(word, "mpirun")) {
        char copy[4096], *tok[128];
        int n = 0;
        snprintf(copy, sizeof copy, "%s", body);
        for (char *save = NULL, *t = strtok_r(copy, " ", &save); t && n < 128; t = strtok_r(NULL, " ", &save))
            tok[n++] = t;
        int at = 0;   /* the runner binary: the first word, or the launcher's argument naming it */
        while (at < n && strcmp(strrchr(tok[at], '/') ? strrchr(tok[at], '/') + 1 : tok[at], "runner")) at++;
        if (at == n) {
            fprintf(stderr, "%s:%d: `%s`: no runner binary in this launcher command\n", c->file, c->line, c->text);
            return -1;
        }
        runner_form(tok + at + 1, n - at - 1, run, sizeof run, &expect);
    } else if (!strncmp(word, "scripts/", 8) && strstr(word, ".sh")) {
        snprintf(run, sizeof run, "%s --help", word);
    } else {
        snprintf(run, sizeof run, "%s", body);
    }
    char cmd[12000];
    /* Debian's python3 (with torch) first, as on the machines the docs are written for */
    snprintf(cmd, sizeof cmd, "cd %s && env PATH=%s/bin:/usr/bin:/bin:$PATH HOME=%s RUNNER_CACHE_DIR=%s/cache %s%s 2>&1",
             sandbox, sandbox, sandbox, sandbox, env, run);
    int rc = test_run_cmd(cmd, out, sizeof out);
    bool ok = expect == EXPECT_0 ? rc == 0
            : expect == EXPECT_0_OR_1 ? rc == 0 || rc == 1
            : rc == 2 && strstr(out, "compare: no member was started") != NULL;
    if (ok) {
        printf("  ok %s:%d: %s\n", c->file, c->line, c->text);
        return 0;
    }
    for (size_t i = 0; rc == 2 && !strncmp(run, test_runner_exe(), strlen(test_runner_exe())) &&
                       i < sizeof MACHINE_REFUSALS / sizeof *MACHINE_REFUSALS; i++)
        if (strstr(out, MACHINE_REFUSALS[i].says)) {
            printf("  ok %s:%d: %s\n    (refused by this machine: %s)\n", c->file, c->line, c->text,
                   MACHINE_REFUSALS[i].why);
            return 0;
        }
    size_t len = strlen(out);
    fflush(stdout);   /* the ok lines before it, so the failure is not spliced into one */
    fprintf(stderr, "%s:%d: the documented command\n    %s\nfailed: it ran (in %s)\n    %s\nexit %d, expected %s; "
            "output (end):\n%s\n", c->file, c->line, c->text, sandbox, run, rc,
            expect == EXPECT_0 ? "0" : expect == EXPECT_0_OR_1 ? "0 or 1" : "2 at compare's data check",
            len > 3000 ? out + len - 3000 : out);
    return -1;
}

static void documented_commands_run(void) {
    read_markdown("README.md");
    char names[64][256];
    int n = list("docs", "docs", ".md", names);
    CHECK(n >= 5);
    for (int i = 0; i < n; i++) read_markdown(names[i]);
    int md = n_cmds;
    n = list("experiments", "experiments", ".yaml", names);
    CHECK(n >= 5);
    for (int i = 0; i < n; i++) read_experiment(names[i]);
    printf("  %d commands in README.md and docs/, %d in experiment files\n", md, n_cmds - md);
    /* the extraction itself: commands the docs are known to show */
    bool found[3] = {false, false, false};
    for (int i = 0; i < n_cmds; i++) {
        if (!strcmp(cmds[i].text, "runner plan experiments/resnet50_cifar100.yaml")) found[0] = true;
        if (strstr(cmds[i].text, "--set data.synthetic.val_size=512")) found[1] = true;   /* joined after "\" */
        if (!strcmp(cmds[i].file, "experiments/finetune_folder.yaml") &&
            !strcmp(cmds[i].text, "python3 scripts/torchvision_weights.py weights/resnet50.pth weights/resnet50.safetensors"))
            found[2] = true;
    }
    CHECK(found[0] && found[1] && found[2]);
    CHECK(md >= 20);
    int failed = 0;
    for (int i = 0; i < n_cmds; i++) failed += run_doc_command(&cmds[i]) != 0;
    CHECK_INT(failed, 0);
}

/* The extraction and the cheap forms on a made-up doc: a wrong flag and an unknown verb
 * fail and are named by file and line; good ones pass. */
static void bad_commands_are_caught(void) {
    doc_cmd_t bad[] = {{"made-up.md", 3, "runner plan exp.yaml --sett train.epochs=1"},
                       {"made-up.md", 4, "runner trian exp.yaml"},
                       {"made-up.md", 5, "runner exp.yaml --set train.epoch=1"},
                       {"made-up.md", 6, "runner compare experiments/compare_dp_ddp_amp.yaml --set train.maxsteps=5"}};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) CHECK_INT(run_doc_command(&bad[i]), -1);
    doc_cmd_t good[] = {{"made-up.md", 7, "runner experiments/x.yaml --set optimizer.lr=0.05"},
                        {"made-up.md", 8, "runner report runs/a runs/b --output reports/ab"}};
    for (size_t i = 0; i < sizeof good / sizeof *good; i++) CHECK_INT(run_doc_command(&good[i]), 0);
    char s[256] = "runner check runs/x   # the gate";
    drop_comment(s);
    CHECK_STR(s, "runner check runs/x");
    CHECK(is_command("$ CUDA_VISIBLE_DEVICES=2,3 runner x.yaml"));
    CHECK(!is_command("runner: wrote runs/x/model.safetensors"));
}

int main(void) {
    if (test_run_cmd("/usr/bin/python3 -c 'import torch, torchvision'", NULL, 0) != 0)
        test_skip("the fine-tuning steps the docs show need /usr/bin/python3 with torch and torchvision "
                  "(scripts/deps.sh --test)");
    if (test_tmpdir(tmp, sizeof tmp)) return 1;
    if (make_sandbox()) {
        fprintf(stderr, "cannot set up the sandbox in %s\n", tmp);
        return 1;
    }
    TEST_RUN(bad_commands_are_caught);
    TEST_RUN(documented_commands_run);
    int rc = test_main_end();
    test_remove_dir_if_passed(tmp);
    return rc;
}
