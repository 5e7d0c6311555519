/* KeyOrder: an ordered map (as collections.OrderedDict) from exact str or int keys to int64
 * values, with the batch calls of the placement's and the LRU policy's hot paths.
 *
 * Layout: entries (key reference, the key's Python hash, value, prev/next links of the order) in
 * one array, freed entries chained in a free list; an open-addressing index over the hashes
 * (linear probing from a multiplicative mix of the hash, uint32 entry number + 1 per slot, 0 =
 * empty, load <= 1/2, backward-shift deletion: no tombstones, so no probe grows with churn).
 * Keys match as in a dict (the same object, else the same hash and equal), restricted to exact
 * str and int: their hash and comparison run no Python code, so no call sees the map change
 * under it, and a key's hash is cached by the str itself. Values are converted before any
 * change, so a bad value changes nothing. Every call holds the GIL (a store call's keys: tens of
 * microseconds at most); the map is not thread-safe beyond the GIL. Memory: 32 bytes per entry
 * (the array grows by half) plus 8-16 of index; the index is rebuilt in one pass when it doubles.
 */
#include "hm_keyorder.h"

#define KO_NIL UINT32_MAX
#define KO_MAX_ENTRIES (UINT32_MAX / 4u) /* the index (2x entries, a power of two) fits size_t/u32 math */
#define KO_MIX 0x9E3779B97F4A7C15ull

typedef struct {
    PyObject *key; /* strong reference; NULL: a free entry */
    Py_hash_t hash;
    int64_t value;
    uint32_t prev, next; /* the order's links (KO_NIL at the ends); next chains free entries */
} KOEntry;

typedef struct {
    PyObject_HEAD
    KOEntry *entries;
    uint32_t cap;       /* entries allocated */
    uint32_t top;       /* entries handed out so far (live or on the free list) */
    uint32_t free_head; /* free entries, chained by next */
    uint32_t *index;    /* entry number + 1, 0 = empty */
    size_t slots;       /* a power of two, >= 2 * len */
    int shift;          /* 64 - log2(slots) */
    uint32_t head, tail; /* oldest, newest */
    Py_ssize_t len;
} KeyOrder;

static int ko_key_ok(PyObject *key) { return PyUnicode_CheckExact(key) || PyLong_CheckExact(key); }

static int ko_check_key(PyObject *key) {
    if (ko_key_ok(key))
        return 0;
    PyErr_Format(PyExc_TypeError, "KeyOrder keys are str or int, got %.100s", Py_TYPE(key)->tp_name);
    return -1;
}

static int ko_equal(PyObject *a, PyObject *b) {
    if (a == b)
        return 1;
    if (PyUnicode_CheckExact(a) && PyUnicode_CheckExact(b))
        return PyUnicode_GET_LENGTH(a) == PyUnicode_GET_LENGTH(b) && PyUnicode_Compare(a, b) == 0;
    if (PyLong_CheckExact(a) && PyLong_CheckExact(b))
        return PyObject_RichCompareBool(a, b, Py_EQ) == 1;
    return 0; /* a str never equals an int */
}

static size_t ko_home(const KeyOrder *t, Py_hash_t h) { return (size_t)(((uint64_t)h * KO_MIX) >> t->shift); }

/* The entry holding `key` (hash h), or -1; *slot: its index slot, or the empty slot ending the probe. */
static int64_t ko_find(const KeyOrder *t, PyObject *key, Py_hash_t h, size_t *slot) {
    size_t mask = t->slots - 1, i = ko_home(t, h);
    for (;;) {
        uint32_t v = t->index[i];
        if (v == 0) {
            *slot = i;
            return -1;
        }
        const KOEntry *e = &t->entries[v - 1];
        if (e->hash == h && ko_equal(e->key, key)) {
            *slot = i;
            return (int64_t)v - 1;
        }
        i = (i + 1) & mask;
    }
}

/* The entry of a checked key, -1 if absent (no error then), -2 with an error set (hash failed). */
static int64_t ko_lookup(const KeyOrder *t, PyObject *key, size_t *slot) {
    Py_hash_t h = PyObject_Hash(key);
    if (h == -1 && PyErr_Occurred())
        return -2;
    return ko_find(t, key, h, slot);
}

