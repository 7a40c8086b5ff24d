/* test_cli_papercuts.c: the rough edges issue 23 found, through the runner binary.
 *  - Command line: `--set k v` names the corrected argument; a typo of a verb names the
 *    verb (`trian x.yaml` is not taken for a file); `resume x.yaml` says to run the file;
 *    exit 2.
 *  - A synthetic plan says it is generated (seed, no files), not a path.
 *  - `export --output` into a missing folder names the folder and the fix; into an existing
 *    folder it writes model.safetensors there. A run directory given with a trailing slash
 *    (as shells complete it) is printed without "//" and named without the slash.
 *  - The load code `export` prints runs without the safetensors package (Debian 12) and
 *    gives the logits of the file's tensors read independently, for torchvision ResNets
 *    with either stem and for a CIFAR ResNet (check_printed_load.py).
 *  - An image file the error told the user to fix, fixed in place: the next plan takes it
 *    (the index cache notices the file's new size and mtime).
 *  - data.bad_images: skip names what it skips: the plan's count is the run's index-time
 *    count; decode-time skips are named on the console and listed with the index-time ones
 *    in skipped_images.jsonl, the same list in single mode, in DDP over 2 ranks and after
 *    an interrupted run is resumed; summary.json counts the kinds apart.
 * The image parts are skipped without python3 + PIL, the printed-code part without torch.
 */
#include <signal.h>
#include <sys/stat.h>

#include "tests/cli/cli_util.h"

static char tmp[1024];
static char out[1 << 16];

static const char *path_in(const char *name) {
    static char p[8][1200];
    static int k;
    k = (k + 1) % 8;
    snprintf(p[k], sizeof p[k], "%s/%s", tmp, name);
    return p[k];
}

static void command_line_typos(void) {
    const char *exp = path_in("typo.yaml");
    test_write_file(exp, "data: {dataset: synthetic}\nmodel: {arch: resnet20}\n");
    char args[2048];
    snprintf(args, sizeof args, "%s --set train.epochs 3", exp);
    CHECK_INT(run_runner(args, out, sizeof out), 2);
    CHECK_CONTAINS(out, "runner: --set train.epochs 3: the form is --set key=value, as one argument; write "
                        "--set train.epochs=3\n");
    snprintf(args, sizeof args, "--set k v");
    CHECK_INT(run_runner(args, out, sizeof out), 2);
    CHECK_CONTAINS(out, "write --set k=v");
    snprintf(args, sizeof args, "plan %s --set train.epochs", exp);
    CHECK_INT(run_runner(args, out, sizeof out), 2);
    CHECK_CONTAINS(out, "runner: --set train.epochs: the form is --set key=value, e.g. --set train.epochs=VALUE");
    snprintf(args, sizeof args, "trian %s", exp);
    CHECK_INT(run_runner(args, out, sizeof out), 2);
    char want[2400];
    snprintf(want, sizeof want, "runner: unknown command 'trian'; to train, give the experiment file itself: "
             "runner %s (or runner run %s)\n", exp, exp);
    CHECK_CONTAINS(out, want);
    snprintf(args, sizeof args, "pln %s", exp);
    CHECK_INT(run_runner(args, out, sizeof out), 2);
    snprintf(want, sizeof want, "runner: unknown command 'pln'; did you mean 'plan'? (runner plan %s)", exp);
    CHECK_CONTAINS(out, want);
    CHECK_INT(run_runner("exprot runs/x", out, sizeof out), 2);
    CHECK_CONTAINS(out, "did you mean 'export'? (runner export runs/x)");
    CHECK_INT(run_runner("frobnicate", out, sizeof out), 2);
    CHECK_CONTAINS(out, "unknown command 'frobnicate' (and no file of that name); the commands are plan, resume, "
                        "compare, report, check and export, or an experiment file to train");
    /* a file path is still a file path */
    CHECK_INT(run_runner("no_such_experiment.yaml", out, sizeof out), 2);
    CHECK_CONTAINS(out, "no_such_experiment.yaml: no such file");
    /* resume of the experiment file (a natural guess after an interruption): says to run
     * the file itself (it said "not a run directory (no resolved.yaml)") */
    snprintf(args, sizeof args, "resume %s", exp);
    CHECK_INT(run_runner(args, out, sizeof out), 2);
    snprintf(want, sizeof want, "runner: %s is a file, not a run directory: to continue the newest unfinished run "
             "of an experiment file, run the file itself (runner %s); resume takes the directory", exp, exp);
    CHECK_CONTAINS(out, want);
}

