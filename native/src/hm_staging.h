/* The I/O workers' staging buffers (hm_iopool.h): a job takes the smallest free buffer that fits
 * (or maps one) and gives it back when it is done; at most one per worker is kept, each of at
 * most HM_STAGING_KEEP bytes. Thread-safe (one mutex); no Python object is touched, so every
 * function runs with or without the GIL. */
#ifndef HM_STAGING_H
#define HM_STAGING_H

#include <stddef.h>
#include <stdint.h>

/* The largest staging buffer the workers keep for the next job (larger ones are unmapped). */
#define HM_STAGING_KEEP (16u << 20)
/* Buffers kept at most (the pool's largest size), and before the pool says how many it runs. */
#define HM_STAGING_MAX_KEPT 256
#define HM_STAGING_DEFAULT_KEPT 8

typedef struct {
    char *p;
    size_t cap;
} hm_staging;

/* A buffer of at least len bytes into s: 0, or -1 when there is no memory. From 2 MiB on it
 * starts on a 2 MiB boundary, advised onto huge pages and faulted in when it is made. */
int hm_staging_take(hm_staging *s, size_t len);
/* Gives s back: kept for the next job, or unmapped (s is emptied either way). */
void hm_staging_give(hm_staging *s);
/* Buffers kept from now on: n (one per worker the pool runs). */
void hm_staging_set_limit(int n);
/* Makes free buffers of nbytes or more until `count` are kept or no more may be (one per
 * worker); *made: how many were made. 0, or -1 when there was no memory. Meant to run with the
 * GIL released (it faults the buffers in). */
int hm_staging_reserve(uint64_t count, size_t nbytes, long *made);
/* In a forked child: forget the parent's kept buffers (they stay mapped, unused). */
void hm_staging_atfork_child(void);

#endif
