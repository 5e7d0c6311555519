/* Batch I/O on a worker pool (see hm_io.h). */
#include "hm_io.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define STAGING_ALIGN 4096u
#define STAGING_KEEP (16u << 20) /* a worker keeps a staging buffer up to this size */
#define DEFAULT_THREADS 8
#define MAX_THREADS 256

struct batch;

typedef struct job {
    struct job *next;
    struct batch *batch;
    Py_ssize_t index;
} job;

typedef struct batch {
    pthread_mutex_t mu;
    pthread_cond_t cv; /* signalled when an item completes or a copy ends */
    int is_write;
    int fd; /* our own dup */
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
} batch;

/* The pool: one queue, grow-only threads. */
static pthread_mutex_t pool_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t pool_cv = PTHREAD_COND_INITIALIZER;
static job *queue_head = NULL, *queue_tail = NULL;
static int pool_threads = 0;
static int pool_target = DEFAULT_THREADS;
static int atfork_registered = 0;

/* Items whose syscall finished after their batch was abandoned (reads discarded, writes done). */
static _Atomic uint64_t late_reads = 0, late_writes = 0;

static void batch_unref(batch *b) {
    pthread_mutex_lock(&b->mu);
    int last = --b->refs == 0;
    pthread_mutex_unlock(&b->mu);
    if (!last)
        return;
    close(b->fd);
    pthread_cond_destroy(&b->cv);
    pthread_mutex_destroy(&b->mu);
    free(b->words);
    free(b->res);
    free(b->done);
    free(b->jobs);
    free(b);
}

typedef struct {
    char *p;
    size_t cap;
} staging;

static char *staging_get(staging *s, size_t len) {
    size_t want = (len + STAGING_ALIGN - 1) / STAGING_ALIGN * STAGING_ALIGN;
    if (want == 0)
        want = STAGING_ALIGN;
    if (s->cap >= want)
        return s->p;
    free(s->p);
    s->p = NULL;
    s->cap = 0;
    void *p = NULL;
    if (posix_memalign(&p, STAGING_ALIGN, want) != 0)
        return NULL;
    s->p = p;
    s->cap = want;
    return s->p;
}

static void staging_trim(staging *s) {
    if (s->cap > STAGING_KEEP) {
        free(s->p);
        s->p = NULL;
        s->cap = 0;
    }
}