static int ko_set_slots(KeyOrder *t, size_t slots) {
    uint32_t *index = PyMem_Calloc(slots, sizeof(uint32_t));
    if (!index) {
        PyErr_NoMemory();
        return -1;
    }
    int shift = 64;
    for (size_t s = slots; s > 1; s >>= 1)
        shift--;
    PyMem_Free(t->index);
    t->index = index;
    t->slots = slots;
    t->shift = shift;
    size_t mask = slots - 1;
    for (uint32_t e = 0; e < t->top; e++) { /* in memory order: a rebuild streams the entries */
        if (!t->entries[e].key)
            continue;
        size_t i = ko_home(t, t->entries[e].hash);
        while (index[i])
            i = (i + 1) & mask;
        index[i] = e + 1;
    }
    return 0;
}

/* Room for `more` new entries: the index stays at load <= 1/2, the entries array holds them. */
static int ko_reserve(KeyOrder *t, Py_ssize_t more) {
    if (more < 0 || (uint64_t)t->len + (uint64_t)more > KO_MAX_ENTRIES) {
        PyErr_SetString(PyExc_OverflowError, "KeyOrder cannot hold that many keys");
        return -1;
    }
    size_t need = (size_t)t->len + (size_t)more;
    if (need * 2 > t->slots) {
        size_t slots = t->slots;
        while (need * 2 > slots)
            slots *= 2;
        if (ko_set_slots(t, slots) < 0)
            return -1;
    }
    if (need > t->cap) {
        size_t cap = t->cap ? (size_t)t->cap + t->cap / 2 : 16; /* 1.5x: less slack than doubling */
        if (cap < need)
            cap = need;
        if (cap > KO_MAX_ENTRIES)
            cap = KO_MAX_ENTRIES;
        KOEntry *entries = PyMem_Realloc(t->entries, cap * sizeof(KOEntry));
        if (!entries) {
            PyErr_NoMemory();
            return -1;
        }
        t->entries = entries;
        t->cap = (uint32_t)cap;
    }
    return 0;
}

static void ko_unlink(KeyOrder *t, uint32_t e) {
    KOEntry *x = &t->entries[e];
    if (x->prev != KO_NIL)
        t->entries[x->prev].next = x->next;
    else
        t->head = x->next;
    if (x->next != KO_NIL)
        t->entries[x->next].prev = x->prev;
    else
        t->tail = x->prev;
}

static void ko_link_tail(KeyOrder *t, uint32_t e) {
    KOEntry *x = &t->entries[e];
    x->prev = t->tail;
    x->next = KO_NIL;
    if (t->tail != KO_NIL)
        t->entries[t->tail].next = e;
    else
        t->head = e;
    t->tail = e;
}

static void ko_link_head(KeyOrder *t, uint32_t e) {
    KOEntry *x = &t->entries[e];
    x->next = t->head;
    x->prev = KO_NIL;
    if (t->head != KO_NIL)
        t->entries[t->head].prev = e;
    else
        t->tail = e;
    t->head = e;
}

/* A new entry at the newest end, in index slot `slot` (empty; room reserved). Steals no reference:
 * takes a new one to key. */
static uint32_t ko_insert_at(KeyOrder *t, size_t slot, PyObject *key, Py_hash_t h, int64_t value) {
    uint32_t e;
    if (t->free_head != KO_NIL) {
        e = t->free_head;
        t->free_head = t->entries[e].next;
    } else {
        e = t->top++;
    }
    KOEntry *x = &t->entries[e];
    Py_INCREF(key);
    x->key = key;
    x->hash = h;
    x->value = value;
    ko_link_tail(t, e);
    t->index[slot] = e + 1;
    t->len++;
    return e;
}

