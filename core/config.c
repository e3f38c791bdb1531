/* core/config.c — the INI configuration: parsing with inih, validation
 * against core/config_keys.def, --set overrides and lookups.
 *
 * inih does the lexing of `key = value` lines (trimming, inline comments).
 * Debian's libinih 55 has build-time behaviour we cannot change: section
 * names are silently cut at 49 bytes, lines are split at 200 bytes unless
 * its runtime globals are set, an indented line continues the previous
 * value (multi-line mode) and only the FIRST syntax error is reported.  So
 * we feed it through our own line reader (ini_parse_stream): the reader
 * counts lines (for file:line), rejects over-long lines and NUL bytes,
 * handles [section] headers itself, rejects lines without '=', and hands
 * inih only lines it has accepted, without their indentation (so no line
 * can ever be taken as a continuation).  Every bad line is reported.
 * What a valid key or value is comes from core/config_keys.c.
 */
#include "config.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include <ini.h>

#include "config_keys.h"

#ifndef SI_PLUGINDIR
#define SI_PLUGINDIR "/usr/local/lib/sparkinfer"
#endif
#ifndef SI_SYSCONFDIR
#define SI_SYSCONFDIR "/usr/local/etc/sparkinfer"
#endif

#define MAX_FILE_BYTES (1u << 20)   /* a configuration is a few KiB */

typedef struct entry {
    char *key;
    char *value;
    int   line;                 /* 0 when set by si_config_set */
} entry;

typedef struct section {
    char  *name;                /* "backend.cpu" */
    int    scope;               /* enum si_cfg_scope */
    int    line;
    entry *e;
    size_t n, cap;
} section;

struct si_config {
    char    *source;            /* "<string>" or the path */
    char    *base_dir;          /* directory of the file, or NULL */
    char    *plugin_dir;        /* resolved [core] plugin_dir, or NULL */
    section *s;
    size_t   n, cap;
};

/* ---- error collection: every bad line, joined by "; " -------------------- */

typedef struct msgs {
    char  *buf;
    size_t len, cap;
    int    n;
    bool   oom;
} msgs;

