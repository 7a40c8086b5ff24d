/* replay.c: main() for a harness built without libFuzzer: runs every file named on the
 * command line (a directory: every file in it) through LLVMFuzzerTestOneInput once.
 * ctest runs each harness this way over tests/fuzz/corpus/<reader>/, so the corpus,
 * crash regressions included, is replayed by every build, the ASan one too. */
#include <dirent.h>
#include <sys/stat.h>

#include "tests/fuzz/fuzz.h"

static int run_file(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) { fprintf(stderr, "replay: cannot open %s\n", path); return -1; }
    size_t cap = 1 << 16, n = 0;
    uint8_t *buf = malloc(cap);
    for (size_t r; buf && (r = fread(buf + n, 1, cap - n, f)) > 0;) {
        n += r;
        if (n == cap) buf = realloc(buf, cap *= 2);
    }
    fclose(f);
    if (!buf) return -1;
    /* an exact-size copy, so reading one byte too far is caught by ASan */
    uint8_t *exact = malloc(n ? n : 1);
    memcpy(exact, buf, n);
    free(buf);
    LLVMFuzzerTestOneInput(exact, n);
    free(exact);
    return 0;
}

int main(int argc, char **argv) {
    int files = 0, bad = 0;
    for (int i = 1; i < argc; i++) {
        struct stat st;
        if (stat(argv[i], &st) != 0) { fprintf(stderr, "replay: %s missing\n", argv[i]); bad++; continue; }
        if (!S_ISDIR(st.st_mode)) { bad += run_file(argv[i]) != 0; files++; continue; }
        DIR *d = opendir(argv[i]);
        struct dirent *de;
        while (d && (de = readdir(d))) {
            if (de->d_name[0] == '.') continue;
            char p[4096];
            snprintf(p, sizeof p, "%s/%s", argv[i], de->d_name);
            bad += run_file(p) != 0;
            files++;
        }
        if (d) closedir(d);
    }
    printf("replayed %d inputs, %d unreadable\n", files, bad);
    return bad || files == 0 ? 1 : 0;
}
