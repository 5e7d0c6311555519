/* SlabAllocator: the DRAM tier's size-class slab allocation of arena offsets (bookkeeping only).
 *
 * The arena is cut into equal slabs; a slab serves at most one size class (a slot size, a
 * multiple of 4 KiB) at a time and goes back to the shared pool when its last slot is freed.
 * Semantics (held to the Python reference model tests/unit/slab_allocator_reference.py by
 * tests/unit/test_slab_allocator.py, state for state):
 * - a class's slabs with free slots form a list in the order they got free slots; a slot is taken
 *   from the first of them, from the top of its stack of free slots; a freed slot is pushed;
 * - a slab is carved from the top of the free-slab stack with its slots stacked so that the
 *   lowest comes out first; an emptied slab is pushed back on that stack;
 * - slabs at or past the limit (set_slab_limit) are retired: no slot is handed out in them; their
 *   slots in use stay valid until freed, and a retired slab whose last slot is freed is listed as
 *   released (its memory may be given back). Raising the limit makes them usable again.
 * Every offset and size from the caller is checked before anything changes: a slot freed twice,
 * an offset of another class or between slots, a batch that frees a slot twice: ValueError, the
 * allocator unchanged. Memory: per slab in use 4 bytes per slot (its free stack) plus a bit per
 * slot (its slots in use); nothing per free slab. Every call holds the GIL (no Python code runs
 * inside); not thread-safe beyond that (the tier's lock serialises its callers).
 */
#include "hm_slabs.h"

#include <stdlib.h>
#include <string.h>

#define SA_ALIGN 4096u
#define SA_NIL UINT32_MAX
#define SA_MAX_SLABS (UINT32_MAX - 1u)

typedef struct {
    uint32_t cls;        /* class number + 1; 0: no class (in the free pool, released, never used) */
    uint32_t used;       /* slots in use (> 0 exactly while the slab has a class) */
    uint32_t nfree;      /* slots on the free stack */
    uint32_t prev, next; /* links in its class's list of slabs with free slots */
    uint8_t listed;      /* in that list */
    uint64_t carved;     /* when it got its class: the order Python's used_by_slab dict keeps */
    uint32_t *stack;     /* free slot numbers, top at nfree - 1 (NULL while no class) */
    uint64_t *bits;      /* slots in use (NULL while no class) */
} SASlab;

typedef struct {
    uint64_t slot_size;
    uint32_t per_slab;
    uint32_t head, tail; /* slabs below the limit with free slots, oldest first */
    uint32_t slabs;      /* slabs holding slots of this class */
} SAClass;

typedef struct {
    PyObject_HEAD
    uint64_t slab_size;
    uint32_t slab_count; /* the limit: slabs [0, slab_count) are usable */
    uint32_t max_slabs;
    SASlab *slabs;       /* max_slabs */
    uint32_t *pool;      /* free slabs, a stack (top at npool - 1) */
    uint32_t npool;
    uint32_t *released;  /* retired slabs that became empty, in that order (room for max_slabs) */
    uint32_t nreleased;
    SAClass *classes;    /* in the order they were first asked for */
    uint32_t nclasses, classes_cap;
    uint32_t last_class; /* the class found last (a workload has one or a few page sizes) */
    uint64_t used_bytes;
    uint64_t carve_seq;
} SlabAllocator;

/* ------------------------------------------------------------------ helpers */

/* The slot size of an object of nbytes (a multiple of 4 KiB, at least 4 KiB); UINT64_MAX when
 * it cannot be represented (read as larger than any slab). */
static uint64_t sa_slot_size(uint64_t nbytes) {
    if (nbytes > UINT64_MAX - SA_ALIGN)
        return UINT64_MAX;
    uint64_t size = (nbytes + SA_ALIGN - 1) / SA_ALIGN * SA_ALIGN;
    return size < SA_ALIGN ? SA_ALIGN : size;
}

/* An object size: a non-negative int. One of 2**63 bytes or more reads as UINT64_MAX (larger than
 * any slab: it never fits, as a request for more than the node could ever grant must not). */
static int sa_parse_nbytes(PyObject *obj, uint64_t *out) {
    if (!PyLong_Check(obj)) {
        PyErr_Format(PyExc_TypeError, "nbytes must be an int, got %.80s", Py_TYPE(obj)->tp_name);
        return -1;
    }
    int overflow;
    long long v = PyLong_AsLongLongAndOverflow(obj, &overflow);
    if (v == -1 && PyErr_Occurred())
        return -1;
    if (overflow > 0) {
        *out = UINT64_MAX;
        return 0;
    }
    if (overflow < 0 || v < 0) {
        PyErr_Format(PyExc_ValueError, "nbytes must be >= 0, got %R", obj);
        return -1;
    }
    *out = (uint64_t)v;
    return 0;
}

/* The class of slot size `size` (<= slab_size), made when `create`; -1 when there is none (or
 * MemoryError set when making one failed: check PyErr_Occurred). */
