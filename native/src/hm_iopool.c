/* The native I/O workers and their batches (see hm_iopool.h). */
#include "hm_iopool.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "hm_io.h"
#include "hm_staging.h"

#define DEFAULT_THREADS 8
#define MAX_THREADS 256
_Static_assert(DEFAULT_THREADS == HM_STAGING_DEFAULT_KEPT && MAX_THREADS == HM_STAGING_MAX_KEPT,
               "the staging pool keeps one buffer per worker");

/* The pool: one queue, grow-only threads. */
static pthread_mutex_t pool_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t pool_cv = PTHREAD_COND_INITIALIZER;
static job *queue_head = NULL, *queue_tail = NULL;
static int pool_threads = 0;
static int pool_target = DEFAULT_THREADS;
static int atfork_registered = 0;

/* Items whose syscall finished after their batch was abandoned (reads discarded, writes done). */
static _Atomic uint64_t late_reads = 0, late_writes = 0;

/* Frees b and the arrays it holds (any of them may be NULL); closes no fd, touches no lock. */
void hm_io_batch_free(batch *b) {
    free(b->words);
    free(b->res);
    free(b->done);
    free(b->jobs);
    free(b->fds);
    free(b->keys);
    free(b->verdict);
    free(b->part_ptr);
    free(b->stage_len);
    free(b->srcs);
    free(b);
}

void hm_io_batch_unref(batch *b) {
    pthread_mutex_lock(&b->mu);
    int last = --b->refs == 0;
    pthread_mutex_unlock(&b->mu);
    if (!last)
        return;
    if (b->fds) {
        for (Py_ssize_t i = 0; i < b->n; i++)
            close(b->fds[i]);
    } else {
        close(b->fd);
    }
    pthread_cond_destroy(&b->cv);
    pthread_mutex_destroy(&b->mu);
    hm_io_batch_free(b);
}

/* Drops a batch that was never submitted (only the caller's reference; closes its fds). */
void hm_io_batch_drop_unsubmitted(batch *b) {
    b->refs = 1;
    pthread_mutex_init(&b->mu, NULL);
    pthread_cond_init(&b->cv, NULL);
    hm_io_batch_unref(b);
}

/* Full-length pread/pwrite with EINTR retried; bytes done (short only at EOF) or -errno. Reads go
 * in requests of at most READ_CHUNK bytes (a multiple of 4096, as O_DIRECT needs): the disks here
 * read fastest in requests of about 1 MiB (fio on this VM's disk, 8 requests in flight: 3.0 GB/s
 * in 1 MiB requests, 2.4 in 2 MiB, 2.0 in 8 MiB), so a long run is read as a few of them in a row
 * while the other workers keep their own in flight. */
#define READ_CHUNK (1u << 20)
int64_t hm_io_do(int is_write, int fd, char *p, uint64_t len, uint64_t off) {
    uint64_t done = 0;
    while (done < len) {
        uint64_t want = len - done;
        if (!is_write && want > READ_CHUNK)
            want = READ_CHUNK;
        ssize_t r = is_write ? pwrite(fd, p + done, (size_t)want, (off_t)(off + done))
                             : pread(fd, p + done, (size_t)want, (off_t)(off + done));
        if (r < 0) {
            if (errno == EINTR)
                continue;
            return -(int64_t)errno;
        }
        if (r == 0)
            break;
        done += (uint64_t)r;
    }
    return (int64_t)done;
}

/* Enters a copy from/into the caller's buffer; 0 when the batch was abandoned (no copy). */
int hm_io_copy_enter(batch *b) {
    pthread_mutex_lock(&b->mu);
    int live = !b->abandoned;
    if (live)
        b->copying++;
    pthread_mutex_unlock(&b->mu);
    return live;
}

void hm_io_copy_leave(batch *b) {
    pthread_mutex_lock(&b->mu);
    b->copying--;
    pthread_cond_broadcast(&b->cv);
    pthread_mutex_unlock(&b->mu);
}

void hm_io_complete(batch *b, Py_ssize_t i, int64_t r) {
    pthread_mutex_lock(&b->mu);
    b->res[i] = r;
    b->done[i] = 1;
    b->n_done++;
    pthread_cond_broadcast(&b->cv);
    pthread_mutex_unlock(&b->mu);
}

/* Marks run/item i done with result r in the critical section that ends its copy (entered with
 * copy_enter): a caller that abandoned the batch meanwhile waits for the copy and then sees the
 * item done, never -ETIMEDOUT with its bytes in the buffer. */
void hm_io_copy_done(batch *b, Py_ssize_t i, int64_t r) {
    pthread_mutex_lock(&b->mu);
    b->copying--;
    b->res[i] = r;
    b->done[i] = 1;
    b->n_done++;
    pthread_cond_broadcast(&b->cv);
    pthread_mutex_unlock(&b->mu);
}