#if defined(__GNUC__)
__attribute__((format(printf, 2, 3)))
#endif
static void msgs_add(msgs *m, const char *fmt, ...)
{
    char one[SI_ERR_MSG_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(one, sizeof one, fmt, ap);
    va_end(ap);
    size_t add = strlen(one) + 2;
    if (m->len + add + 1 > m->cap) {
        size_t cap = (m->cap ? m->cap * 2 : 512) + add;
        char *nb = realloc(m->buf, cap);
        if (nb == NULL) {
            m->oom = true;
            return;
        }
        m->buf = nb;
        m->cap = cap;
    }
    m->len += (size_t)sprintf(m->buf + m->len, "%s%s", m->n ? "; " : "", one);
    m->n++;
}

/* Copies the joined messages into err; marks truncation with "...". */
static void msgs_to_err(const msgs *m, si_err *err)
{
    if (err == NULL)
        return;
    if (m->oom && m->n == 0) {
        si_err_set(err, SI_ENOMEM, "out of memory while reading the configuration");
        return;
    }
    snprintf(err->msg, sizeof err->msg, "%s", m->buf ? m->buf : "");
    if (m->len >= sizeof err->msg)
        memcpy(err->msg + sizeof err->msg - 4, "...", 4);
}

/* ---- small helpers ------------------------------------------------------- */

static char *dup_n(const char *s, size_t n)
{
    char *d = malloc(n + 1);
    if (d != NULL) {
        memcpy(d, s, n);
        d[n] = '\0';
    }
    return d;
}

static char *dup_s(const char *s)
{
    return dup_n(s, strlen(s));
}


static long find_section(const si_config *c, const char *name)
{
    for (size_t i = 0; i < c->n; i++)
        if (strcmp(c->s[i].name, name) == 0)
            return (long)i;
    return -1;
}

static int add_section(si_config *c, const char *name, int scope, int line, long *idx)
{
    if (c->n == c->cap) {
        size_t cap = c->cap ? c->cap * 2 : 8;
        section *ns = realloc(c->s, cap * sizeof *ns);
        if (ns == NULL)
            return SI_ENOMEM;
        c->s = ns;
        c->cap = cap;
    }
    section *s = &c->s[c->n];
    memset(s, 0, sizeof *s);
    if ((s->name = dup_s(name)) == NULL)
        return SI_ENOMEM;
    s->scope = scope;
    s->line = line;
    *idx = (long)c->n++;
    return SI_OK;
}

static void free_section(section *s)
{
    for (size_t j = 0; j < s->n; j++) {
        free(s->e[j].key);
        free(s->e[j].value);
    }
    free(s->e);
    free(s->name);
}

static entry *find_entry(const section *s, const char *key)
{
    for (size_t j = 0; j < s->n; j++)
        if (strcmp(s->e[j].key, key) == 0)
            return &s->e[j];
    return NULL;
}

/* [core] plugin_dir: a relative value from a file is relative to the file. */
static int update_plugin_dir(si_config *c, const char *value, bool from_file)
{
    char *pd;
    if (value[0] != '/' && from_file && c->base_dir != NULL) {
        size_t n = strlen(c->base_dir) + 1 + strlen(value) + 1;
        if ((pd = malloc(n)) == NULL)
            return SI_ENOMEM;
        snprintf(pd, n, "%s/%s", c->base_dir, value);
    } else if ((pd = dup_s(value)) == NULL) {
        return SI_ENOMEM;
    }
    free(c->plugin_dir);
    c->plugin_dir = pd;
    return SI_OK;
}

/* Validates and stores key=value in section idx.  `where` prefixes the
 * message ("file:12" or "--set ...").  A file may not repeat a key; an
 * override replaces it. */
static int set_key(si_config *c, long idx, const char *key, const char *value,
                   const char *where, int line, bool override, msgs *m)
{
    section *s = &c->s[idx];
    if (!si_cfg_name_ok(key, strlen(key))) {
        msgs_add(m, "%s: bad key name '%.60s' in [%s] (use [a-z0-9_]+, at most %d characters)",
                 where, key, s->name, SI_CONFIG_MAX_NAME);
        return SI_EFORMAT;
    }
    const si_cfg_key *d = si_cfg_key_find(s->scope, key);
    if (d == NULL) {
        const char *near = si_cfg_key_near(s->scope, key);
        if (s->scope != SI_CFG_PLUGIN || near != NULL) {
            char hint[80] = "";
            if (near != NULL)
                snprintf(hint, sizeof hint, " (did you mean '%s'?)", near);
            msgs_add(m, "%s: unknown key '%s' in [%s]%s", where, key, s->name, hint);
            return SI_EFORMAT;
        }
        /* any other key of a plugin section is the plugin's own knob */
    } else if (!si_cfg_value_ok(d, value)) {
        char what[96];
        si_cfg_describe(d, what, sizeof what);
        if (*value == '\0')
            msgs_add(m, "%s: empty value for '%s' in [%s] (expected %s)", where, key, s->name, what);
        else
            msgs_add(m, "%s: bad value '%.80s' for '%s' in [%s] (expected %s)",
                     where, value, key, s->name, what);
        return SI_EFORMAT;
    }
    entry *e = find_entry(s, key);
    if (e != NULL && !override) {
        msgs_add(m, "%s: duplicate key '%s' in [%s] (first at line %d)", where, key, s->name, e->line);
        return SI_EFORMAT;
    }
    char *v = dup_s(value);
    if (v == NULL)
        return SI_ENOMEM;
    if (s->scope == SI_CFG_CORE && strcmp(key, "plugin_dir") == 0 &&
        update_plugin_dir(c, value, !override) != SI_OK) {
        free(v);
        return SI_ENOMEM;
    }
    if (e != NULL) {
        free(e->value);
        e->value = v;
        e->line = line;
        return SI_OK;
    }
    if (s->n == s->cap) {
        size_t cap = s->cap ? s->cap * 2 : 8;
        entry *ne = realloc(s->e, cap * sizeof *ne);
        if (ne == NULL) {
            free(v);
            return SI_ENOMEM;
        }
        s->e = ne;
        s->cap = cap;
    }
    if ((s->e[s->n].key = dup_s(key)) == NULL) {
        free(v);
        return SI_ENOMEM;
    }
    s->e[s->n].value = v;
    s->e[s->n].line = line;
    s->n++;
    return SI_OK;
}

/* ---- parsing ------------------------------------------------------------- */

enum { NO_SECTION = -1, BAD_SECTION = -2 };

typedef struct parser {
    si_config  *c;
    const char *text;
    size_t      len, pos;
    int         line;
    long        cur;            /* index of the current section, or NO_/BAD_SECTION */
    int         status;         /* SI_ENOMEM when an allocation failed */
    msgs       *m;
} parser;

static void section_header(parser *p, const char *t, const char *end)
{
    const char *close = memchr(t, ']', (size_t)(end - t));
    p->cur = BAD_SECTION;       /* keys below a bad header are dropped quietly */
    if (close == NULL) {
        msgs_add(p->m, "%s:%d: missing ']' in section header", p->c->source, p->line);
        return;
    }
    const char *after = close + 1;
    while (after < end && (*after == ' ' || *after == '\t'))
        after++;
    if (after < end && *after != ';' && *after != '#') {
        msgs_add(p->m, "%s:%d: text after ']' in section header", p->c->source, p->line);
        return;
    }
    char *name = dup_n(t + 1, (size_t)(close - t - 1));
    if (name == NULL) {
        p->status = SI_ENOMEM;
        return;
    }
    char why[SI_ERR_MSG_MAX - 64];
    int scope = si_cfg_classify_section(name, why, sizeof why);
    long prev = find_section(p->c, name);
    if (scope < 0)
        msgs_add(p->m, "%s:%d: %s", p->c->source, p->line, why);
    else if (prev >= 0)
        msgs_add(p->m, "%s:%d: duplicate section [%s] (first at line %d)", p->c->source,
                 p->line, name, p->c->s[prev].line);
    else if (add_section(p->c, name, scope, p->line, &p->cur) != SI_OK)
        p->status = SI_ENOMEM;
    free(name);
}

/* Decides what inih may see of one raw line [s, s+n): true to pass the line
 * (from *start), false to hand inih a blank line instead. */
static bool accept_line(parser *p, const char *s, size_t n, const char **start)
{
    const char *end = s + n, *t = s;
    while (t < end && (*t == ' ' || *t == '\t'))
        t++;
    *start = t;
    if (t == end || *t == ';' || *t == '#')
        return true;            /* blank or comment */
    if (*t == '[') {
        section_header(p, t, end);
        return false;
    }
    /* inih splits at the first '=' or ':' unless an inline comment (';'
     * after whitespace) comes first; we accept only '=' first. */
    const char *q = t;
    while (q < end && *q != '=' && *q != ':' && !(*q == ';' && q > t && isspace((unsigned char)q[-1])))
        q++;
    if (q == end || *q != '=') {
        msgs_add(p->m, "%s:%d: missing '=' (expected key = value)", p->c->source, p->line);
        return false;
    }
    const char *ke = q;
    while (ke > t && isspace((unsigned char)ke[-1]))
        ke--;
    if (ke == t) {
        msgs_add(p->m, "%s:%d: missing key before '='", p->c->source, p->line);
        return false;
    }
    if (p->cur == NO_SECTION) {
        msgs_add(p->m, "%s:%d: key '%.*s' outside any section", p->c->source, p->line,
                 (int)(ke - t > 60 ? 60 : ke - t), t);
        return false;
    }
    return p->cur != BAD_SECTION;
}

/* fgets-style reader for ini_parse_stream: one whole line per call, never
 * split.  `num` is inih's buffer size (ini_max_line). */
static char *read_line(char *str, int num, void *stream)
{
    parser *p = stream;
    if (p->pos >= p->len || num < 2)
        return NULL;
    const char *s = p->text + p->pos;
    size_t rest = p->len - p->pos;
    const char *nl = memchr(s, '\n', rest);
    size_t n = nl ? (size_t)(nl - s) : rest;
    p->pos += nl ? n + 1 : n;
    p->line++;
    if (n > 0 && s[n - 1] == '\r')
        n--;
    if (p->line == 1 && n >= 3 && memcmp(s, "\xEF\xBB\xBF", 3) == 0) {
        s += 3;                 /* UTF-8 byte order mark */
        n -= 3;
    }
    size_t limit = SI_CONFIG_MAX_LINE;
    if ((size_t)num - 3 < limit && num >= 3)
        limit = (size_t)num - 3;    /* inih wants room for "\r\n\0" */
    const char *start = s;
    bool pass;
    if (n > limit) {
        msgs_add(p->m, "%s:%d: line longer than %zu bytes", p->c->source, p->line, limit);
        pass = false;
    } else if (memchr(s, '\0', n) != NULL) {
        msgs_add(p->m, "%s:%d: NUL byte in line", p->c->source, p->line);
        pass = false;
    } else {
        pass = accept_line(p, s, n, &start);
    }
    if (!pass) {
        strcpy(str, "\n");
        return str;
    }
    size_t k = n - (size_t)(start - s);
    memcpy(str, start, k);
    str[k] = '\n';
    str[k + 1] = '\0';
    return str;
}

static int on_pair(void *user, const char *section_unused, const char *name, const char *value)
{
    parser *p = user;
    (void)section_unused;       /* ours is p->cur: inih's copy may be cut short */
    if (p->cur < 0)
        return 1;
    char where[PATH_MAX + 32];
    snprintf(where, sizeof where, "%s:%d", p->c->source, p->line);
    if (set_key(p->c, p->cur, name, value, where, p->line, false, p->m) == SI_ENOMEM)
        p->status = SI_ENOMEM;
    return 1;                   /* errors are collected here, all of them */
}

/* Runs inih over text with the parser globals our rules need, restoring
 * them afterwards (they are process-wide). */
static int run_inih(parser *p)
{
    static char inline_prefix[] = ";";
    static char start_prefix[] = ";#";
    bool multiline = ini_allow_multiline, stack = ini_use_stack, re = ini_allow_realloc;
    bool bom = ini_allow_bom, inl = ini_allow_inline_comments, stop = ini_stop_on_first_error;
    bool novalue = ini_allow_no_value;
    int max_line = ini_max_line, initial = ini_initial_alloc;
    char *ip = ini_inline_comment_prefixes, *sp = ini_start_comment_prefixes;

    ini_allow_multiline = false;
    ini_use_stack = false;
    ini_allow_realloc = false;
    ini_max_line = SI_CONFIG_MAX_LINE + 3;
    ini_initial_alloc = SI_CONFIG_MAX_LINE + 3;
    ini_allow_bom = false;      /* the reader strips it */
    ini_allow_inline_comments = true;
    ini_inline_comment_prefixes = inline_prefix;
    ini_start_comment_prefixes = start_prefix;
    ini_stop_on_first_error = false;
    ini_allow_no_value = false;

    int rc = ini_parse_stream(read_line, p, on_pair, p);

    ini_allow_multiline = multiline;
    ini_use_stack = stack;
    ini_allow_realloc = re;
    ini_max_line = max_line;
    ini_initial_alloc = initial;
    ini_allow_bom = bom;
    ini_allow_inline_comments = inl;
    ini_inline_comment_prefixes = ip;
    ini_start_comment_prefixes = sp;
    ini_stop_on_first_error = stop;
    ini_allow_no_value = novalue;
    return rc;
}

static int parse_text(si_config *c, const char *text, size_t len, si_err *err)
{
    msgs m = { 0 };
    parser p = { .c = c, .text = text, .len = len, .cur = NO_SECTION, .m = &m };
    int rc = run_inih(&p);
    if (rc == -2 || p.status == SI_ENOMEM || m.oom) {
        free(m.buf);
        return si_err_set(err, SI_ENOMEM, "%s: out of memory while parsing", c->source);
    }
    if (rc > 0 && m.n == 0)     /* inih saw something our reader let through */
        msgs_add(&m, "%s:%d: malformed line", c->source, rc);
    /* `path` is required in an enabled plugin section */
    for (size_t i = 0; i < c->n; i++) {
        const section *s = &c->s[i];
        if (s->scope == SI_CFG_PLUGIN && find_entry(s, "path") == NULL &&
            si_config_get_bool(c, s->name, "enabled", true))
            msgs_add(&m, "%s:%d: [%s] has no 'path' (required when enabled)", c->source,
                     s->line, s->name);
    }
    int status = m.n ? SI_EFORMAT : SI_OK;
    if (status != SI_OK)
        msgs_to_err(&m, err);
    free(m.buf);
    return status;
}

/* ---- public API ---------------------------------------------------------- */

int si_config_new(si_config **out, si_err *err)
{
    if (out == NULL)
        return si_err_set(err, SI_EINVAL, "si_config_new: out is NULL");
    *out = NULL;
    si_config *c = calloc(1, sizeof *c);
    if (c == NULL || (c->source = dup_s("<empty>")) == NULL) {
        free(c);
        return si_err_set(err, SI_ENOMEM, "out of memory");
    }
    *out = c;
    return SI_OK;
}

void si_config_free(si_config *c)
{
    if (c == NULL)
        return;
    for (size_t i = 0; i < c->n; i++)
        free_section(&c->s[i]);
    free(c->s);
    free(c->source);
    free(c->base_dir);
    free(c->plugin_dir);
    free(c);
}

int si_config_load_string(const char *text, const char *name, si_config **out, si_err *err)
{
    if (out != NULL)
        *out = NULL;
    if (out == NULL || text == NULL)
        return si_err_set(err, SI_EINVAL, "si_config_load_string: NULL argument");
    si_config *c = calloc(1, sizeof *c);
    if (c == NULL || (c->source = dup_s(name ? name : "<string>")) == NULL) {
        free(c);
        return si_err_set(err, SI_ENOMEM, "out of memory");
    }
    int rc = parse_text(c, text, strlen(text), err);
    if (rc != SI_OK) {
        si_config_free(c);
        return rc;
    }
    *out = c;
    return SI_OK;
}

int si_config_load(const char *path, si_config **out, si_err *err)
{
    if (out != NULL)
        *out = NULL;
    if (out == NULL || path == NULL)
        return si_err_set(err, SI_EINVAL, "si_config_load: NULL argument");
    FILE *f = fopen(path, "rb");
    if (f == NULL)
        return si_err_set(err, errno == ENOENT ? SI_ENOTFOUND : SI_EIO, "%s: cannot open: %s",
                          path, strerror(errno));
    char *text = malloc(MAX_FILE_BYTES + 1);
    if (text == NULL) {
        fclose(f);
        return si_err_set(err, SI_ENOMEM, "%s: out of memory", path);
    }
    size_t n = fread(text, 1, MAX_FILE_BYTES + 1, f);
    int read_err = ferror(f) ? errno : 0;
    fclose(f);
    if (read_err != 0 || n > MAX_FILE_BYTES) {
        free(text);
        if (read_err != 0)
            return si_err_set(err, SI_EIO, "%s: cannot read: %s", path, strerror(read_err));
        return si_err_set(err, SI_EFORMAT, "%s: larger than %u bytes; not a configuration",
                          path, MAX_FILE_BYTES);
    }

    si_config *c = calloc(1, sizeof *c);
    int rc = SI_ENOMEM;
    if (c != NULL && (c->source = dup_s(path)) != NULL) {
        const char *slash = strrchr(path, '/');
        if (slash != NULL)
            c->base_dir = dup_n(path, slash == path ? 1 : (size_t)(slash - path));
        if (slash == NULL || c->base_dir != NULL)
            rc = SI_OK;
    }
    if (rc != SI_OK) {
        si_config_free(c);
        free(text);
        return si_err_set(err, SI_ENOMEM, "%s: out of memory", path);
    }
    /* the file may hold NUL bytes: the reader works on [text, text+n) */
    rc = parse_text(c, text, n, err);
    free(text);
    if (rc != SI_OK) {
        si_config_free(c);
        return rc;
    }
    *out = c;
    return SI_OK;
}

int si_config_set(si_config *c, const char *assignment, si_err *err)
{
    if (c == NULL || assignment == NULL)
        return si_err_set(err, SI_EINVAL, "si_config_set: NULL argument");
    size_t alen = strlen(assignment);
    if (alen > SI_CONFIG_MAX_LINE)
        return si_err_set(err, SI_EINVAL, "--set: assignment longer than %d bytes",
                          SI_CONFIG_MAX_LINE);
    char where[224];
    snprintf(where, sizeof where, "--set %.200s", assignment);
    const char *eq = strchr(assignment, '=');
    const char *dot = NULL;
    if (eq != NULL)
        for (const char *q = assignment; q < eq; q++)
            if (*q == '.')
                dot = q;
    if (eq == NULL || dot == NULL || dot == assignment || dot + 1 == eq)
        return si_err_set(err, SI_EINVAL, "%.200s: expected section.key=value", where);

    char *sec = dup_n(assignment, (size_t)(dot - assignment));
    char *key = dup_n(dot + 1, (size_t)(eq - dot - 1));
    char *val = dup_s(eq + 1);
    int rc = SI_ENOMEM;
    if (sec == NULL || key == NULL || val == NULL) {
        si_err_set(err, rc, "--set: out of memory");
        goto out;
    }
    /* trim around the key and the value as a file line would be */
    char *k = key, *v = val;
    while (isspace((unsigned char)*k))
        k++;
    for (size_t n = strlen(k); n > 0 && isspace((unsigned char)k[n - 1]); n--)
        k[n - 1] = '\0';
    while (isspace((unsigned char)*v))
        v++;
    for (size_t n = strlen(v); n > 0 && isspace((unsigned char)v[n - 1]); n--)
        v[n - 1] = '\0';

    char why[SI_ERR_MSG_MAX - 64];
    int scope = si_cfg_classify_section(sec, why, sizeof why);
    if (scope < 0) {
        rc = si_err_set(err, SI_EINVAL, "%.200s: %s", where, why);
        goto out;
    }
    long idx = find_section(c, sec);
    bool created = false;
    if (idx < 0) {
        if (add_section(c, sec, scope, 0, &idx) != SI_OK) {
            si_err_set(err, rc, "--set: out of memory");
            goto out;
        }
        created = true;
    }
    msgs m = { 0 };
    rc = set_key(c, idx, k, v, where, 0, true, &m);
    if (rc != SI_OK) {
        if (rc == SI_ENOMEM)
            si_err_set(err, rc, "--set: out of memory");
        else {
            rc = SI_EINVAL;
            msgs_to_err(&m, err);
        }
        if (created) {
            free_section(&c->s[idx]);
            c->n--;
        }
    }
    free(m.buf);
out:
    free(sec);
    free(key);
    free(val);
    return rc;
}

const char *si_config_get(const si_config *c, const char *section_name, const char *key)
{
    if (c == NULL || section_name == NULL || key == NULL)
        return NULL;
    long i = find_section(c, section_name);
    if (i >= 0) {
        const entry *e = find_entry(&c->s[i], key);
        if (e != NULL)
            return e->value;
    }
    char why[8];
    int scope = si_cfg_classify_section(section_name, why, sizeof why);
    if (scope < 0 || (scope == SI_CFG_PLUGIN && i < 0))
        return NULL;
    const si_cfg_key *d = si_cfg_key_find(scope, key);
    return d ? d->dflt : NULL;
}

bool si_config_get_bool(const si_config *c, const char *section_name, const char *key, bool dflt)
{
    const char *v = si_config_get(c, section_name, key);
    bool b;
    return v != NULL && si_cfg_parse_bool(v, &b) ? b : dflt;
}

long si_config_get_long(const si_config *c, const char *section_name, const char *key, long dflt)
{
    const char *v = si_config_get(c, section_name, key);
    long l;
    return v != NULL && si_cfg_parse_long(v, &l) ? l : dflt;
}

double si_config_get_double(const si_config *c, const char *section_name, const char *key,
                            double dflt)
{
    const char *v = si_config_get(c, section_name, key);
    double x;
    return v != NULL && si_cfg_parse_double(v, &x) ? x : dflt;
}

size_t si_config_n_sections(const si_config *c)
{
    return c ? c->n : 0;
}

const char *si_config_section_name(const si_config *c, size_t i)
{
    return c != NULL && i < c->n ? c->s[i].name : NULL;
}

const char *si_config_source(const si_config *c)
{
    return c ? c->source : NULL;
}

const char *si_config_plugin_dir(const si_config *c)
{
    return c != NULL && c->plugin_dir != NULL ? c->plugin_dir : SI_PLUGINDIR;
}

const char *si_config_default_path(const char *cli_path)
{
    if (cli_path != NULL)
        return cli_path;
    const char *env = getenv(SI_CONFIG_ENV);
    if (env != NULL && *env != '\0')
        return env;
    return SI_SYSCONFDIR "/sparkinfer.ini";
}

