/* _core.FpTable (see hm_fptable.h).
 *
 * Locking rule: nobody waits for the GIL while holding the table's rwlock, and nobody waits for
 * the rwlock while holding the GIL (a thread holding the GIL only *tries* the lock), so the two
 * locks cannot deadlock and a long batch elsewhere never stalls Python. Inputs are borrowed and
 * validated (lengths, dtypes, key != 0) with the GIL held. A batch of at most HM_GIL_KEEP_KEYS
 * keys whose lock is free at once then runs with the GIL held (microseconds, where giving the GIL
 * away would cost the caller a switch interval to get it back), a put up to its first key that
 * needs a growth (a segment's doubling or split: not with the GIL). Any other batch, and the rest
 * of such a put, releases the GIL once for its whole work.
 */
#include "hm_fptable.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "hm_segtable.h"

typedef struct {
    PyObject_HEAD
    hm_segtable table;
    unsigned value_words;
    pthread_rwlock_t lock;
    int lock_ready;
    /* Published under the write lock at the end of every writing call, read without any lock:
     * len() and nbytes never wait for a long batch while holding the GIL. */
    _Atomic size_t pub_count, pub_capacity, pub_nbytes;
} FpTable;

/* Needs the write lock. */
static void publish(FpTable *self) {
    atomic_store_explicit(&self->pub_count, self->table.count, memory_order_release);
    atomic_store_explicit(&self->pub_capacity, self->table.slots, memory_order_release);
    atomic_store_explicit(&self->pub_nbytes, hm_segtable_nbytes(&self->table), memory_order_release);
}

static int try_lock(FpTable *self, int writer) {
    return writer ? pthread_rwlock_trywrlock(&self->lock) : pthread_rwlock_tryrdlock(&self->lock);
}

static void lock(FpTable *self, int writer) {
    if (writer)
        pthread_rwlock_wrlock(&self->lock);
    else
        pthread_rwlock_rdlock(&self->lock);
}

/* Runs the statements `...` under the table's lock (a writer's when `writer`), with the GIL held
 * when the batch is short and the lock free at once, released otherwise (locking rule above). */
#define TABLE_BATCH(self, n, writer, ...)                                   \
    do {                                                                    \
        if ((n) <= HM_GIL_KEEP_KEYS && try_lock((self), (writer)) == 0) {   \
            __VA_ARGS__;                                                    \
            pthread_rwlock_unlock(&(self)->lock);                           \
        } else {                                                            \
            Py_BEGIN_ALLOW_THREADS                                          \
            lock((self), (writer));                                         \
            __VA_ARGS__;                                                    \
            pthread_rwlock_unlock(&(self)->lock);                           \
            Py_END_ALLOW_THREADS                                            \
        }                                                                   \
    } while (0)

/* Lookups of a batch overlap their cache misses: the probe of key i + PREFETCH_AHEAD is
 * prefetched while key i is looked up (at 10M entries each probe is a miss of its own). */
#define PREFETCH_AHEAD 16

static inline void prefetch_first(const hm_segtable *t, const uint64_t *k, Py_ssize_t n) {
    for (Py_ssize_t i = 0; i < n && i < PREFETCH_AHEAD; i++)
        hm_segtable_prefetch(t, k[i]);
}

static inline void prefetch_next(const hm_segtable *t, const uint64_t *k, Py_ssize_t i, Py_ssize_t n) {
    if (i + PREFETCH_AHEAD < n)
        hm_segtable_prefetch(t, k[i + PREFETCH_AHEAD]);
}

static int check_keys(const uint64_t *fps, Py_ssize_t n) {
    for (Py_ssize_t i = 0; i < n; i++) {
        if (fps[i] == 0) {
            PyErr_Format(PyExc_ValueError, "fps[%zd] is 0 (0 marks an empty slot; fingerprints are never 0)",
                         i);
            return -1;
        }
    }
    return 0;
}

/* Borrows fps (u64[n], no zero) into *view. */
static int get_fps(PyObject *obj, Py_buffer *view, Py_ssize_t *n) {
    if (hm_get_u64(obj, "fps", 0, view, n) < 0)
        return -1;
    if (check_keys(view->buf, *n) < 0) {
        PyBuffer_Release(view);
        return -1;
    }
    return 0;
}

