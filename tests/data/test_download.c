/* test_download.c: MD5 against RFC 1321's vectors, the tar reader's safety rules, and
 * downloads from a loopback HTTP/1.1 server started here (a thread on 127.0.0.1, random
 * port) serving tarballs built here: success through dataset_open, and a bad checksum,
 * evil archives (`..`, absolute path, symlink to /etc, hard link), a 404 and a dead server
 * each failing cleanly with nothing left at or beside the target. */
#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "data/dataset.h"
#include "data/download.h"
#include "tests/data/data_test_util.h"
#include "tests/test.h"

static char tmp[512];

/* ---- a tiny tar writer (ustar) ---- */
typedef struct { char *buf; size_t len, cap; } tarbuf_t;

static void tb_put(tarbuf_t *t, const void *p, size_t n) {
    if (t->len + n > t->cap) {
        t->cap = (t->len + n) * 2;
        t->buf = realloc(t->buf, t->cap);
    }
    memcpy(t->buf + t->len, p, n);
    t->len += n;
}

static void tar_entry(tarbuf_t *t, const char *name, char type, const void *data, size_t n,
                      const char *link) {
    uint8_t h[512] = {0};
    snprintf((char *)h, 100, "%s", name);
    snprintf((char *)h + 100, 8, "%07o", type == '5' ? 0755 : 0644);
    snprintf((char *)h + 108, 8, "%07o", 0);
    snprintf((char *)h + 116, 8, "%07o", 0);
    snprintf((char *)h + 124, 12, "%011o", (unsigned)n);
    snprintf((char *)h + 136, 12, "%011o", 0);
    h[156] = (uint8_t)type;
    if (link) snprintf((char *)h + 157, 100, "%s", link);
    memcpy(h + 257, "ustar", 6);
    memcpy(h + 263, "00", 2);
    memset(h + 148, ' ', 8);
    unsigned sum = 0;
    for (int i = 0; i < 512; i++) sum += h[i];
    snprintf((char *)h + 148, 8, "%06o", sum);
    h[155] = ' ';
    tb_put(t, h, 512);
    if (n) {
        tb_put(t, data, n);
        uint8_t pad[512] = {0};
        if (n % 512) tb_put(t, pad, 512 - n % 512);
    }
}

static void tar_end(tarbuf_t *t) {
    uint8_t z[1024] = {0};
    tb_put(t, z, sizeof z);
}

/* gzip-compresses t into a malloc'd buffer. */
static char *gz_bytes(const tarbuf_t *t, size_t *out_len) {
    char p[600];
    snprintf(p, sizeof p, "%s/gz.tmp", tmp);
    gzFile f = gzopen(p, "wb");
    gzwrite(f, t->buf, (unsigned)t->len);
    gzclose(f);
    char *b = test_read_file(p, out_len);
    unlink(p);
    return b;
}

static void md5_hex(const void *p, size_t n, char hex[33]) {
    md5_ctx_t c;
    md5_init(&c);
    md5_update(&c, p, n);
    uint8_t d[16];
    md5_final(&c, d);
    for (int i = 0; i < 16; i++) snprintf(hex + 2 * i, 3, "%02x", d[i]);
}

/* ---- a loopback HTTP/1.1 server ---- */
typedef struct { const char *path; const char *body; size_t len; } route_t;
typedef struct {
    int fd, port, stop, requests;
    route_t routes[16];
    int nroutes;
    pthread_mutex_t mu;
} server_t;

