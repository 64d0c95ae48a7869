/* JSON output without malloc or stdio: a buffer flushed with write(2), and report paths. */
#include "tracer_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h> /* rename */
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

void om_json_init(struct om_json *w, int fd, char *buf, size_t cap)
{
    w->fd = fd;
    w->err = 0;
    w->len = 0;
    w->cap = cap;
    w->buf = buf;
    w->need_comma = 0;
}

int om_json_flush(struct om_json *w)
{
    if (!w->err)
        w->err = om_write_all(w->fd, w->buf, w->len);
    w->len = 0;
    return w->err;
}

void om_json_raw(struct om_json *w, const char *s, size_t n)
{
    while (n) {
        if (w->len == w->cap && om_json_flush(w) != 0)
            return;
        size_t room = w->cap - w->len, k = n < room ? n : room;
        memcpy(w->buf + w->len, s, k);
        w->len += k;
        s += k;
        n -= k;
    }
}

static void put(struct om_json *w, char c)
{
    om_json_raw(w, &c, 1);
}

static void value_prefix(struct om_json *w)
{
    if (w->need_comma)
        put(w, ',');
    w->need_comma = 1;
}

void om_json_begin(struct om_json *w, char bracket)
{
    value_prefix(w);
    put(w, bracket);
    w->need_comma = 0;
}

void om_json_end(struct om_json *w, char bracket)
{
    put(w, bracket);
    w->need_comma = 1;
}

void om_json_key(struct om_json *w, const char *key)
{
    om_json_str(w, key);
    put(w, ':');
    w->need_comma = 0;
}

/* Length of the valid UTF-8 sequence at s (at most n bytes), or 0 when it is not one. */
static size_t utf8_len(const unsigned char *s, size_t n)
{
    size_t len;
    uint32_t min;
    if (s[0] >= 0xc2 && s[0] <= 0xdf) {
        len = 2;
        min = 0x80;
    } else if (s[0] >= 0xe0 && s[0] <= 0xef) {
        len = 3;
        min = 0x800;
    } else if (s[0] >= 0xf0 && s[0] <= 0xf4) {
        len = 4;
        min = 0x10000;
    } else {
        return 0;
    }
    if (len > n)
        return 0;
    uint32_t cp = s[0] & (0x7f >> len);
    for (size_t i = 1; i < len; i++) {
        if ((s[i] & 0xc0) != 0x80)
            return 0;
        cp = (cp << 6) | (s[i] & 0x3f);
    }
    if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
        return 0;
    return len;
}

/* Bytes that are not UTF-8 (argv and paths may hold anything) become U+FFFD, so the
 * report always parses. */
void om_json_strn(struct om_json *w, const char *s, size_t n)
{
    static const char hex[] = "0123456789abcdef";
    value_prefix(w);
    put(w, '"');
    const unsigned char *u = (const unsigned char *)s;
    size_t i = 0;
    while (i < n) {
        unsigned char c = u[i];
        size_t run = i;
        while (run < n && u[run] >= 0x20 && u[run] < 0x80 && u[run] != '"' && u[run] != '\\')
            run++;
        if (run > i) {
            om_json_raw(w, s + i, run - i);
            i = run;
            continue;
        }
        if (c >= 0x80) {
            size_t len = utf8_len(u + i, n - i);
            if (len) {
                om_json_raw(w, s + i, len);
                i += len;
            } else {
                om_json_raw(w, "\\ufffd", 6);
                i++;
            }
            continue;
        }
        char esc[6] = {'\\', 0};
        size_t elen = 2;
        switch (c) {
        case '"':
            esc[1] = '"';
            break;
        case '\\':
            esc[1] = '\\';
            break;
        case '\n':
            esc[1] = 'n';
            break;
        case '\r':
            esc[1] = 'r';
            break;
        case '\t':
            esc[1] = 't';
            break;
        case '\b':
            esc[1] = 'b';
            break;
        case '\f':
            esc[1] = 'f';
            break;
        default:
            memcpy(esc, "\\u00", 4);
            esc[4] = hex[c >> 4];
            esc[5] = hex[c & 15];
            elen = 6;
        }
        om_json_raw(w, esc, elen);
        i++;
    }
    put(w, '"');
}

void om_json_str(struct om_json *w, const char *s)
{
    if (!s)
        om_json_null(w);
    else
        om_json_strn(w, s, strlen(s));
}

static size_t fmt_u64(char *out, uint64_t v)
{
    char tmp[20];
    size_t n = 0;
    do {
        tmp[n++] = (char)('0' + v % 10);
        v /= 10;
    } while (v);
    for (size_t i = 0; i < n; i++)
        out[i] = tmp[n - 1 - i];
    return n;
}

void om_json_u64(struct om_json *w, uint64_t v)
{
    char b[20];
    value_prefix(w);
    om_json_raw(w, b, fmt_u64(b, v));
}

