/* The I/O workers' staging buffers (see hm_staging.h). */
#define _DEFAULT_SOURCE /* MAP_ANONYMOUS, madvise (this file includes no Python.h, which sets it) */
#include "hm_staging.h"

#include <pthread.h>
#include <stdatomic.h>
#include <sys/mman.h>

#define STAGING_ALIGN 4096u
#define HUGE_PAGE (2u << 20)
#ifdef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE_ADVICE MADV_POPULATE_WRITE
#else
#define MADV_POPULATE_WRITE_ADVICE 23 /* Linux 5.14+; older kernels answer EINVAL */
#endif

/* Staging buffers shared by the workers: a job takes the smallest free one that fits (or makes
 * one) and gives it back when it is done. At most one per worker is kept (staging_limit), each of
 * at most HM_STAGING_KEEP bytes. reserve_io_staging makes them ahead (an SSD engine's open), so the
 * first gets do not pay for faulting them in. */
static pthread_mutex_t staging_mu = PTHREAD_MUTEX_INITIALIZER;
static hm_staging staging_free[HM_STAGING_MAX_KEPT];
static int staging_nfree = 0;
static _Atomic int staging_limit = HM_STAGING_DEFAULT_KEPT;

static size_t staging_size(size_t len) {
    size_t want = (len + STAGING_ALIGN - 1) / STAGING_ALIGN * STAGING_ALIGN;
    if (want == 0)
        want = STAGING_ALIGN;
    if (want >= HUGE_PAGE)
        want = (want + HUGE_PAGE - 1) / HUGE_PAGE * HUGE_PAGE;
    return want;
}

/* A new buffer of `want` bytes (staging_size): 0, or -1 when there is no memory. A mapping of
 * its own (never the malloc heap: the huge-page advice must not reach memory malloc later hands to
 * someone else), from 2 MiB on starting on a 2 MiB boundary, advised onto huge pages and faulted
 * in now, while huge pages are to be had (not by the first read's DMA, which takes whatever pages
 * the kernel has then; kernels before 5.14 refuse the populate advice and the first read faults
 * the pages in instead). */
static int staging_make(hm_staging *s, size_t want) {
    size_t align = want >= HUGE_PAGE ? HUGE_PAGE : STAGING_ALIGN;
    size_t span = want + (align > STAGING_ALIGN ? align : 0);
    char *raw = mmap(NULL, span, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (raw == MAP_FAILED)
        return -1;
    char *p = raw;
    if (span > want) { /* keep the aligned part only */
        p = raw + ((align - (uintptr_t)raw % align) % align);
        if (p > raw)
            munmap(raw, (size_t)(p - raw));
        if (raw + span > p + want)
            munmap(p + want, (size_t)(raw + span - (p + want)));
    }
    if (want >= HUGE_PAGE) {
#ifdef MADV_HUGEPAGE
        (void)madvise(p, want, MADV_HUGEPAGE);
#endif
        (void)madvise(p, want, MADV_POPULATE_WRITE_ADVICE);
    }
    s->p = p;
    s->cap = want;
    return 0;
}

static void staging_unmap(hm_staging *s) {
    if (s->p)
        munmap(s->p, s->cap);
    s->p = NULL;
    s->cap = 0;
}

int hm_staging_take(hm_staging *s, size_t len) {
    size_t want = staging_size(len);
    pthread_mutex_lock(&staging_mu);
    int best = -1;
    for (int i = 0; i < staging_nfree; i++)
        if (staging_free[i].cap >= want && (best < 0 || staging_free[i].cap < staging_free[best].cap))
            best = i;
    if (best >= 0) {
        *s = staging_free[best];
        staging_free[best] = staging_free[--staging_nfree];
        pthread_mutex_unlock(&staging_mu);
        return 0;
    }
    pthread_mutex_unlock(&staging_mu);
    return staging_make(s, want);
}

/* Keeps s for the next job: in a free place of the pool, else in place of the smallest kept
 * buffer when s is larger (so the pool comes to hold the sizes the calls use: a run of one 8 MiB
 * entry does not map and fault in a fresh buffer every time); unmaps what is not kept. */
void hm_staging_give(hm_staging *s) {
    if (s->cap <= HM_STAGING_KEEP) {
        pthread_mutex_lock(&staging_mu);
        if (staging_nfree < atomic_load(&staging_limit) && staging_nfree < HM_STAGING_MAX_KEPT) {
            staging_free[staging_nfree++] = *s;
            pthread_mutex_unlock(&staging_mu);
            return;
        }
        int smallest = -1;
        for (int i = 0; i < staging_nfree; i++)
            if (staging_free[i].cap < s->cap && (smallest < 0 || staging_free[i].cap < staging_free[smallest].cap))
                smallest = i;
        if (smallest >= 0) {
            hm_staging out = staging_free[smallest];
            staging_free[smallest] = *s;
            *s = out;
        }
        pthread_mutex_unlock(&staging_mu);
    }
    staging_unmap(s);
}

void hm_staging_set_limit(int n) {
    atomic_store(&staging_limit, n);
}

int hm_staging_reserve(uint64_t count, size_t nbytes, long *made) {
    size_t want = staging_size(nbytes);
    *made = 0;
    for (;;) {
        pthread_mutex_lock(&staging_mu);
        uint64_t fits = 0;
        for (int i = 0; i < staging_nfree; i++)
            fits += staging_free[i].cap >= want;
        int room = staging_nfree < atomic_load(&staging_limit);
        pthread_mutex_unlock(&staging_mu);
        if (fits >= count || !room)
            return 0;
        hm_staging s;
        if (staging_make(&s, want) < 0)
            return -1;
        hm_staging_give(&s);
        (*made)++;
    }
}

void hm_staging_atfork_child(void) {
    pthread_mutex_init(&staging_mu, NULL);
    staging_nfree = 0;
}