static void synthetic_plan_says_generated(void) {
    const char *exp = path_in("syn.yaml");
    test_write_file(exp, "seed: 7\ndata: {dataset: cifar100, root: data/cifar-100-binary}\nmodel: {arch: resnet20}\n");
    char args[2048];
    snprintf(args, sizeof args, "plan %s --set data.dataset=synthetic", exp);
    CHECK_INT(run_runner(args, out, sizeof out), 0);
    CHECK_CONTAINS(out, "data         synthetic, generated from seed 7 (no files): 1024 train / 256 test samples, "
                        "3x32x32 input, 10 classes\n");
    CHECK(strstr(out, "cifar-100-binary") == NULL);
}

/* Trains EXP (a tiny synthetic run) and returns its run directory (static), NULL on failure. */
static const char *tiny_run(const char *name, const char *model, const char *image) {
    char exp[1200], body[1024];
    snprintf(exp, sizeof exp, "%s/%s.yaml", tmp, name);
    snprintf(body, sizeof body, "name: %s\ndevice: cpu\ndata: {dataset: synthetic, synthetic: {train_size: 16, "
             "val_size: 8, image: %s, classes: 3}, workers: 0}\nmodel: %s\ntrain: {epochs: 1, batch_size: 8}\n"
             "parallel: {mode: single}\n", name, image, model);
    test_write_file(exp, body);
    return cli_run(exp, path_in("runs"), NULL, 0, out, sizeof out);
}

static void export_output_folder(void) {
    const char *d = tiny_run("exo", "{arch: resnet20}", "[3, 8, 8]");
    CHECK(d != NULL);
    if (!d) return;
    char dir[4096], args[9000];
    snprintf(dir, sizeof dir, "%s", d);
    snprintf(args, sizeof args, "export %s --output %s/missing/sub/m.safetensors", dir, tmp);
    CHECK_INT(run_runner(args, out, sizeof out), 2);
    char want[3000];
    snprintf(want, sizeof want, "runner: --output %s/missing/sub/m.safetensors: the folder %s/missing/sub does not "
             "exist; create it first (mkdir -p %s/missing/sub) or give a path in an existing folder", tmp, tmp, tmp);
    CHECK_CONTAINS(out, want);
    CHECK(access(path_in("missing"), F_OK) != 0);   /* nothing created */
    mkdir(path_in("exports"), 0755);
    snprintf(args, sizeof args, "export %s --output %s/exports", dir, tmp);
    CHECK_INT(run_runner(args, out, sizeof out), 0);
    snprintf(want, sizeof want, "runner: wrote %s/exports/model.safetensors\n", tmp);
    CHECK_CONTAINS(out, want);
    CHECK(access(path_in("exports/model.safetensors"), R_OK) == 0);
    /* a run directory as the shell completes it, with a trailing slash: the paths printed
     * (and the load code) have no "//", and report names a run by its directory alone */
    snprintf(args, sizeof args, "export %s/", dir);
    CHECK_INT(run_runner(args, out, sizeof out), 0);
    snprintf(want, sizeof want, "runner: wrote %s/model.safetensors\n", dir);
    CHECK_CONTAINS(out, want);
    CHECK(strstr(out, "//") == NULL);
    char copy[4200];
    snprintf(copy, sizeof copy, "%s-again", dir);
    snprintf(args, sizeof args, "cp -r '%s' '%s'", dir, copy);
    CHECK_INT(test_run_cmd(args, NULL, 0), 0);
    snprintf(args, sizeof args, "report %s/ %s/ --output %s/rep", dir, copy, tmp);
    CHECK_INT(run_runner(args, out, sizeof out), 0);
    const char *slash = strrchr(copy, '/');
    snprintf(want, sizeof want, "| exo (%s) |", slash ? slash + 1 : copy);
    CHECK_CONTAINS(out, want);
    CHECK(strstr(out, "/) |") == NULL);
}