static int64_t sa_class(SlabAllocator *a, uint64_t size, int create) {
    if (a->last_class < a->nclasses && a->classes[a->last_class].slot_size == size)
        return a->last_class;
    for (uint32_t ci = 0; ci < a->nclasses; ci++) /* classes are few: one per page size in use */
        if (a->classes[ci].slot_size == size) {
            a->last_class = ci;
            return ci;
        }
    if (!create)
        return -1;
    if (a->nclasses == a->classes_cap) {
        uint32_t cap = a->classes_cap ? a->classes_cap * 2 : 4;
        SAClass *grown = PyMem_Realloc(a->classes, (size_t)cap * sizeof(SAClass));
        if (!grown) {
            PyErr_NoMemory();
            return -1;
        }
        a->classes = grown;
        a->classes_cap = cap;
    }
    SAClass *c = &a->classes[a->nclasses];
    c->slot_size = size;
    c->per_slab = (uint32_t)(a->slab_size / size);
    c->head = c->tail = SA_NIL;
    c->slabs = 0;
    a->last_class = a->nclasses++;
    return a->last_class;
}

static void sa_list_append(SlabAllocator *a, SAClass *c, uint32_t s) {
    SASlab *slab = &a->slabs[s];
    slab->prev = c->tail;
    slab->next = SA_NIL;
    if (c->tail == SA_NIL)
        c->head = s;
    else
        a->slabs[c->tail].next = s;
    c->tail = s;
    slab->listed = 1;
}

static void sa_list_remove(SlabAllocator *a, SAClass *c, uint32_t s) {
    SASlab *slab = &a->slabs[s];
    if (slab->prev == SA_NIL)
        c->head = slab->next;
    else
        a->slabs[slab->prev].next = slab->next;
    if (slab->next == SA_NIL)
        c->tail = slab->prev;
    else
        a->slabs[slab->next].prev = slab->prev;
    slab->prev = slab->next = SA_NIL;
    slab->listed = 0;
}

static void sa_drop_class(SASlab *slab) {
    PyMem_Free(slab->stack);
    PyMem_Free(slab->bits);
    slab->stack = NULL;
    slab->bits = NULL;
    slab->cls = 0;
    slab->used = slab->nfree = 0;
}

/* Gives slab s (off the pool) to class number ci with every slot free: 0, or -1 (MemoryError). */
static int sa_carve(SlabAllocator *a, uint32_t ci, uint32_t s) {
    SAClass *c = &a->classes[ci];
    SASlab *slab = &a->slabs[s];
    size_t words = ((size_t)c->per_slab + 63) / 64;
    slab->stack = PyMem_Malloc((size_t)c->per_slab * sizeof(uint32_t));
    slab->bits = PyMem_Calloc(words, sizeof(uint64_t));
    if (!slab->stack || !slab->bits) {
        sa_drop_class(slab);
        PyErr_NoMemory();
        return -1;
    }
    for (uint32_t i = 0; i < c->per_slab; i++)
        slab->stack[i] = c->per_slab - 1 - i; /* the lowest slot on top */
    slab->nfree = c->per_slab;
    slab->used = 0;
    slab->cls = ci + 1;
    slab->carved = a->carve_seq++;
    c->slabs++;
    sa_list_append(a, c, s);
    return 0;
}

/* Up to `count` slots of class ci written to out (offsets), as `count` single allocations
 * would hand them out; returns how many (fewer when the arena runs out). *nomem: set when a slab
 * could not be carved (MemoryError set; the slots taken so far are taken and counted). */
static Py_ssize_t sa_take(SlabAllocator *a, uint32_t ci, Py_ssize_t count, uint64_t *out, int *nomem) {
    SAClass *c = &a->classes[ci];
    Py_ssize_t got = 0;
    *nomem = 0;
    while (got < count) {
        if (c->head == SA_NIL) {
            if (!a->npool)
                break;
            if (sa_carve(a, ci, a->pool[a->npool - 1]) < 0) {
                *nomem = 1;
                break;
            }
            a->npool--;
        }
        uint32_t s = c->head;
        SASlab *slab = &a->slabs[s];
        uint64_t base = (uint64_t)s * a->slab_size;
        while (got < count && slab->nfree) {
            uint32_t slot = slab->stack[--slab->nfree];
            slab->bits[slot / 64] |= 1ull << (slot % 64);
            slab->used++;
            out[got++] = base + (uint64_t)slot * c->slot_size;
        }
        if (!slab->nfree)
            sa_list_remove(a, c, s);
    }
    a->used_bytes += c->slot_size * (uint64_t)got;
    return got;
}

/* Checks that `offset` is a slot in use of class ci: 0 with its slab and slot number, or -1 with
 * ValueError naming what is wrong. */
static int sa_locate(SlabAllocator *a, uint32_t ci, uint64_t offset, uint32_t *s_out, uint32_t *slot_out) {
    const SAClass *c = &a->classes[ci];
    uint64_t s = offset / a->slab_size;
    if (s >= a->max_slabs) {
        PyErr_Format(PyExc_ValueError, "offset %llu is outside the arena (%llu bytes)", (unsigned long long)offset,
                     (unsigned long long)a->max_slabs * a->slab_size);
        return -1;
    }
    const SASlab *slab = &a->slabs[s];
    if (slab->cls != ci + 1) {
        PyErr_Format(PyExc_ValueError, "offset %llu: slab %llu holds no slots of %llu bytes",
                     (unsigned long long)offset, (unsigned long long)s, (unsigned long long)c->slot_size);
        return -1;
    }
    uint64_t within = offset - s * a->slab_size;
    if (within % c->slot_size || within / c->slot_size >= c->per_slab) {
        PyErr_Format(PyExc_ValueError, "offset %llu is not the start of a slot of %llu bytes",
                     (unsigned long long)offset, (unsigned long long)c->slot_size);
        return -1;
    }
    uint32_t slot = (uint32_t)(within / c->slot_size);
    if (!(slab->bits[slot / 64] & (1ull << (slot % 64)))) {
        PyErr_Format(PyExc_ValueError, "offset %llu: the slot is not in use (freed twice?)", (unsigned long long)offset);
        return -1;
    }
    *s_out = (uint32_t)s;
    *slot_out = slot;
    return 0;
}

