/* test_safetensors.c: the safetensors reader/writer and net weight I/O: a bit-exact
 * round trip of a resnet20's params, buffers and counters; F16/BF16 conversion on load;
 * and every error class (short file, header length past the end, bad JSON, unknown
 * dtype, offsets out of range, size/shape mismatch, overlap, duplicate, missing /
 * unexpected / wrong-shaped tensor), each ERR_INPUT naming the file and the tensor; and
 * loading with a kept prefix (fine-tuning with a fresh classifier). */
#include <stdlib.h>

#include "model/cpu/cpu_backend.h"
#include "model/net.h"
#include "model/arch/resnet.h"
#include "model/safetensors.h"
#include "util/half.h"
#include "util/rng.h"
#include "tests/test.h"

static char g_dir[512];

static backend_t *cpu(void) {
    err_t e = {0};
    backend_opts_t bo = {.kind = BACKEND_CPU, .threads = 2};
    return cpu_backend_create(&bo, &e);
}

/* Writes raw bytes: an 8-byte LE length, the header text, then data_len zero bytes. */
static void write_raw(const char *path, const char *header, size_t data_len, int64_t len_override) {
    FILE *f = fopen(path, "wb");
    uint64_t n = len_override >= 0 ? (uint64_t)len_override : strlen(header);
    for (int i = 0; i < 8; i++) fputc((int)((n >> (8 * i)) & 0xff), f);
    fputs(header, f);
    for (size_t i = 0; i < data_len; i++) fputc(0, f);
    fclose(f);
}

/* Opens path expecting failure with a message containing `want` and the path. */
static void expect_open_error(const char *path, const char *want) {
    err_t e = {0};
    safetensors_t *st = safetensors_open(path, 0, &e);
    CHECK(st == NULL);
    safetensors_close(st);
    CHECK_INT(e.code, ERR_INPUT);
    CHECK_CONTAINS(e.msg, path);
    CHECK_CONTAINS(e.msg, want);
}

static void test_header_errors(void) {
    char p[600];
    snprintf(p, sizeof p, "%s/bad.safetensors", g_dir);
    FILE *f = fopen(p, "wb");
    fputs("abc", f);
    fclose(f);
    expect_open_error(p, "too short");
    write_raw(p, "{}", 0, 1000);
    expect_open_error(p, "header length 1000");
    write_raw(p, "{\"a\": {\"dtype\": \"F32\", ", 0, -1);
    expect_open_error(p, "header JSON");
    write_raw(p, "[1,2]", 0, -1);
    expect_open_error(p, "not a JSON object");
    write_raw(p, "{\"w\":{\"dtype\":\"Q8\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8, -1);
    expect_open_error(p, "unsupported dtype Q8");
    write_raw(p, "{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 4, -1);
    expect_open_error(p, "tensor w: data_offsets [0, 8] run past the data section (4 bytes)");
    write_raw(p, "{\"w\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,8]}}", 8, -1);
    expect_open_error(p, "tensor w: 8 bytes for 3 elements");
    write_raw(p, "{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,0]}}", 8, -1);
    expect_open_error(p, "data_offsets must be [begin, end]");
    write_raw(p, "{\"w\":{\"dtype\":\"F32\",\"shape\":[-2],\"data_offsets\":[0,8]}}", 8, -1);
    expect_open_error(p, "shape entry 0");
    write_raw(p, "{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                 "\"v\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}", 12, -1);
    expect_open_error(p, "overlap");
    write_raw(p, "{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                 "\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,16]}}", 16, -1);
    expect_open_error(p, "appears twice");
    write_raw(p, "{\"w\":{\"dtype\":\"F32\",\"shape\":[2]}}", 8, -1);
    expect_open_error(p, "needs dtype, shape and data_offsets");
    /* a valid one with metadata and an empty tensor */
    write_raw(p, "{\"__metadata__\":{\"format\":\"pt\"},\"w\":{\"dtype\":\"F32\",\"shape\":[2],"
                 "\"data_offsets\":[0,8]},\"z\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[8,8]}}", 8, -1);
    err_t e = {0};
    safetensors_t *st = safetensors_open(p, 0, &e);
    CHECK(st != NULL);
    if (st) {
        CHECK_INT(st->n, 2);
        CHECK_STR(safetensors_meta(st, "format"), "pt");
        const st_tensor_t *w = safetensors_find(st, "w");
        CHECK(w && w->numel == 2 && w->ndim == 1);
        CHECK(safetensors_find(st, "nope") == NULL);
    }
    safetensors_close(st);
    expect_open_error("/nonexistent/dir/x.safetensors", "cannot open");
}