/* Full-length pread/pwrite with EINTR retried; bytes done (short only at EOF) or -errno. */
static int64_t do_io(int is_write, int fd, char *p, uint64_t len, uint64_t off) {
    uint64_t done = 0;
    while (done < len) {
        ssize_t r = is_write ? pwrite(fd, p + done, (size_t)(len - done), (off_t)(off + done))
                             : pread(fd, p + done, (size_t)(len - done), (off_t)(off + done));
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
static int copy_enter(batch *b) {
    pthread_mutex_lock(&b->mu);
    int live = !b->abandoned;
    if (live)
        b->copying++;
    pthread_mutex_unlock(&b->mu);
    return live;
}

static void copy_leave(batch *b) {
    pthread_mutex_lock(&b->mu);
    b->copying--;
    pthread_cond_broadcast(&b->cv);
    pthread_mutex_unlock(&b->mu);
}

static void complete(batch *b, Py_ssize_t i, int64_t r) {
    pthread_mutex_lock(&b->mu);
    b->res[i] = r;
    b->done[i] = 1;
    b->n_done++;
    pthread_cond_broadcast(&b->cv);
    pthread_mutex_unlock(&b->mu);
}

static void run_job(job *j, staging *s) {
    batch *b = j->batch;
    Py_ssize_t i = j->index;
    uint64_t len = b->len[i];
    pthread_mutex_lock(&b->mu);
    int abandoned = b->abandoned;
    pthread_mutex_unlock(&b->mu);
    if (abandoned) /* never started: stays -ETIMEDOUT */
        return;
    char *st = staging_get(s, (size_t)len);
    if (!st) {
        complete(b, i, -ENOMEM);
        return;
    }
    if (b->is_write) {
        if (!copy_enter(b))
            return;
        if (len)
            memcpy(st, b->buf + b->buf_off[i], (size_t)len);
        copy_leave(b);
        int64_t r = do_io(1, b->fd, st, len, b->file_off[i]);
        pthread_mutex_lock(&b->mu);
        int late = b->abandoned;
        pthread_mutex_unlock(&b->mu);
        if (late)
            atomic_fetch_add(&late_writes, 1);
        complete(b, i, r);
    } else {
        int64_t r = do_io(0, b->fd, st, len, b->file_off[i]);
        if (!copy_enter(b)) {
            atomic_fetch_add(&late_reads, 1);
            return; /* late: the caller's buffer is not ours any more */
        }
        if (r > 0)
            memcpy(b->buf + b->buf_off[i], st, (size_t)r);
        /* Done in the same critical section that ends the copy: a caller that abandoned the
         * batch meanwhile waits for the copy and then sees the item done, never -ETIMEDOUT with
         * its bytes in the buffer. */
        pthread_mutex_lock(&b->mu);
        b->copying--;
        b->res[i] = r;
        b->done[i] = 1;
        b->n_done++;
        pthread_cond_broadcast(&b->cv);
        pthread_mutex_unlock(&b->mu);
    }
    staging_trim(s);
}

static void *worker_main(void *arg) {
    (void)arg;
    staging s = {NULL, 0};
    for (;;) {
        pthread_mutex_lock(&pool_mu);
        while (!queue_head)
            pthread_cond_wait(&pool_cv, &pool_mu);
        job *j = queue_head;
        queue_head = j->next;
        if (!queue_head)
            queue_tail = NULL;
        pthread_mutex_unlock(&pool_mu);
        run_job(j, &s);
        batch_unref(j->batch);
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
}

/* Starts workers up to pool_target; needs pool_mu. Returns the errno of a failed start or 0. */
static int pool_grow_locked(void) {
    if (!atfork_registered) {
        if (pthread_atfork(NULL, NULL, pool_atfork_child) != 0)
            return ENOMEM;
        atfork_registered = 1;
    }
    while (pool_threads < pool_target) {
        pthread_attr_t attr;
        pthread_attr_init(&attr);
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        pthread_attr_setstacksize(&attr, 256u << 10);
        pthread_t t;
        int rc = pthread_create(&t, &attr, worker_main, NULL);
        pthread_attr_destroy(&attr);
        if (rc != 0)
            return pool_threads > 0 ? 0 : rc;
        pool_threads++;
    }
    return 0;
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

static void deadline_after(struct timespec *ts, double seconds) {
    clock_gettime(CLOCK_MONOTONIC, ts);
    double whole = (double)(long long)seconds;
    long long sec = (long long)whole;
    long long nsec = (long long)((seconds - whole) * 1e9) + ts->tv_nsec;
    ts->tv_sec += (time_t)(sec + nsec / 1000000000LL);
    ts->tv_nsec = (long)(nsec % 1000000000LL);
}

/* (fd, buf, buf_offsets, lengths, file_offsets, timeout_s, out) */
static PyObject *io_batch(PyObject *const *args, Py_ssize_t nargs, int is_write) {
    const char *name = is_write ? "pwrite_batch" : "pread_batch";
    if (nargs != 7) {
        PyErr_Format(PyExc_TypeError, "%s(fd, buf, buf_offsets, lengths, file_offsets, timeout_s, out)", name);
        return NULL;
    }
    long fd_long = PyLong_AsLong(args[0]);
    if (fd_long == -1 && PyErr_Occurred())
        return NULL;
    if (fd_long < 0 || fd_long > INT32_MAX) {
        PyErr_Format(PyExc_ValueError, "%s: fd must be a file descriptor (>= 0), got %ld", name, fd_long);
        return NULL;
    }
    int fd = (int)fd_long;
    double timeout = PyFloat_AsDouble(args[5]);
    if (timeout == -1.0 && PyErr_Occurred())
        return NULL;
    if (!(timeout <= 1e9)) { /* also refuses NaN */
        PyErr_Format(PyExc_ValueError, "%s: timeout_s must be a finite number of seconds", name);
        return NULL;
    }
    Py_buffer buf, boff, len, foff, out;
    Py_ssize_t n, n_len, n_foff, n_out;
    if (hm_get_bytes(args[1], "buf", !is_write, &buf) < 0)
        return NULL;
    if (hm_get_u64(args[2], "buf_offsets", 0, &boff, &n) < 0)
        goto fail_buf;
    if (hm_get_u64(args[3], "lengths", 0, &len, &n_len) < 0)
        goto fail_boff;
    if (hm_get_u64(args[4], "file_offsets", 0, &foff, &n_foff) < 0)
        goto fail_len;
    if (hm_get_i64(args[6], "out", 1, &out, &n_out) < 0)
        goto fail_foff;
    if (hm_check_len("lengths", n_len, "buf_offsets", n) < 0 ||
        hm_check_len("file_offsets", n_foff, "buf_offsets", n) < 0 || hm_check_len("out", n_out, "buf_offsets", n) < 0)
        goto fail_out;
    const uint64_t *bo = boff.buf, *l = len.buf, *fo = foff.buf;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (!hm_in_bounds(bo[i], l[i], (uint64_t)buf.len)) {
            PyErr_Format(PyExc_ValueError, "item %zd: buf offset %llu + length %llu > buffer size %zd", i,
                         (unsigned long long)bo[i], (unsigned long long)l[i], buf.len);
            goto fail_out;
        }
        if (!hm_in_bounds(fo[i], l[i], (uint64_t)INT64_MAX)) {
            PyErr_Format(PyExc_ValueError, "item %zd: file offset %llu + length %llu is past the largest file offset",
                         i, (unsigned long long)fo[i], (unsigned long long)l[i]);
            goto fail_out;
        }
    }
    if (n > INT32_MAX / 2) {
        PyErr_Format(PyExc_ValueError, "%s: %zd items is more than one batch may hold", name, n);
        goto fail_out;
    }
    int64_t *res = out.buf;
    for (Py_ssize_t i = 0; i < n; i++)
        res[i] = -ETIMEDOUT;
    if (n == 0 || timeout <= 0) /* the deadline has passed: nothing is started */
        goto done;

    batch *b = calloc(1, sizeof *b);
    int err = 0;
    if (b) {
        b->words = malloc((size_t)n * 3 * sizeof(uint64_t));
        b->res = malloc((size_t)n * sizeof(int64_t));
        b->done = calloc((size_t)n, 1);
        b->jobs = calloc((size_t)n, sizeof(job));
    }
    if (!b || !b->words || !b->res || !b->done || !b->jobs) {
        if (b) {
            free(b->words);
            free(b->res);
            free(b->done);
            free(b->jobs);
            free(b);
        }
        PyErr_NoMemory();
        goto fail_out;
    }
    b->fd = fcntl(fd, F_DUPFD_CLOEXEC, 0);
    if (b->fd < 0) {
        PyErr_SetFromErrno(PyExc_OSError);
        free(b->words);
        free(b->res);
        free(b->done);
        free(b->jobs);
        free(b);
        goto fail_out;
    }
    memcpy(b->words, bo, (size_t)n * sizeof(uint64_t));
    memcpy(b->words + n, l, (size_t)n * sizeof(uint64_t));
    memcpy(b->words + 2 * n, fo, (size_t)n * sizeof(uint64_t));
    b->buf_off = b->words;
    b->len = b->words + n;
    b->file_off = b->words + 2 * n;
    b->buf = buf.buf;
    b->is_write = is_write;
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

    Py_BEGIN_ALLOW_THREADS
    struct timespec deadline;
    deadline_after(&deadline, timeout);
    pthread_mutex_lock(&pool_mu);
    err = pool_grow_locked();
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
    for (Py_ssize_t i = 0; i < n; i++)
        res[i] = b->done[i] ? b->res[i] : -ETIMEDOUT;
    pthread_mutex_unlock(&b->mu);
    batch_unref(b);
    Py_END_ALLOW_THREADS
    if (err != 0) {
        errno = err;
        PyErr_SetFromErrno(PyExc_OSError);
        goto fail_out;
    }
done:
    PyBuffer_Release(&out);
    PyBuffer_Release(&foff);
    PyBuffer_Release(&len);
    PyBuffer_Release(&boff);
    PyBuffer_Release(&buf);
    Py_RETURN_NONE;
fail_out:
    PyBuffer_Release(&out);
fail_foff:
    PyBuffer_Release(&foff);
fail_len:
    PyBuffer_Release(&len);
fail_boff:
    PyBuffer_Release(&boff);
fail_buf:
    PyBuffer_Release(&buf);
    return NULL;
}

PyObject *hm_py_pread_batch(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    return io_batch(args, nargs, 0);
}

PyObject *hm_py_pwrite_batch(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    return io_batch(args, nargs, 1);
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