/* Frees slot `slot` of slab s (class ci), its use bit already cleared. */
static void sa_release_slot(SlabAllocator *a, uint32_t ci, uint32_t s, uint32_t slot) {
    SAClass *c = &a->classes[ci];
    SASlab *slab = &a->slabs[s];
    int retired = s >= a->slab_count;
    a->used_bytes -= c->slot_size;
    if (--slab->used == 0) {
        if (slab->listed)
            sa_list_remove(a, c, s);
        sa_drop_class(slab);
        c->slabs--;
        if (retired)
            a->released[a->nreleased++] = s; /* a slab is listed at most once: room for all */
        else
            a->pool[a->npool++] = s;
        return;
    }
    slab->stack[slab->nfree++] = slot;
    if (!retired && !slab->listed)
        sa_list_append(a, c, s);
}

/* Gives back slots just taken (offsets of class ci) when the call that took them fails. */
static void sa_give_back(SlabAllocator *a, uint32_t ci, const uint64_t *offsets, Py_ssize_t n) {
    for (Py_ssize_t i = 0; i < n; i++) {
        uint32_t s = (uint32_t)(offsets[i] / a->slab_size);
        uint32_t slot = (uint32_t)((offsets[i] - (uint64_t)s * a->slab_size) / a->classes[ci].slot_size);
        a->slabs[s].bits[slot / 64] &= ~(1ull << (slot % 64));
        sa_release_slot(a, ci, s, slot);
    }
}

static PyObject *sa_u32_list(const uint32_t *v, uint32_t n) {
    PyObject *out = PyList_New(n);
    if (!out)
        return NULL;
    for (uint32_t i = 0; i < n; i++) {
        PyObject *x = PyLong_FromUnsignedLong(v[i]);
        if (!x) {
            Py_DECREF(out);
            return NULL;
        }
        PyList_SET_ITEM(out, i, x);
    }
    return out;
}

static PyObject *sa_offsets_list(const uint64_t *v, Py_ssize_t n) {
    PyObject *out = PyList_New(n);
    if (!out)
        return NULL;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *x = PyLong_FromUnsignedLongLong(v[i]);
        if (!x) {
            Py_DECREF(out);
            return NULL;
        }
        PyList_SET_ITEM(out, i, x);
    }
    return out;
}

static void sa_free_all(SlabAllocator *a) {
    if (a->slabs)
        for (uint32_t s = 0; s < a->max_slabs; s++)
            sa_drop_class(&a->slabs[s]);
}

/* ------------------------------------------------------------------ the type */

static void SlabAllocator_dealloc(SlabAllocator *a) {
    sa_free_all(a);
    PyMem_Free(a->slabs);
    PyMem_Free(a->pool);
    PyMem_Free(a->released);
    PyMem_Free(a->classes);
    Py_TYPE(a)->tp_free((PyObject *)a);
}

static void sa_fill_pool(SlabAllocator *a) {
    a->npool = a->slab_count;
    for (uint32_t i = 0; i < a->slab_count; i++)
        a->pool[i] = a->slab_count - 1 - i; /* slab 0 on top */
}

static PyObject *SlabAllocator_new(PyTypeObject *type, PyObject *args, PyObject *kwds) {
    static char *kwlist[] = {"capacity", "slab_size", "max_capacity", NULL};
    PyObject *capacity_obj, *slab_obj, *max_obj = Py_None;
    uint64_t capacity_v, slab_v;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OO|O:SlabAllocator", kwlist, &capacity_obj, &slab_obj, &max_obj) ||
        hm_parse_u64(capacity_obj, "capacity", &capacity_v) < 0 || hm_parse_u64(slab_obj, "slab_size", &slab_v) < 0)
        return NULL;
    unsigned long long capacity = capacity_v, slab_size = slab_v;
    if (slab_size == 0 || slab_size % SA_ALIGN) {
        PyErr_Format(PyExc_ValueError, "slab_size must be a positive multiple of %u, got %llu", SA_ALIGN, slab_size);
        return NULL;
    }
    unsigned long long count = capacity / slab_size, max_capacity = 0;
    if (count == 0) {
        PyErr_Format(PyExc_ValueError, "capacity %llu holds no slab of %llu bytes", capacity, slab_size);
        return NULL;
    }
    if (max_obj != Py_None) {
        uint64_t v;
        if (hm_parse_u64(max_obj, "max_capacity", &v) < 0)
            return NULL;
        max_capacity = v;
    }
    unsigned long long max_slabs = max_capacity / slab_size > count ? max_capacity / slab_size : count;
    if (max_slabs > SA_MAX_SLABS || max_slabs > UINT64_MAX / slab_size) {
        PyErr_Format(PyExc_ValueError, "%llu slabs of %llu bytes are more than one allocator keeps", max_slabs,
                     slab_size);
        return NULL;
    }
    SlabAllocator *a = (SlabAllocator *)type->tp_alloc(type, 0);
    if (!a)
        return NULL;
    a->slab_size = slab_size;
    a->slab_count = (uint32_t)count;
    a->max_slabs = (uint32_t)max_slabs;
    a->slabs = PyMem_Calloc(max_slabs, sizeof(SASlab));
    a->pool = PyMem_Malloc(max_slabs * sizeof(uint32_t));
    a->released = PyMem_Malloc(max_slabs * sizeof(uint32_t));
    if (!a->slabs || !a->pool || !a->released) {
        Py_DECREF(a);
        return PyErr_NoMemory();
    }
    for (uint32_t s = 0; s < a->max_slabs; s++)
        a->slabs[s].prev = a->slabs[s].next = SA_NIL;
    sa_fill_pool(a);
    return (PyObject *)a;
}

