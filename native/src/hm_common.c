/* Buffer borrowing with type checks (see hm_common.h). */
#include "hm_common.h"

#include <string.h>

/* The struct-module format of a buffer, without its byte-order prefix. */
static const char *bare_format(const Py_buffer *view) {
    const char *f = view->format ? view->format : "B";
    if (*f == '@' || *f == '=' || *f == '<')
        f++;
    return f;
}

static int get_contiguous(PyObject *obj, const char *what, int writable, Py_buffer *view) {
    int flags = PyBUF_C_CONTIGUOUS | PyBUF_FORMAT | (writable ? PyBUF_WRITABLE : 0);
    if (PyObject_GetBuffer(obj, view, flags) == 0)
        return 0;
    PyErr_Clear();
    /* Say which argument and why, in the caller's words (the raw BufferError names neither). */
    if (writable && PyObject_GetBuffer(obj, view, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) == 0) {
        PyBuffer_Release(view);
        PyErr_Clear();
        PyErr_Format(PyExc_TypeError, "%s is read-only (a writable buffer is needed)", what);
        return -1;
    }
    if (PyObject_CheckBuffer(obj))
        PyErr_Format(PyExc_TypeError, "%s is not C-contiguous", what);
    else
        PyErr_Format(PyExc_TypeError, "%s: expected a buffer (numpy array, bytearray, mmap), got %.80s",
                     what, Py_TYPE(obj)->tp_name);
    return -1;
}

static int get_words(PyObject *obj, const char *what, int writable, Py_buffer *view, Py_ssize_t *n,
                     int is_signed) {
    if (get_contiguous(obj, what, writable, view) < 0)
        return -1;
    const char *f = bare_format(view);
    int ok = view->itemsize == 8 && f[1] == '\0' &&
             (is_signed ? (f[0] == 'l' || f[0] == 'q') : (f[0] == 'L' || f[0] == 'Q'));
    if (!ok) {
        PyErr_Format(PyExc_TypeError, "%s must be an array of %s (got format '%s', itemsize %zd)", what,
                     is_signed ? "int64" : "uint64", view->format ? view->format : "B", view->itemsize);
        PyBuffer_Release(view);
        return -1;
    }
    *n = view->len / 8;
    return 0;
}

int hm_get_u64(PyObject *obj, const char *what, int writable, Py_buffer *view, Py_ssize_t *n) {
    return get_words(obj, what, writable, view, n, 0);
}

int hm_get_i64(PyObject *obj, const char *what, int writable, Py_buffer *view, Py_ssize_t *n) {
    return get_words(obj, what, writable, view, n, 1);
}

int hm_get_bool_out(PyObject *obj, const char *what, Py_ssize_t n, Py_buffer *view) {
    if (get_contiguous(obj, what, 1, view) < 0)
        return -1;
    const char *f = bare_format(view);
    if (view->itemsize != 1 || f[1] != '\0' || (f[0] != '?' && f[0] != 'B')) {
        PyErr_Format(PyExc_TypeError, "%s must be an array of bool (got format '%s')", what,
                     view->format ? view->format : "B");
        PyBuffer_Release(view);
        return -1;
    }
    if (view->len != n) {
        PyErr_Format(PyExc_ValueError, "%s has %zd elements, expected %zd", what, view->len, n);
        PyBuffer_Release(view);
        return -1;
    }
    return 0;
}

int hm_get_bytes(PyObject *obj, const char *what, int writable, Py_buffer *view) {
    return get_contiguous(obj, what, writable, view);
}

int hm_check_len(const char *what, Py_ssize_t n, const char *ref, Py_ssize_t expected) {
    if (n == expected)
        return 0;
    PyErr_Format(PyExc_ValueError, "%s has %zd elements but %s has %zd", what, n, ref, expected);
    return -1;
}

int hm_parse_u64(PyObject *obj, const char *what, uint64_t *out) {
    if (!PyLong_Check(obj)) {
        PyErr_Format(PyExc_TypeError, "%s must be an int, got %.80s", what, Py_TYPE(obj)->tp_name);
        return -1;
    }
    unsigned long long v = PyLong_AsUnsignedLongLong(obj);
    if (v == (unsigned long long)-1 && PyErr_Occurred()) {
        PyErr_Clear();
        PyErr_Format(PyExc_ValueError, "%s must be in [0, 2**64), got %R", what, obj);
        return -1;
    }
    *out = (uint64_t)v;
    return 0;
}