/* Take entry e (in index slot `slot`) out; returns its key reference (the caller owns it). */
static PyObject *ko_remove_at(KeyOrder *t, size_t slot, uint32_t e) {
    size_t mask = t->slots - 1, i = slot;
    for (;;) { /* backward shift: the entries after the hole that may move into it do */
        t->index[i] = 0;
        size_t j = i;
        for (;;) {
            j = (j + 1) & mask;
            uint32_t v = t->index[j];
            if (v == 0)
                goto shifted;
            size_t k = ko_home(t, t->entries[v - 1].hash);
            if (i <= j ? (k <= i || k > j) : (k <= i && k > j)) {
                t->index[i] = v;
                i = j;
                break;
            }
        }
    }
shifted:
    ko_unlink(t, e);
    KOEntry *x = &t->entries[e];
    PyObject *key = x->key;
    x->key = NULL;
    x->next = t->free_head;
    t->free_head = e;
    t->len--;
    return key;
}

/* The index slot of a live entry (it is there: its key is found by itself). */
static size_t ko_slot_of(const KeyOrder *t, uint32_t e) {
    size_t mask = t->slots - 1, i = ko_home(t, t->entries[e].hash);
    while (t->index[i] != e + 1)
        i = (i + 1) & mask;
    return i;
}

static int ko_value(PyObject *obj, int64_t *out) {
    if (PyLong_CheckExact(obj)) { /* the usual value: no index conversion */
        long long v = PyLong_AsLongLong(obj);
        if (v == -1 && PyErr_Occurred())
            return -1;
        *out = (int64_t)v;
        return 0;
    }
    PyObject *n = PyNumber_Index(obj);
    if (!n)
        return -1;
    long long v = PyLong_AsLongLong(n);
    Py_DECREF(n);
    if (v == -1 && PyErr_Occurred())
        return -1;
    *out = (int64_t)v;
    return 0;
}

static void ko_clear(KeyOrder *t) {
    uint32_t e = t->head;
    t->head = t->tail = t->free_head = KO_NIL;
    t->top = 0;
    t->len = 0;
    memset(t->index, 0, t->slots * sizeof(uint32_t));
    while (e != KO_NIL) { /* the map is already empty when a key's release runs */
        uint32_t next = t->entries[e].next;
        PyObject *key = t->entries[e].key;
        t->entries[e].key = NULL;
        Py_DECREF(key);
        e = next;
    }
}

/* ---------------------------------------------------------------- the type */

static PyObject *KeyOrder_new(PyTypeObject *type, PyObject *args, PyObject *kwds) {
    static char *kwlist[] = {NULL};
    if (!PyArg_ParseTupleAndKeywords(args, kwds, ":KeyOrder", kwlist))
        return NULL;
    KeyOrder *t = (KeyOrder *)type->tp_alloc(type, 0);
    if (!t)
        return NULL;
    t->head = t->tail = t->free_head = KO_NIL;
    if (ko_set_slots(t, 16) < 0) {
        Py_DECREF(t);
        return NULL;
    }
    return (PyObject *)t;
}

static void KeyOrder_dealloc(KeyOrder *t) {
    if (t->index)
        ko_clear(t);
    PyMem_Free(t->index);
    PyMem_Free(t->entries);
    Py_TYPE(t)->tp_free((PyObject *)t);
}

static Py_ssize_t KeyOrder_len(KeyOrder *t) { return t->len; }

static int KeyOrder_contains(KeyOrder *t, PyObject *key) {
    if (!ko_key_ok(key))
        return 0;
    size_t slot;
    int64_t e = ko_lookup(t, key, &slot);
    return e == -2 ? -1 : e >= 0;
}

static PyObject *KeyOrder_subscript(KeyOrder *t, PyObject *key) {
    size_t slot;
    int64_t e = ko_key_ok(key) ? ko_lookup(t, key, &slot) : -1;
    if (e == -2)
        return NULL;
    if (e < 0) {
        PyErr_SetObject(PyExc_KeyError, key);
        return NULL;
    }
    return PyLong_FromLongLong(t->entries[e].value);
}