/* fits(nbytes) -> whether a slot of nbytes' class fits in a slab */
static PyObject *SlabAllocator_fits(SlabAllocator *a, PyObject *arg) {
    uint64_t nbytes;
    if (sa_parse_nbytes(arg, &nbytes) < 0)
        return NULL;
    return PyBool_FromLong(sa_slot_size(nbytes) <= a->slab_size);
}

/* alloc_many(nbytes, count) -> up to count offsets (fewer when the arena runs out) */
static PyObject *SlabAllocator_alloc_many(SlabAllocator *a, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "alloc_many(nbytes, count) takes 2 arguments");
        return NULL;
    }
    uint64_t nbytes;
    if (sa_parse_nbytes(args[0], &nbytes) < 0)
        return NULL;
    Py_ssize_t count = PyLong_AsSsize_t(args[1]);
    if (count == -1 && PyErr_Occurred())
        return NULL;
    uint64_t size = sa_slot_size(nbytes);
    if (size > a->slab_size || count <= 0)
        return PyList_New(0);
    int64_t ci = sa_class(a, size, 1);
    if (ci < 0)
        return NULL;
    uint64_t room = (uint64_t)a->npool * (a->slab_size / size);
    for (uint32_t s = a->classes[ci].head; s != SA_NIL; s = a->slabs[s].next)
        room += a->slabs[s].nfree;
    if ((uint64_t)count > room)
        count = (Py_ssize_t)room;
    uint64_t *out = PyMem_Malloc((size_t)(count ? count : 1) * sizeof(uint64_t));
    if (!out)
        return PyErr_NoMemory();
    int nomem;
    Py_ssize_t got = sa_take(a, (uint32_t)ci, count, out, &nomem);
    PyObject *res = nomem ? NULL : sa_offsets_list(out, got);
    if (!res)
        sa_give_back(a, (uint32_t)ci, out, got);
    PyMem_Free(out);
    return res;
}

/* alloc(nbytes) -> an offset, or None when no slot of its class is free (or it is too large) */
static PyObject *SlabAllocator_alloc(SlabAllocator *a, PyObject *arg) {
    uint64_t nbytes;
    if (sa_parse_nbytes(arg, &nbytes) < 0)
        return NULL;
    uint64_t size = sa_slot_size(nbytes);
    if (size > a->slab_size)
        Py_RETURN_NONE;
    int64_t ci = sa_class(a, size, 1);
    if (ci < 0)
        return NULL;
    uint64_t offset;
    int nomem;
    if (!sa_take(a, (uint32_t)ci, 1, &offset, &nomem))
        return nomem ? NULL : Py_NewRef(Py_None);
    PyObject *res = PyLong_FromUnsignedLongLong(offset);
    if (!res)
        sa_give_back(a, (uint32_t)ci, &offset, 1);
    return res;
}

/* alloc_batch(sizes) -> (offsets, too_large): a slot for each of sizes in order (None: larger
 * than a slab, or no free slot of its class), each run of equal sizes as one alloc_many;
 * too_large counts the Nones of the first kind. On an error nothing stays taken. */
static PyObject *SlabAllocator_alloc_batch(SlabAllocator *a, PyObject *sizes_obj) {
    PyObject *seq = PySequence_Fast(sizes_obj, "alloc_batch(sizes): sizes must be a sequence of ints");
    if (!seq)
        return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq), i = 0, too_large = 0;
    PyObject **items = PySequence_Fast_ITEMS(seq);
    PyObject *out = NULL, *result = NULL;
    uint64_t *sizes = PyMem_Malloc((size_t)(n ? n : 1) * 2 * sizeof(uint64_t));
    if (!sizes) {
        PyErr_NoMemory();
        goto done;
    }
    uint64_t *offsets = sizes + n; /* UINT64_MAX: none taken */
    for (Py_ssize_t k = 0; k < n; k++) {
        offsets[k] = UINT64_MAX;
        if (sa_parse_nbytes(items[k], &sizes[k]) < 0)
            goto done;
    }
    while (i < n) {
        Py_ssize_t j = i + 1;
        while (j < n && sizes[j] == sizes[i])
            j++;
        uint64_t size = sa_slot_size(sizes[i]);
        if (size > a->slab_size) {
            too_large += j - i;
        } else {
            int64_t ci = sa_class(a, size, 1);
            int nomem;
            if (ci < 0)
                goto give_back;
            sa_take(a, (uint32_t)ci, j - i, offsets + i, &nomem);
            if (nomem)
                goto give_back;
        }
        i = j;
    }
    out = PyList_New(n);
    for (Py_ssize_t k = 0; out && k < n; k++) {
        PyObject *x = offsets[k] == UINT64_MAX ? Py_NewRef(Py_None) : PyLong_FromUnsignedLongLong(offsets[k]);
        if (!x)
            Py_CLEAR(out);
        else
            PyList_SET_ITEM(out, k, x);
    }
    if (out)
        result = Py_BuildValue("(On)", out, too_large);
    if (result)
        goto done;