/* The indented blocks of an export's output, unindented, as tmp/NAME<i>.py; returns how many. */
static int printed_blocks(const char *text, const char *name, char paths[4][1200]) {
    int n = 0;
    const char *p = text;
    while (p && *p && n < 4) {
        if (strncmp(p, "    ", 4)) {
            p = strchr(p, '\n');
            if (p) p++;
            continue;
        }
        char code[8192] = "";
        size_t k = 0;
        while (p && !strncmp(p, "    ", 4)) {
            const char *nl = strchr(p, '\n');
            size_t l = nl ? (size_t)(nl - p) + 1 : strlen(p);
            if (k + l < sizeof code) { memcpy(code + k, p + 4, l - 4); k += l - 4; code[k] = '\0'; }
            p = nl ? nl + 1 : NULL;
        }
        snprintf(paths[n], sizeof paths[n], "%s/%s%d.py", tmp, name, n);
        test_write_file(paths[n], code);
        n++;
    }
    return n;
}

static void printed_load_code_without_safetensors(void) {
    if (test_run_cmd("/usr/bin/python3 -c 'import torch, torchvision, numpy'", NULL, 0) != 0) {
        fprintf(stderr, "  (PyTorch or numpy not installed: the printed code was not run)\n");
        return;
    }
    static const struct { const char *name, *model, *image, *arch; int blocks; } cases[] = {
        {"gray18", "{arch: resnet18, stem: cifar}", "[1, 8, 8]", "resnet18", 2},
        {"inet18", "{arch: resnet18, stem: imagenet}", "[3, 32, 32]", "resnet18", 2},
        {"cifar20", "{arch: resnet20}", "[3, 8, 8]", "resnet20", 1},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const char *d = tiny_run(cases[i].name, cases[i].model, cases[i].image);
        CHECK(d != NULL);
        if (!d) continue;
        char args[4400], cmd[16384], blocks[4][1200];
        snprintf(args, sizeof args, "export %s", d);
        CHECK_INT(run_runner(args, out, sizeof out), 0);
        CHECK_CONTAINS(out, "from torchvision_model import load\n");
        int n = printed_blocks(out, cases[i].name, blocks);
        CHECK_INT(n, cases[i].blocks);
        if (n == 2) CHECK_CONTAINS(out, "    except ImportError:   # no safetensors package (Debian 12): the runner's reader\n");
        /* from another directory than the source tree: the printed paths are absolute */
        int k = snprintf(cmd, sizeof cmd, "cd / && /usr/bin/python3 %s/tests/cli/check_printed_load.py %s/model.safetensors",
                         test_source_dir(), d);
        for (int b = 0; b < n; b++) k += snprintf(cmd + k, sizeof cmd - (size_t)k, " %s", blocks[b]);
        snprintf(cmd + k, sizeof cmd - (size_t)k, " --shim %s/tests/cli/safetensors_shim 2>&1", test_source_dir());
        char res[8192];
        int rc = test_run_cmd(cmd, res, sizeof res);
        if (rc) fprintf(stderr, "%s\n", res);
        CHECK_INT(rc, 0);
        char want[256];
        snprintf(want, sizeof want, "%s0.py: %s, ", cases[i].name, cases[i].arch);
        CHECK_CONTAINS(res, want);
        CHECK_CONTAINS(res, n == 2 ? "via torchvision_model (no safetensors package): logits 3x3 equal"
                                   : "via torchvision_model.load (no safetensors package): logits 3x3 equal");
    }
}

/* ---- image folders ---- */

static bool have_pil;

/* root/{train,val}/{cat,dog}/NNN.jpg: 6 training and 2 validation images per class, then
 * the bad ones: a text file named .jpg (found while indexing) and truncated JPEGs (found
 * while decoding), two in train, one in val. */
