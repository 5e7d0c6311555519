/* Key fingerprints (see hm_fingerprint.h). */
#include "hm_fingerprint.h"

#include <stdatomic.h>

#include "hm_xxh3.h"

/* TEST-ONLY: every fingerprint is ANDed with this mask when it is non-zero (forces collisions). */
static _Atomic uint64_t test_mask = 0;

static inline uint64_t finish(uint64_t h, uint64_t mask) {
    if (mask)
        h &= mask;
    return h ? h : 1;
}

/* The UTF-8 bytes of a str or bytes key (borrowed from the object). -1 with TypeError naming the
 * index when the key is neither (idx < 0: a single key). */
static int key_bytes(PyObject *key, Py_ssize_t idx, const char **data, Py_ssize_t *len) {
    if (PyUnicode_Check(key)) {
        *data = PyUnicode_AsUTF8AndSize(key, len);
        return *data ? 0 : -1;
    }
    if (PyBytes_Check(key)) {
        *data = PyBytes_AS_STRING(key);
        *len = PyBytes_GET_SIZE(key);
        return 0;
    }
    if (idx < 0)
        PyErr_Format(PyExc_TypeError, "key must be str or bytes, got %.80s", Py_TYPE(key)->tp_name);
    else
        PyErr_Format(PyExc_TypeError, "keys[%zd] must be str or bytes, got %.80s", idx,
                     Py_TYPE(key)->tp_name);
    return -1;
}

/* fingerprint(key) -> int in [1, 2**64). */
PyObject *hm_py_fingerprint(PyObject *self, PyObject *key) {
    (void)self;
    hm_xxh3_fn fn = hm_xxh3_require();
    if (!fn)
        return NULL;
    const char *data;
    Py_ssize_t len;
    if (key_bytes(key, -1, &data, &len) < 0)
        return NULL;
    uint64_t h = finish(fn(data, (size_t)len), atomic_load_explicit(&test_mask, memory_order_relaxed));
    return PyLong_FromUnsignedLongLong(h);
}

/* fingerprints / key_hashes of a batch: `raw` gives the plain xxh3_64 of each key (no test mask,
 * 0 stays 0). The keys are held (a tuple of them) while the GIL is released, so another thread
 * mutating the list cannot free one. */
static PyObject *hash_keys(PyObject *const *args, Py_ssize_t nargs, int raw) {
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, raw ? "key_hashes(keys, out)" : "fingerprints(keys, out)");
        return NULL;
    }
    hm_xxh3_fn fn = hm_xxh3_require();
    if (!fn)
        return NULL;
    PyObject *keys = PySequence_Tuple(args[0]);
    if (!keys)
        return NULL;
    Py_ssize_t n = PyTuple_GET_SIZE(keys), n_out;
    Py_buffer out;
    if (hm_get_u64(args[1], "out", 1, &out, &n_out) < 0) {
        Py_DECREF(keys);
        return NULL;
    }
    if (hm_check_len("out", n_out, "keys", n) < 0)
        goto fail;
    const char **data = NULL;
    Py_ssize_t *lens = NULL;
    if (n > 0) {
        data = PyMem_Malloc((size_t)n * sizeof *data);
        lens = PyMem_Malloc((size_t)n * sizeof *lens);
        if (!data || !lens) {
            PyMem_Free(data);
            PyMem_Free(lens);
            PyErr_NoMemory();
            goto fail;
        }
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        if (key_bytes(PyTuple_GET_ITEM(keys, i), i, &data[i], &lens[i]) < 0) {
            PyMem_Free(data);
            PyMem_Free(lens);
            goto fail;
        }
    }
    uint64_t mask = atomic_load_explicit(&test_mask, memory_order_relaxed);
    uint64_t *h = out.buf;
    if (n > 0) {
        uint64_t total = 0;
        for (Py_ssize_t i = 0; i < n; i++)
            total += (uint64_t)lens[i];
        HM_MAYBE_WITHOUT_GIL(total > HM_GIL_KEEP_BYTES, for (Py_ssize_t i = 0; i < n; i++) {
            uint64_t v = fn(data[i], (size_t)lens[i]);
            h[i] = raw ? v : finish(v, mask);
        });
    }
    PyMem_Free(data);
    PyMem_Free(lens);
    PyBuffer_Release(&out);
    Py_DECREF(keys);
    Py_RETURN_NONE;
fail:
    PyBuffer_Release(&out);
    Py_DECREF(keys);
    return NULL;
}

/* fingerprints(keys: Sequence[str | bytes], out: u64[n]) -> None. */
PyObject *hm_py_fingerprints(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    return hash_keys(args, nargs, 0);
}

/* key_hashes(keys: Sequence[str | bytes], out: u64[n]) -> None: xxh3_64 of each key's UTF-8 bytes
 * as it is (what object headers carry: never masked, 0 stays 0). */
PyObject *hm_py_key_hashes(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    return hash_keys(args, nargs, 1);
}

/* set_test_fingerprint_mask(mask) -> None; 0 turns it off. TEST-ONLY, process-global. */
PyObject *hm_py_set_test_fingerprint_mask(PyObject *self, PyObject *mask) {
    (void)self;
    uint64_t m;
    if (hm_parse_u64(mask, "mask", &m) < 0)
        return NULL;
    atomic_store_explicit(&test_mask, m, memory_order_relaxed);
    Py_RETURN_NONE;
}