static void test_dtype_conversion(void) {
    char p[600];
    snprintf(p, sizeof p, "%s/dt.safetensors", g_dir);
    uint16_t h[3] = {f32_to_f16(1.5f), f32_to_f16(-0.25f), f32_to_f16(65504.0f)};
    uint16_t b[3] = {f32_to_bf16(3.0f), f32_to_bf16(-1e-3f), f32_to_bf16(1e30f)};
    int64_t c[1] = {42};
    st_entry_t en[3] = {{"h", ST_F16, 1, {3}, h}, {"b", ST_BF16, 1, {3}, b}, {"c", ST_I64, 0, {0}, c}};
    err_t e = {0};
    CHECK_INT(safetensors_write(p, en, 3, NULL, NULL, 0, &e), 0);
    safetensors_t *st = safetensors_open(p, 0, &e);
    CHECK(st != NULL);
    if (!st) return;
    float out[3];
    CHECK_INT(safetensors_read_f32(st, safetensors_find(st, "h"), out, &e), 0);
    CHECK_NEAR(out[0], 1.5, 0, 0);
    CHECK_NEAR(out[1], -0.25, 0, 0);
    CHECK_NEAR(out[2], 65504.0, 0, 0);
    CHECK_INT(safetensors_read_f32(st, safetensors_find(st, "b"), out, &e), 0);
    CHECK_NEAR(out[0], 3.0, 0, 0);
    CHECK_NEAR(out[1], round_bf16(-1e-3f), 0, 0);
    CHECK_NEAR(out[2], round_bf16(1e30f), 0, 0);
    const st_tensor_t *ct = safetensors_find(st, "c");
    CHECK(ct && ct->ndim == 0 && ct->numel == 1);
    int64_t cv = 0;
    CHECK_INT(safetensors_read_i64(st, ct, &cv, &e), 0);
    CHECK_INT(cv, 42);
    CHECK_INT(safetensors_read_i64(st, safetensors_find(st, "h"), &cv, &e), -1);
    CHECK_CONTAINS(e.msg, "expected an integer dtype");
    safetensors_close(st);
}

/* Saves a trained-looking resnet20 and loads it into a fresh one: bit-identical. */
static void test_net_round_trip(void) {
    backend_t *be = cpu();
    CHECK(be != NULL);
    if (!be) return;
    err_t e = {0};
    net_t *a = resnet_build("resnet20", 1, 10, false, &e), *b = resnet_build("resnet20", 1, 10, false, &e);
    CHECK_INT(net_bind(a, be, 2, 28, 28, DT_F32, &e), 0);
    CHECK_INT(net_bind(b, be, 2, 28, 28, DT_F32, &e), 0);
    CHECK_INT(net_init(a, 7, &e), 0);
    size_t np = net_num_params(a), nb = net_num_buffers(a);
    float *pa = malloc(np * 4), *pb = malloc(np * 4), *ba = malloc(nb * 4), *bb = malloc(nb * 4);
    /* make buffers and counters non-trivial */
    for (size_t i = 0; i < nb; i++) ba[i] = 0.5f + (float)i * 1e-3f;
    CHECK_INT(net_upload_buffers(a, ba, &e), 0);
    for (int i = 0; i < net_num_counters(a); i++) net_counters(a)[i] = 100 + i;
    char p[600];
    snprintf(p, sizeof p, "%s/r20.safetensors", g_dir);
    const char *mk[1] = {"arch"}, *mv[1] = {"resnet20"};
    CHECK_INT(safetensors_save_net(a, p, mk, mv, 1, &e), 0);
    int rc = safetensors_load_net(b, p, &e);
    if (rc) fprintf(stderr, "%s\n", e.msg);
    CHECK_INT(rc, 0);
    CHECK_INT(net_download_params(a, pa, &e), 0);
    CHECK_INT(net_download_params(b, pb, &e), 0);
    CHECK(memcmp(pa, pb, np * 4) == 0);
    CHECK_INT(net_download_buffers(b, bb, &e), 0);
    CHECK(memcmp(ba, bb, nb * 4) == 0);
    for (int i = 0; i < net_num_counters(b); i++) CHECK_INT(net_counters(b)[i], 100 + i);
    /* the file holds torchvision names and OIHW shapes */
    safetensors_t *st = safetensors_open(p, 0, &e);
    CHECK(st != NULL);
    if (st) {
        CHECK_STR(safetensors_meta(st, "arch"), "resnet20");
        CHECK_INT(st->n, net_num_tensors(a));
        const st_tensor_t *w = safetensors_find(st, "layer2.0.downsample.0.weight");
        CHECK(w && w->ndim == 4 && w->shape[0] == 32 && w->shape[1] == 16 && w->shape[2] == 1);
        const st_tensor_t *c1 = safetensors_find(st, "conv1.weight");
        CHECK(c1 && c1->shape[0] == 16 && c1->shape[1] == 1 && c1->shape[2] == 3 && c1->shape[3] == 3);
        const st_tensor_t *nbt = safetensors_find(st, "bn1.num_batches_tracked");
        CHECK(nbt && nbt->dtype == ST_I64 && nbt->ndim == 0);
        /* OIHW element (o=1, i=0, h=2, w=0) equals KRSC (1, 2, 0, 0) */
        float oihw[16 * 9];
        CHECK_INT(safetensors_read_f32(st, c1, oihw, &e), 0);
        const net_tensor_t *t = net_find_tensor(a, "conv1.weight");
        CHECK_NEAR(oihw[(1 * 1 + 0) * 9 + 2 * 3 + 0], pa[t->offset + ((1 * 3 + 2) * 3 + 0) * 1 + 0], 0, 0);
    }
    safetensors_close(st);
    /* no temp files left beside it */
    char cmd[700], out[256];
    snprintf(cmd, sizeof cmd, "ls %s | grep -c tmp", g_dir);
    test_run_cmd(cmd, out, sizeof out);
    CHECK_INT(atoi(out), 0);
    free(pa); free(pb); free(ba); free(bb);
    net_free(a);
    net_free(b);
    backend_free(be);
}

