/* xxh3 from an installed library, found with dlopen/dlsym (see hm_xxh3.h). */
#include "hm_xxh3.h"

#include <dlfcn.h>
#include <stdatomic.h>
#include <string.h>

static _Atomic(hm_xxh3_fn) loaded_fn = NULL;
static PyObject *loaded_desc = NULL; /* (path, symbol); guarded by the GIL */

hm_xxh3_fn hm_xxh3_get(void) { return atomic_load_explicit(&loaded_fn, memory_order_acquire); }

hm_xxh3_fn hm_xxh3_require(void) {
    hm_xxh3_fn fn = hm_xxh3_get();
    if (!fn)
        PyErr_SetString(PyExc_RuntimeError,
                        "xxh3 is not loaded: import hicache_mooncake.native (it calls set_xxh3_library)");
    return fn;
}

/* set_xxh3_library(path, symbol): dlopen(path) and use dlsym(symbol) from now on. The handle is
 * kept open for the life of the process. OSError when the library or the symbol is missing, and
 * ValueError when the symbol does not compute xxh3_64 (checked against a known value). */
PyObject *hm_py_set_xxh3_library(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    if (nargs != 2 || !PyUnicode_Check(args[0]) || !PyUnicode_Check(args[1])) {
        PyErr_SetString(PyExc_TypeError, "set_xxh3_library(path: str, symbol: str)");
        return NULL;
    }
    const char *path = PyUnicode_AsUTF8(args[0]);
    const char *symbol = PyUnicode_AsUTF8(args[1]);
    if (!path || !symbol)
        return NULL;
    void *handle = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!handle) {
        const char *err = dlerror();
        PyErr_Format(PyExc_OSError, "cannot load %s for xxh3: %s", path, err ? err : "unknown error");
        return NULL;
    }
    void *sym = dlsym(handle, symbol);
    if (!sym) {
        /* dlerror's string lives only until the next dl* call: format it before dlclose. */
        const char *err = dlerror();
        PyErr_Format(PyExc_OSError, "%s has no symbol %s: %s", path, symbol, err ? err : "unknown error");
        dlclose(handle);
        return NULL;
    }
    hm_xxh3_fn fn;
    /* POSIX guarantees a data pointer from dlsym converts to a function pointer. */
    memcpy(&fn, &sym, sizeof fn);
    /* XXH3_64bits("", 0) with seed 0: a wrong symbol must not silently write bad checksums. */
    if (fn("", 0) != UINT64_C(0x2D06800538D394C2)) {
        dlclose(handle);
        PyErr_Format(PyExc_ValueError, "%s:%s does not compute xxh3_64 (seed 0)", path, symbol);
        return NULL;
    }
    PyObject *desc = PyTuple_Pack(2, args[0], args[1]);
    if (!desc) {
        dlclose(handle);
        return NULL;
    }
    Py_XSETREF(loaded_desc, desc);
    atomic_store_explicit(&loaded_fn, fn, memory_order_release);
    Py_RETURN_NONE;
}

/* xxh3_library() -> (path, symbol) of the loaded function, or None. */
PyObject *hm_py_xxh3_library(PyObject *self, PyObject *unused) {
    (void)self;
    (void)unused;
    if (!loaded_desc)
        Py_RETURN_NONE;
    return Py_NewRef(loaded_desc);
}

/* xxh3_64(buf) -> int, the GIL released while hashing. */
PyObject *hm_py_xxh3_64(PyObject *self, PyObject *arg) {
    (void)self;
    hm_xxh3_fn fn = hm_xxh3_require();
    if (!fn)
        return NULL;
    Py_buffer view;
    if (hm_get_bytes(arg, "buf", 0, &view) < 0)
        return NULL;
    uint64_t h;
    HM_MAYBE_WITHOUT_GIL((size_t)view.len > HM_GIL_KEEP_BYTES, h = fn(view.buf, (size_t)view.len));
    PyBuffer_Release(&view);
    return PyLong_FromUnsignedLongLong(h);
}

/* xxh3_batch(buf, offsets: u64[n], lengths: u64[n], out: u64[n]) -> None: out[i] = xxh3 of
 * buf[offsets[i]:offsets[i]+lengths[i]]. Every range is checked before any hashing. */
PyObject *hm_py_xxh3_batch(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    if (nargs != 4) {
        PyErr_SetString(PyExc_TypeError, "xxh3_batch(buf, offsets, lengths, out)");
        return NULL;
    }
    hm_xxh3_fn fn = hm_xxh3_require();
    if (!fn)
        return NULL;
    Py_buffer buf, off, len, out;
    Py_ssize_t n, n_len, n_out;
    if (hm_get_bytes(args[0], "buf", 0, &buf) < 0)
        return NULL;
    if (hm_get_u64(args[1], "offsets", 0, &off, &n) < 0)
        goto fail_buf;
    if (hm_get_u64(args[2], "lengths", 0, &len, &n_len) < 0)
        goto fail_off;
    if (hm_get_u64(args[3], "out", 1, &out, &n_out) < 0)
        goto fail_len;
    if (hm_check_len("lengths", n_len, "offsets", n) < 0 || hm_check_len("out", n_out, "offsets", n) < 0)
        goto fail_out;
    /* The call's own copy of the ranges: a caller's thread changing its arrays meanwhile cannot
     * move a range past the check. */
    uint64_t *own = PyMem_Malloc(2 * (size_t)(n ? n : 1) * sizeof(uint64_t));
    if (!own) {
        PyErr_NoMemory();
        goto fail_out;
    }
    if (n > 0) { /* an empty array's buffer may be NULL, which memcpy must not see */
        memcpy(own, off.buf, (size_t)n * sizeof(uint64_t));
        memcpy(own + n, len.buf, (size_t)n * sizeof(uint64_t));
    }
    const uint64_t *o = own, *l = own + n;
    uint64_t size = (uint64_t)buf.len;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (!hm_in_bounds(o[i], l[i], size)) {
            PyErr_Format(PyExc_ValueError, "range %zd: offset %llu + length %llu > buffer size %llu", i,
                         (unsigned long long)o[i], (unsigned long long)l[i], (unsigned long long)size);
            PyMem_Free(own);
            goto fail_out;
        }
    }
    uint64_t *h = out.buf;
    const char *base = buf.buf;
    if (n > 0) {
        HM_MAYBE_WITHOUT_GIL(hm_total_len(l, n) > HM_GIL_KEEP_BYTES, for (Py_ssize_t i = 0; i < n; i++) {
            h[i] = fn(base + o[i], (size_t)l[i]);
        });
    }
    PyMem_Free(own);
    PyBuffer_Release(&out);
    PyBuffer_Release(&len);
    PyBuffer_Release(&off);
    PyBuffer_Release(&buf);
    Py_RETURN_NONE;
fail_out:
    PyBuffer_Release(&out);
fail_len:
    PyBuffer_Release(&len);
fail_off:
    PyBuffer_Release(&off);
fail_buf:
    PyBuffer_Release(&buf);
    return NULL;
}