static int KeyOrder_ass_subscript(KeyOrder *t, PyObject *key, PyObject *value) {
    if (ko_check_key(key) < 0)
        return -1;
    int64_t v = 0;
    if (value && ko_value(value, &v) < 0)
        return -1;
    Py_hash_t h = PyObject_Hash(key);
    if (h == -1 && PyErr_Occurred())
        return -1;
    size_t slot;
    int64_t e = ko_find(t, key, h, &slot);
    if (!value) {
        if (e < 0) {
            PyErr_SetObject(PyExc_KeyError, key);
            return -1;
        }
        Py_DECREF(ko_remove_at(t, slot, (uint32_t)e));
        return 0;
    }
    if (e >= 0) { /* an existing key keeps its place, as in a dict */
        t->entries[e].value = v;
        return 0;
    }
    size_t slots = t->slots;
    if (ko_reserve(t, 1) < 0)
        return -1;
    if (t->slots != slots) /* the index was rebuilt: the empty slot is elsewhere */
        ko_find(t, key, h, &slot);
    ko_insert_at(t, slot, key, h, v);
    return 0;
}

static PyObject *KeyOrder_get(KeyOrder *t, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs < 1 || nargs > 2) {
        PyErr_SetString(PyExc_TypeError, "get(key, default=None)");
        return NULL;
    }
    size_t slot;
    int64_t e = ko_key_ok(args[0]) ? ko_lookup(t, args[0], &slot) : -1;
    if (e == -2)
        return NULL;
    if (e >= 0)
        return PyLong_FromLongLong(t->entries[e].value);
    return Py_NewRef(nargs == 2 ? args[1] : Py_None);
}

static PyObject *KeyOrder_pop(KeyOrder *t, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs < 1 || nargs > 2) {
        PyErr_SetString(PyExc_TypeError, "pop(key[, default])");
        return NULL;
    }
    size_t slot;
    int64_t e = ko_key_ok(args[0]) ? ko_lookup(t, args[0], &slot) : -1;
    if (e == -2)
        return NULL;
    if (e < 0) {
        if (nargs == 2)
            return Py_NewRef(args[1]);
        PyErr_SetObject(PyExc_KeyError, args[0]);
        return NULL;
    }
    PyObject *out = PyLong_FromLongLong(t->entries[e].value);
    if (!out)
        return NULL;
    Py_DECREF(ko_remove_at(t, slot, (uint32_t)e));
    return out;
}

static PyObject *KeyOrder_popitem(KeyOrder *t, PyObject *args, PyObject *kwds) {
    static char *kwlist[] = {"last", NULL};
    int last = 1;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "|p:popitem", kwlist, &last))
        return NULL;
    if (t->len == 0) {
        PyErr_SetString(PyExc_KeyError, "popitem(): KeyOrder is empty");
        return NULL;
    }
    uint32_t e = last ? t->tail : t->head;
    PyObject *value = PyLong_FromLongLong(t->entries[e].value);
    if (!value)
        return NULL;
    PyObject *key = ko_remove_at(t, ko_slot_of(t, e), e);
    PyObject *out = PyTuple_Pack(2, key, value);
    Py_DECREF(key);
    Py_DECREF(value);
    return out;
}

static PyObject *KeyOrder_move_to_end(KeyOrder *t, PyObject *args, PyObject *kwds) {
    static char *kwlist[] = {"key", "last", NULL};
    PyObject *key;
    int last = 1;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "O|p:move_to_end", kwlist, &key, &last))
        return NULL;
    size_t slot;
    int64_t e = ko_key_ok(key) ? ko_lookup(t, key, &slot) : -1;
    if (e == -2)
        return NULL;
    if (e < 0) {
        PyErr_SetObject(PyExc_KeyError, key);
        return NULL;
    }
    ko_unlink(t, (uint32_t)e);
    if (last)
        ko_link_tail(t, (uint32_t)e);
    else
        ko_link_head(t, (uint32_t)e);
    Py_RETURN_NONE;
}

static PyObject *KeyOrder_clear(KeyOrder *t, PyObject *Py_UNUSED(ignored)) {
    ko_clear(t);
    Py_RETURN_NONE;
}

enum { KO_KEYS, KO_VALUES, KO_ITEMS };