/* Fine-tuning (model.init_head: reinit): a 10-class file into a 4-class net with "fc."
 * kept: every other parameter, running statistic and counter comes from the file, fc.*
 * keeps the net's own values, and the file's fc.* (another shape) is no error; without
 * the kept prefix that same file is refused naming fc.weight. */
static void test_load_keeping_head(void) {
    backend_t *be = cpu();
    err_t e = {0};
    net_t *a = resnet_build("resnet20", 3, 10, false, &e), *b = resnet_build("resnet20", 3, 4, false, &e);
    CHECK_INT(net_bind(a, be, 1, 8, 8, DT_F32, &e), 0);
    CHECK_INT(net_bind(b, be, 1, 8, 8, DT_F32, &e), 0);
    CHECK_INT(net_init(a, 1, &e), 0);
    CHECK_INT(net_init(b, 2, &e), 0);
    size_t nb = net_num_buffers(a), npa = net_num_params(a), npb = net_num_params(b);
    float *ba = malloc(nb * 4), *bb = malloc(nb * 4), *pa = malloc(npa * 4), *pb = malloc(npb * 4),
          *pb0 = malloc(npb * 4);
    for (size_t i = 0; i < nb; i++) ba[i] = 0.25f + (float)i * 1e-3f;
    CHECK_INT(net_upload_buffers(a, ba, &e), 0);
    for (int i = 0; i < net_num_counters(a); i++) net_counters(a)[i] = 40 + i;
    char p[600];
    snprintf(p, sizeof p, "%s/head10.safetensors", g_dir);
    CHECK_INT(safetensors_save_net(a, p, NULL, NULL, 0, &e), 0);
    CHECK_INT(net_download_params(b, pb0, &e), 0);
    safetensors_t *st = safetensors_open(p, 0, &e);
    CHECK(st != NULL);
    if (!st) return;
    CHECK_INT(safetensors_load_net_from(b, st, NULL, &e), -1);
    CHECK_CONTAINS(e.msg, "tensor fc.weight has shape [10,64], expected [4,64]");
    int rc = safetensors_load_net_from(b, st, "fc.", &e);
    if (rc) fprintf(stderr, "%s\n", e.msg);
    CHECK_INT(rc, 0);
    CHECK_INT(net_download_params(a, pa, &e), 0);
    CHECK_INT(net_download_params(b, pb, &e), 0);
    CHECK_INT(net_download_buffers(b, bb, &e), 0);
    CHECK(memcmp(ba, bb, nb * 4) == 0);
    for (int i = 0; i < net_num_counters(b); i++) CHECK_INT(net_counters(b)[i], 40 + i);
    int bad_body = 0, bad_head = 0;
    for (int i = 0; i < net_num_tensors(b); i++) {
        const net_tensor_t *t = net_tensor(b, i);
        if (t->store != NET_STORE_PARAM) continue;
        const net_tensor_t *ta = net_find_tensor(a, t->name);
        if (!strncmp(t->name, "fc.", 3))
            bad_head += memcmp(pb + t->offset, pb0 + t->offset, t->numel * 4) != 0;
        else
            bad_body += memcmp(pb + t->offset, pa + ta->offset, t->numel * 4) != 0;
    }
    CHECK_INT(bad_body, 0);
    CHECK_INT(bad_head, 0);
    safetensors_close(st);
    free(ba); free(bb); free(pa); free(pb); free(pb0);
    net_free(a);
    net_free(b);
    backend_free(be);
}