give_back:
    for (Py_ssize_t k = 0; k < n; k++)
        if (offsets[k] != UINT64_MAX)
            sa_give_back(a, (uint32_t)sa_class(a, sa_slot_size(sizes[k]), 0), offsets + k, 1);
done:
    Py_XDECREF(out);
    PyMem_Free(sizes);
    Py_DECREF(seq);
    return result;
}

/* The class of nbytes for a free: its number, or -1 with ValueError (none handed out). */
static int64_t sa_class_for_free(SlabAllocator *a, uint64_t nbytes) {
    uint64_t size = sa_slot_size(nbytes);
    int64_t ci = size <= a->slab_size ? sa_class(a, size, 0) : -1;
    if (ci < 0)
        PyErr_Format(PyExc_ValueError, "no slots of %llu bytes were handed out", (unsigned long long)size);
    return ci;
}

/* free(offset, nbytes): the slot back to its class (ValueError, nothing changed, unless it is a
 * slot of nbytes' class in use) */
static PyObject *SlabAllocator_free(SlabAllocator *a, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "free(offset, nbytes) takes 2 arguments");
        return NULL;
    }
    uint64_t offset, nbytes;
    if (hm_parse_u64(args[0], "offset", &offset) < 0 || sa_parse_nbytes(args[1], &nbytes) < 0)
        return NULL;
    int64_t ci = sa_class_for_free(a, nbytes);
    uint32_t s, slot;
    if (ci < 0 || sa_locate(a, (uint32_t)ci, offset, &s, &slot) < 0)
        return NULL;
    a->slabs[s].bits[slot / 64] &= ~(1ull << (slot % 64));
    sa_release_slot(a, (uint32_t)ci, s, slot);
    Py_RETURN_NONE;
}

/* free_many(offsets, nbytes): free of each, in order; every offset is checked first (a slot not
 * in use, or listed twice: ValueError, nothing changed) */
static PyObject *SlabAllocator_free_many(SlabAllocator *a, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "free_many(offsets, nbytes) takes 2 arguments");
        return NULL;
    }
    uint64_t nbytes;
    if (sa_parse_nbytes(args[1], &nbytes) < 0)
        return NULL;
    PyObject *seq = PySequence_Fast(args[0], "free_many(offsets, nbytes): offsets must be a sequence of ints");
    if (!seq)
        return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    PyObject **items = PySequence_Fast_ITEMS(seq);
    PyObject *result = NULL;
    uint32_t *where = PyMem_Malloc((size_t)(n ? n : 1) * 2 * sizeof(uint32_t));
    if (!where) {
        PyErr_NoMemory();
        goto done;
    }
    int64_t ci = n ? sa_class_for_free(a, nbytes) : 0;
    if (ci < 0)
        goto done;
    Py_ssize_t checked = 0;
    for (; checked < n; checked++) { /* each use bit cleared as it is checked: a repeat fails */
        uint64_t offset;
        uint32_t s, slot;
        if (hm_parse_u64(items[checked], "offset", &offset) < 0 ||
            sa_locate(a, (uint32_t)ci, offset, &s, &slot) < 0)
            break;
        a->slabs[s].bits[slot / 64] &= ~(1ull << (slot % 64));
        where[2 * checked] = s;
        where[2 * checked + 1] = slot;
    }
    if (checked < n) { /* put the use bits back: nothing changed */
        for (Py_ssize_t i = 0; i < checked; i++)
            a->slabs[where[2 * i]].bits[where[2 * i + 1] / 64] |= 1ull << (where[2 * i + 1] % 64);
        goto done;
    }
    for (Py_ssize_t i = 0; i < n; i++)
        sa_release_slot(a, (uint32_t)ci, where[2 * i], where[2 * i + 1]);
    result = Py_NewRef(Py_None);
done:
    PyMem_Free(where);
    Py_DECREF(seq);
    return result;
}