static void serve_one(server_t *s, int c) {
    char req[4096];
    size_t n = 0;
    while (n < sizeof req - 1) {
        ssize_t r = recv(c, req + n, sizeof req - 1 - n, 0);
        if (r <= 0) break;
        n += (size_t)r;
        req[n] = 0;
        if (strstr(req, "\r\n\r\n")) break;
    }
    req[n] = 0;
    char method[16] = "", path[1024] = "";
    sscanf(req, "%15s %1023s", method, path);
    pthread_mutex_lock(&s->mu);
    s->requests++;
    const route_t *rt = NULL;
    for (int i = 0; i < s->nroutes; i++)
        if (!strcmp(s->routes[i].path, path)) rt = &s->routes[i];
    pthread_mutex_unlock(&s->mu);
    char head[256];
    if (rt) {
        int hl = snprintf(head, sizeof head, "HTTP/1.1 200 OK\r\nContent-Type: application/gzip\r\n"
                          "Content-Length: %zu\r\nConnection: close\r\n\r\n", rt->len);
        send(c, head, (size_t)hl, MSG_NOSIGNAL);
        size_t off = 0;
        while (off < rt->len) {
            ssize_t w = send(c, rt->body + off, rt->len - off, MSG_NOSIGNAL);
            if (w <= 0) break;
            off += (size_t)w;
        }
    } else if (!strcmp(path, "/hang")) {
        /* headers, a few bytes, then silence: the client's low-speed timeout must fire */
        const char *h = "HTTP/1.1 200 OK\r\nContent-Length: 100000\r\n\r\nabc";
        send(c, h, strlen(h), MSG_NOSIGNAL);
        sleep(2);
    } else {
        const char *nf = "HTTP/1.1 404 Not Found\r\nContent-Length: 9\r\nConnection: close\r\n\r\nnot found";
        send(c, nf, strlen(nf), MSG_NOSIGNAL);
    }
    close(c);
}

static void *server_main(void *arg) {
    server_t *s = arg;
    for (;;) {
        pthread_mutex_lock(&s->mu);
        int stop = s->stop;
        pthread_mutex_unlock(&s->mu);
        if (stop) break;
        struct pollfd p = {s->fd, POLLIN, 0};
        if (poll(&p, 1, 50) <= 0) continue;
        int c = accept(s->fd, NULL, NULL);
        if (c >= 0) serve_one(s, c);
    }
    return NULL;
}

/* Binds 127.0.0.1 on a free port; returns the listening socket and the port. */
static int listen_any(int *port) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {0};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (bind(fd, (struct sockaddr *)&a, sizeof a) || listen(fd, 16)) { close(fd); return -1; }
    socklen_t l = sizeof a;
    getsockname(fd, (struct sockaddr *)&a, &l);
    *port = ntohs(a.sin_port);
    return fd;
}

/* Number of entries in dir (excluding . and ..). */
static int count_entries(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return -1;
    int n = 0;
    struct dirent *de;
    while ((de = readdir(d)))
        if (strcmp(de->d_name, ".") && strcmp(de->d_name, "..")) n++;
    closedir(d);
    return n;
}

static int exists(const char *p) {
    struct stat st;
    return lstat(p, &st) == 0;
}

static void test_md5(void) {
    const char *in[] = {"", "a", "abc", "message digest", "abcdefghijklmnopqrstuvwxyz",
        "12345678901234567890123456789012345678901234567890123456789012345678901234567890"};
    const char *want[] = {"d41d8cd98f00b204e9800998ecf8427e", "0cc175b9c0f1b6a831c399e269772661",
        "900150983cd24fb0d6963f7d28e17f72", "f96b697d7cb7938d525a2f31aaf161d0",
        "c3fcd3d76192e4007dfb496cca67e13b", "57edf4a22be3c955ac49da2e2107b67a"};
    for (int i = 0; i < 6; i++) {
        char hex[33];
        md5_hex(in[i], strlen(in[i]), hex);
        CHECK_STR(hex, want[i]);
    }
    /* the same digest when fed in odd pieces */
    const char *s = in[5];
    md5_ctx_t c;
    md5_init(&c);
    md5_update(&c, s, 3);
    md5_update(&c, s + 3, 61);
    md5_update(&c, s + 64, 16);
    uint8_t d[16];
    md5_final(&c, d);
    char hex[33];
    for (int i = 0; i < 16; i++) snprintf(hex + 2 * i, 3, "%02x", d[i]);
    CHECK_STR(hex, want[5]);
}

/* A CIFAR-10-shaped tarball: cifar-10-batches-bin/{data_batch_1..5,test_batch}.bin with one
 * record each, labels = file number, pixel byte = file number * 10. */