static int make_folder(const char *root, bool bad) {
    char cmd[4096];
    snprintf(cmd, sizeof cmd,
             "/usr/bin/python3 -c \"\nfrom PIL import Image\nimport os, random\nrandom.seed(0)\n"
             "for split, n in [('train', 6), ('val', 2)]:\n"
             "    for c in ['cat', 'dog']:\n"
             "        d = '%s/%%s/%%s' %% (split, c); os.makedirs(d, exist_ok=True)\n"
             "        for i in range(n):\n"
             "            Image.new('RGB', (40, 30), (random.randrange(256), 10 * i, 50)).save('%%s/%%03d.jpg' %% (d, i), quality=90)\n"
             "if %d:\n"
             "    open('%s/train/cat/zz_notes.jpg', 'w').write('not a photo')\n"
             "    b = open('%s/train/dog/000.jpg', 'rb').read()[:300]\n"
             "    for p in ['train/dog/001.jpg', 'train/cat/003.jpg', 'val/cat/001.jpg']: open('%s/' + p, 'wb').write(b)\n"
             "\" 2>&1", root, bad ? 1 : 0, root, root, root);
    return test_run_cmd(cmd, NULL, 0);
}

static void fixed_in_place_is_seen(void) {
    if (!have_pil) return;
    const char *root = path_in("fix");
    CHECK_INT(make_folder(root, false), 0);
    char cmd[4096], args[4096];
    snprintf(cmd, sizeof cmd, "echo 'not a photo' > %s/train/cat/001.jpg", root);
    CHECK_INT(system(cmd), 0);
    const char *exp = path_in("fix.yaml");
    char body[2048];
    snprintf(body, sizeof body, "device: cpu\ndata: {dataset: image_folder, root: %s, image_size: 16, workers: 1}\n"
             "model: {arch: resnet20}\n", root);
    test_write_file(exp, body);
    /* a run (the plan writes no index cache) meets the bad file, caches the index with it
     * and stops before creating a run directory */
    snprintf(args, sizeof args, "%s --set train.max_steps=1 --set output.root=%s", exp, path_in("fix_runs"));
    CHECK_INT(run_runner(args, out, sizeof out), 2);
    CHECK_CONTAINS(out, "train/cat/001.jpg: not an image (it starts with the text \"not a photo\"): expected a "
                        "JPEG or PNG file; fix or remove the file");
    CHECK(access(path_in("fix_runs"), F_OK) != 0);
    /* fixed in place, as the message says: its folder's mtime stays, the file's changes */
    snprintf(cmd, sizeof cmd, "sleep 0.01; cat %s/train/cat/000.jpg > %s/train/cat/001.jpg", root, root);
    CHECK_INT(system(cmd), 0);
    snprintf(args, sizeof args, "plan %s", exp);
    int rc = run_runner(args, out, sizeof out);
    if (rc) fprintf(stderr, "%s\n", out);
    CHECK_INT(rc, 0);
    CHECK_CONTAINS(out, "(reused: no walk of the tree; 1 file changed since, checked again)");
    CHECK_CONTAINS(out, ": 12 train / 4 test samples");
}

/* The lines of dir/skipped_images.jsonl (malloc'd, "" when missing). */
static char *skipped_list(const char *dir) {
    char p[4400];
    snprintf(p, sizeof p, "%s/skipped_images.jsonl", dir);
    char *s = test_read_file(p, NULL);
    return s ? s : strdup("");
}

