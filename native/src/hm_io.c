/* pread_batch / pwrite_batch and the staging reservation (see hm_io.h; the workers:
 * hm_iopool.h). */
#include "hm_io.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>

#include "hm_iopool.h"
#include "hm_staging.h"

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
        if (b)
            hm_io_batch_free(b);
        PyErr_NoMemory();
        goto fail_out;
    }
    b->fd = fcntl(fd, F_DUPFD_CLOEXEC, 0);
    if (b->fd < 0) {
        PyErr_SetFromErrno(PyExc_OSError);
        hm_io_batch_free(b);
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
    hm_io_batch_init(b, n);

    Py_BEGIN_ALLOW_THREADS
    err = hm_io_batch_run(b, timeout, res, NULL);
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

/* reserve_io_staging(count, nbytes) -> buffers made: the workers' staging pool holds at least
 * `count` free buffers of nbytes or more (as far as one per worker is kept), made now with the
 * GIL released (faulted in: the first reads do not pay for it). */
PyObject *hm_py_reserve_io_staging(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "reserve_io_staging(count, nbytes)");
        return NULL;
    }
    uint64_t count, nbytes;
    if (hm_parse_u64(args[0], "count", &count) < 0 || hm_parse_u64(args[1], "nbytes", &nbytes) < 0)
        return NULL;
    if (nbytes > HM_STAGING_KEEP) {
        PyErr_Format(PyExc_ValueError, "reserve_io_staging: nbytes %llu is more than a kept buffer (%u)",
                     (unsigned long long)nbytes, HM_STAGING_KEEP);
        return NULL;
    }
    long made = 0;
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = hm_staging_reserve(count, (size_t)nbytes, &made);
    Py_END_ALLOW_THREADS
    if (rc < 0)
        return PyErr_NoMemory();
    return PyLong_FromLong(made);
}