/* set_slab_limit(count) -> the slabs usable again (see the module docstring) */
static PyObject *SlabAllocator_set_slab_limit(SlabAllocator *a, PyObject *arg) {
    Py_ssize_t count = PyLong_AsSsize_t(arg);
    if (count == -1 && PyErr_Occurred())
        return NULL;
    if (count < 1 || count > (Py_ssize_t)a->max_slabs) {
        PyErr_Format(PyExc_ValueError, "slab count must be in 1..%u, got %zd", a->max_slabs, count);
        return NULL;
    }
    uint32_t old = a->slab_count, limit = (uint32_t)count;
    PyObject *revived = PyList_New(0);
    if (!revived)
        return NULL;
    if (limit > old) {
        for (uint32_t s = old; s < limit; s++) {
            PyObject *x = PyLong_FromUnsignedLong(s);
            if (!x || PyList_Append(revived, x) < 0) {
                Py_XDECREF(x);
                Py_DECREF(revived);
                return NULL;
            }
            Py_DECREF(x);
        }
    }
    a->slab_count = limit;
    if (limit < old) {
        uint32_t kept = 0;
        for (uint32_t i = 0; i < a->npool; i++)
            if (a->pool[i] < limit)
                a->pool[kept++] = a->pool[i];
        a->npool = kept;
        for (uint32_t s = limit; s < old; s++)
            if (!a->slabs[s].cls)
                a->released[a->nreleased++] = s;
        for (uint32_t ci = 0; ci < a->nclasses; ci++) {
            SAClass *c = &a->classes[ci];
            for (uint32_t s = c->head, next; s != SA_NIL; s = next) {
                next = a->slabs[s].next;
                if (s >= limit)
                    sa_list_remove(a, c, s);
            }
        }
    } else if (limit > old) {
        for (uint32_t s = old; s < limit; s++) {
            SASlab *slab = &a->slabs[s];
            if (slab->cls) {
                if (slab->nfree)
                    sa_list_append(a, &a->classes[slab->cls - 1], s);
            } else {
                memmove(a->pool + 1, a->pool, (size_t)a->npool * sizeof(uint32_t));
                a->pool[0] = s; /* at the bottom: handed out last */
                a->npool++;
            }
        }
        uint32_t kept = 0;
        for (uint32_t i = 0; i < a->nreleased; i++)
            if (a->released[i] >= limit)
                a->released[kept++] = a->released[i];
        a->nreleased = kept;
    }
    return revived;
}

/* is_retired(offset) -> whether its slab is at or past the limit */
static PyObject *SlabAllocator_is_retired(SlabAllocator *a, PyObject *arg) {
    uint64_t offset;
    if (hm_parse_u64(arg, "offset", &offset) < 0)
        return NULL;
    return PyBool_FromLong(offset / a->slab_size >= a->slab_count);
}

/* take_released() -> the released slabs, the list emptied */
static PyObject *SlabAllocator_take_released(SlabAllocator *a, PyObject *Py_UNUSED(ignored)) {
    PyObject *out = sa_u32_list(a->released, a->nreleased);
    if (out)
        a->nreleased = 0;
    return out;
}

/* largest_class() -> the slot size of the class holding the most slabs (the first such), or None */
static PyObject *SlabAllocator_largest_class(SlabAllocator *a, PyObject *Py_UNUSED(ignored)) {
    int64_t best = -1;
    for (uint32_t ci = 0; ci < a->nclasses; ci++)
        if (best < 0 || a->classes[ci].slabs > a->classes[best].slabs)
            best = ci;
    if (best < 0 || !a->classes[best].slabs)
        Py_RETURN_NONE;
    return PyLong_FromUnsignedLongLong(a->classes[best].slot_size);
}

/* reset(): every slab below the limit free, no class (released slabs stay listed) */
static PyObject *SlabAllocator_reset(SlabAllocator *a, PyObject *Py_UNUSED(ignored)) {
    sa_free_all(a);
    for (uint32_t s = 0; s < a->max_slabs; s++) {
        a->slabs[s].prev = a->slabs[s].next = SA_NIL;
        a->slabs[s].listed = 0;
    }
    a->nclasses = 0;
    a->used_bytes = 0;
    sa_fill_pool(a);
    Py_RETURN_NONE;
}

/* free_slots(nbytes) -> free slots of nbytes' class in slabs below the limit (not counting whole
 * free slabs) */
static PyObject *SlabAllocator_free_slots(SlabAllocator *a, PyObject *arg) {
    uint64_t nbytes;
    if (sa_parse_nbytes(arg, &nbytes) < 0)
        return NULL;
    uint64_t size = sa_slot_size(nbytes), total = 0;
    int64_t ci = size <= a->slab_size ? sa_class(a, size, 0) : -1;
    if (ci >= 0)
        for (uint32_t s = a->classes[ci].head; s != SA_NIL; s = a->slabs[s].next)
            total += a->slabs[s].nfree;
    return PyLong_FromUnsignedLongLong(total);
}

/* slabs_in_use(except_nbytes) -> {slab: slots in use} of the slabs below the limit that hold
 * slots of any class but except_nbytes' one */
static PyObject *SlabAllocator_slabs_in_use(SlabAllocator *a, PyObject *arg) {
    uint64_t nbytes;
    if (sa_parse_nbytes(arg, &nbytes) < 0)
        return NULL;
    uint64_t size = sa_slot_size(nbytes);
    int64_t skip = size <= a->slab_size ? sa_class(a, size, 0) : -1;
    PyObject *out = PyDict_New();
    if (!out)
        return NULL;
    for (uint32_t s = 0; s < a->slab_count; s++) {
        const SASlab *slab = &a->slabs[s];
        if (!slab->cls || (int64_t)slab->cls - 1 == skip)
            continue;
        PyObject *k = PyLong_FromUnsignedLong(s), *v = PyLong_FromUnsignedLong(slab->used);
        int bad = !k || !v || PyDict_SetItem(out, k, v) < 0;
        Py_XDECREF(k);
        Py_XDECREF(v);
        if (bad) {
            Py_DECREF(out);
            return NULL;
        }
    }
    return out;
}