static char *good_tarball(size_t *len, int top_dir) {
    tarbuf_t t = {0};
    if (top_dir) tar_entry(&t, "cifar-10-batches-bin/", '5', NULL, 0, NULL);
    uint8_t rec[3073];
    for (int f = 1; f <= 6; f++) {
        char name[128];
        if (f <= 5) snprintf(name, sizeof name, "%sdata_batch_%d.bin", top_dir ? "cifar-10-batches-bin/" : "./", f);
        else snprintf(name, sizeof name, "%stest_batch.bin", top_dir ? "cifar-10-batches-bin/" : "");
        rec[0] = (uint8_t)(f % 10);
        memset(rec + 1, f * 10, 3072);
        tar_entry(&t, name, '0', rec, sizeof rec, NULL);
    }
    const char *meta = "airplane\nautomobile\nbird\ncat\ndeer\ndog\nfrog\nhorse\nship\ntruck\n";
    tar_entry(&t, top_dir ? "cifar-10-batches-bin/batches.meta.txt" : "batches.meta.txt", '0',
              meta, strlen(meta), NULL);
    tar_end(&t);
    char *gz = gz_bytes(&t, len);
    free(t.buf);
    return gz;
}

static char *evil_tarball(size_t *len, const char *name, char type, const char *link) {
    tarbuf_t t = {0};
    tar_entry(&t, "top/ok.bin", '0', "hello", 5, NULL);
    tar_entry(&t, name, type, type == '0' ? "evil" : NULL, type == '0' ? 4 : 0, link);
    tar_end(&t);
    char *gz = gz_bytes(&t, len);
    free(t.buf);
    return gz;
}

static server_t srv;

static void add_route(const char *path, const char *body, size_t len) {
    pthread_mutex_lock(&srv.mu);
    srv.routes[srv.nroutes++] = (route_t){path, body, len};
    pthread_mutex_unlock(&srv.mu);
}

static void url_of(char *out, size_t n, const char *path) {
    snprintf(out, n, "http://127.0.0.1:%d%s", srv.port, path);
}

static void test_download_success(void) {
    size_t len, len2;
    char *gz = good_tarball(&len, 1), *flat = good_tarball(&len2, 0);
    add_route("/cifar-10-binary.tar.gz", gz, len);
    add_route("/flat.tar.gz", flat, len2);
    char md5[33], url[256], root[700], parent[600];
    md5_hex(gz, len, md5);
    url_of(url, sizeof url, "/cifar-10-binary.tar.gz");
    snprintf(parent, sizeof parent, "%s/ok/data", tmp);
    snprintf(root, sizeof root, "%s/cifar-10-batches-bin", parent);
    dataset_opts_t o = {0};
    o.name = "cifar10";
    o.root = root;
    o.split = DATA_SPLIT_TRAIN;
    o.download = true;
    o.download_url = url;
    o.download_md5 = md5;
    dataset_t *d = NULL;
    err_t e = {0};
    CHECK_INT(dataset_open(&o, &d, &e), 0);
    if (!d) fprintf(stderr, "%s\n", e.msg);
    if (d) {
        CHECK_INT(dataset_size(d), 5);
        int label;
        const uint8_t *img = dataset_get(d, 3, &label);
        CHECK_INT(label, 4);
        CHECK_INT(img[100], 40);
        CHECK_STR(dataset_class_name(d, 3), "cat");
        dataset_free(d);
    }
    CHECK_INT(count_entries(parent), 1);  /* only the target: no temp dir, no archive */
    int before = srv.requests;
    /* a second open finds the files and downloads nothing */
    CHECK_INT(dataset_open(&o, &d, &e), 0);
    dataset_free(d);
    CHECK_INT(srv.requests, before);
    /* an archive without a top-level directory becomes the target itself; no md5 given */
    char target[700];
    snprintf(target, sizeof target, "%s/flat/", parent);  /* a trailing slash is fine */
    download_opts_t dl = {0};
    url_of(url, sizeof url, "/flat.tar.gz");
    dl.url = url;
    dl.target = target;
    dl.progress = 0;
    CHECK_INT(download_dataset_archive(&dl, &e), 0);
    char p[800];
    snprintf(p, sizeof p, "%sdata_batch_2.bin", target);
    CHECK(exists(p));
    CHECK_INT(count_entries(target), 7);
    /* the target exists now: refused */
    CHECK_INT(download_dataset_archive(&dl, &e), -1);
    CHECK_CONTAINS(e.msg, "already exists");
}