/* Up to `limit` entries from the oldest (newest when !oldest_first), as a list of kind. */
static PyObject *ko_listing(KeyOrder *t, int kind, Py_ssize_t limit, int oldest_first) {
    Py_ssize_t n = limit < t->len ? limit : t->len;
    PyObject *out = PyList_New(n);
    if (!out)
        return NULL;
    uint32_t e = oldest_first ? t->head : t->tail;
    for (Py_ssize_t i = 0; i < n; i++) {
        const KOEntry *x = &t->entries[e];
        PyObject *item;
        if (kind == KO_KEYS) {
            item = Py_NewRef(x->key);
        } else {
            PyObject *v = PyLong_FromLongLong(x->value);
            if (!v) {
                Py_DECREF(out);
                return NULL;
            }
            item = kind == KO_VALUES ? v : PyTuple_Pack(2, x->key, v);
            if (kind == KO_ITEMS)
                Py_DECREF(v);
        }
        if (!item) {
            Py_DECREF(out);
            return NULL;
        }
        PyList_SET_ITEM(out, i, item);
        e = oldest_first ? x->next : x->prev;
    }
    return out;
}

static PyObject *KeyOrder_keys(KeyOrder *t, PyObject *Py_UNUSED(ignored)) {
    return ko_listing(t, KO_KEYS, t->len, 1);
}

static PyObject *KeyOrder_values(KeyOrder *t, PyObject *Py_UNUSED(ignored)) {
    return ko_listing(t, KO_VALUES, t->len, 1);
}

static PyObject *KeyOrder_items(KeyOrder *t, PyObject *Py_UNUSED(ignored)) {
    return ko_listing(t, KO_ITEMS, t->len, 1);
}

static PyObject *KeyOrder_newest(KeyOrder *t, PyObject *arg) {
    Py_ssize_t limit = PyLong_AsSsize_t(arg);
    if (limit == -1 && PyErr_Occurred())
        return NULL;
    return ko_listing(t, KO_ITEMS, limit < 0 ? 0 : limit, 0);
}

static PyObject *KeyOrder_iter(KeyOrder *t) {
    PyObject *keys = ko_listing(t, KO_KEYS, t->len, 1);
    if (!keys)
        return NULL;
    PyObject *it = PyObject_GetIter(keys);
    Py_DECREF(keys);
    return it;
}

/* ---------------------------------------------------------------- batch calls */

/* One batch call's arguments: the keys as a fast sequence (every item a str or int) with their
 * hashes, and for the calls that take values, one int for all (`one`) or one per key (`vals`). */
typedef struct {
    PyObject *fast;
    PyObject **items;
    Py_ssize_t n;
    Py_hash_t *h;
    int64_t one, *vals;
} KOBatch;

static void ko_batch_close(KOBatch *b) {
    PyMem_Free(b->vals);
    PyMem_Free(b->h);
    Py_XDECREF(b->fast);
}

/* Reads keys (and values, unless NULL) before any change; 0, or -1 with an error set and nothing
 * held. A value is an int or a sequence of ints as long as the keys (ValueError naming both). */
static int ko_batch_open(KOBatch *b, PyObject *keys, PyObject *values) {
    memset(b, 0, sizeof(*b));
    b->fast = PySequence_Fast(keys, "keys must be a sequence");
    if (!b->fast)
        return -1;
    b->n = PySequence_Fast_GET_SIZE(b->fast);
    b->items = PySequence_Fast_ITEMS(b->fast);
    size_t count = (size_t)(b->n ? b->n : 1);
    b->h = PyMem_Malloc(count * sizeof(Py_hash_t));
    if (!b->h) {
        PyErr_NoMemory();
        goto fail;
    }
    for (Py_ssize_t i = 0; i < b->n; i++)
        if (ko_check_key(b->items[i]) < 0 || ((b->h[i] = PyObject_Hash(b->items[i])) == -1 && PyErr_Occurred()))
            goto fail;
    if (!values)
        return 0;
    if (PyLong_Check(values)) {
        if (ko_value(values, &b->one) == 0)
            return 0;
        goto fail;
    }
    PyObject *vfast = PySequence_Fast(values, "values must be an int or a sequence of ints");
    if (!vfast)
        goto fail;
    int ok = hm_check_len("values", PySequence_Fast_GET_SIZE(vfast), "keys", b->n) == 0;
    if (ok && !(b->vals = PyMem_Malloc(count * sizeof(int64_t)))) {
        PyErr_NoMemory();
        ok = 0;
    }
    /* a value's __index__ may run Python code that changes the list: its size is read each step */
    for (Py_ssize_t i = 0; ok && i < b->n; i++) {
        ok = i < PySequence_Fast_GET_SIZE(vfast);
        if (!ok)
            PyErr_SetString(PyExc_ValueError, "values changed while they were read");
        else {
            PyObject *value = Py_NewRef(PySequence_Fast_ITEMS(vfast)[i]); /* alive while it runs */
            ok = ko_value(value, &b->vals[i]) == 0;
            Py_DECREF(value);
        }
    }
    Py_DECREF(vfast);
    if (ok)
        return 0;
fail:
    ko_batch_close(b);
    return -1;
}