static int wrong_nargs(Py_ssize_t nargs, Py_ssize_t want, const char *sig) {
    if (nargs == want)
        return 0;
    PyErr_Format(PyExc_TypeError, "FpTable.%s", sig);
    return -1;
}

static PyObject *FpTable_new(PyTypeObject *type, PyObject *args, PyObject *kwds) {
    static char *kwlist[] = {"value_words", "capacity", "segment_slots", NULL};
    int value_words = 1;
    Py_ssize_t capacity = 1024, segment_slots = HM_SEGTABLE_DEFAULT_SEGMENT_SLOTS;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "|inn:FpTable", kwlist, &value_words, &capacity,
                                     &segment_slots))
        return NULL;
    if (value_words < 1 || value_words > (int)HM_TABLE_MAX_VALUE_WORDS) {
        PyErr_Format(PyExc_ValueError, "value_words must be in 1..%u, got %d", HM_TABLE_MAX_VALUE_WORDS,
                     value_words);
        return NULL;
    }
    if (capacity < 1) {
        PyErr_Format(PyExc_ValueError, "capacity must be >= 1, got %zd", capacity);
        return NULL;
    }
    if (segment_slots < (Py_ssize_t)HM_TABLE_MIN_CAPACITY) {
        PyErr_Format(PyExc_ValueError, "segment_slots must be >= %u, got %zd", HM_TABLE_MIN_CAPACITY,
                     segment_slots);
        return NULL;
    }
    size_t cap = hm_table_round_capacity((size_t)capacity, (unsigned)value_words);
    size_t seg = hm_segtable_round_segment_slots((size_t)segment_slots, (unsigned)value_words);
    if (cap == 0 || seg == 0 || (cap > seg && cap / seg > ((size_t)1 << HM_SEGTABLE_MAX_DEPTH))) {
        PyErr_Format(PyExc_ValueError, "capacity %zd / segment_slots %zd is too large", capacity,
                     segment_slots);
        return NULL;
    }
    FpTable *self = (FpTable *)type->tp_alloc(type, 0);
    if (!self)
        return NULL;
    self->value_words = (unsigned)value_words;
    if (pthread_rwlock_init(&self->lock, NULL) != 0) {
        Py_DECREF(self);
        PyErr_SetString(PyExc_OSError, "pthread_rwlock_init failed");
        return NULL;
    }
    self->lock_ready = 1;
    if (hm_segtable_init(&self->table, self->value_words, cap, seg) < 0) {
        Py_DECREF(self);
        return PyErr_NoMemory();
    }
    publish(self);
    return (PyObject *)self;
}

