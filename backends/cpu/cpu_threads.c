/* backends/cpu/cpu_threads.c — a small persistent thread pool, per-thread
 * scratch and the shared op workspace.
 *
 * One pool per backend instance.  A parallel run hands out task indices
 * from an atomic counter, so uneven tasks (experts with different row
 * counts, attention rows of different lengths) balance themselves.  The
 * caller takes part as thread 0.  Workers spin briefly before sleeping on a
 * condition variable: a decode step issues thousands of small runs, and a
 * futex wake-up per run would cost more than the work.
 */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <unistd.h>

#include "cpu_internal.h"

#define CPU_SPIN 20000   /* polls before a worker sleeps (~tens of microseconds) */

struct cpu_pool {
    int              n;          /* threads including the caller */
    pthread_t       *th;
    int              n_started;
    pthread_mutex_t  mu;
    pthread_cond_t   cv;
    atomic_uint      gen;        /* bumped once per run (and at shutdown) */
    atomic_int       quit;
    atomic_int       pending;    /* workers still inside the current run */
    atomic_llong     next;       /* next task index */
    int64_t          n_tasks;
    cpu_task_fn      fn;
    void            *ctx;
};

typedef struct worker_arg {
    cpu_pool *p;
    int       tid;
} worker_arg;

static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

static void run_tasks(cpu_pool *p, int tid)
{
    for (;;) {
        long long i = atomic_fetch_add_explicit(&p->next, 1, memory_order_relaxed);
        if (i >= p->n_tasks)
            break;
        p->fn(p->ctx, i, tid);
    }
}

static void *worker_main(void *arg)
{
    worker_arg *wa = arg;
    cpu_pool *p = wa->p;
    int tid = wa->tid;
    free(wa);
    unsigned seen = 0;
    for (;;) {
        unsigned g = atomic_load_explicit(&p->gen, memory_order_acquire);
        for (int spin = 0; g == seen && spin < CPU_SPIN; spin++) {
            cpu_relax();
            g = atomic_load_explicit(&p->gen, memory_order_acquire);
        }
        if (g == seen) {
            pthread_mutex_lock(&p->mu);
            while ((g = atomic_load_explicit(&p->gen, memory_order_acquire)) == seen)
                pthread_cond_wait(&p->cv, &p->mu);
            pthread_mutex_unlock(&p->mu);
        }
        seen = g;
        if (atomic_load_explicit(&p->quit, memory_order_acquire))
            return NULL;
        run_tasks(p, tid);
        atomic_fetch_sub_explicit(&p->pending, 1, memory_order_acq_rel);
    }
}

int cpu_online_cores(void)
{
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    if (n < 1)
        n = 1;
    if (n > 1024)
        n = 1024;
    return (int)n;
}

int cpu_pool_create(int n_threads, cpu_pool **out, si_err *err)
{
    cpu_pool *p = calloc(1, sizeof *p);
    if (p == NULL)
        return si_err_set(err, SI_ENOMEM, "cpu: out of memory for the thread pool");
    p->n = n_threads < 1 ? 1 : n_threads;
    atomic_init(&p->gen, 0);
    atomic_init(&p->quit, 0);
    atomic_init(&p->pending, 0);
    atomic_init(&p->next, 0);
    if (pthread_mutex_init(&p->mu, NULL) != 0) {
        free(p);
        return si_err_set(err, SI_ENOMEM, "cpu: pthread_mutex_init failed");
    }
    if (pthread_cond_init(&p->cv, NULL) != 0) {
        pthread_mutex_destroy(&p->mu);
        free(p);
        return si_err_set(err, SI_ENOMEM, "cpu: pthread_cond_init failed");
    }
    if (p->n > 1) {
        p->th = calloc((size_t)p->n - 1, sizeof *p->th);
        if (p->th == NULL) {
            cpu_pool_destroy(p);
            return si_err_set(err, SI_ENOMEM, "cpu: out of memory for %d threads", p->n);
        }
    }
    for (int i = 1; i < p->n; i++) {
        worker_arg *wa = malloc(sizeof *wa);
        int rc = wa == NULL ? ENOMEM : 0;
        if (wa != NULL) {
            wa->p = p;
            wa->tid = i;
            rc = pthread_create(&p->th[i - 1], NULL, worker_main, wa);
            if (rc != 0)
                free(wa);
        }
        if (rc != 0) {
            cpu_pool_destroy(p);
            return si_err_set(err, SI_ENOMEM, "cpu: cannot start worker thread %d of %d (error %d)",
                              i, n_threads, rc);
        }
        p->n_started++;
    }
    *out = p;
    return SI_OK;
}

void cpu_pool_destroy(cpu_pool *p)
{
    if (p == NULL)
        return;
    pthread_mutex_lock(&p->mu);
    atomic_store(&p->quit, 1);
    atomic_fetch_add(&p->gen, 1);
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
    for (int i = 0; i < p->n_started; i++)
        pthread_join(p->th[i], NULL);
    free(p->th);
    pthread_cond_destroy(&p->cv);
    pthread_mutex_destroy(&p->mu);
    free(p);
}

void cpu_pool_run(cpu_pool *p, int64_t n_tasks, cpu_task_fn fn, void *ctx)
{
    if (n_tasks <= 0)
        return;
    if (p->n == 1 || n_tasks == 1) {
        for (int64_t i = 0; i < n_tasks; i++)
            fn(ctx, i, 0);
        return;
    }
    p->fn = fn;
    p->ctx = ctx;
    p->n_tasks = n_tasks;
    atomic_store_explicit(&p->next, 0, memory_order_relaxed);
    atomic_store_explicit(&p->pending, p->n - 1, memory_order_relaxed);
    /* The release on gen publishes fn/ctx/n_tasks to the workers. */
    pthread_mutex_lock(&p->mu);
    atomic_fetch_add_explicit(&p->gen, 1, memory_order_release);
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
    run_tasks(p, 0);
    /* Yield after a while: on an oversubscribed machine a worker may need
     * this very core to finish its task. */
    for (int spin = 0; atomic_load_explicit(&p->pending, memory_order_acquire) > 0; spin++) {
        if (spin < CPU_SPIN)
            cpu_relax();
        else
            sched_yield();
    }
}

void *cpu_aligned_alloc(size_t bytes)
{
    void *p = NULL;
    if (posix_memalign(&p, CPU_ALIGN, bytes ? cpu_round(bytes) : CPU_ALIGN) != 0)
        return NULL;
    return p;
}

int cpu_tls_reserve(si_backend *b, size_t bytes, si_err *err)
{
    for (int i = 0; i < b->n_threads; i++) {
        if (b->tls[i].size >= bytes)
            continue;
        void *np = cpu_aligned_alloc(bytes);
        if (np == NULL)
            return si_err_set(err, SI_ENOMEM, "cpu: out of memory for %zu bytes of thread scratch", bytes);
        free(b->tls[i].p);
        b->tls[i].p = np;
        b->tls[i].size = bytes;
    }
    return SI_OK;
}

void *cpu_work_reserve(si_backend *b, size_t bytes, si_err *err)
{
    if (b->work_size >= bytes && b->work != NULL)
        return b->work;
    void *np = cpu_aligned_alloc(bytes);
    if (np == NULL) {
        si_err_set(err, SI_ENOMEM, "cpu: out of memory for a %zu-byte op workspace", bytes);
        return NULL;
    }
    free(b->work);
    b->work = np;
    b->work_size = bytes;
    return np;
}