static void skipped_files_are_listed(void) {
    if (!have_pil) return;
    const char *root = path_in("bad");
    CHECK_INT(make_folder(root, true), 0);
    const char *exp = path_in("skip.yaml");
    char body[2048], args[4096];
    snprintf(body, sizeof body, "name: skip\nseed: 1\ndevice: cpu\ndata: {dataset: image_folder, root: %s, "
             "image_size: 16, bad_images: skip, workers: 1}\nmodel: {arch: resnet20}\n"
             "train: {epochs: 2, batch_size: 4}\nparallel: {mode: single}\nlogging: {print_every: 1}\n"
             "checkpoint: {resume: never}\n", root);
    test_write_file(exp, body);
    snprintf(args, sizeof args, "plan %s", exp);
    CHECK_INT(run_runner(args, out, sizeof out), 0);
    CHECK_CONTAINS(out, "bad files    1 left out (data.bad_images: skip), found while indexing; first: ");
    const char *single = cli_run(exp, path_in("single"), NULL, 0, out, sizeof out);
    CHECK(single != NULL);
    if (!single) return;
    char want[4096];
    snprintf(want, sizeof want, "data.bad_images: skip: 1 image file found bad while indexing, left out (all in "
             "%s/skipped_images.jsonl):\n  %s/train/cat/zz_notes.jpg: not an image", single, root);
    CHECK_CONTAINS(out, want);
    snprintf(want, sizeof want, "data.bad_images: skip: %s/train/dog/001.jpg failed to decode, replaced by the next "
             "sample (truncated JPEG", root);
    CHECK_CONTAINS(out, want);
    snprintf(want, sizeof want, "data.bad_images: skip: 4 image files skipped: 1 found bad while indexing (left "
             "out), 3 failed to decode (replaced); all in %s/skipped_images.jsonl", single);
    CHECK_CONTAINS(out, want);
    CHECK(cli_json_number(single, "summary.json", "bad_images_skipped") == 4);
    CHECK(cli_json_number(single, "summary.json", "bad_images_skipped_indexing") == 1);
    CHECK(cli_json_number(single, "summary.json", "bad_images_skipped_decoding") == 3);
    char *list = skipped_list(single);
    char expect[8192];
    snprintf(expect, sizeof expect,
             "{\"found\":\"indexing\",\"split\":\"train\",\"path\":\"%s/train/cat/zz_notes.jpg\",\"reason\":\"not an "
             "image (it starts with the text \\\"not a photo\\\"): expected a JPEG or PNG file\"}\n"
             "{\"found\":\"decoding\",\"split\":\"train\",\"path\":\"%s/train/cat/003.jpg\",\"reason\":\"truncated "
             "JPEG: the data ends inside the image\"}\n"
             "{\"found\":\"decoding\",\"split\":\"train\",\"path\":\"%s/train/dog/001.jpg\",\"reason\":\"truncated "
             "JPEG: the data ends inside the image\"}\n"
             "{\"found\":\"decoding\",\"split\":\"val\",\"path\":\"%s/val/cat/001.jpg\",\"reason\":\"truncated "
             "JPEG: the data ends inside the image\"}\n", root, root, root, root);
    CHECK_STR(list, expect);
    /* DDP, 2 ranks, each decoding its own samples: rank 0 gathers the same list */
    const char *ddp = cli_run(exp, path_in("ddp"), "--set parallel.mode=ddp --set parallel.world_size=2 "
                              "--set data.workers=0", 1, out, sizeof out);
    CHECK(ddp != NULL);
    if (ddp) {
        char *l2 = skipped_list(ddp);
        CHECK_STR(l2, expect);
        free(l2);
        CHECK(cli_json_number(ddp, "summary.json", "bad_images_skipped_decoding") == 3);
    }
    /* interrupted at its second step, then resumed: the list again */
    char log[1200], dir[4096];
    snprintf(log, sizeof log, "%s/int.log", tmp);
    const char *longer[] = {"train.epochs=6"};   /* 18 steps: time to stop it at the second */
    CHECK_INT(cli_interrupt_at(exp, path_in("int"), log, "skip", longer, 1, 2, SIGINT, dir, sizeof dir), 130);
    if (dir[0]) {
        snprintf(args, sizeof args, "resume %s", dir);
        int rc = run_runner(args, out, sizeof out);
        if (rc) fprintf(stderr, "%s\n", out);
        CHECK_INT(rc, 0);
        char *l3 = skipped_list(dir);
        CHECK_STR(l3, expect);
        free(l3);
        CHECK(cli_json_number(dir, "summary.json", "bad_images_skipped") == 4);
    }
    free(list);
}

int main(void) {
    if (test_tmpdir(tmp, sizeof tmp)) return 1;
    setenv("RUNNER_CACHE_DIR", tmp, 1);
    have_pil = test_run_cmd("/usr/bin/python3 -c 'import PIL'", NULL, 0) == 0;
    if (!have_pil) fprintf(stderr, "  (python3 PIL not installed: the image folder parts are skipped)\n");
    TEST_RUN(command_line_typos);
    TEST_RUN(synthetic_plan_says_generated);
    TEST_RUN(export_output_folder);
    TEST_RUN(printed_load_code_without_safetensors);
    TEST_RUN(fixed_in_place_is_seen);
    TEST_RUN(skipped_files_are_listed);
    int rc = test_main_end();
    test_remove_dir_if_passed(tmp);
    return rc;
}
