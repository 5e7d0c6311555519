/* Page keys (see hm_keys.h). Both functions run with the GIL held: they read and make str
 * objects. A batch of 128 hashes costs a few microseconds. */
#include "hm_keys.h"

#include <string.h>

/* check_page_keys(hashes: sequence, max_chars: int) -> int.
 * The index of the first item that is not a str (a subclass counts) of 1 to max_chars
 * characters, or -1 when every item is one. */
PyObject *hm_py_check_page_keys(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "check_page_keys(hashes, max_chars)");
        return NULL;
    }
    Py_ssize_t max_chars = PyLong_AsSsize_t(args[1]);
    if (max_chars == -1 && PyErr_Occurred())
        return NULL;
    PyObject *seq = PySequence_Fast(args[0], "hashes must be a sequence");
    if (!seq)
        return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq), bad = -1;
    PyObject **items = PySequence_Fast_ITEMS(seq);
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *h = items[i];
        Py_ssize_t len;
        if (!PyUnicode_Check(h) || (len = PyUnicode_GET_LENGTH(h)) < 1 || len > max_chars) {
            bad = i;
            break;
        }
    }
    Py_DECREF(seq);
    return PyLong_FromSsize_t(bad);
}

/* prefix + h + tail as a new str: all three ASCII (`ascii`: prefix and tail are; `fixed`: their
 * length together) are laid out with three copies, anything else goes through PyUnicode_Concat
 * (the same value either way). */
static PyObject *join_one(PyObject *prefix, PyObject *h, PyObject *tail, int ascii, Py_ssize_t fixed) {
    if (ascii && PyUnicode_IS_ASCII(h)) {
        Py_ssize_t a = PyUnicode_GET_LENGTH(prefix), b = PyUnicode_GET_LENGTH(h);
        if (b > PY_SSIZE_T_MAX - fixed) {
            PyErr_SetString(PyExc_OverflowError, "key too long");
            return NULL;
        }
        PyObject *out = PyUnicode_New(fixed + b, 127);
        if (!out)
            return NULL;
        char *to = (char *)PyUnicode_DATA(out);
        memcpy(to, PyUnicode_DATA(prefix), (size_t)a);
        memcpy(to + a, PyUnicode_DATA(h), (size_t)b);
        memcpy(to + a + b, PyUnicode_DATA(tail), (size_t)(fixed - a));
        return out;
    }
    PyObject *head = PyUnicode_Concat(prefix, h);
    if (!head)
        return NULL;
    PyObject *out = PyUnicode_Concat(head, tail);
    Py_DECREF(head);
    return out;
}

/* join_keys(prefix: str, hashes: sequence of str, tail: str) -> list[str].
 * [prefix + h + tail for h in hashes]; TypeError naming the index of an item that is not a str
 * (nothing returned). */
PyObject *hm_py_join_keys(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "join_keys(prefix, hashes, tail)");
        return NULL;
    }
    PyObject *prefix = args[0], *tail = args[2];
    if (!PyUnicode_Check(prefix) || !PyUnicode_Check(tail)) {
        PyErr_SetString(PyExc_TypeError, "join_keys: prefix and tail must be str");
        return NULL;
    }
    /* ASCII prefix and tail take the fast layout (a str subclass is a str here: its value) */
    int ascii = PyUnicode_IS_ASCII(prefix) && PyUnicode_IS_ASCII(tail);
    Py_ssize_t fixed = PyUnicode_GET_LENGTH(prefix) + PyUnicode_GET_LENGTH(tail);
    PyObject *seq = PySequence_Fast(args[1], "hashes must be a sequence");
    if (!seq)
        return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    PyObject **items = PySequence_Fast_ITEMS(seq);
    PyObject *out = PyList_New(n);
    if (!out) {
        Py_DECREF(seq);
        return NULL;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *h = items[i];
        if (!PyUnicode_Check(h)) {
            PyErr_Format(PyExc_TypeError, "hashes[%zd] must be str, got %.80s", i, Py_TYPE(h)->tp_name);
            Py_DECREF(out);
            Py_DECREF(seq);
            return NULL;
        }
        PyObject *key = join_one(prefix, h, tail, ascii, fixed);
        if (!key) {
            Py_DECREF(out);
            Py_DECREF(seq);
            return NULL;
        }
        PyList_SET_ITEM(out, i, key);
    }
    Py_DECREF(seq);
    return out;
}