static int64_t ko_batch_value(const KOBatch *b, Py_ssize_t i) { return b->vals ? b->vals[i] : b->one; }

/* The entry of batch key i, or -1 (absent; *slot: where it would go). */
static int64_t ko_batch_find(const KeyOrder *t, const KOBatch *b, Py_ssize_t i, size_t *slot) {
    return ko_find(t, b->items[i], b->h[i], slot);
}

static int ko_two_args(Py_ssize_t nargs, const char *usage) {
    if (nargs == 2)
        return 0;
    PyErr_SetString(PyExc_TypeError, usage);
    return -1;
}

static PyObject *KeyOrder_contains_many(KeyOrder *t, PyObject *keys) {
    KOBatch b;
    if (ko_batch_open(&b, keys, NULL) < 0)
        return NULL;
    PyObject *out = PyList_New(b.n);
    for (Py_ssize_t i = 0; out && i < b.n; i++) {
        size_t slot;
        PyList_SET_ITEM(out, i, Py_NewRef(ko_batch_find(t, &b, i, &slot) >= 0 ? Py_True : Py_False));
    }
    ko_batch_close(&b);
    return out;
}

static PyObject *KeyOrder_any_in(KeyOrder *t, PyObject *keys) {
    KOBatch b;
    if (ko_batch_open(&b, keys, NULL) < 0)
        return NULL;
    int found = 0;
    for (Py_ssize_t i = 0; i < b.n && !found; i++) {
        size_t slot;
        found = ko_batch_find(t, &b, i, &slot) >= 0;
    }
    ko_batch_close(&b);
    return PyBool_FromLong(found);
}

/* add_new(keys, values) -> bool: when no key is present and none repeats, every key joins the
 * newest end in order with its value (values: one int for all, or a sequence as long as keys);
 * otherwise False and nothing changes. */
static PyObject *KeyOrder_add_new(KeyOrder *t, PyObject *const *args, Py_ssize_t nargs) {
    KOBatch b;
    if (ko_two_args(nargs, "add_new(keys, values)") < 0 || ko_batch_open(&b, args[0], args[1]) < 0)
        return NULL;
    PyObject *result = Py_False;
    size_t slot;
    for (Py_ssize_t i = 0; i < b.n; i++)
        if (ko_batch_find(t, &b, i, &slot) >= 0)
            goto done;
    if (ko_reserve(t, b.n) < 0) {
        result = NULL;
        goto done;
    }
    for (Py_ssize_t i = 0; i < b.n; i++) {
        if (ko_batch_find(t, &b, i, &slot) >= 0) { /* a repeat within the batch: undo it all */
            for (Py_ssize_t j = 0; j < i; j++) {
                uint32_t e = t->tail;
                Py_DECREF(ko_remove_at(t, ko_slot_of(t, e), e));
            }
            goto done;
        }
        ko_insert_at(t, slot, b.items[i], b.h[i], ko_batch_value(&b, i));
    }
    result = Py_True;
done:
    ko_batch_close(&b);
    return Py_XNewRef(result);
}

/* put_many(keys, values): self[key] = value for each in order (a present key keeps its place, a
 * new one joins the newest end), as dict.update of the pairs; a bad key or value changes nothing. */
