/* wandb_auth.c: where the W&B API key comes from: WANDB_API_KEY, else the netrc file
 * ($NETRC, else $HOME/.netrc) entry whose machine is the host of WANDB_BASE_URL (or the
 * "default" entry), password field, as the SDK and curl read it.
 *
 * Not here: `wandb login` (writing the netrc file), key validation against the service.
 */
#include <stdlib.h>
#include <string.h>

#include "runner/track/track_impl.h"

/* Writes the host of url: scheme, user info, port and path are removed. */
void track_url_host(const char *url, char *host, size_t len) {
    const char *p = strstr(url, "://");
    p = p ? p + 3 : url;
    const char *at = strchr(p, '@'), *slash = strchr(p, '/');
    if (at && (!slash || at < slash)) p = at + 1;
    size_t n = strcspn(p, ":/?#");
    if (n >= len) n = len - 1;
    memcpy(host, p, n);
    host[n] = 0;
}

/* Reads the next whitespace-separated token of a netrc file into tok. */
static int netrc_token(FILE *f, char *tok, size_t len) {
    int c;
    while ((c = fgetc(f)) != EOF && (c == ' ' || c == '\t' || c == '\n' || c == '\r')) {}
    if (c == EOF) return -1;
    size_t n = 0;
    bool quoted = c == '"';
    if (quoted) c = fgetc(f);
    while (c != EOF && (quoted ? c != '"' : !(c == ' ' || c == '\t' || c == '\n' || c == '\r'))) {
        if (n + 1 < len) tok[n++] = (char)c;
        c = fgetc(f);
    }
    tok[n] = 0;
    return 0;
}

/* See track_impl.h: the netrc grammar (machine / default / password tokens). */
int track_netrc_find(FILE *f, const char *host, char *key, size_t len) {
    char tok[512];
    int state = 0;            /* 0: outside a matching entry, 1: inside one */
    int found = -1;
    while (netrc_token(f, tok, sizeof tok) == 0) {
        if (!strcmp(tok, "machine")) {
            if (netrc_token(f, tok, sizeof tok) != 0) break;
            if (state == 1 && found == 0) break;
            state = !strcmp(tok, host) ? 1 : 0;
        } else if (!strcmp(tok, "default")) {
            if (state == 1 && found == 0) break;
            state = 1;
        } else if (!strcmp(tok, "password") && state == 1) {
            if (netrc_token(f, tok, sizeof tok) != 0) break;
            snprintf(key, len, "%s", tok);
            found = 0;
        }
    }
    memset(tok, 0, sizeof tok);
    return found;
}

/* Finds the password for host in the netrc file at path. */
static int netrc_lookup(const char *path, const char *host, char *key, size_t len) {
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    int found = track_netrc_find(f, host, key, len);
    fclose(f);
    return found;
}

/* See track_impl.h. */
int track_wandb_api_key(const char *base_url, char *key, size_t len) {
    const char *env = getenv("WANDB_API_KEY");
    if (env && *env) {
        snprintf(key, len, "%s", env);
        return 0;
    }
    char host[256], path[1024];
    track_url_host(base_url, host, sizeof host);
    const char *netrc = getenv("NETRC");
    if (netrc && *netrc) {
        snprintf(path, sizeof path, "%s", netrc);
    } else {
        const char *home = getenv("HOME");
        if (!home || !*home) return -1;
        snprintf(path, sizeof path, "%s/.netrc", home);
    }
    return netrc_lookup(path, host, key, len);
}