static void FpTable_dealloc(FpTable *self) {
    /* No call can be in flight: every call holds a reference to self. */
    hm_segtable_free(&self->table);
    if (self->lock_ready)
        pthread_rwlock_destroy(&self->lock);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* Needs the write lock: upserts the keys from *at on, growing the table only when `may_grow`.
 * Returns 0 when every key is stored, -1 when a growth failed to allocate, or
 * HM_SEGTABLE_NEEDS_GROWTH when one is needed and not allowed; *at is then the first key not
 * stored. */
static int put_locked(FpTable *self, const uint64_t *k, const uint64_t *v, Py_ssize_t n,
                      unsigned char *present, int may_grow, Py_ssize_t *at) {
    for (Py_ssize_t i = *at; i < n; i++) {
        int r = hm_segtable_put(&self->table, k[i], v + i * self->value_words, may_grow);
        if (r < 0 || r == HM_SEGTABLE_NEEDS_GROWTH) {
            *at = i;
            return r;
        }
        present[i] = (unsigned char)r;
    }
    *at = n;
    return 0;
}

/* put(fps: u64[n], values: u64[n*w], out_present: bool[n]) -> None. On a failed growth the keys
 * before the failing one are stored and MemoryError says how many. */
static PyObject *FpTable_put(FpTable *self, PyObject *const *args, Py_ssize_t nargs) {
    if (wrong_nargs(nargs, 3, "put(fps, values, out_present)") < 0)
        return NULL;
    Py_buffer fps, vals, out;
    Py_ssize_t n, nv;
    if (get_fps(args[0], &fps, &n) < 0)
        return NULL;
    if (hm_get_u64(args[1], "values", 0, &vals, &nv) < 0)
        goto fail_fps;
    if (nv != n * (Py_ssize_t)self->value_words) {
        PyErr_Format(PyExc_ValueError, "values has %zd words, expected %zd keys x %u value words", nv, n,
                     self->value_words);
        goto fail_vals;
    }
    if (hm_get_bool_out(args[2], "out_present", n, &out) < 0)
        goto fail_vals;
    const uint64_t *k = fps.buf, *v = vals.buf;
    unsigned char *present = out.buf;
    Py_ssize_t done = 0;
    if (n > 0) {
        /* A short batch tries with the GIL held and without growth (a split moves up to a
         * segment's entries: not with the GIL); what is left, if anything, runs without it. */
        int r = HM_SEGTABLE_NEEDS_GROWTH;
        if (n <= HM_GIL_KEEP_KEYS && try_lock(self, 1) == 0) {
            r = put_locked(self, k, v, n, present, 0, &done);
            publish(self);
            pthread_rwlock_unlock(&self->lock);
        }
        if (r == HM_SEGTABLE_NEEDS_GROWTH) {
            Py_BEGIN_ALLOW_THREADS
            lock(self, 1);
            put_locked(self, k, v, n, present, 1, &done);
            publish(self);
            pthread_rwlock_unlock(&self->lock);
            Py_END_ALLOW_THREADS
        }
    }
    PyBuffer_Release(&out);
    PyBuffer_Release(&vals);
    PyBuffer_Release(&fps);
    if (done < n) {
        PyErr_Format(PyExc_MemoryError, "FpTable.put: growing the table failed after %zd of %zd keys (those are stored)",
                     done, n);
        return NULL;
    }
    Py_RETURN_NONE;
fail_vals:
    PyBuffer_Release(&vals);
fail_fps:
    PyBuffer_Release(&fps);
    return NULL;
}

/* get(fps, out_found: bool[n], out_values: u64[n*w]) -> None; absent rows get zeros. */
static PyObject *FpTable_get(FpTable *self, PyObject *const *args, Py_ssize_t nargs) {
    if (wrong_nargs(nargs, 3, "get(fps, out_found, out_values)") < 0)
        return NULL;
    Py_buffer fps, found, vals;
    Py_ssize_t n, nv;
    if (get_fps(args[0], &fps, &n) < 0)
        return NULL;
    if (hm_get_bool_out(args[1], "out_found", n, &found) < 0)
        goto fail_fps;
    if (hm_get_u64(args[2], "out_values", 1, &vals, &nv) < 0)
        goto fail_found;
    unsigned w = self->value_words;
    if (nv != n * (Py_ssize_t)w) {
        PyErr_Format(PyExc_ValueError, "out_values has %zd words, expected %zd keys x %u value words", nv,
                     n, w);
        PyBuffer_Release(&vals);
        goto fail_found;
    }
    const uint64_t *k = fps.buf;
    unsigned char *f = found.buf;
    uint64_t *v = vals.buf;
    if (n > 0) {
        TABLE_BATCH(self, n, 0, prefetch_first(&self->table, k, n); for (Py_ssize_t i = 0; i < n; i++) {
            prefetch_next(&self->table, k, i, n);
            const uint64_t *s = hm_segtable_find(&self->table, k[i]);
            f[i] = s != NULL;
            if (s)
                memcpy(v + i * w, s, w * sizeof(uint64_t));
            else
                memset(v + i * w, 0, w * sizeof(uint64_t));
        });
    }
    PyBuffer_Release(&vals);
    PyBuffer_Release(&found);
    PyBuffer_Release(&fps);
    Py_RETURN_NONE;
fail_found:
    PyBuffer_Release(&found);
fail_fps:
    PyBuffer_Release(&fps);
    return NULL;
}

/* contains(fps, out: bool[n]) -> None. */
static PyObject *FpTable_contains(FpTable *self, PyObject *const *args, Py_ssize_t nargs) {
    if (wrong_nargs(nargs, 2, "contains(fps, out)") < 0)
        return NULL;
    Py_buffer fps, out;
    Py_ssize_t n;
    if (get_fps(args[0], &fps, &n) < 0)
        return NULL;
    if (hm_get_bool_out(args[1], "out", n, &out) < 0) {
        PyBuffer_Release(&fps);
        return NULL;
    }
    const uint64_t *k = fps.buf;
    unsigned char *f = out.buf;
    if (n > 0) {
        TABLE_BATCH(self, n, 0, prefetch_first(&self->table, k, n); for (Py_ssize_t i = 0; i < n; i++) {
            prefetch_next(&self->table, k, i, n);
            f[i] = hm_segtable_find(&self->table, k[i]) != NULL;
        });
    }
    PyBuffer_Release(&out);
    PyBuffer_Release(&fps);
    Py_RETURN_NONE;
}

/* prefix_len(fps) -> int: the count of leading present keys. */
static PyObject *FpTable_prefix_len(FpTable *self, PyObject *arg) {
    Py_buffer fps;
    Py_ssize_t n, i = 0;
    if (get_fps(arg, &fps, &n) < 0)
        return NULL;
    const uint64_t *k = fps.buf;
    if (n > 0) {
        TABLE_BATCH(self, n, 0, prefetch_first(&self->table, k, n);
                    while (i < n && hm_segtable_find(&self->table, k[i]) != NULL) prefetch_next(&self->table, k, i++, n));
    }
    PyBuffer_Release(&fps);
    return PyLong_FromSsize_t(i);
}

/* remove(fps, out_removed) and remove_if(fps, expected_word0, out_removed). */
static PyObject *remove_batch(FpTable *self, PyObject *fps_obj, PyObject *expected_obj, PyObject *out_obj) {
    Py_buffer fps, exp, out;
    Py_ssize_t n, ne = 0;
    if (get_fps(fps_obj, &fps, &n) < 0)
        return NULL;
    if (expected_obj) {
        if (hm_get_u64(expected_obj, "expected_word0", 0, &exp, &ne) < 0)
            goto fail_fps;
        if (hm_check_len("expected_word0", ne, "fps", n) < 0)
            goto fail_exp;
    }
    if (hm_get_bool_out(out_obj, "out_removed", n, &out) < 0)
        goto fail_exp;
    const uint64_t *k = fps.buf, *e = expected_obj ? exp.buf : NULL;
    unsigned char *r = out.buf;
    if (n > 0) {
        TABLE_BATCH(self, n, 1, {
            for (Py_ssize_t i = 0; i < n; i++)
                r[i] = (unsigned char)hm_segtable_remove(&self->table, k[i], e ? e + i : NULL);
            publish(self);
        });
    }
    PyBuffer_Release(&out);
    if (expected_obj)
        PyBuffer_Release(&exp);
    PyBuffer_Release(&fps);
    Py_RETURN_NONE;
fail_exp:
    if (expected_obj)
        PyBuffer_Release(&exp);
fail_fps:
    PyBuffer_Release(&fps);
    return NULL;
}

static PyObject *FpTable_remove(FpTable *self, PyObject *const *args, Py_ssize_t nargs) {
    if (wrong_nargs(nargs, 2, "remove(fps, out_removed)") < 0)
        return NULL;
    return remove_batch(self, args[0], NULL, args[1]);
}

static PyObject *FpTable_remove_if(FpTable *self, PyObject *const *args, Py_ssize_t nargs) {
    if (wrong_nargs(nargs, 3, "remove_if(fps, expected_word0, out_removed)") < 0)
        return NULL;
    return remove_batch(self, args[0], args[1], args[2]);
}

/* items() -> (bytearray of u64[m] keys, bytearray of u64[m*w] values), a snapshot in slot order. */
static PyObject *FpTable_items(FpTable *self, PyObject *unused) {
    (void)unused;
    uint64_t *keys = NULL, *vals = NULL;
    size_t m = 0;
    unsigned w = self->value_words;
    int oom = 0;
    Py_BEGIN_ALLOW_THREADS
    pthread_rwlock_rdlock(&self->lock);
    m = self->table.count;
    keys = malloc((m ? m : 1) * sizeof(uint64_t));
    vals = malloc((m ? m : 1) * w * sizeof(uint64_t));
    if (keys && vals) {
        m = hm_segtable_copy_out(&self->table, keys, vals, m);
    } else {
        oom = 1;
    }
    pthread_rwlock_unlock(&self->lock);
    Py_END_ALLOW_THREADS
    PyObject *result = NULL;
    if (!oom) {
        PyObject *k = PyByteArray_FromStringAndSize((const char *)keys, (Py_ssize_t)(m * sizeof(uint64_t)));
        PyObject *v = k ? PyByteArray_FromStringAndSize((const char *)vals, (Py_ssize_t)(m * w * sizeof(uint64_t)))
                        : NULL;
        if (k && v)
            result = PyTuple_Pack(2, k, v);
        Py_XDECREF(k);
        Py_XDECREF(v);
    } else {
        PyErr_NoMemory();
    }
    free(keys);
    free(vals);
    return result;
}

static PyObject *FpTable_clear(FpTable *self, PyObject *unused) {
    (void)unused;
    Py_BEGIN_ALLOW_THREADS
    pthread_rwlock_wrlock(&self->lock);
    hm_segtable_clear(&self->table);
    publish(self);
    pthread_rwlock_unlock(&self->lock);
    Py_END_ALLOW_THREADS
    Py_RETURN_NONE;
}

static Py_ssize_t FpTable_len(FpTable *self) {
    return (Py_ssize_t)atomic_load_explicit(&self->pub_count, memory_order_acquire);
}

static PyObject *FpTable_get_nbytes(FpTable *self, void *closure) {
    (void)closure;
    return PyLong_FromSize_t(atomic_load_explicit(&self->pub_nbytes, memory_order_acquire));
}

static PyObject *FpTable_get_capacity(FpTable *self, void *closure) {
    (void)closure;
    return PyLong_FromSize_t(atomic_load_explicit(&self->pub_capacity, memory_order_acquire));
}

static PyObject *FpTable_get_value_words(FpTable *self, void *closure) {
    (void)closure;
    return PyLong_FromUnsignedLong(self->value_words);
}

static PyMethodDef FpTable_methods[] = {
    {"put", HM_FASTCALL(FpTable_put), METH_FASTCALL, "put(fps, values, out_present)"},
    {"get", HM_FASTCALL(FpTable_get), METH_FASTCALL, "get(fps, out_found, out_values)"},
    {"contains", HM_FASTCALL(FpTable_contains), METH_FASTCALL, "contains(fps, out)"},
    {"prefix_len", (PyCFunction)FpTable_prefix_len, METH_O, "prefix_len(fps) -> int"},
    {"remove", HM_FASTCALL(FpTable_remove), METH_FASTCALL, "remove(fps, out_removed)"},
    {"remove_if", HM_FASTCALL(FpTable_remove_if), METH_FASTCALL,
     "remove_if(fps, expected_word0, out_removed)"},
    {"items", (PyCFunction)FpTable_items, METH_NOARGS, "items() -> (bytearray keys, bytearray values)"},
    {"clear", (PyCFunction)FpTable_clear, METH_NOARGS, "clear()"},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef FpTable_getset[] = {
    {"nbytes", (getter)FpTable_get_nbytes, NULL, "bytes the slot arrays, the directory and the segment headers take", NULL},
    {"capacity", (getter)FpTable_get_capacity, NULL, "slots of every segment together", NULL},
    {"value_words", (getter)FpTable_get_value_words, NULL, "uint64 words per value", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PySequenceMethods FpTable_as_sequence = {
    .sq_length = (lenfunc)FpTable_len,
};

PyTypeObject hm_FpTableType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "hicache_mooncake.native._core.FpTable",
    .tp_basicsize = sizeof(FpTable),
    .tp_dealloc = (destructor)FpTable_dealloc,
    .tp_as_sequence = &FpTable_as_sequence,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Open-addressing table of uint64 fingerprints -> 1..4 uint64 words (internal rwlock).",
    .tp_methods = FpTable_methods,
    .tp_getset = FpTable_getset,
    .tp_new = FpTable_new,
};
