/* test_util.c: JSON round trips and errors, half-precision rounding, the counter RNG,
 * path expansion (~, ~user, $VAR). */
#include <pwd.h>
#include <stdlib.h>
#include <unistd.h>

#include "util/fs.h"
#include "util/half.h"
#include "util/json.h"
#include "util/rng.h"
#include "tests/test.h"

static void json_roundtrip(void) {
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    jw_t w;
    jw_init(&w, f, true);
    jw_obj_begin(&w);
    jw_kstr(&w, "name", "a \"q\"\n");
    jw_kint(&w, "steps", 391);
    jw_knum(&w, "lr", 0.1);
    jw_key(&w, "list");
    jw_arr_begin(&w);
    for (int i = 0; i < 9; i++) jw_int(&w, i * i);
    jw_arr_end(&w);
    jw_kbool(&w, "ok", true);
    jw_obj_end(&w);
    fclose(f);
    err_t e = {0};
    json_t *j = json_parse(buf, len, &e);
    CHECK(j != NULL);
    CHECK_STR(json_get_string(j, "name", NULL), "a \"q\"\n");
    CHECK_INT(json_get_number(j, "steps", -1), 391);
    CHECK_NEAR(json_get_number(j, "lr", -1), 0.1, 0, 0);
    const json_t *l = json_get(j, "list");
    CHECK(l && l->type == JSON_ARRAY);
    CHECK_INT(l ? l->count : 0, 9);
    CHECK_INT(l ? l->items[8]->number : 0, 64);
    CHECK(json_get(j, "ok") && json_get(j, "ok")->boolean);
    json_free(j);
    free(buf);
}

static void json_errors(void) {
    err_t e = {0};
    const char *bad = "{\n  \"a\": 1,\n  \"b\": [1, 2,, 3]\n}";
    CHECK(json_parse(bad, strlen(bad), &e) == NULL);
    CHECK_INT(e.code, ERR_INPUT);
    CHECK_CONTAINS(e.msg, "line 3, column 14");
    CHECK(json_parse("{} x", 4, &e) == NULL);
    CHECK_CONTAINS(e.msg, "trailing");
    char deep[2000];
    memset(deep, '[', sizeof deep);
    CHECK(json_parse(deep, sizeof deep, &e) == NULL);
    CHECK_CONTAINS(e.msg, "too deep");
    json_t *u = json_parse("\"\\u00e9\\ud83d\\ude00\"", 20, &e);
    CHECK(u && !strcmp(u->string, "\xc3\xa9\xf0\x9f\x98\x80"));
    json_free(u);
}

static void half_rounding(void) {
    CHECK_INT(f32_to_f16(1.0f), 0x3c00);
    CHECK_INT(f32_to_f16(65504.0f), 0x7bff);
    CHECK_INT(f32_to_f16(65520.0f), 0x7c00);          /* rounds to inf */
    CHECK_INT(f32_to_f16(-2.0f), 0xc000);
    CHECK_INT(f32_to_f16(5.9604645e-08f), 0x0001);    /* smallest subnormal */
    CHECK_INT(f32_to_f16(2.9802322e-08f), 0x0000);    /* exactly half of it: ties to even 0 */
    CHECK_INT(f32_to_f16(1.0f + 1.0f / 2048), 0x3c00); /* tie between 1 and 1+2^-10: even */
    CHECK_INT(f32_to_f16(1.0f + 3.0f / 2048), 0x3c02); /* tie: rounds up to even */
    CHECK_NEAR(f16_to_f32(0x3555), 0.333251953125, 0, 0);
    CHECK_INT(f32_to_bf16(1.0f), 0x3f80);
    CHECK_INT(f32_to_bf16(1.00390625f), 0x3f80);      /* tie to even */
    CHECK_INT(f32_to_bf16(1.01171875f), 0x3f82);      /* tie up to even */
    CHECK_NEAR(round_bf16(3.14159265f), 3.140625, 0, 0);
    /* every fp16 value converts back exactly */
    int bad = 0;
    for (uint32_t h = 0; h < 0x7c00; h++) if (f32_to_f16(f16_to_f32((uint16_t)h)) != h) bad++;
    CHECK_INT(bad, 0);
}