/* Runs a failing download into parent/name and checks nothing is left beside it. */
static void expect_clean_failure_t(const char *path, const char *md5, int retries,
                                   long low_speed_s, const char *want1, const char *want2) {
    char parent[600], target[700], url[256];
    static int k = 0;
    snprintf(parent, sizeof parent, "%s/fail%d", tmp, k++);
    snprintf(target, sizeof target, "%s/dataset", parent);
    mkdir(parent, 0755);
    if (path[0] == '/') url_of(url, sizeof url, path);
    else snprintf(url, sizeof url, "%s", path);
    download_opts_t dl = {0};
    dl.url = url;
    dl.md5 = md5;
    dl.target = target;
    dl.retries = retries;
    dl.backoff_s = -1;
    dl.progress = 0;
    dl.connect_timeout_s = 5;
    dl.low_speed_time_s = low_speed_s;
    err_t e = {0};
    CHECK_INT(download_dataset_archive(&dl, &e), -1);
    CHECK_INT(e.code, ERR_INPUT);
    CHECK_CONTAINS(e.msg, want1);
    if (want2) CHECK_CONTAINS(e.msg, want2);
    CHECK_CONTAINS(e.msg, url);
    CHECK(!exists(target));
    CHECK_INT(count_entries(parent), 0);
    char escaped[700];
    snprintf(escaped, sizeof escaped, "%s/x", tmp);  /* where ../x would land from the temp dir */
    CHECK(!exists(escaped));
    printf("expected failure: %s\n", e.msg);
}

static void expect_clean_failure(const char *path, const char *md5, int retries,
                                 const char *want1, const char *want2) {
    expect_clean_failure_t(path, md5, retries, 0, want1, want2);
}

static void test_download_failures(void) {
    size_t len;
    char *gz = good_tarball(&len, 1);
    add_route("/good.tar.gz", gz, len);
    char actual[33];
    md5_hex(gz, len, actual);
    expect_clean_failure("/good.tar.gz", "00000000000000000000000000000000", 0,
                         "md5 is ", "expected 00000000000000000000000000000000");
    struct { const char *name; char type; const char *link; const char *want; } evil[] = {
        {"top/../../x", '0', NULL, "`..` path component"},
        {"../x", '0', NULL, "`..` path component"},
        {"/tmp/runner-evil-abs", '0', NULL, "absolute path"},
        {"top/etc", '2', "/etc", "symbolic link to \"/etc\""},
        {"top/hl", '1', "/etc/passwd", "hard link"},
        {"top/dev", '3', NULL, "is not a regular file"},
    };
    static char *bodies[6];
    static char paths[6][32];
    for (int i = 0; i < 6; i++) {
        size_t l;
        bodies[i] = evil_tarball(&l, evil[i].name, evil[i].type, evil[i].link);
        snprintf(paths[i], sizeof paths[i], "/evil%d.tar.gz", i);
        add_route(paths[i], bodies[i], l);
        char m[33];
        md5_hex(bodies[i], l, m);
        expect_clean_failure(paths[i], m, 0, evil[i].want, "nothing was written to");
    }
    CHECK(!exists("/tmp/runner-evil-abs"));
    /* a corrupt gzip stream with the right md5 of what is served */
    static char corrupt[4096];
    memcpy(corrupt, gz, len < sizeof corrupt ? len : sizeof corrupt);
    size_t cl = len < sizeof corrupt ? len : sizeof corrupt;
    for (size_t i = 20; i < cl - 8; i += 5) corrupt[i] ^= 0x33;
    add_route("/corrupt.tar.gz", corrupt, cl);
    expect_clean_failure("/corrupt.tar.gz", NULL, 0, "extracting the download", NULL);
    int before = srv.requests;
    expect_clean_failure("/missing.tar.gz", NULL, 3, "HTTP status 404", "download it yourself");
    CHECK_INT(srv.requests - before, 1);  /* a 404 is not retried */
    /* a dead server: a port nobody listens on */
    int port, fd = listen_any(&port);
    close(fd);
    char dead[128];
    snprintf(dead, sizeof dead, "http://127.0.0.1:%d/cifar.tar.gz", port);
    expect_clean_failure(dead, NULL, 1, "after 2 attempts", "curl -L -o archive.tar.gz");
    /* a server that stalls mid-transfer: aborted by the low-speed timeout (1 s here) */
    expect_clean_failure_t("/hang", NULL, -1, 1, "after 1 attempt", "Operation too slow");
    free(gz);
}

