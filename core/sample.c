/* core/sample.c — penalties, greedy, top-k, top-p, min-p, temperature.
 * See sample.h for the stage order and semantics.
 *
 * Working set: cand[n_vocab] (id, logit) pairs, rebuilt per call.  The
 * first n_cand entries are the live candidates; `sorted` says whether they
 * are in descending order (logit, then ascending id) yet.
 */
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "sample.h"

typedef struct cand {
    float   logit;
    int32_t id;
} cand;

struct si_sampler {
    si_sampler_params p;
    uint32_t  n_vocab;
    uint64_t  rng[4];
    int32_t  *ring;       /* [p.penalty_last_n] last accepted tokens */
    uint32_t  ring_n, ring_head;
    uint32_t *count;      /* [n_vocab] occurrences in the ring (NULL when penalties are off) */
    uint32_t *stamp;      /* [n_vocab] "penalised in call #gen" marks */
    uint32_t  gen;
    cand     *cand;       /* [n_vocab] */
};

/* ---- random numbers: splitmix64 seeds xoshiro256** ----------------------- */

static uint64_t splitmix64(uint64_t *x)
{
    uint64_t z = (*x += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static uint64_t rotl(uint64_t x, int k)
{
    return (x << k) | (x >> (64 - k));
}

static uint64_t next_u64(uint64_t s[4])
{
    uint64_t r = rotl(s[1] * 5, 7) * 9, t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return r;
}

static double uniform01(uint64_t s[4])   /* [0, 1) with 53 random bits */
{
    return (double)(next_u64(s) >> 11) * (1.0 / 9007199254740992.0);
}

/* ---- setup ------------------------------------------------------------------ */

void si_sampler_default_params(si_sampler_params *p)
{
    *p = (si_sampler_params){
        .temperature = 1.0f, .top_k = 20, .top_p = 0.95f, .min_p = 0.0f,
        .repeat_penalty = 1.0f, .presence_penalty = 0.0f, .frequency_penalty = 0.0f,
        .penalty_last_n = 64, .seed = 0,
    };
}

static bool penalties_on(const si_sampler_params *p)
{
    return p->penalty_last_n > 0 &&
           (p->repeat_penalty != 1.0f || p->presence_penalty != 0.0f || p->frequency_penalty != 0.0f);
}

void si_sampler_reset(si_sampler *s)
{
    uint64_t x = s->p.seed;
    for (int i = 0; i < 4; i++)
        s->rng[i] = splitmix64(&x);
    s->ring_n = s->ring_head = 0;
    if (s->count != NULL)
        memset(s->count, 0, s->n_vocab * sizeof *s->count);
}

void si_sampler_free(si_sampler *s)
{
    if (s == NULL)
        return;
    free(s->ring);
    free(s->count);
    free(s->stamp);
    free(s->cand);
    free(s);
}

int si_sampler_new(const si_sampler_params *p, uint32_t n_vocab, si_sampler **out, si_err *err)
{
    *out = NULL;
    if (n_vocab == 0 || n_vocab > INT32_MAX)
        return si_err_set(err, SI_EINVAL, "sampler: bad vocabulary size %u", n_vocab);
    if (!isfinite(p->temperature))
        return si_err_set(err, SI_EINVAL, "sampler: temperature %g is not finite", (double)p->temperature);
    if (!(p->top_p >= 0.0f && p->top_p <= 1.0f))
        return si_err_set(err, SI_EINVAL, "sampler: top_p %g outside [0, 1]", (double)p->top_p);
    if (!(p->min_p >= 0.0f && p->min_p <= 1.0f))
        return si_err_set(err, SI_EINVAL, "sampler: min_p %g outside [0, 1]", (double)p->min_p);
    if (!(p->repeat_penalty > 0.0f) || !isfinite(p->repeat_penalty))
        return si_err_set(err, SI_EINVAL, "sampler: repeat_penalty %g must be > 0", (double)p->repeat_penalty);
    if (!isfinite(p->presence_penalty) || !isfinite(p->frequency_penalty))
        return si_err_set(err, SI_EINVAL, "sampler: presence/frequency penalty not finite");
    if (p->penalty_last_n < 0 || p->penalty_last_n > SI_SAMPLER_MAX_WINDOW)
        return si_err_set(err, SI_EINVAL, "sampler: penalty_last_n %d outside [0, %d]",
                          p->penalty_last_n, SI_SAMPLER_MAX_WINDOW);
    si_sampler *s = calloc(1, sizeof *s);
    if (s == NULL)
        return si_err_set(err, SI_ENOMEM, "sampler: out of memory");
    s->p = *p;
    s->n_vocab = n_vocab;
    s->cand = malloc(n_vocab * sizeof *s->cand);
    bool ok = s->cand != NULL;
    if (ok && penalties_on(p)) {
        s->ring = malloc((size_t)p->penalty_last_n * sizeof *s->ring);
        s->count = calloc(n_vocab, sizeof *s->count);
        s->stamp = calloc(n_vocab, sizeof *s->stamp);
        ok = s->ring && s->count && s->stamp;
    }
    if (!ok) {
        si_sampler_free(s);
        return si_err_set(err, SI_ENOMEM, "sampler: out of memory for %u tokens", n_vocab);
    }
    si_sampler_reset(s);
    *out = s;
    return SI_OK;
}

int si_sampler_accept(si_sampler *s, int32_t id)
{
    if (id < 0 || (uint32_t)id >= s->n_vocab)
        return SI_ERANGE;
    if (s->count == NULL)
        return SI_OK;
    uint32_t cap = (uint32_t)s->p.penalty_last_n;
    if (s->ring_n == cap) {            /* the oldest leaves the window */
        s->count[s->ring[s->ring_head]]--;
        s->ring[s->ring_head] = id;
        s->ring_head = (s->ring_head + 1) % cap;
    } else {
        s->ring[(s->ring_head + s->ring_n) % cap] = id;
        s->ring_n++;
    }
    s->count[id]++;
    return SI_OK;
}

/* ---- stages ------------------------------------------------------------------ */

/* a ranks before b: larger logit, then smaller id (deterministic ties). */
static bool better(const cand *a, const cand *b)
{
    return a->logit > b->logit || (a->logit == b->logit && a->id < b->id);
}

static void apply_penalties(si_sampler *s)
{
    const si_sampler_params *p = &s->p;
    if (++s->gen == 0) {   /* wrapped: old marks could collide */
        memset(s->stamp, 0, s->n_vocab * sizeof *s->stamp);
        s->gen = 1;
    }
    uint32_t cap = (uint32_t)p->penalty_last_n;
    for (uint32_t i = 0; i < s->ring_n; i++) {
        int32_t id = s->ring[(s->ring_head + i) % cap];
        if (s->stamp[id] == s->gen)
            continue;
        s->stamp[id] = s->gen;
        cand *c = &s->cand[id];   /* candidates are still in id order here */
        if (c->logit == -INFINITY)
            continue;
        if (c->logit <= 0.0f)
            c->logit *= p->repeat_penalty;
        else
            c->logit /= p->repeat_penalty;
        c->logit -= (float)s->count[id] * p->frequency_penalty + p->presence_penalty;
    }
}

/* Binary heap over c[0, n) with `better` at the root when max_heap, the
 * worst at the root otherwise. */
static void sift_down(cand *c, size_t n, size_t i, bool max_heap)
{
    cand x = c[i];
    for (;;) {
        size_t k = 2 * i + 1;
        if (k >= n)
            break;
        if (k + 1 < n && (max_heap ? better(&c[k + 1], &c[k]) : better(&c[k], &c[k + 1])))
            k++;
        if (max_heap ? !better(&c[k], &x) : !better(&x, &c[k]))
            break;
        c[i] = c[k];
        i = k;
    }
    c[i] = x;
}

/* Keeps the k best of c[0, n) in c[0, k), sorted best first.  A heap of the
 * k best so far with the worst at its root: O(n log k). */
static void top_k(cand *c, size_t n, size_t k)
{
    for (size_t i = k / 2; i-- > 0;)
        sift_down(c, k, i, false);
    for (size_t i = k; i < n; i++)
        if (better(&c[i], &c[0])) {
            c[0] = c[i];
            sift_down(c, k, 0, false);
        }
    /* Heap sort with the worst at the root leaves c[0, k) best first. */
    for (size_t m = k; m > 1; m--) {
        cand x = c[0];
        c[0] = c[m - 1];
        c[m - 1] = x;
        sift_down(c, m - 1, 0, false);
    }
}

static float max_logit(const cand *c, size_t n, bool sorted)
{
    if (sorted)
        return c[0].logit;
    float m = -INFINITY;
    for (size_t i = 0; i < n; i++)
        m = c[i].logit > m ? c[i].logit : m;
    return m;
}

/* Smallest best-first prefix holding >= p of the mass, moved to c[0, m).
 * Unsorted input is turned into a max-heap and popped only as far as
 * needed (O(n + m log n)): the popped elements collect at the end, best
 * last, and are then reversed and moved to the front. */
static size_t top_p(cand *c, size_t n, bool sorted, float p)
{
    float mx = max_logit(c, n, sorted);
    double z = 0.0;
    for (size_t i = 0; i < n; i++)
        z += expf(c[i].logit - mx);
    double need = (double)p * z, cum = 0.0;
    if (sorted) {
        size_t m = 0;
        while (m < n) {
            cum += expf(c[m].logit - mx);
            m++;
            if (cum >= need)
                break;
        }
        return m;
    }
    for (size_t i = n / 2; i-- > 0;)
        sift_down(c, n, i, true);
    size_t m = 0;
    while (m < n) {
        size_t last = n - 1 - m;
        cand best = c[0];
        c[0] = c[last];
        c[last] = best;
        sift_down(c, last, 0, true);
        m++;
        cum += expf(best.logit - mx);
        if (cum >= need)
            break;
    }
    /* c[n-m, n) is best last: reverse it in place, then move it to the front. */
    for (size_t i = n - m, j = n - 1; i < j; i++, j--) {
        cand x = c[i];
        c[i] = c[j];
        c[j] = x;
    }
    memmove(c, c + (n - m), m * sizeof *c);
    return m;
}

static size_t min_p(cand *c, size_t n, bool sorted, float mp)
{
    float thr = max_logit(c, n, sorted) + logf(mp);
    size_t m = 0;
    for (size_t i = 0; i < n; i++)
        if (c[i].logit >= thr)
            c[m++] = c[i];
    return m;
}

/* Stages 3-6 on the live candidates c[0, n) (sorted: best first): top-k,
 * top-p, min-p, temperature.  Returns the count left. */
static size_t shape(si_sampler *s, size_t n, bool sorted)
{
    const si_sampler_params *p = &s->p;
    cand *c = s->cand;
    if (p->top_k > 0 && (size_t)p->top_k < n) {
        top_k(c, n, (size_t)p->top_k);
        n = (size_t)p->top_k;
        sorted = true;
    }
    if (p->top_p < 1.0f && n > 1) {
        n = top_p(c, n, sorted, p->top_p);
        sorted = true;
    }
    if (p->min_p > 0.0f && n > 1)
        n = min_p(c, n, sorted, p->min_p);
    if (p->temperature != 1.0f)
        for (size_t i = 0; i < n; i++)
            c[i].logit /= p->temperature;
    return n;
}

/* Runs stages 1-6 up to the softmax: leaves the candidates in c[0, *n)
 * with tempered logits, or the greedy pick in *greedy (>= 0). */
static int prepare(si_sampler *s, const float *logits, size_t *n_out, int32_t *greedy, si_err *err)
{
    const si_sampler_params *p = &s->p;
    size_t n = s->n_vocab;
    cand *c = s->cand;
    /* -inf (and NaN) candidates can never be drawn: drop them at once,
     * which also keeps every later maximum finite.  Penalties index the
     * candidates by id, so they need the full array first. */
    size_t m = 0;
    if (s->count != NULL) {
        for (size_t i = 0; i < n; i++) {
            float l = logits[i];
            c[i] = (cand){ isnan(l) ? -INFINITY : l, (int32_t)i };
        }
        apply_penalties(s);
        for (size_t i = 0; i < n; i++)
            if (c[i].logit > -INFINITY)
                c[m++] = c[i];
    } else {
        for (size_t i = 0; i < n; i++)
            if (logits[i] > -INFINITY)   /* false for NaN too */
                c[m++] = (cand){ logits[i], (int32_t)i };
    }
    n = m;
    if (n == 0)
        return si_err_set(err, SI_EINVAL, "sampler: no finite logit among %u", s->n_vocab);

    *greedy = -1;
    if (p->temperature <= 0.0f) {
        size_t b = 0;
        for (size_t i = 1; i < n; i++)
            if (better(&c[i], &c[b]))
                b = i;
        *greedy = c[b].id;
        return SI_OK;
    }
    *n_out = shape(s, n, false);
    return SI_OK;
}

/* One draw from the softmax of c[0, n). */
static int32_t draw(si_sampler *s, size_t n)
{
    const cand *c = s->cand;
    float mx = max_logit(c, n, false);
    double z = 0.0;
    for (size_t i = 0; i < n; i++)
        z += exp((double)c[i].logit - mx);
    double u = uniform01(s->rng) * z, cum = 0.0;
    for (size_t i = 0; i < n; i++) {
        cum += exp((double)c[i].logit - mx);
        if (u < cum)
            return c[i].id;
    }
    return c[n - 1].id;   /* u landed on the rounding slack at the top */
}

int si_sampler_sample(si_sampler *s, const float *logits, int32_t *out, si_err *err)
{
    size_t n = 0;
    int32_t g;
    int rc = prepare(s, logits, &n, &g, err);
    if (rc != SI_OK)
        return rc;
    *out = g >= 0 ? g : draw(s, n);
    return SI_OK;
}

/* ---- the top-K path ------------------------------------------------------- */

uint32_t si_sampler_topk_k(const si_sampler *s, uint32_t max_k)
{
    const si_sampler_params *p = &s->p;
    uint32_t k = 0;
    if (p->temperature <= 0.0f)
        k = 1;
    else if (p->top_k > 0 && (uint32_t)p->top_k < s->n_vocab)
        k = (uint32_t)p->top_k + 1;   /* one more tells whether more than top_k are finite */
    else
        k = s->n_vocab;               /* the whole row: exact for any parameters */
    if (k > s->n_vocab)
        k = s->n_vocab;
    return k <= max_k ? k : 0;
}

uint32_t si_sampler_penalties(si_sampler *s, int32_t *ids, int32_t *counts, float pen[3])
{
    const si_sampler_params *p = &s->p;
    pen[0] = p->repeat_penalty;
    pen[1] = p->frequency_penalty;
    pen[2] = p->presence_penalty;
    if (s->count == NULL)
        return 0;
    if (++s->gen == 0) {   /* the same marks apply_penalties uses: wrap as it does */
        memset(s->stamp, 0, s->n_vocab * sizeof *s->stamp);
        s->gen = 1;
    }
    uint32_t cap = (uint32_t)p->penalty_last_n, n = 0;
    for (uint32_t i = 0; i < s->ring_n; i++) {
        int32_t id = s->ring[(s->ring_head + i) % cap];
        if (s->stamp[id] == s->gen)
            continue;
        s->stamp[id] = s->gen;
        ids[n] = id;
        counts[n] = (int32_t)s->count[id];
        n++;
    }
    return n;
}

uint32_t si_sampler_penalty_cap(const si_sampler *s)
{
    return s->count != NULL ? (uint32_t)s->p.penalty_last_n : 0;
}

static int by_id(const void *a, const void *b)
{
    int32_t x = ((const cand *)a)->id, y = ((const cand *)b)->id;
    return (x > y) - (x < y);
}

int si_sampler_sample_topk(si_sampler *s, const float *vals, const int32_t *ids, uint32_t k, int32_t *out,
                           si_err *err)
{
    const si_sampler_params *p = &s->p;
    if (k == 0 || k > s->n_vocab)
        return si_err_set(err, SI_EINVAL, "sampler: top-K of %u entries (vocabulary %u)", k, s->n_vocab);
    /* The finite entries come first: f of them, all of the row's when
     * f < k (or when k spans the vocabulary). */
    size_t f = 0;
    while (f < k && vals[f] > -INFINITY)
        f++;
    if (f == 0)
        return si_err_set(err, SI_EINVAL, "sampler: no finite logit among %u", s->n_vocab);
    if (p->temperature <= 0.0f) {
        *out = ids[0];
        return SI_OK;
    }
    bool all = f < k || k == s->n_vocab;
    cand *c = s->cand;
    size_t n;
    bool sorted;
    if (p->top_k > 0 && (size_t)p->top_k < f) {
        /* More than top_k finite logits: si_sampler_sample's top-k stage
         * leaves exactly these, best first. */
        n = (size_t)p->top_k;
        sorted = true;
    } else if (all) {
        /* Every candidate is known; si_sampler_sample holds them in id
         * order at this point, and the later sums run in that order. */
        n = f;
        sorted = false;
    } else {
        return si_err_set(err, SI_EUNSUPPORTED,
                          "sampler: top_k %d with %u candidates cannot be sampled exactly", p->top_k, k);
    }
    for (size_t i = 0; i < n; i++)
        c[i] = (cand){ vals[i], ids[i] };
    if (!sorted)
        qsort(c, n, sizeof *c, by_id);
    n = shape(s, n, sorted);
    *out = draw(s, n);
    return SI_OK;
}

int si_sampler_dist(si_sampler *s, const float *logits, float *probs, si_err *err)
{
    size_t n = 0;
    int32_t g;
    int rc = prepare(s, logits, &n, &g, err);
    if (rc != SI_OK)
        return rc;
    memset(probs, 0, s->n_vocab * sizeof *probs);
    if (g >= 0) {
        probs[g] = 1.0f;
        return SI_OK;
    }
    const cand *c = s->cand;
    float mx = max_logit(c, n, false);
    double z = 0.0;
    for (size_t i = 0; i < n; i++)
        z += exp((double)c[i].logit - mx);
    for (size_t i = 0; i < n; i++)
        probs[c[i].id] = (float)(exp((double)c[i].logit - mx) / z);
    return SI_OK;
}
