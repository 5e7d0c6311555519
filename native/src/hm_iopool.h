/* The native I/O workers and their batches, shared by hm_io.c (pread_batch / pwrite_batch) and
 * hm_entries_io.c (read_entries / write_entries); not part of the module's API (hm_io.h).
 *
 * One queue, grow-only detached worker threads (io threads: set_io_threads). A batch is n jobs
 * (one per item, or per run of entries) sharing one lock and condition: the caller queues them
 * and waits, with the GIL released, until all are done or its deadline passes
 * (hm_io_batch_run); then it abandons the batch, waiting only for copies into or out of its
 * buffer already under way (hm_io_copy_enter / hm_io_copy_leave: a worker copies only while
 * the batch is live). Each job takes a staging buffer (hm_staging.h) for its syscall. The last
 * reference (the caller's, or the last job's) frees the batch and closes its own fds.
 */
#ifndef HM_IOPOOL_H
#define HM_IOPOOL_H

#include "hm_common.h"

#include <pthread.h>

#include "hm_xxh3.h"

typedef struct job {
    struct job *next;
    struct batch *batch;
    Py_ssize_t index;
} job;

typedef struct batch {
    pthread_mutex_t mu;
    pthread_cond_t cv; /* signalled when an item completes or a copy ends */
    /* a run of SSD entries (hm_entries_io.c) on staging of len[i] (or stage_len[i]) bytes;
     * NULL: item i is one plain read or write of buf (hm_io.c) */
    void (*run)(struct batch *b, Py_ssize_t i, char *staging);
    int is_write;
    int fd;   /* READ / WRITE: our own dup */
    int *fds; /* ENTRIES: our own dup of each run's fd (one job per run) */
    char *buf;
    const uint64_t *buf_off, *len, *file_off; /* copies owned by the batch */
    int64_t *res;
    unsigned char *done;
    Py_ssize_t n, n_done;
    int abandoned;
    int copying; /* workers inside a copy from or into buf */
    int refs;    /* the caller + every job not yet finished */
    uint64_t *words;
    job *jobs;
    /* ENTRIES (read_entries): job i reads run i = items [run_first[i], run_first[i + 1]), entries
     * back to back from file offset file_off[i], run_len[i] bytes (len); the item verdicts are
     * written by the run's worker before the run is marked done. All arrays are the batch's own
     * copies (nothing of the caller's is read after the call returned). */
    const uint64_t *run_first, *plen, *gen, *seq, *key_end, *part_first, *dst_off, *part_len;
    char *keys;
    uint64_t max_key;
    int64_t *verdict;
    hm_xxh3_fn xxh3;
    /* WRITE_ENTRIES (write_entries): job i writes run i the same way from the parts
     * [part_first[k], part_first[k + 1]) of each of its entries k (part_ptr: their first bytes in
     * the caller's buffers, part_len); staged (copied with its headers into the worker's staging)
     * or, with borrow, written in place after a header block from staging. */
    const char **part_ptr;
    uint64_t *stage_len; /* borrowed: the staging each run needs (headers, zeros, staged payloads) */
    int borrow;
    int writing; /* runs past their copy whose write has not ended */
    Py_buffer *srcs; /* the caller's source buffers, held while a borrowed write may read them */
    Py_ssize_t n_srcs;
} batch;

/* Frees b and the arrays it holds (any of them may be NULL); closes no fd, touches no lock. */
void hm_io_batch_free(batch *b);
/* Drops one reference; the last closes the batch's fds and frees it. */
void hm_io_batch_unref(batch *b);
/* Drops a batch that was never submitted (only the caller's reference; closes its fds). */
void hm_io_batch_drop_unsubmitted(batch *b);
/* Full-length pread/pwrite (reads in requests of at most 1 MiB), EINTR retried: bytes done
 * (short only at EOF) or -errno. */
int64_t hm_io_do(int is_write, int fd, char *p, uint64_t len, uint64_t off);
/* Enters a copy from/into the caller's buffer; 0 when the batch was abandoned (no copy). */
int hm_io_copy_enter(batch *b);
void hm_io_copy_leave(batch *b);
/* Job i is done with result r. */
void hm_io_complete(batch *b, Py_ssize_t i, int64_t r);
/* Job i is done with result r, in the critical section that ends its copy (hm_io_copy_enter). */
void hm_io_copy_done(batch *b, Py_ssize_t i, int64_t r);
/* Initialises b's lock, condition, job list and results for n >= 1 jobs (res, done and jobs
 * allocated for n). */
void hm_io_batch_init(batch *b, Py_ssize_t n);
/* Queues b's jobs and waits (no GIL) for them or `timeout` seconds; fills res (and, for runs of
 * entries, verdict_out), drops the caller's reference. 0, or the errno of a pool that could not
 * start (nothing queued). */
int hm_io_batch_run(batch *b, double timeout, int64_t *res, int64_t *verdict_out);
/* ts = CLOCK_MONOTONIC now + seconds. */
void hm_io_deadline_after(struct timespec *ts, double seconds);
/* A timeout in seconds (finite; <= 0: the deadline has passed); -1 with ValueError naming fn. */
int hm_io_parse_timeout(PyObject *obj, const char *fn, double *out);
/* Counts an item whose read finished after its batch was abandoned (discarded) / whose write
 * ended after it (io_late_items). */
void hm_io_count_late_read(void);
void hm_io_count_late_write(void);

#endif
