/* Keyed lists of the wire protocol (see hm_wire.h). */
#include "hm_wire.h"

#include <string.h>

static void put_be32(char *p, uint32_t v) {
    p[0] = (char)(v >> 24);
    p[1] = (char)(v >> 16);
    p[2] = (char)(v >> 8);
    p[3] = (char)v;
}

static uint32_t get_be32(const unsigned char *p) {
    return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | (uint32_t)p[3];
}

/* The size argument as a Py_ssize_t in [lo, hi] (ValueError naming `what` otherwise). */
static int parse_size(PyObject *obj, const char *what, Py_ssize_t lo, Py_ssize_t hi, Py_ssize_t *out) {
    Py_ssize_t v = PyLong_AsSsize_t(obj);
    if (v == -1 && PyErr_Occurred())
        return -1;
    if (v < lo || v > hi) {
        PyErr_Format(PyExc_ValueError, "%s must be in [%zd, %zd], got %zd", what, lo, hi, v);
        return -1;
    }
    *out = v;
    return 0;
}

PyObject *hm_py_wire_encode_keyed(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    if (nargs != 4) {
        PyErr_SetString(PyExc_TypeError, "wire_encode_keyed(keys, trailers, trailer_size, max_key_len)");
        return NULL;
    }
    Py_ssize_t tsize, max_key;
    if (parse_size(args[2], "trailer_size", 0, 1 << 16, &tsize) < 0 ||
        parse_size(args[3], "max_key_len", 1, 0xFFFF, &max_key) < 0)
        return NULL;
    PyObject *seq = PySequence_Fast(args[0], "keys must be a sequence");
    if (!seq)
        return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    PyObject **items = PySequence_Fast_ITEMS(seq);
    PyObject *out = NULL;
    Py_buffer tr;
    if (hm_get_bytes(args[1], "trailers", 0, &tr) < 0) {
        Py_DECREF(seq);
        return NULL;
    }
    if (n > (Py_ssize_t)UINT32_MAX || tr.len != n * tsize) {
        PyErr_Format(PyExc_ValueError, "trailers has %zd bytes, expected %zd keys x %zd", tr.len, n, tsize);
        goto done;
    }
    /* first pass: check every key and add up the size (UTF-8 is cached in the str) */
    Py_ssize_t total = 4;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (!PyUnicode_Check(items[i])) {
            PyErr_Format(PyExc_TypeError, "key %zd is not a str but %.80s", i, Py_TYPE(items[i])->tp_name);
            goto done;
        }
        Py_ssize_t len;
        if (!PyUnicode_AsUTF8AndSize(items[i], &len)) {
            PyErr_Clear();
            PyErr_Format(PyExc_ValueError, "key %zd is not encodable as UTF-8", i);
            goto done;
        }
        if (len < 1 || len > max_key) {
            PyErr_Format(PyExc_ValueError, "key %zd has %zd bytes, outside 1..%zd", i, len, max_key);
            goto done;
        }
        total += 2 + len + tsize; /* n <= 2^32 items of <= 2^17 bytes: no overflow */
    }
    out = PyBytes_FromStringAndSize(NULL, total);
    if (!out)
        goto done;
    char *p = PyBytes_AS_STRING(out);
    const char *t = tr.buf;
    put_be32(p, (uint32_t)n);
    p += 4;
    for (Py_ssize_t i = 0; i < n; i++) {
        Py_ssize_t len;
        const char *raw = PyUnicode_AsUTF8AndSize(items[i], &len); /* cached: cannot fail now */
        p[0] = (char)(len >> 8);
        p[1] = (char)len;
        memcpy(p + 2, raw, (size_t)len);
        p += 2 + len;
        if (tsize) {
            memcpy(p, t + i * tsize, (size_t)tsize);
            p += tsize;
        }
    }
done:
    PyBuffer_Release(&tr);
    Py_DECREF(seq);
    return out;
}

PyObject *hm_py_wire_decode_keyed(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    if (nargs != 5) {
        PyErr_SetString(PyExc_TypeError, "wire_decode_keyed(meta, offset, trailer_size, max_key_len, max_batch)");
        return NULL;
    }
    Py_buffer meta;
    if (hm_get_bytes(args[0], "meta", 0, &meta) < 0)
        return NULL;
    Py_ssize_t off, tsize, max_key, max_batch;
    PyObject *keys = NULL, *trailers = NULL, *result = NULL;
    if (parse_size(args[1], "offset", 0, meta.len, &off) < 0 ||
        parse_size(args[2], "trailer_size", 0, 1 << 16, &tsize) < 0 ||
        parse_size(args[3], "max_key_len", 1, 0xFFFF, &max_key) < 0 ||
        parse_size(args[4], "max_batch", 0, (Py_ssize_t)UINT32_MAX, &max_batch) < 0)
        goto done;
    const unsigned char *buf = meta.buf;
    Py_ssize_t size = meta.len, pos = off;
    if (size - pos < 4) {
        PyErr_SetString(PyExc_ValueError, "truncated meta");
        goto done;
    }
    uint32_t count = get_be32(buf + pos);
    pos += 4;
    if ((Py_ssize_t)count > max_batch) {
        PyErr_Format(PyExc_ValueError, "batch of %lu exceeds limit %zd", (unsigned long)count, max_batch);
        goto done;
    }
    /* Each item takes at least 3 + tsize bytes, so no more than `room` items fit: that many are
     * allocated (a count the buffer cannot hold allocates nothing for it), and a list that claims
     * more fails inside the loop at the first item that does not fit, with the error that item
     * has (the reader before this one said the same). */
    Py_ssize_t room = (size - pos) / (3 + tsize);
    Py_ssize_t cap = (Py_ssize_t)count < room ? (Py_ssize_t)count : room;
    keys = PyList_New(cap);
    trailers = PyBytes_FromStringAndSize(NULL, cap * tsize);
    if (!keys || !trailers)
        goto done;
    char *t = PyBytes_AS_STRING(trailers);
    for (Py_ssize_t i = 0; i < (Py_ssize_t)count; i++) {
        if (size - pos < 2) {
            PyErr_SetString(PyExc_ValueError, "truncated meta");
            goto done;
        }
        Py_ssize_t len = ((Py_ssize_t)buf[pos] << 8) | (Py_ssize_t)buf[pos + 1];
        pos += 2;
        if (len < 1 || len > max_key) {
            PyErr_Format(PyExc_ValueError, "key length %zd outside 1..%zd", len, max_key);
            goto done;
        }
        if (size - pos < len + tsize || i >= cap) { /* i < cap always holds here (above) */
            PyErr_SetString(PyExc_ValueError, "truncated meta");
            goto done;
        }
        PyObject *key = PyUnicode_DecodeUTF8((const char *)buf + pos, len, "strict");
        if (!key) {
            PyErr_Clear();
            PyErr_SetString(PyExc_ValueError, "key is not UTF-8");
            goto done;
        }
        PyList_SET_ITEM(keys, i, key);
        pos += len;
        memcpy(t + i * tsize, buf + pos, (size_t)tsize);
        pos += tsize;
    }
    result = Py_BuildValue("(OOn)", keys, trailers, pos);
done:
    Py_XDECREF(keys);
    Py_XDECREF(trailers);
    PyBuffer_Release(&meta);
    return result;
}