/* Writes the tensors of a resnet20 file with one change and checks the load error. */
static void load_error_case(const char *drop, const char *extra, const char *reshape, const char *want) {
    backend_t *be = cpu();
    err_t e = {0};
    net_t *n = resnet_build("resnet20", 3, 10, false, &e);
    CHECK_INT(net_bind(n, be, 1, 32, 32, DT_F32, &e), 0);
    int nt = net_num_tensors(n);
    st_entry_t *en = calloc((size_t)nt + 1, sizeof *en);
    float *zeros = calloc(1 << 16, sizeof(float));
    int k = 0;
    for (int i = 0; i < nt; i++) {
        const net_tensor_t *t = net_tensor(n, i);
        if (drop && !strcmp(t->name, drop)) continue;
        en[k].name = t->name;
        en[k].dtype = t->store == NET_STORE_COUNTER ? ST_I64 : ST_F32;
        en[k].ndim = t->ndim;
        for (int d = 0; d < t->ndim; d++) en[k].shape[d] = t->shape[d];
        if (reshape && !strcmp(t->name, reshape)) en[k].shape[1] = 1;  /* [16,3,3,3] -> [16,1,3,3] */
        en[k].data = zeros;
        k++;
    }
    if (extra) en[k++] = (st_entry_t){extra, ST_F32, 1, {4}, zeros};
    char p[600];
    snprintf(p, sizeof p, "%s/case.safetensors", g_dir);
    CHECK_INT(safetensors_write(p, en, k, NULL, NULL, 0, &e), 0);
    err_clear(&e);
    CHECK_INT(safetensors_load_net(n, p, &e), -1);
    CHECK_INT(e.code, ERR_INPUT);
    CHECK_CONTAINS(e.msg, p);
    CHECK_CONTAINS(e.msg, want);
    free(en);
    free(zeros);
    net_free(n);
    backend_free(be);
}

static void test_load_errors(void) {
    load_error_case("layer1.0.conv1.weight", NULL, NULL, "missing tensor layer1.0.conv1.weight");
    load_error_case(NULL, "layer9.0.conv1.weight", NULL, "unexpected tensor layer9.0.conv1.weight");
    load_error_case(NULL, NULL, "conv1.weight", "tensor conv1.weight has shape [16,1,3,3], expected [16,3,3,3]");
}

/* Random byte flips and truncations of a valid file: every open either fails cleanly
 * with ERR_INPUT or yields tensors whose ranges lie inside the data section (run under
 * the sanitizers to make "cleanly" mean something). */
static void test_mutations(void) {
    char p[600], q[600];
    snprintf(p, sizeof p, "%s/good.safetensors", g_dir);
    snprintf(q, sizeof q, "%s/mut.safetensors", g_dir);
    float w[6] = {1, 2, 3, 4, 5, 6};
    int64_t c = 3;
    st_entry_t en[2] = {{"layer1.0.conv1.weight", ST_F32, 2, {2, 3}, w}, {"n", ST_I64, 0, {0}, &c}};
    err_t e = {0};
    CHECK_INT(safetensors_write(p, en, 2, NULL, NULL, 0, &e), 0);
    size_t len = 0;
    char *orig = test_read_file(p, &len);
    CHECK(orig != NULL && len > 16);
    if (!orig) return;
    rng_t r = rng_make(1, RNG_STREAM_MISC, 77, 0);
    int failed = 0, opened = 0;
    for (int it = 0; it < 400; it++) {
        char *buf = malloc(len);
        memcpy(buf, orig, len);
        size_t n = len;
        int flips = 1 + (int)rng_below(&r, 4);
        for (int k = 0; k < flips; k++) buf[rng_below(&r, (uint32_t)len)] = (char)rng_below(&r, 256);
        if (it % 5 == 0) n = rng_below(&r, (uint32_t)len);
        FILE *f = fopen(q, "wb");
        fwrite(buf, 1, n, f);
        fclose(f);
        free(buf);
        err_clear(&e);
        safetensors_t *st = safetensors_open(q, 0, &e);
        if (!st) {
            failed++;
            CHECK_INT(e.code, ERR_INPUT);
            continue;
        }
        opened++;
        for (int i = 0; i < st->n; i++) CHECK(st->t[i].end <= st->data_size && st->t[i].begin <= st->t[i].end);
        safetensors_close(st);
    }
    printf("mutations: %d rejected, %d still valid\n", failed, opened);
    CHECK(failed > 100);
    free(orig);
}

int main(void) {
    if (test_tmpdir(g_dir, sizeof g_dir) != 0) return 1;
    TEST_RUN(test_header_errors);
    TEST_RUN(test_dtype_conversion);
    TEST_RUN(test_net_round_trip);
    TEST_RUN(test_load_keeping_head);
    TEST_RUN(test_load_errors);
    TEST_RUN(test_mutations);
    return test_main_end();
}