void hm_io_count_late_read(void) {
    atomic_fetch_add(&late_reads, 1);
}

void hm_io_count_late_write(void) {
    atomic_fetch_add(&late_writes, 1);
}

static void run_job_staged(job *j, hm_staging *s);

static void run_job(job *j) {
    batch *b = j->batch;
    pthread_mutex_lock(&b->mu);
    int abandoned = b->abandoned;
    pthread_mutex_unlock(&b->mu);
    if (abandoned) /* never started: stays -ETIMEDOUT */
        return;
    hm_staging s = {NULL, 0};
    uint64_t want = b->stage_len ? b->stage_len[j->index] : b->len[j->index];
    if (hm_staging_take(&s, (size_t)want) < 0) {
        hm_io_complete(j->batch, j->index, -ENOMEM);
        return;
    }
    run_job_staged(j, &s);
    hm_staging_give(&s);
}

static void run_job_staged(job *j, hm_staging *s) {
    batch *b = j->batch;
    Py_ssize_t i = j->index;
    uint64_t len = b->len[i];
    char *st = s->p;
    if (b->run) {
        b->run(b, i, st);
        return;
    }
    if (b->is_write) {
        if (!hm_io_copy_enter(b))
            return;
        if (len)
            memcpy(st, b->buf + b->buf_off[i], (size_t)len);
        hm_io_copy_leave(b);
        int64_t r = hm_io_do(1, b->fd, st, len, b->file_off[i]);
        pthread_mutex_lock(&b->mu);
        int late = b->abandoned;
        pthread_mutex_unlock(&b->mu);
        if (late)
            atomic_fetch_add(&late_writes, 1);
        hm_io_complete(b, i, r);
    } else {
        int64_t r = hm_io_do(0, b->fd, st, len, b->file_off[i]);
        if (!hm_io_copy_enter(b)) {
            atomic_fetch_add(&late_reads, 1);
            return; /* late: the caller's buffer is not ours any more */
        }
        if (r > 0)
            memcpy(b->buf + b->buf_off[i], st, (size_t)r);
        hm_io_copy_done(b, i, r);
    }
}

static void *worker_main(void *arg) {
    (void)arg;
    for (;;) {
        pthread_mutex_lock(&pool_mu);
        while (!queue_head)
            pthread_cond_wait(&pool_cv, &pool_mu);
        job *j = queue_head;
        queue_head = j->next;
        if (!queue_head)
            queue_tail = NULL;
        pthread_mutex_unlock(&pool_mu);
        run_job(j);
        hm_io_batch_unref(j->batch);
    }
    return NULL;
}

/* In a forked child the workers do not exist: start over (the parent's queued jobs are lost to
 * the child, as are its threads). */
static void pool_atfork_child(void) {
    pthread_mutex_init(&pool_mu, NULL);
    pthread_cond_init(&pool_cv, NULL);
    queue_head = queue_tail = NULL;
    pool_threads = 0;
    hm_staging_atfork_child();
}

/* Starts workers up to pool_target; needs pool_mu. Returns the errno of a failed start or 0. */
static int pool_grow_locked(void) {
    if (!atfork_registered) {
        if (pthread_atfork(NULL, NULL, pool_atfork_child) != 0)
            return ENOMEM;
        atfork_registered = 1;
    }
    int rc = 0;
    while (pool_threads < pool_target) {
        pthread_attr_t attr;
        pthread_attr_init(&attr);
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        pthread_attr_setstacksize(&attr, 256u << 10);
        pthread_t t;
        rc = pthread_create(&t, &attr, worker_main, NULL);
        pthread_attr_destroy(&attr);
        if (rc != 0)
            break;
        pool_threads++;
    }
    hm_staging_set_limit(pool_threads > DEFAULT_THREADS ? pool_threads : DEFAULT_THREADS);
    return pool_threads > 0 ? 0 : rc;
}

static void pool_submit(job *first, job *last) {
    pthread_mutex_lock(&pool_mu);
    if (queue_tail)
        queue_tail->next = first;
    else
        queue_head = first;
    queue_tail = last;
    pthread_cond_broadcast(&pool_cv);
    pthread_mutex_unlock(&pool_mu);
}

void hm_io_deadline_after(struct timespec *ts, double seconds) {
    clock_gettime(CLOCK_MONOTONIC, ts);
    double whole = (double)(long long)seconds;
    long long sec = (long long)whole;
    long long nsec = (long long)((seconds - whole) * 1e9) + ts->tv_nsec;
    ts->tv_sec += (time_t)(sec + nsec / 1000000000LL);
    ts->tv_nsec = (long)(nsec % 1000000000LL);
}