static void test_tar_direct(void) {
    /* GNU long names and pax paths are honoured */
    tarbuf_t t = {0};
    char longname[200];
    memset(longname, 'a', 150);
    strcpy(longname + 150, "/f.txt");
    tar_entry(&t, "././@LongLink", 'L', longname, strlen(longname) + 1, NULL);
    tar_entry(&t, "ignored", '0', "LONG", 4, NULL);
    const char *pax = "20 path=dir/pax.txt\n";
    tar_entry(&t, "PaxHeaders/x", 'x', pax, strlen(pax), NULL);
    tar_entry(&t, "short", '0', "PAX", 3, NULL);
    /* an old-GNU header (magic "ustar  \0", as in the CIFAR tarballs): bytes 345.. hold
     * times, not a name prefix */
    size_t at = t.len;
    tar_entry(&t, "gnu.bin", '0', "GNU!", 4, NULL);
    memcpy(t.buf + at + 257, "ustar  ", 8);
    memcpy(t.buf + at + 345, "00000000001", 11);
    memset(t.buf + at + 148, ' ', 8);
    unsigned sum = 0;
    for (int i = 0; i < 512; i++) sum += (uint8_t)t.buf[at + i];
    snprintf(t.buf + at + 148, 8, "%06o", sum);
    tar_end(&t);
    char arch[600], dest[600];
    snprintf(arch, sizeof arch, "%s/t.tar", tmp);
    snprintf(dest, sizeof dest, "%s/tdest", tmp);
    CHECK_INT(tw_write(arch, NULL, t.buf, t.len), 0);
    mkdir(dest, 0755);
    err_t e = {0};
    CHECK_INT(tar_extract(arch, dest, &e), 0);
    if (e.code) fprintf(stderr, "%s\n", e.msg);
    char p[900];
    snprintf(p, sizeof p, "%s/%s", dest, longname);
    size_t n;
    char *b = test_read_file(p, &n);
    CHECK(b && n == 4 && !memcmp(b, "LONG", 4));
    free(b);
    snprintf(p, sizeof p, "%s/dir/pax.txt", dest);
    b = test_read_file(p, &n);
    CHECK(b && n == 3 && !memcmp(b, "PAX", 3));
    free(b);
    snprintf(p, sizeof p, "%s/gnu.bin", dest);
    b = test_read_file(p, &n);
    CHECK(b && n == 4 && !memcmp(b, "GNU!", 4));
    free(b);
    /* a bad header checksum */
    t.buf[1024 + 3] ^= 1;  /* the 2nd header (after the long name block) name field */
    CHECK_INT(tw_write(arch, NULL, t.buf, t.len), 0);
    char dest2[600];
    snprintf(dest2, sizeof dest2, "%s/tdest2", tmp);
    mkdir(dest2, 0755);
    CHECK_INT(tar_extract(arch, dest2, &e), -1);
    CHECK_CONTAINS(e.msg, "bad tar header checksum");
    /* truncated */
    CHECK_INT(tw_write(arch, NULL, t.buf, 700), 0);
    CHECK_INT(tar_extract(arch, dest2, &e), -1);
    CHECK_CONTAINS(e.msg, "truncated");
    free(t.buf);
}

int main(void) {
    if (test_tmpdir(tmp, sizeof tmp)) return 1;
    /* the loopback server must be reached directly even where a proxy is configured */
    unsetenv("http_proxy"); unsetenv("HTTP_PROXY"); unsetenv("https_proxy");
    unsetenv("HTTPS_PROXY"); unsetenv("all_proxy"); unsetenv("ALL_PROXY");
    pthread_mutex_init(&srv.mu, NULL);
    srv.fd = listen_any(&srv.port);
    if (srv.fd < 0) { fprintf(stderr, "cannot listen on 127.0.0.1\n"); return 1; }
    pthread_t th;
    pthread_create(&th, NULL, server_main, &srv);
    TEST_RUN(test_md5);
    TEST_RUN(test_tar_direct);
    TEST_RUN(test_download_success);
    TEST_RUN(test_download_failures);
    pthread_mutex_lock(&srv.mu);
    srv.stop = 1;
    pthread_mutex_unlock(&srv.mu);
    pthread_join(th, NULL);
    close(srv.fd);
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmp);
    test_run_cmd(cmd, NULL, 0);
    return test_main_end();
}