static PyObject *KeyOrder_put_many(KeyOrder *t, PyObject *const *args, Py_ssize_t nargs) {
    KOBatch b;
    if (ko_two_args(nargs, "put_many(keys, values)") < 0 || ko_batch_open(&b, args[0], args[1]) < 0)
        return NULL;
    PyObject *result = NULL;
    if (ko_reserve(t, b.n) == 0) {
        for (Py_ssize_t i = 0; i < b.n; i++) {
            size_t slot;
            int64_t e = ko_batch_find(t, &b, i, &slot);
            if (e >= 0)
                t->entries[e].value = ko_batch_value(&b, i);
            else
                ko_insert_at(t, slot, b.items[i], b.h[i], ko_batch_value(&b, i));
        }
        result = Py_None;
    }
    ko_batch_close(&b);
    return Py_XNewRef(result);
}

/* touch_many(keys) -> bool: when every key is present, each moves to the newest end in order
 * (move_to_end of each); otherwise False and nothing changes. */
static PyObject *KeyOrder_touch_many(KeyOrder *t, PyObject *keys) {
    KOBatch b;
    if (ko_batch_open(&b, keys, NULL) < 0)
        return NULL;
    uint32_t *found = PyMem_Malloc((size_t)(b.n ? b.n : 1) * sizeof(uint32_t));
    PyObject *result = found ? Py_True : PyErr_NoMemory();
    for (Py_ssize_t i = 0; found && i < b.n; i++) {
        size_t slot;
        int64_t e = ko_batch_find(t, &b, i, &slot);
        if (e < 0) {
            result = Py_False;
            break;
        }
        found[i] = (uint32_t)e;
    }
    for (Py_ssize_t i = 0; result == Py_True && i < b.n; i++) {
        ko_unlink(t, found[i]);
        ko_link_tail(t, found[i]);
    }
    PyMem_Free(found);
    ko_batch_close(&b);
    return Py_XNewRef(result);
}

/* values_of(keys) -> list of their values; KeyError naming the first absent key. */
static PyObject *KeyOrder_values_of(KeyOrder *t, PyObject *keys) {
    KOBatch b;
    if (ko_batch_open(&b, keys, NULL) < 0)
        return NULL;
    PyObject *out = PyList_New(b.n);
    for (Py_ssize_t i = 0; out && i < b.n; i++) {
        size_t slot;
        int64_t e = ko_batch_find(t, &b, i, &slot);
        PyObject *v = e >= 0 ? PyLong_FromLongLong(t->entries[e].value) : NULL;
        if (!v) {
            if (e < 0)
                PyErr_SetObject(PyExc_KeyError, b.items[i]);
            Py_CLEAR(out);
            break;
        }
        PyList_SET_ITEM(out, i, v);
    }
    ko_batch_close(&b);
    return out;
}

/* pop_oldest(amount) -> (keys, values): the oldest entries taken out while `amount` is > 0, each
 * taking its value off it (popitem(last=False) while the map is not empty and amount > 0; an
 * entry of value <= 0 takes nothing off). */
static PyObject *KeyOrder_pop_oldest(KeyOrder *t, PyObject *arg) {
    long long amount = PyLong_AsLongLong(arg);
    if (amount == -1 && PyErr_Occurred())
        return NULL;
    Py_ssize_t n = 0;
    long long left = amount;
    for (uint32_t e = t->head; e != KO_NIL && left > 0; e = t->entries[e].next, n++)
        left -= t->entries[e].value;
    PyObject *keys = PyList_New(n), *values = PyList_New(n);
    if (!keys || !values)
        goto fail;
    uint32_t e = t->head;
    for (Py_ssize_t i = 0; i < n; i++, e = t->entries[e].next) {
        PyObject *v = PyLong_FromLongLong(t->entries[e].value);
        if (!v)
            goto fail;
        PyList_SET_ITEM(values, i, v);
        PyList_SET_ITEM(keys, i, Py_NewRef(t->entries[e].key));
    }
    for (Py_ssize_t i = 0; i < n; i++) { /* the lists hold the keys: no release runs here */
        uint32_t x = t->head;
        Py_DECREF(ko_remove_at(t, ko_slot_of(t, x), x));
    }
    PyObject *out = PyTuple_Pack(2, keys, values);
    Py_DECREF(keys);
    Py_DECREF(values);
    return out;
fail:
    Py_XDECREF(keys);
    Py_XDECREF(values);
    return NULL;
}