/* Initialises b's lock, condition, job list and results for n jobs (n >= 1; b->res, b->done and
 * b->jobs allocated for n). */
void hm_io_batch_init(batch *b, Py_ssize_t n) {
    b->n = n;
    b->refs = (int)(1 + n);
    pthread_mutex_init(&b->mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&b->cv, &ca);
    pthread_condattr_destroy(&ca);
    for (Py_ssize_t i = 0; i < n; i++) {
        b->res[i] = -ETIMEDOUT;
        b->jobs[i].batch = b;
        b->jobs[i].index = i;
        b->jobs[i].next = i + 1 < n ? &b->jobs[i + 1] : NULL;
    }
}

/* Queues every job of b and waits (no GIL) until all are done or `timeout` seconds passed, then
 * abandons b (waiting only for copies under way), writes each job's result into res (-ETIMEDOUT
 * for a job not done) and, for ENTRIES, each item's verdict into verdict_out (the run's -errno
 * for the items of a run whose read failed), and drops the caller's reference. Returns 0, or the
 * errno of a pool that could not start (nothing was queued). */
int hm_io_batch_run(batch *b, double timeout, int64_t *res, int64_t *verdict_out) {
    Py_ssize_t n = b->n;
    struct timespec deadline;
    hm_io_deadline_after(&deadline, timeout);
    pthread_mutex_lock(&pool_mu);
    int err = pool_grow_locked();
    pthread_mutex_unlock(&pool_mu);
    if (err == 0) {
        pool_submit(&b->jobs[0], &b->jobs[n - 1]);
        pthread_mutex_lock(&b->mu);
        while (b->n_done < n) {
            if (pthread_cond_timedwait(&b->cv, &b->mu, &deadline) == ETIMEDOUT)
                break;
        }
    } else {
        pthread_mutex_lock(&b->mu);
        b->refs -= (int)n; /* no job was queued */
    }
    /* From here on no worker touches buf: wait only for copies already under way. */
    b->abandoned = 1;
    while (b->copying > 0)
        pthread_cond_wait(&b->cv, &b->mu);
    for (Py_ssize_t i = 0; i < n; i++) {
        int64_t r = b->done[i] ? b->res[i] : -ETIMEDOUT;
        res[i] = r;
        if (verdict_out)
            for (uint64_t k = b->run_first[i]; k < b->run_first[i + 1]; k++)
                verdict_out[k] = r < 0 ? r : b->verdict[k];
    }
    pthread_mutex_unlock(&b->mu);
    hm_io_batch_unref(b);
    return err;
}

/* Reads a timeout in seconds (finite; <= 0: the deadline has passed). */
int hm_io_parse_timeout(PyObject *obj, const char *fn, double *out) {
    double t = PyFloat_AsDouble(obj);
    if (t == -1.0 && PyErr_Occurred())
        return -1;
    if (!(t <= 1e9)) { /* also refuses NaN */
        PyErr_Format(PyExc_ValueError, "%s: timeout_s must be a finite number of seconds", fn);
        return -1;
    }
    *out = t;
    return 0;
}

/* set_io_threads(n): the pool grows to n workers at the next batch (it never shrinks). */
PyObject *hm_py_set_io_threads(PyObject *self, PyObject *arg) {
    (void)self;
    long n = PyLong_AsLong(arg);
    if (n == -1 && PyErr_Occurred())
        return NULL;
    if (n < 1 || n > MAX_THREADS) {
        PyErr_Format(PyExc_ValueError, "io threads must be in 1..%d, got %ld", MAX_THREADS, n);
        return NULL;
    }
    pthread_mutex_lock(&pool_mu);
    if ((int)n > pool_target)
        pool_target = (int)n;
    hm_staging_set_limit(pool_target); /* one kept staging buffer per worker to be */
    pthread_mutex_unlock(&pool_mu);
    Py_RETURN_NONE;
}

/* io_threads() -> the pool's target size. */
PyObject *hm_py_io_threads(PyObject *self, PyObject *unused) {
    (void)self;
    (void)unused;
    pthread_mutex_lock(&pool_mu);
    int n = pool_target;
    pthread_mutex_unlock(&pool_mu);
    return PyLong_FromLong(n);
}

/* io_late_items() -> (reads finished after their deadline and discarded, writes finished after
 * their deadline), counted since the process started. */
PyObject *hm_py_io_late_items(PyObject *self, PyObject *unused) {
    (void)self;
    (void)unused;
    return Py_BuildValue("(KK)", (unsigned long long)atomic_load(&late_reads),
                         (unsigned long long)atomic_load(&late_writes));
}