static PyObject *sa_stack_offsets(const SlabAllocator *a, uint32_t s) {
    const SASlab *slab = &a->slabs[s];
    uint64_t size = a->classes[slab->cls - 1].slot_size;
    PyObject *out = PyList_New(slab->nfree);
    for (uint32_t i = 0; out && i < slab->nfree; i++) {
        PyObject *x = PyLong_FromUnsignedLongLong((uint64_t)s * a->slab_size + (uint64_t)slab->stack[i] * size);
        if (!x) {
            Py_CLEAR(out);
            break;
        }
        PyList_SET_ITEM(out, i, x);
    }
    return out;
}

typedef struct {
    uint64_t carved;
    uint32_t slab;
} SACarved;

static int sa_by_carve(const void *x, const void *y) {
    uint64_t a = ((const SACarved *)x)->carved, b = ((const SACarved *)y)->carved;
    return (a > b) - (a < b);
}

/* state() -> (classes, free slabs, retired, released, used_bytes), as the reference model's
 * fields: classes {slot size: ([(slab, free offsets)] in list order, [(slab, used)] in the order
 * the slabs got the class)}, retired {slab: (slot size, free offsets)} for the retired slabs in
 * use. For tests: it walks everything. */
static PyObject *SlabAllocator_state(SlabAllocator *a, PyObject *Py_UNUSED(ignored)) {
    PyObject *classes = PyDict_New(), *retired = PyDict_New(), *result = NULL;
    SACarved *order = PyMem_Malloc((size_t)a->max_slabs * sizeof(SACarved));
    if (!classes || !retired || !order)
        goto done;
    for (uint32_t ci = 0; ci < a->nclasses; ci++) {
        const SAClass *c = &a->classes[ci];
        PyObject *listed = PyList_New(0), *used = PyList_New(0), *key = NULL, *pair = NULL;
        int bad = !listed || !used;
        for (uint32_t s = c->head; !bad && s != SA_NIL; s = a->slabs[s].next) {
            PyObject *free = sa_stack_offsets(a, s);
            PyObject *item = free ? Py_BuildValue("(IN)", s, free) : NULL;
            bad = !item || PyList_Append(listed, item) < 0;
            Py_XDECREF(item);
        }
        uint32_t n = 0;
        for (uint32_t s = 0; s < a->max_slabs; s++)
            if (a->slabs[s].cls == ci + 1)
                order[n++] = (SACarved){a->slabs[s].carved, s};
        qsort(order, n, sizeof(SACarved), sa_by_carve);
        for (uint32_t i = 0; !bad && i < n; i++) {
            PyObject *item = Py_BuildValue("(II)", order[i].slab, a->slabs[order[i].slab].used);
            bad = !item || PyList_Append(used, item) < 0;
            Py_XDECREF(item);
        }
        if (!bad) {
            key = PyLong_FromUnsignedLongLong(c->slot_size);
            pair = PyTuple_Pack(2, listed, used);
            bad = !key || !pair || PyDict_SetItem(classes, key, pair) < 0;
        }
        Py_XDECREF(listed);
        Py_XDECREF(used);
        Py_XDECREF(key);
        Py_XDECREF(pair);
        if (bad)
            goto done;
    }
    for (uint32_t s = a->slab_count; s < a->max_slabs; s++) {
        if (!a->slabs[s].cls)
            continue;
        PyObject *free = sa_stack_offsets(a, s);
        PyObject *v = free ? Py_BuildValue("(KN)", (unsigned long long)a->classes[a->slabs[s].cls - 1].slot_size, free)
                           : NULL;
        PyObject *k = PyLong_FromUnsignedLong(s);
        int bad = !v || !k || PyDict_SetItem(retired, k, v) < 0;
        Py_XDECREF(v);
        Py_XDECREF(k);
        if (bad)
            goto done;
    }
    PyObject *pool = sa_u32_list(a->pool, a->npool);
    PyObject *released = pool ? sa_u32_list(a->released, a->nreleased) : NULL;
    if (pool && released)
        result = Py_BuildValue("(OOOOK)", classes, pool, retired, released, (unsigned long long)a->used_bytes);
    Py_XDECREF(pool);
    Py_XDECREF(released);
done:
    if (!result && !PyErr_Occurred())
        PyErr_NoMemory();
    PyMem_Free(order);
    Py_XDECREF(classes);
    Py_XDECREF(retired);
    return result;
}