static void rng_counter_based(void) {
    rng_t a = rng_make(7, RNG_STREAM_AUGMENT, 3, 12345);
    rng_t b = rng_make(7, RNG_STREAM_AUGMENT, 3, 12345);
    rng_t c = rng_make(7, RNG_STREAM_AUGMENT, 3, 12346);
    int same = 0, diff = 0;
    for (int i = 0; i < 100; i++) {
        uint32_t x = rng_u32(&a), y = rng_u32(&b), z = rng_u32(&c);
        same += x == y;
        diff += x != z;
    }
    CHECK_INT(same, 100);
    CHECK(diff >= 99);
    /* uniform mean and below() range over many draws */
    rng_t r = rng_make(1, RNG_STREAM_MISC, 0, 0);
    double s = 0;
    int hist[10] = {0};
    for (int i = 0; i < 100000; i++) { s += rng_uniform(&r); hist[rng_below(&r, 10)]++; }
    CHECK_NEAR(s / 100000, 0.5, 0.005, 0);
    for (int i = 0; i < 10; i++) CHECK_NEAR(hist[i], 10000, 400, 0);
}

/* path_expand: what a shell would have done to ~, ~user and $VAR; literal otherwise. */
static void path_expansion(void) {
    char out[256];
    err_t e = {0};
    setenv("HOME", "/home/tester", 1);
    setenv("RUNNER_TEST_SCRATCH", "/scratch/u1", 1);
    unsetenv("RUNNER_TEST_UNSET");
    CHECK_INT(path_expand("~/runs", out, sizeof out, &e), 0);
    CHECK_STR(out, "/home/tester/runs");
    CHECK_INT(path_expand("~", out, sizeof out, &e), 0);
    CHECK_STR(out, "/home/tester");
    struct passwd *pw = getpwuid(getuid());
    if (pw) {
        char in[300], want[300];
        snprintf(in, sizeof in, "~%s/fm", pw->pw_name);
        snprintf(want, sizeof want, "%s/fm", pw->pw_dir);
        CHECK_INT(path_expand(in, out, sizeof out, &e), 0);
        CHECK_STR(out, want);
    }
    CHECK_INT(path_expand("$RUNNER_TEST_SCRATCH/data", out, sizeof out, &e), 0);
    CHECK_STR(out, "/scratch/u1/data");
    CHECK_INT(path_expand("a/${RUNNER_TEST_SCRATCH}x/b", out, sizeof out, &e), 0);
    CHECK_STR(out, "a//scratch/u1x/b");
    /* only a leading ~ is special; $$ and a lone $ are literal */
    CHECK_INT(path_expand("data/~x/$$y/a$/$1", out, sizeof out, &e), 0);
    CHECK_STR(out, "data/~x/$y/a$/$1");
    CHECK_INT(path_expand("relative/path", out, sizeof out, &e), 0);
    CHECK_STR(out, "relative/path");
    /* errors: unset variable, unknown user, unclosed brace, too long */
    CHECK_INT(path_expand("$RUNNER_TEST_UNSET/x", out, sizeof out, &e), -1);
    CHECK_INT(e.code, ERR_INPUT);
    CHECK_CONTAINS(e.msg, "environment variable RUNNER_TEST_UNSET is not set");
    err_clear(&e);
    CHECK_INT(path_expand("~no_such_user_xq/x", out, sizeof out, &e), -1);
    CHECK_CONTAINS(e.msg, "there is no user no_such_user_xq");
    err_clear(&e);
    CHECK_INT(path_expand("${HOME", out, sizeof out, &e), -1);
    CHECK_CONTAINS(e.msg, "closing }");
    err_clear(&e);
    CHECK_INT(path_expand("~/0123456789", out, 12, &e), -1);
    CHECK_CONTAINS(e.msg, "longer than 11 bytes");
}

int main(void) {
    TEST_RUN(path_expansion);
    TEST_RUN(json_roundtrip);
    TEST_RUN(json_errors);
    TEST_RUN(half_rounding);
    TEST_RUN(rng_counter_based);
    return test_main_end();
}
