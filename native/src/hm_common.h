/* Shared helpers of the native core: borrowing Python buffers with their type checked.
 *
 * Every function here runs with the GIL held. A borrowed Py_buffer must be released with
 * PyBuffer_Release before the call that took it returns (Python owns every buffer).
 */
#ifndef HM_COMMON_H
#define HM_COMMON_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stddef.h>
#include <stdint.h>

/* The methods' fast-call signature, cast for PyMethodDef without -Wcast-function-type noise. */
#define HM_FASTCALL(fn) ((PyCFunction)(void (*)(void))(fn))

/* Borrows `obj` as a C-contiguous array of uint64 (numpy uint64: format 'L' or 'Q', itemsize 8).
 * `what` names the argument in the error. On success *n is the element count (all dimensions
 * together). Returns 0, or -1 with TypeError/BufferError set. */
int hm_get_u64(PyObject *obj, const char *what, int writable, Py_buffer *view, Py_ssize_t *n);

/* The same for an array of int64 (format 'l' or 'q'). */
int hm_get_i64(PyObject *obj, const char *what, int writable, Py_buffer *view, Py_ssize_t *n);

/* Borrows a writable C-contiguous array of bool/uint8 (itemsize 1) with exactly n elements. */
int hm_get_bool_out(PyObject *obj, const char *what, Py_ssize_t n, Py_buffer *view);

/* Borrows any C-contiguous bytes-like object (read-only or writable as asked); the error names
 * `what` (e.g. "dst": "dst is read-only (a writable buffer is needed)"). */
int hm_get_bytes(PyObject *obj, const char *what, int writable, Py_buffer *view);

/* Checks that n equals the expected length; ValueError naming both otherwise. */
int hm_check_len(const char *what, Py_ssize_t n, const char *ref, Py_ssize_t expected);

/* Parses one non-negative Python int into a uint64_t (ValueError/TypeError naming `what`). */
int hm_parse_u64(PyObject *obj, const char *what, uint64_t *out);

/* Bounds check without overflow: does [off, off + len) lie inside a buffer of `size` bytes? */
static inline int hm_in_bounds(uint64_t off, uint64_t len, uint64_t size) {
    return off <= size && len <= size - off;
}

/* When a call gives the GIL away, its thread waits up to one switch interval (5 ms by default)
 * to get it back whenever another thread runs Python meanwhile: far more than a short batch
 * costs. So a call releases the GIL only for work worth that price: table batches of more than
 * HM_GIL_KEEP_KEYS keys, copies and hashes of more than HM_GIL_KEEP_BYTES bytes. Shorter work
 * runs with the GIL held (microseconds, like a dict lookup) and hands nothing to the scheduler. */
#define HM_GIL_KEEP_KEYS 1024
#define HM_GIL_KEEP_BYTES (64u * 1024u)

/* Runs the statements `...` with the GIL released when `release` is true, held otherwise. */
#define HM_MAYBE_WITHOUT_GIL(release, ...) \
    do {                                   \
        if (release) {                     \
            Py_BEGIN_ALLOW_THREADS         \
            __VA_ARGS__;                   \
            Py_END_ALLOW_THREADS           \
        } else {                           \
            __VA_ARGS__;                   \
        }                                  \
    } while (0)

/* The sum of n lengths, saturating (a sum past UINT64_MAX only needs to read as "large"). */
static inline uint64_t hm_total_len(const uint64_t *len, Py_ssize_t n) {
    uint64_t total = 0;
    for (Py_ssize_t i = 0; i < n; i++)
        total = len[i] > UINT64_MAX - total ? UINT64_MAX : total + len[i];
    return total;
}

#endif