static PyObject *SlabAllocator_get_capacity(SlabAllocator *a, void *Py_UNUSED(c)) {
    return PyLong_FromUnsignedLongLong((uint64_t)a->slab_count * a->slab_size);
}
static PyObject *SlabAllocator_get_slab_size(SlabAllocator *a, void *Py_UNUSED(c)) {
    return PyLong_FromUnsignedLongLong(a->slab_size);
}
static PyObject *SlabAllocator_get_slab_count(SlabAllocator *a, void *Py_UNUSED(c)) {
    return PyLong_FromUnsignedLong(a->slab_count);
}
static PyObject *SlabAllocator_get_max_slabs(SlabAllocator *a, void *Py_UNUSED(c)) {
    return PyLong_FromUnsignedLong(a->max_slabs);
}
static PyObject *SlabAllocator_get_used_bytes(SlabAllocator *a, void *Py_UNUSED(c)) {
    return PyLong_FromUnsignedLongLong(a->used_bytes);
}
static PyObject *SlabAllocator_get_free_slab_count(SlabAllocator *a, void *Py_UNUSED(c)) {
    return PyLong_FromUnsignedLong(a->npool);
}
static PyObject *SlabAllocator_get_released(SlabAllocator *a, void *Py_UNUSED(c)) {
    return sa_u32_list(a->released, a->nreleased);
}
static PyObject *SlabAllocator_get_retired_in_use(SlabAllocator *a, void *Py_UNUSED(c)) {
    uint32_t n = 0;
    for (uint32_t s = a->slab_count; s < a->max_slabs; s++)
        n += a->slabs[s].cls != 0;
    return PyLong_FromUnsignedLong(n);
}
static PyObject *SlabAllocator_get_nbytes(SlabAllocator *a, void *Py_UNUSED(c)) {
    uint64_t total = (uint64_t)a->max_slabs * (sizeof(SASlab) + 2 * sizeof(uint32_t)) +
                     (uint64_t)a->classes_cap * sizeof(SAClass);
    for (uint32_t s = 0; s < a->max_slabs; s++)
        if (a->slabs[s].cls) {
            uint64_t per = a->classes[a->slabs[s].cls - 1].per_slab;
            total += per * sizeof(uint32_t) + (per + 63) / 64 * sizeof(uint64_t);
        }
    return PyLong_FromUnsignedLongLong(total);
}

static PyMethodDef SlabAllocator_methods[] = {
    {"fits", (PyCFunction)SlabAllocator_fits, METH_O, "fits(nbytes) -> whether a slot of its class fits a slab"},
    {"alloc", (PyCFunction)SlabAllocator_alloc, METH_O, "alloc(nbytes) -> offset | None"},
    {"alloc_many", HM_FASTCALL(SlabAllocator_alloc_many), METH_FASTCALL, "alloc_many(nbytes, count) -> offsets"},
    {"alloc_batch", (PyCFunction)SlabAllocator_alloc_batch, METH_O,
     "alloc_batch(sizes) -> (offsets with None where none, too_large)"},
    {"free", HM_FASTCALL(SlabAllocator_free), METH_FASTCALL, "free(offset, nbytes)"},
    {"free_many", HM_FASTCALL(SlabAllocator_free_many), METH_FASTCALL, "free_many(offsets, nbytes)"},
    {"set_slab_limit", (PyCFunction)SlabAllocator_set_slab_limit, METH_O, "set_slab_limit(count) -> revived slabs"},
    {"is_retired", (PyCFunction)SlabAllocator_is_retired, METH_O, "is_retired(offset) -> bool"},
    {"take_released", (PyCFunction)SlabAllocator_take_released, METH_NOARGS, "take_released() -> slabs"},
    {"largest_class", (PyCFunction)SlabAllocator_largest_class, METH_NOARGS, "largest_class() -> slot size | None"},
    {"reset", (PyCFunction)SlabAllocator_reset, METH_NOARGS, "reset(): every usable slab free"},
    {"free_slots", (PyCFunction)SlabAllocator_free_slots, METH_O, "free_slots(nbytes) -> free slots of its class"},
    {"slabs_in_use", (PyCFunction)SlabAllocator_slabs_in_use, METH_O,
     "slabs_in_use(except_nbytes) -> {slab: used} of the other classes below the limit"},
    {"state", (PyCFunction)SlabAllocator_state, METH_NOARGS, "state() -> the whole bookkeeping (tests)"},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef SlabAllocator_getset[] = {
    {"capacity", (getter)SlabAllocator_get_capacity, NULL, "bytes of the usable slabs", NULL},
    {"slab_size", (getter)SlabAllocator_get_slab_size, NULL, "bytes per slab", NULL},
    {"slab_count", (getter)SlabAllocator_get_slab_count, NULL, "the limit: usable slabs", NULL},
    {"max_slabs", (getter)SlabAllocator_get_max_slabs, NULL, "the largest limit", NULL},
    {"used_bytes", (getter)SlabAllocator_get_used_bytes, NULL, "the slot sizes handed out", NULL},
    {"free_slab_count", (getter)SlabAllocator_get_free_slab_count, NULL, "slabs in the free pool", NULL},
    {"released", (getter)SlabAllocator_get_released, NULL, "retired slabs that became empty (a copy)", NULL},
    {"retired_in_use", (getter)SlabAllocator_get_retired_in_use, NULL, "retired slabs holding slots", NULL},
    {"nbytes", (getter)SlabAllocator_get_nbytes, NULL, "bytes of bookkeeping", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

PyTypeObject hm_SlabAllocatorType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "hicache_mooncake.native._core.SlabAllocator",
    .tp_basicsize = sizeof(SlabAllocator),
    .tp_dealloc = (destructor)SlabAllocator_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Size-class slab allocation of arena offsets (hm_slabs.c).",
    .tp_methods = SlabAllocator_methods,
    .tp_getset = SlabAllocator_getset,
    .tp_new = SlabAllocator_new,
};