static PyObject *KeyOrder_nbytes(KeyOrder *t, PyObject *Py_UNUSED(ignored)) {
    return PyLong_FromSize_t((size_t)t->cap * sizeof(KOEntry) + t->slots * sizeof(uint32_t));
}

static PyMethodDef KeyOrder_methods[] = {
    {"get", HM_FASTCALL(KeyOrder_get), METH_FASTCALL, "get(key, default=None)"},
    {"pop", HM_FASTCALL(KeyOrder_pop), METH_FASTCALL, "pop(key[, default])"},
    {"popitem", (PyCFunction)(void (*)(void))KeyOrder_popitem, METH_VARARGS | METH_KEYWORDS,
     "popitem(last=True) -> (key, value)"},
    {"move_to_end", (PyCFunction)(void (*)(void))KeyOrder_move_to_end, METH_VARARGS | METH_KEYWORDS,
     "move_to_end(key, last=True)"},
    {"clear", (PyCFunction)KeyOrder_clear, METH_NOARGS, "clear()"},
    {"keys", (PyCFunction)KeyOrder_keys, METH_NOARGS, "keys() -> list, oldest first"},
    {"values", (PyCFunction)KeyOrder_values, METH_NOARGS, "values() -> list, oldest first"},
    {"items", (PyCFunction)KeyOrder_items, METH_NOARGS, "items() -> list of (key, value), oldest first"},
    {"newest", (PyCFunction)KeyOrder_newest, METH_O, "newest(limit) -> up to limit (key, value), newest first"},
    {"contains_many", (PyCFunction)KeyOrder_contains_many, METH_O, "contains_many(keys) -> list of bool"},
    {"any_in", (PyCFunction)KeyOrder_any_in, METH_O, "any_in(keys) -> whether some key is present"},
    {"add_new", HM_FASTCALL(KeyOrder_add_new), METH_FASTCALL,
     "add_new(keys, values) -> bool: all keys new and distinct -> added newest last, else nothing"},
    {"put_many", HM_FASTCALL(KeyOrder_put_many), METH_FASTCALL,
     "put_many(keys, values): self[key] = value of each pair in order (dict.update)"},
    {"touch_many", (PyCFunction)KeyOrder_touch_many, METH_O,
     "touch_many(keys) -> bool: all present -> each moved to the newest end in order, else nothing"},
    {"values_of", (PyCFunction)KeyOrder_values_of, METH_O, "values_of(keys) -> list (KeyError: absent)"},
    {"pop_oldest", (PyCFunction)KeyOrder_pop_oldest, METH_O,
     "pop_oldest(amount) -> (keys, values): oldest first while amount > 0, each value taken off it"},
    {"nbytes", (PyCFunction)KeyOrder_nbytes, METH_NOARGS, "nbytes() -> bytes held by the map's arrays"},
    {NULL, NULL, 0, NULL},
};

static PySequenceMethods KeyOrder_as_sequence = {
    .sq_contains = (objobjproc)KeyOrder_contains,
};

static PyMappingMethods KeyOrder_as_mapping = {
    .mp_length = (lenfunc)KeyOrder_len,
    .mp_subscript = (binaryfunc)KeyOrder_subscript,
    .mp_ass_subscript = (objobjargproc)KeyOrder_ass_subscript,
};

PyTypeObject hm_KeyOrderType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "hicache_mooncake.native._core.KeyOrder",
    .tp_basicsize = sizeof(KeyOrder),
    .tp_dealloc = (destructor)KeyOrder_dealloc,
    .tp_as_sequence = &KeyOrder_as_sequence,
    .tp_as_mapping = &KeyOrder_as_mapping,
    .tp_iter = (getiterfunc)KeyOrder_iter,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Insertion-ordered map of str/int keys to int64 values with batch calls (hm_keyorder.c).",
    .tp_methods = KeyOrder_methods,
    .tp_new = KeyOrder_new,
};