void om_json_i64(struct om_json *w, int64_t v)
{
    char b[21];
    size_t n = 0;
    uint64_t u = (uint64_t)v;
    if (v < 0) {
        b[n++] = '-';
        u = -u;
    }
    n += fmt_u64(b + n, u);
    value_prefix(w);
    om_json_raw(w, b, n);
}

void om_json_null(struct om_json *w)
{
    value_prefix(w);
    om_json_raw(w, "null", 4);
}

void om_json_bool(struct om_json *w, int v)
{
    value_prefix(w);
    om_json_raw(w, v ? "true" : "false", v ? 4 : 5);
}

void om_json_hex(struct om_json *w, uint64_t v)
{
    static const char hex[] = "0123456789abcdef";
    char b[18];
    size_t n = 16;
    do {
        b[--n + 2] = hex[v & 15];
        v >>= 4;
    } while (v);
    b[n] = '0';
    b[n + 1] = 'x';
    value_prefix(w);
    put(w, '"');
    om_json_raw(w, b + n, 18 - n);
    put(w, '"');
}

void om_json_ratio(struct om_json *w, uint64_t num, uint64_t den)
{
    if (den == 0) {
        om_json_null(w);
        return;
    }
    uint64_t whole = num / den;
    /* Thousandths, rounded; 128-bit so that large byte counts cannot overflow. */
    unsigned __int128 rem = (unsigned __int128)(num % den) * 1000 + den / 2;
    uint64_t milli = (uint64_t)(rem / den);
    if (milli >= 1000) {
        whole++;
        milli -= 1000;
    }
    char b[32];
    size_t n = fmt_u64(b, whole);
    b[n++] = '.';
    b[n++] = (char)('0' + milli / 100);
    b[n++] = (char)('0' + milli / 10 % 10);
    b[n++] = (char)('0' + milli % 10);
    value_prefix(w);
    om_json_raw(w, b, n);
}

static int append(char *out, size_t outlen, size_t *len, const char *s, size_t n)
{
    if (*len + n >= outlen)
        return -ENAMETOOLONG;
    memcpy(out + *len, s, n);
    *len += n;
    return 0;
}

static int append_long(char *out, size_t outlen, size_t *len, long v)
{
    char b[24];
    size_t n = 0;
    uint64_t u = (uint64_t)v;
    if (v < 0) {
        b[n++] = '-';
        u = -u;
    }
    n += fmt_u64(b + n, u);
    return append(out, outlen, len, b, n);
}

int om_path_expand(const char *tmpl, long pid, long rank, char *out, size_t outlen)
{
    size_t len = 0;
    int rc = 0;
    if (outlen == 0)
        return -ENAMETOOLONG;
    for (const char *c = tmpl; *c && rc == 0; c++) {
        if (*c != '%') {
            rc = append(out, outlen, &len, c, 1);
            continue;
        }
        switch (*++c) {
        case 'p':
            rc = append_long(out, outlen, &len, pid);
            break;
        case 'r':
            rc = append_long(out, outlen, &len, rank);
            break;
        case '%':
            rc = append(out, outlen, &len, "%", 1);
            break;
        default:
            rc = -EINVAL;
        }
    }
    out[rc == 0 ? len : 0] = '\0';
    return rc;
}

static int parse_rank(const char *s, long *out)
{
    if (!s || !*s)
        return -1;
    char *end;
    long v = strtol(s, &end, 10);
    if (*end != '\0' || v < 0)
        return -1;
    *out = v;
    return 0;
}

long om_env_rank(void)
{
    long r = 0;
    if (parse_rank(getenv("RANK"), &r) == 0 || parse_rank(getenv("LOCAL_RANK"), &r) == 0)
        return r;
    return 0;
}

int om_file_is_special(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && !S_ISREG(st.st_mode);
}

static int write_in_place(const char *path, int (*fill)(int fd, void *ctx), void *ctx)
{
    int fd = om_sys_open(path, O_WRONLY | O_TRUNC, 0);
    if (fd < 0)
        return fd;
    int rc = fill(fd, ctx);
    if (close(fd) != 0 && rc == 0)
        rc = -errno;
    return rc;
}

int om_file_replace(const char *path, int (*fill)(int fd, void *ctx), void *ctx)
{
    if (om_file_is_special(path))
        return write_in_place(path, fill, ctx);
    /* Next to the file, so that rename(2) is atomic; the pid keeps processes apart. */
    char tmp[4096 + 32];
    size_t plen = strlen(path);
    if (plen + 32 > sizeof tmp)
        return -ENAMETOOLONG;
    memcpy(tmp, path, plen);
    if (om_path_expand(".tmp.%p", (long)getpid(), 0, tmp + plen, sizeof tmp - plen) != 0)
        return -ENAMETOOLONG;
    int fd = om_sys_open(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0)
        return fd;
    int rc = fill(fd, ctx);
    if (close(fd) != 0 && rc == 0)
        rc = -errno;
    if (rc == 0 && rename(tmp, path) != 0)
        rc = -errno;
    if (rc != 0)
        unlink(tmp);
    return rc;
}
