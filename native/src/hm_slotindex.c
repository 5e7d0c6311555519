/* _core.SlotIndex (see hm_slotindex.h).
 *
 * Rows: fingerprint -> three words (slot offset, size | object type << 48, version) in an
 * hm_segtable. Per slot of the arena (offset >> shift): the UTF-8 bytes of the key published
 * there (a malloc'd block: 4-byte length, then the bytes), its pin count and its reads. A lookup
 * that finds a row compares the caller's key with the slot's key: another key under the same
 * fingerprint is a collision (a miss, never that key's slot).
 *
 * Invariants: a row exists exactly when its slot holds its key; a slot's pins and reads outlive
 * its row; reads restart at 0 when a row is published there. A row removed (remove, move, clear)
 * while its slot is pinned leaves a *zombie*: the slot record keeps the object's size instead of a
 * key, and the unpin that drops its last pin moves (offset, size) to the freed list, which the
 * caller empties (take_freed) to give the slot back to its allocator. Room on that list is
 * reserved when a zombie is made, so an unpin never allocates and never fails for a pinned slot.
 *
 * Concurrency: no internal lock; every call holds the GIL from start to end (a batch is
 * microseconds; a growth rehashes one segment of at most `segment_slots` rows), which makes each
 * call atomic. The caller serialises the calls that change rows (the DRAM tier's lock); read_into,
 * pin_found and unpin may run without it: read_into looks up, checks and pins with the GIL held,
 * releases it once for the copy (the pins keep the slots from being freed), and unpins with it
 * held again.
 * Arguments are checked before anything changes: a bad offset, a slot that already holds a key or
 * is a zombie, a key that is not a str, a pin count that would go below zero: ValueError /
 * TypeError naming the item, nothing changed (a publish whose allocation fails stops there:
 * MemoryError, the items before it are published).
 */
#include "hm_slotindex.h"

#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "hm_segtable.h"
#include "hm_slots.h"

#define ROW_WORDS 3u
#define TYPE_SHIFT 48
#define SIZE_MASK ((UINT64_C(1) << TYPE_SHIFT) - 1)
#define DEFAULT_SEGMENT_SLOTS 16384u

/* `reads` of a zombie (a removed slot still pinned); the reads of a slot saturate below it. */
#define READS_ZOMBIE UINT32_MAX
#define READS_MAX (UINT32_MAX - 1)

typedef struct {
    union {
        char *key;             /* [uint32 length][bytes], malloc'd; NULL: no key published here */
        uint64_t zombie_bytes; /* reads == READS_ZOMBIE: the removed object's size */
    } u;
    uint32_t pins;
    uint32_t reads;
} slot_rec;

typedef struct {
    PyObject_HEAD
    hm_segtable table;
    int table_ready;
    slot_rec *slots;
    size_t nslots;
    unsigned shift;
    size_t pinned;    /* slots whose pins > 0 */
    size_t key_bytes; /* the key blocks together */
    size_t zombies;   /* zombies not yet taken: pinned ones and those on the freed list */
    uint64_t *freed;  /* freed_cap pairs (slot offset, size); the first freed_n are the freed zombies */
    size_t freed_n, freed_cap;
    /* read_into's figures (every call holds the GIL while it adds to them) */
    uint64_t hits, hit_bytes, misses, size_mismatch, collisions;
} SlotIndex;

/* ------------------------------------------------------------------ borrowed arguments */

typedef struct {
    Py_buffer b[6];
    int n;
} borrowed;

static void release_all(borrowed *bs) {
    while (bs->n > 0)
        PyBuffer_Release(&bs->b[--bs->n]);
}

/* Borrows a uint64 array of `want` elements (any count when want < 0; *n gets it). */
static int arg_u64(borrowed *bs, PyObject *obj, const char *what, int writable, Py_ssize_t want, uint64_t **out,
                   Py_ssize_t *n) {
    Py_ssize_t got;
    if (hm_get_u64(obj, what, writable, &bs->b[bs->n], &got) < 0)
        return -1;
    bs->n++;
    if (want >= 0 && got != want) {
        PyErr_Format(PyExc_ValueError, "%s has %zd elements, expected %zd", what, got, want);
        return -1;
    }
    *out = bs->b[bs->n - 1].buf;
    if (n)
        *n = got;
    return 0;
}

static int arg_i64_out(borrowed *bs, PyObject *obj, const char *what, Py_ssize_t want, int64_t **out) {
    Py_ssize_t got;
    if (hm_get_i64(obj, what, 1, &bs->b[bs->n], &got) < 0)
        return -1;
    bs->n++;
    if (got != want) {
        PyErr_Format(PyExc_ValueError, "%s has %zd elements, expected %zd", what, got, want);
        return -1;
    }
    *out = bs->b[bs->n - 1].buf;
    return 0;
}

static int arg_bool_out(borrowed *bs, PyObject *obj, const char *what, Py_ssize_t want, unsigned char **out) {
    if (hm_get_bool_out(obj, what, want, &bs->b[bs->n]) < 0)
        return -1;
    bs->n++;
    *out = bs->b[bs->n - 1].buf;
    return 0;
}

/* `keys` as a fast sequence of exactly `want` items. */
static PyObject *arg_keys(PyObject *obj, Py_ssize_t want) {
    PyObject *seq = PySequence_Fast(obj, "keys must be a sequence of str");
    if (seq && PySequence_Fast_GET_SIZE(seq) != want) {
        PyErr_Format(PyExc_ValueError, "keys has %zd items, expected %zd", PySequence_Fast_GET_SIZE(seq), want);
        Py_CLEAR(seq);
    }
    return seq;
}

static int wrong_nargs(Py_ssize_t nargs, Py_ssize_t want, const char *sig) {
    if (nargs == want)
        return 0;
    PyErr_Format(PyExc_TypeError, "SlotIndex.%s", sig);
    return -1;
}

/* ------------------------------------------------------------------ slots and keys */

/* The slot of `offset`, or -1 with ValueError naming `what[i]`. */
static Py_ssize_t slot_of(const SlotIndex *self, uint64_t offset, const char *what, Py_ssize_t i) {
    uint64_t slot = offset >> self->shift;
    if ((offset & ((UINT64_C(1) << self->shift) - 1)) != 0 || slot >= self->nslots) {
        PyErr_Format(PyExc_ValueError, "%s[%zd] = %llu is not a slot offset of this index (%zu slots of %llu bytes)",
                     what, i, (unsigned long long)offset, self->nslots,
                     (unsigned long long)(UINT64_C(1) << self->shift));
        return -1;
    }
    return (Py_ssize_t)slot;
}

/* The UTF-8 bytes of keys[i] (a str), or NULL with TypeError naming it. */
static const char *key_bytes(PyObject *key, Py_ssize_t i, Py_ssize_t *len) {
    if (!PyUnicode_Check(key)) {
        PyErr_Format(PyExc_TypeError, "keys[%zd] must be a str, got %.80s", i, Py_TYPE(key)->tp_name);
        return NULL;
    }
    return PyUnicode_AsUTF8AndSize(key, len);
}

/* The key block published at a slot (NULL: none, or a zombie). */
static inline const char *rec_key(const slot_rec *rec) {
    return rec->reads == READS_ZOMBIE ? NULL : rec->u.key;
}

static int same_key(const slot_rec *rec, const char *key, Py_ssize_t len) {
    const char *block = rec_key(rec);
    if (!block)
        return 0;
    uint32_t stored;
    memcpy(&stored, block, sizeof stored);
    return (Py_ssize_t)stored == len && memcmp(block + sizeof stored, key, (size_t)len) == 0;
}

static void drop_key(SlotIndex *self, slot_rec *rec) {
    char *block = (char *)rec_key(rec);
    if (!block)
        return;
    uint32_t stored;
    memcpy(&stored, block, sizeof stored);
    self->key_bytes -= sizeof stored + stored;
    free(block);
    rec->u.key = NULL;
}

/* Room on the freed list for `more` zombies beyond those there are (reserved before any is made,
 * so that an unpin never allocates); -1 with MemoryError. */
static int reserve_zombies(SlotIndex *self, size_t more) {
    size_t need = self->zombies + more;
    if (need <= self->freed_cap)
        return 0;
    size_t cap = self->freed_cap ? self->freed_cap : 16;
    while (cap < need)
        cap *= 2;
    uint64_t *grown = NULL;
    if (cap <= SIZE_MAX / (2 * sizeof *grown))
        grown = PyMem_Realloc(self->freed, cap * 2 * sizeof *grown);
    if (!grown) {
        PyErr_NoMemory();
        return -1;
    }
    self->freed = grown;
    self->freed_cap = cap;
    return 0;
}

/* The pinned slot `rec`, whose row is gone, becomes a zombie of `nbytes` (room reserved). */
static void make_zombie(SlotIndex *self, slot_rec *rec, uint64_t nbytes) {
    drop_key(self, rec);
    rec->u.zombie_bytes = nbytes;
    rec->reads = READS_ZOMBIE;
    self->zombies++;
}

/* One pin less on the pinned slot at `offset`; its last pin frees a zombie onto the freed list. */
static void unpin_slot(SlotIndex *self, uint64_t offset) {
    slot_rec *rec = &self->slots[offset >> self->shift];
    if (--rec->pins)
        return;
    self->pinned--;
    if (rec->reads == READS_ZOMBIE) {
        self->freed[2 * self->freed_n] = offset;
        self->freed[2 * self->freed_n + 1] = rec->u.zombie_bytes;
        self->freed_n++;
        rec->u.key = NULL;
        rec->reads = 0;
    }
}

/* Whether keys[i] is the key of `row` (found by find_rows): 1 yes, 0 another key, -1 no row; -2
 * with an error set (not a str). */
static int row_key(const SlotIndex *self, const uint64_t *row, PyObject *key, Py_ssize_t i) {
    Py_ssize_t len;
    const char *k = key_bytes(key, i, &len);
    if (!k)
        return -2;
    if (!row)
        return -1;
    uint64_t slot = row[0] >> self->shift;
    return slot < self->nslots && same_key(&self->slots[slot], k, len) ? 1 : 0;
}

/* The row of fps[i] and whether keys[i] is its key: 1 found, 0 another key (a collision), -1 no
 * row; -2 with an error set. *row: the row's words (NULL without a row). */
static int find_key(const SlotIndex *self, uint64_t fp, PyObject *key, Py_ssize_t i, uint64_t **row) {
    *row = fp ? hm_segtable_find(&self->table, fp) : NULL;
    return row_key(self, *row, key, i);
}

/* The rows of fps[0..n) (rows[i] NULL: none), with the batch's cache misses overlapped: every
 * probe's first slot is prefetched, then the rows are found and their slot records prefetched,
 * then the records' keys. The pointers hold until the table next changes. */
static void find_rows(const SlotIndex *self, const uint64_t *fps, Py_ssize_t n, uint64_t **rows) {
    for (Py_ssize_t i = 0; i < n; i++)
        if (fps[i])
            hm_segtable_prefetch(&self->table, fps[i]);
    for (Py_ssize_t i = 0; i < n; i++) {
        rows[i] = fps[i] ? hm_segtable_find(&self->table, fps[i]) : NULL;
        if (rows[i] && (rows[i][0] >> self->shift) < self->nslots)
            __builtin_prefetch(&self->slots[rows[i][0] >> self->shift]);
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        if (rows[i] && (rows[i][0] >> self->shift) < self->nslots) {
            const char *key = rec_key(&self->slots[rows[i][0] >> self->shift]);
            if (key)
                __builtin_prefetch(key);
        }
    }
}

/* n row pointers of the call's own (NULL with MemoryError set). */
static uint64_t **row_array(Py_ssize_t n) {
    uint64_t **rows = PyMem_Malloc((size_t)(n > 0 ? n : 1) * sizeof *rows);
    if (!rows)
        PyErr_NoMemory();
    return rows;
}

static void pin_slot(SlotIndex *self, slot_rec *rec) {
    if (rec->pins++ == 0)
        self->pinned++;
}

/* ------------------------------------------------------------------ construction */

static PyObject *SlotIndex_new(PyTypeObject *type, PyObject *args, PyObject *kwds) {
    static char *kwlist[] = {"slots", "slot_shift", "segment_slots", NULL};
    Py_ssize_t nslots = 0, segment_slots = DEFAULT_SEGMENT_SLOTS;
    int shift = 12;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "ni|n:SlotIndex", kwlist, &nslots, &shift, &segment_slots))
        return NULL;
    if (nslots < 1 || (size_t)nslots > SIZE_MAX / sizeof(slot_rec)) {
        PyErr_Format(PyExc_ValueError, "slots must be >= 1, got %zd", nslots);
        return NULL;
    }
    if (shift < 0 || shift > 40) {
        PyErr_Format(PyExc_ValueError, "slot_shift must be in 0..40, got %d", shift);
        return NULL;
    }
    size_t seg = hm_segtable_round_segment_slots(
        segment_slots < (Py_ssize_t)HM_TABLE_MIN_CAPACITY ? HM_TABLE_MIN_CAPACITY : (size_t)segment_slots, ROW_WORDS);
    if (seg == 0) {
        PyErr_Format(PyExc_ValueError, "segment_slots %zd is too large", segment_slots);
        return NULL;
    }
    SlotIndex *self = (SlotIndex *)type->tp_alloc(type, 0);
    if (!self)
        return NULL;
    self->nslots = (size_t)nslots;
    self->shift = (unsigned)shift;
    /* faulted in now, in the kernel: a first touch per page on the data path cost ~5 us (a put of
     * 128 pages spread over 8 record pages: 40 us) */
    void *recs = mmap(NULL, (size_t)nslots * sizeof(slot_rec), PROT_READ | PROT_WRITE,
                      MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
    self->slots = recs == MAP_FAILED ? NULL : recs;
    if (!self->slots || hm_segtable_init(&self->table, ROW_WORDS, HM_TABLE_MIN_CAPACITY * 128, seg) < 0) {
        Py_DECREF(self);
        return PyErr_NoMemory();
    }
    self->table_ready = 1;
    return (PyObject *)self;
}

static void SlotIndex_dealloc(SlotIndex *self) {
    if (self->slots) {
        for (size_t i = 0; i < self->nslots; i++)
            free((char *)rec_key(&self->slots[i]));
        munmap(self->slots, self->nslots * sizeof(slot_rec));
    }
    if (self->table_ready)
        hm_segtable_free(&self->table);
    PyMem_Free(self->freed);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* ------------------------------------------------------------------ lookups */

/* lookup(keys, fps, out_found, out_occupied, out_rows): each key's row (zeros without one);
 * found: the row's slot holds this key; occupied: a row exists for its fingerprint. */
static PyObject *SlotIndex_lookup(SlotIndex *self, PyObject *const *args, Py_ssize_t nargs) {
    if (wrong_nargs(nargs, 5, "lookup(keys, fps, out_found, out_occupied, out_rows)") < 0)
        return NULL;
    borrowed bs = {.n = 0};
    uint64_t *fps, *rows, **found_rows = NULL;
    unsigned char *found, *occupied;
    Py_ssize_t n;
    PyObject *keys = NULL, *result = NULL;
    if (arg_u64(&bs, args[1], "fps", 0, -1, &fps, &n) < 0 || !(keys = arg_keys(args[0], n)) ||
        arg_bool_out(&bs, args[2], "out_found", n, &found) < 0 ||
        arg_bool_out(&bs, args[3], "out_occupied", n, &occupied) < 0 ||
        arg_u64(&bs, args[4], "out_rows", 1, n * (Py_ssize_t)ROW_WORDS, &rows, NULL) < 0)
        goto done;
    PyObject **items = PySequence_Fast_ITEMS(keys);
    if (!(found_rows = row_array(n)))
        goto done;
    find_rows(self, fps, n, found_rows);
    for (Py_ssize_t i = 0; i < n; i++) {
        const uint64_t *row = found_rows[i];
        int r = row_key(self, row, items[i], i);
        if (r == -2)
            goto done;
        found[i] = r == 1;
        occupied[i] = r >= 0;
        for (unsigned w = 0; w < ROW_WORDS; w++)
            rows[i * ROW_WORDS + w] = row ? row[w] : 0;
    }
    result = Py_NewRef(Py_None);
done:
    PyMem_Free(found_rows);
    Py_XDECREF(keys);
    release_all(&bs);
    return result;
}

/* sizes(keys, fps, out_sizes) -> collisions: each key's published size, -1 where it is absent
 * (its fingerprint held by another key included: those are counted and returned); no read is
 * counted. What a set screens its batch with, without the rows. */
static PyObject *SlotIndex_sizes(SlotIndex *self, PyObject *const *args, Py_ssize_t nargs) {
    if (wrong_nargs(nargs, 3, "sizes(keys, fps, out_sizes)") < 0)
        return NULL;
    borrowed bs = {.n = 0};
    uint64_t *fps, **found_rows = NULL;
    int64_t *sizes;
    Py_ssize_t n, collisions = 0;
    PyObject *keys = NULL, *result = NULL;
    if (arg_u64(&bs, args[1], "fps", 0, -1, &fps, &n) < 0 || !(keys = arg_keys(args[0], n)) ||
        arg_i64_out(&bs, args[2], "out_sizes", n, &sizes) < 0)
        goto done;
    PyObject **items = PySequence_Fast_ITEMS(keys);
    if (!(found_rows = row_array(n)))
        goto done;
    find_rows(self, fps, n, found_rows);
    for (Py_ssize_t i = 0; i < n; i++) {
        int r = row_key(self, found_rows[i], items[i], i);
        if (r == -2)
            goto done;
        collisions += r == 0;
        sizes[i] = r == 1 ? (int64_t)(found_rows[i][1] & SIZE_MASK) : -1;
    }
    result = PyLong_FromSsize_t(collisions);
done:
    PyMem_Free(found_rows);
    Py_XDECREF(keys);
    release_all(&bs);
    return result;
}

/* read_into(keys, fps, arena, pages) -> (hits, hit, freed): every key found whose row's size is
 * its page's (the page's parts together) is pinned, counted as a read and copied out of the arena
 * (from its slot offset, the page's parts back to back) into its page's parts, then unpinned.
 * Only the pages of keys found are borrowed (a miss costs no look at its parts). The GIL is
 * released once, for the copies (of more than HM_GIL_KEEP_BYTES). hits: the keys copied; hit:
 * None when every key was, else a list of bools; freed: zombies on the freed list (this call's
 * last pins included) for the caller to take. All or nothing on bad arguments (a found key's part
 * that is not one writable C-contiguous buffer, a key that is not a str, a row whose page would
 * not fit the arena, pages not one per key): the error, and nothing pinned, counted or copied. */
static PyObject *SlotIndex_read_into(SlotIndex *self, PyObject *const *args, Py_ssize_t nargs) {
    if (wrong_nargs(nargs, 4, "read_into(keys, fps, arena, pages)") < 0)
        return NULL;
    borrowed bs = {.n = 0};
    uint64_t *fps, **found_rows = NULL, *slot = NULL;
    Py_ssize_t *found = NULL, *which = NULL, n, npages;
    PyObject *keys = NULL, *hit = NULL, *result = NULL;
    Py_buffer arena;
    int have_arena = 0, have_pages = 0;
    hm_pages pages;
    if (arg_u64(&bs, args[1], "fps", 0, -1, &fps, &n) < 0 || !(keys = arg_keys(args[0], n)))
        goto done;
    if ((npages = PyObject_Length(args[3])) < 0 || hm_check_len("pages", npages, "keys", n) < 0)
        goto done;
    if (hm_get_bytes(args[2], "arena", 0, &arena) < 0)
        goto done;
    have_arena = 1;
    PyObject **items = PySequence_Fast_ITEMS(keys);
    size_t room = n > 0 ? (size_t)n : 1;
    found_rows = row_array(n);
    found = PyMem_Malloc(room * sizeof *found);
    which = PyMem_Malloc(room * sizeof *which);
    slot = PyMem_Malloc(room * sizeof *slot);
    if (!found_rows || !found || !which || !slot) {
        PyErr_NoMemory();
        goto done;
    }
    find_rows(self, fps, n, found_rows);
    Py_ssize_t nfound = 0, collided = 0, k = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        int r = row_key(self, found_rows[i], items[i], i);
        if (r == -2)
            goto done;
        if (r == 0)
            collided++;
        if (r == 1)
            found[nfound++] = i;
    }
    /* the found keys' pages only; borrowed page c is the caller's page found[c] */
    if (hm_pages_borrow(args[3], 1, found, nfound, &pages) < 0)
        goto done;
    have_pages = 1;
    /* Borrowing may run an exporter's code, and another thread with it: the rows are looked up
     * again, and nothing runs between that lookup and the pins (a key gone meanwhile is a miss;
     * one published meanwhile, not borrowed, too). */
    find_rows(self, fps, n, found_rows);
    Py_ssize_t still = 0;
    for (Py_ssize_t c = 0; c < nfound; c++) {
        const uint64_t *row = found_rows[found[c]];
        if (row_key(self, row, items[found[c]], found[c]) != 1) /* a str: checked above */
            continue;
        still++;
        if ((row[1] & SIZE_MASK) == pages.bytes[c]) {
            which[k] = c;
            slot[k++] = row[0];
        }
    }
    nfound = still;
    if (hm_pages_check(&pages, which, slot, k, (uint64_t)arena.len) < 0)
        goto done;
    for (Py_ssize_t j = 0; j < k; j++) { /* every key and range checked: now the pins */
        slot_rec *rec = &self->slots[slot[j] >> self->shift];
        pin_slot(self, rec);
        if (rec->reads < READS_MAX) /* saturates: a count, not an identity */
            rec->reads++;
    }
    uint64_t total = hm_pages_total(&pages, which, k);
    char *base = arena.buf;
    HM_MAYBE_WITHOUT_GIL(total > HM_GIL_KEEP_BYTES,
                         hm_pages_copy(&pages, which, slot, k, base, 0, total >= HM_SLOT_STREAM_TOTAL));
    for (Py_ssize_t j = 0; j < k; j++)
        unpin_slot(self, slot[j]);
    self->hits += (uint64_t)k;
    self->hit_bytes += total;
    self->misses += (uint64_t)(n - nfound);
    self->size_mismatch += (uint64_t)(nfound - k);
    self->collisions += (uint64_t)collided;
    if (k == n) {
        hit = Py_NewRef(Py_None);
    } else if ((hit = PyList_New(n))) {
        for (Py_ssize_t i = 0; i < n; i++)
            PyList_SET_ITEM(hit, i, Py_NewRef(Py_False));
        for (Py_ssize_t j = 0; j < k; j++)
            Py_SETREF(PyList_GET_ITEM(hit, found[which[j]]), Py_NewRef(Py_True));
    }
    if (hit) /* without it (no memory), the copies still counted: the caller sees the error */
        result = Py_BuildValue("(nNn)", k, hit, (Py_ssize_t)self->freed_n);
done:
    PyMem_Free(found_rows);
    PyMem_Free(found);
    PyMem_Free(which);
    PyMem_Free(slot);
    if (have_pages)
        hm_pages_release(&pages);
    if (have_arena)
        PyBuffer_Release(&arena);
    Py_XDECREF(keys);
    release_all(&bs);
    return result;
}

/* take_freed() -> list of (offset, size): the zombies whose last pin went since the last call,
 * for the caller to give back to its allocator; the list is empty afterwards. */
static PyObject *SlotIndex_take_freed(SlotIndex *self, PyObject *unused) {
    (void)unused;
    PyObject *out = PyList_New((Py_ssize_t)self->freed_n);
    if (!out)
        return NULL;
    for (size_t i = 0; i < self->freed_n; i++) {
        PyObject *pair = Py_BuildValue("(KK)", (unsigned long long)self->freed[2 * i],
                                       (unsigned long long)self->freed[2 * i + 1]);
        if (!pair) {
            Py_DECREF(out);
            return NULL; /* nothing taken: the list stays for the next call */
        }
        PyList_SET_ITEM(out, (Py_ssize_t)i, pair);
    }
    self->zombies -= self->freed_n;
    self->freed_n = 0;
    return out;
}

/* Checks every offset (a slot of this index); -1 with ValueError naming the first bad one. */
static int check_offsets(const SlotIndex *self, const uint64_t *offsets, Py_ssize_t n, const char *what) {
    for (Py_ssize_t i = 0; i < n; i++)
        if (slot_of(self, offsets[i], what, i) < 0)
            return -1;
    return 0;
}

/* pin(offsets, out_reads): one more pin on each slot (no read counted); reads[i]: the slot's
 * reads so far. */
static PyObject *SlotIndex_pin(SlotIndex *self, PyObject *const *args, Py_ssize_t nargs) {
    if (wrong_nargs(nargs, 2, "pin(offsets, out_reads)") < 0)
        return NULL;
    borrowed bs = {.n = 0};
    uint64_t *offsets, *reads;
    Py_ssize_t n;
    PyObject *result = NULL;
    if (arg_u64(&bs, args[0], "offsets", 0, -1, &offsets, &n) < 0 ||
        arg_u64(&bs, args[1], "out_reads", 1, n, &reads, NULL) < 0 || check_offsets(self, offsets, n, "offsets") < 0)
        goto done;
    for (Py_ssize_t i = 0; i < n; i++) {
        slot_rec *rec = &self->slots[offsets[i] >> self->shift];
        pin_slot(self, rec);
        reads[i] = rec->reads == READS_ZOMBIE ? 0 : rec->reads;
    }
    result = Py_NewRef(Py_None);
done:
    release_all(&bs);
    return result;
}

/* pin_found(keys, fps, out_found, out_rows, out_reads) -> pinned: lookup (as lookup) and one
 * more pin (no read counted) on the slot of every key found, in one call: nobody can free a slot
 * between its lookup and its pin. reads[i]: the found slot's reads so far (0 elsewhere). */
static PyObject *SlotIndex_pin_found(SlotIndex *self, PyObject *const *args, Py_ssize_t nargs) {
    if (wrong_nargs(nargs, 5, "pin_found(keys, fps, out_found, out_rows, out_reads)") < 0)
        return NULL;
    borrowed bs = {.n = 0};
    uint64_t *fps, *rows, *reads, **found_rows = NULL;
    unsigned char *found;
    Py_ssize_t n, pinned = 0;
    PyObject *keys = NULL, *result = NULL;
    if (arg_u64(&bs, args[1], "fps", 0, -1, &fps, &n) < 0 || !(keys = arg_keys(args[0], n)) ||
        arg_bool_out(&bs, args[2], "out_found", n, &found) < 0 ||
        arg_u64(&bs, args[3], "out_rows", 1, n * (Py_ssize_t)ROW_WORDS, &rows, NULL) < 0 ||
        arg_u64(&bs, args[4], "out_reads", 1, n, &reads, NULL) < 0)
        goto done;
    PyObject **items = PySequence_Fast_ITEMS(keys);
    if (!(found_rows = row_array(n)))
        goto done;
    find_rows(self, fps, n, found_rows);
    for (Py_ssize_t i = 0; i < n; i++) { /* every key checked before the first pin */
        int r = row_key(self, found_rows[i], items[i], i);
        if (r == -2)
            goto done;
        found[i] = r == 1;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        const uint64_t *row = found[i] ? found_rows[i] : NULL;
        for (unsigned w = 0; w < ROW_WORDS; w++)
            rows[i * ROW_WORDS + w] = row ? row[w] : 0;
        reads[i] = 0;
        if (row) {
            slot_rec *rec = &self->slots[row[0] >> self->shift];
            pin_slot(self, rec);
            reads[i] = rec->reads;
            pinned++;
        }
    }
    result = PyLong_FromSsize_t(pinned);
done:
    PyMem_Free(found_rows);
    Py_XDECREF(keys);
    release_all(&bs);
    return result;
}

/* count_reads(offsets): one more read of each slot (a one-sided reader located it). */
static PyObject *SlotIndex_count_reads(SlotIndex *self, PyObject *arg) {
    borrowed bs = {.n = 0};
    uint64_t *offsets;
    Py_ssize_t n;
    PyObject *result = NULL;
    if (arg_u64(&bs, arg, "offsets", 0, -1, &offsets, &n) < 0 || check_offsets(self, offsets, n, "offsets") < 0)
        goto done;
    for (Py_ssize_t i = 0; i < n; i++) /* a zombie's reads (READS_ZOMBIE) are above READS_MAX */
        if (self->slots[offsets[i] >> self->shift].reads < READS_MAX)
            self->slots[offsets[i] >> self->shift].reads++;
    result = Py_NewRef(Py_None);
done:
    release_all(&bs);
    return result;
}

/* unpin(offsets) -> freed: one pin less on each slot; a zombie's last pin puts it on the freed
 * list; freed: the zombies on that list. A slot given more often than it is pinned: ValueError,
 * no pin dropped. */
static PyObject *SlotIndex_unpin(SlotIndex *self, PyObject *arg) {
    borrowed bs = {.n = 0};
    uint64_t *offsets;
    Py_ssize_t n, i;
    PyObject *result = NULL;
    if (arg_u64(&bs, arg, "offsets", 0, -1, &offsets, &n) < 0 || check_offsets(self, offsets, n, "offsets") < 0)
        goto done;
    for (i = 0; i < n; i++) { /* counted down first: a slot short of pins refuses the whole call */
        slot_rec *rec = &self->slots[offsets[i] >> self->shift];
        if (rec->pins == 0)
            break;
        rec->pins--;
    }
    for (Py_ssize_t j = i - 1; j >= 0; j--) /* back up; the pins go below through unpin_slot */
        self->slots[offsets[j] >> self->shift].pins++;
    if (i < n) {
        PyErr_Format(PyExc_ValueError, "offsets[%zd] = %llu is not pinned", i, (unsigned long long)offsets[i]);
        goto done;
    }
    for (i = 0; i < n; i++)
        unpin_slot(self, offsets[i]);
    result = PyLong_FromSize_t(self->freed_n);
done:
    release_all(&bs);
    return result;
}

/* pinned(offsets, out): whether each slot is pinned. */
static PyObject *SlotIndex_pinned(SlotIndex *self, PyObject *const *args, Py_ssize_t nargs) {
    if (wrong_nargs(nargs, 2, "pinned(offsets, out)") < 0)
        return NULL;
    borrowed bs = {.n = 0};
    uint64_t *offsets;
    unsigned char *out;
    Py_ssize_t n;
    PyObject *result = NULL;
    if (arg_u64(&bs, args[0], "offsets", 0, -1, &offsets, &n) < 0 || arg_bool_out(&bs, args[1], "out", n, &out) < 0 ||
        check_offsets(self, offsets, n, "offsets") < 0)
        goto done;
    for (Py_ssize_t i = 0; i < n; i++)
        out[i] = self->pinned && self->slots[offsets[i] >> self->shift].pins > 0;
    result = Py_NewRef(Py_None);
done:
    release_all(&bs);
    return result;
}

/* pinned_offsets() -> list of the offsets of every pinned slot (a scan of the slots unless none is). */
static PyObject *SlotIndex_pinned_offsets(SlotIndex *self, PyObject *unused) {
    (void)unused;
    PyObject *out = PyList_New(0);
    if (!out || !self->pinned)
        return out;
    for (size_t i = 0; i < self->nslots; i++) {
        if (!self->slots[i].pins)
            continue;
        PyObject *v = PyLong_FromUnsignedLongLong((unsigned long long)i << self->shift);
        if (!v || PyList_Append(out, v) < 0) {
            Py_XDECREF(v);
            Py_DECREF(out);
            return NULL;
        }
        Py_DECREF(v);
    }
    return out;
}

/* ------------------------------------------------------------------ changes */

static int cmp_u64(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* publish(keys, fps, rows, out_status): each key at the slot of its row (rows: n x 3 words, the
 * slot offset first). status[i]: 1 published; 0 the key is published already (a row of the table
 * or an earlier item of this batch: its first value stays); -1 another key holds the fingerprint.
 * Refused before any change: an offset that is not a slot, a slot that holds a key, a slot given
 * twice, a key that is not a str. */
static PyObject *SlotIndex_publish(SlotIndex *self, PyObject *const *args, Py_ssize_t nargs) {
    if (wrong_nargs(nargs, 4, "publish(keys, fps, rows, out_status)") < 0)
        return NULL;
    borrowed bs = {.n = 0};
    uint64_t *fps, *rows;
    int64_t *status;
    Py_ssize_t n, len;
    PyObject *keys = NULL, *result = NULL;
    uint64_t *sorted = NULL;
    if (arg_u64(&bs, args[1], "fps", 0, -1, &fps, &n) < 0 || !(keys = arg_keys(args[0], n)) ||
        arg_u64(&bs, args[2], "rows", 0, n * (Py_ssize_t)ROW_WORDS, &rows, NULL) < 0 ||
        arg_i64_out(&bs, args[3], "out_status", n, &status) < 0)
        goto done;
    PyObject **items = PySequence_Fast_ITEMS(keys);
    sorted = malloc((size_t)(n ? n : 1) * sizeof *sorted);
    if (!sorted) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t i = 0; i < n; i++) { /* the batch's misses overlapped (find_rows) */
        if (fps[i])
            hm_segtable_prefetch(&self->table, fps[i]);
        if ((rows[i * ROW_WORDS] >> self->shift) < self->nslots)
            __builtin_prefetch(&self->slots[rows[i * ROW_WORDS] >> self->shift], 1);
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        if (fps[i] == 0) {
            PyErr_Format(PyExc_ValueError, "fps[%zd] is 0 (fingerprints are never 0)", i);
            goto done;
        }
        Py_ssize_t slot = slot_of(self, rows[i * ROW_WORDS], "rows", i);
        if (slot < 0 || !key_bytes(items[i], i, &len))
            goto done;
        if (self->slots[slot].reads == READS_ZOMBIE || self->slots[slot].u.key) {
            PyErr_Format(PyExc_ValueError, "rows[%zd]: slot offset %llu holds %s", i,
                         (unsigned long long)rows[i * ROW_WORDS],
                         self->slots[slot].reads == READS_ZOMBIE ? "a removed object a reader still pins"
                                                                 : "a published key");
            goto done;
        }
        sorted[i] = (uint64_t)slot;
    }
    qsort(sorted, (size_t)n, sizeof *sorted, cmp_u64);
    for (Py_ssize_t i = 1; i < n; i++) {
        if (sorted[i] == sorted[i - 1]) {
            PyErr_Format(PyExc_ValueError, "rows: slot offset %llu is given twice",
                         (unsigned long long)(sorted[i] << self->shift));
            goto done;
        }
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        uint64_t *row;
        int r = find_key(self, fps[i], items[i], i, &row);
        if (r >= 0) {
            status[i] = r == 1 ? 0 : -1;
            continue;
        }
        const char *k = PyUnicode_AsUTF8AndSize(items[i], &len); /* cached by the check above */
        uint32_t klen = (uint32_t)len;
        char *block = (size_t)len <= UINT32_MAX ? malloc(sizeof klen + (size_t)len) : NULL;
        if (!block || hm_segtable_put(&self->table, fps[i], rows + i * ROW_WORDS, 1) < 0) {
            free(block);
            PyErr_Format(PyExc_MemoryError, "SlotIndex.publish: out of memory after %zd of %zd keys", i, n);
            goto done;
        }
        memcpy(block, &klen, sizeof klen);
        memcpy(block + sizeof klen, k, (size_t)len);
        slot_rec *rec = &self->slots[rows[i * ROW_WORDS] >> self->shift];
        rec->u.key = block;
        rec->reads = 0;
        self->key_bytes += sizeof klen + (size_t)len;
        status[i] = 1;
    }
    result = Py_NewRef(Py_None);
done:
    free(sorted);
    Py_XDECREF(keys);
    release_all(&bs);
    return result;
}

/* remove(fps, offsets, out_pinned) -> removed: drops the row of fps[i] where it is at offsets[i]
 * (its slot's key with it); pinned[i]: the slot is pinned by a reader, and became a zombie if its
 * row was dropped (the freed list gives it back with its last pin); the caller frees the others. */
static PyObject *SlotIndex_remove(SlotIndex *self, PyObject *const *args, Py_ssize_t nargs) {
    if (wrong_nargs(nargs, 3, "remove(fps, offsets, out_pinned)") < 0)
        return NULL;
    borrowed bs = {.n = 0};
    uint64_t *fps, *offsets;
    unsigned char *pinned;
    Py_ssize_t n, removed = 0;
    size_t held = 0;
    PyObject *result = NULL;
    if (arg_u64(&bs, args[0], "fps", 0, -1, &fps, &n) < 0 || arg_u64(&bs, args[1], "offsets", 0, n, &offsets, NULL) < 0 ||
        arg_bool_out(&bs, args[2], "out_pinned", n, &pinned) < 0 || check_offsets(self, offsets, n, "offsets") < 0)
        goto done;
    for (Py_ssize_t i = 0; i < n; i++)
        held += self->slots[offsets[i] >> self->shift].pins > 0;
    if (held && reserve_zombies(self, held) < 0)
        goto done;
    for (Py_ssize_t i = 0; i < n; i++) {
        slot_rec *rec = &self->slots[offsets[i] >> self->shift];
        pinned[i] = rec->pins > 0;
        uint64_t *row = fps[i] ? hm_segtable_find(&self->table, fps[i]) : NULL;
        if (!row || row[0] != offsets[i])
            continue;
        uint64_t nbytes = row[1] & SIZE_MASK;
        hm_segtable_remove(&self->table, fps[i], &offsets[i]);
        removed++;
        if (rec->pins > 0)
            make_zombie(self, rec, nbytes);
        else
            drop_key(self, rec);
    }
    result = PyLong_FromSsize_t(removed);
done:
    release_all(&bs);
    return result;
}

/* move(fp, key, old_offset, new_offset) -> bool: the row of `key` points at new_offset if it is
 * still at old_offset (relocation); the key and the reads go with it, the pins stay, and the old
 * slot, which the caller pins (ValueError otherwise, nothing changed), becomes a zombie. */
static PyObject *SlotIndex_move(SlotIndex *self, PyObject *const *args, Py_ssize_t nargs) {
    if (wrong_nargs(nargs, 4, "move(fp, key, old_offset, new_offset)") < 0)
        return NULL;
    uint64_t fp, old, new_;
    if (hm_parse_u64(args[0], "fp", &fp) < 0 || hm_parse_u64(args[2], "old_offset", &old) < 0 ||
        hm_parse_u64(args[3], "new_offset", &new_) < 0)
        return NULL;
    Py_ssize_t os = slot_of(self, old, "old_offset", 0), ns = slot_of(self, new_, "new_offset", 0);
    if (os < 0 || ns < 0)
        return NULL;
    uint64_t *row;
    int r = find_key(self, fp, args[1], 0, &row);
    if (r == -2)
        return NULL;
    if (r != 1 || row[0] != old || os == ns)
        Py_RETURN_FALSE;
    slot_rec *from = &self->slots[os], *to = &self->slots[ns];
    if (to->reads == READS_ZOMBIE || to->u.key) {
        PyErr_Format(PyExc_ValueError, "new_offset %llu holds a published key or a pinned removed object",
                     (unsigned long long)new_);
        return NULL;
    }
    if (!from->pins) {
        PyErr_Format(PyExc_ValueError, "old_offset %llu is not pinned by the caller", (unsigned long long)old);
        return NULL;
    }
    if (reserve_zombies(self, 1) < 0)
        return NULL;
    row[0] = new_;
    to->u.key = from->u.key;
    to->reads = from->reads;
    from->u.key = NULL; /* the key went with the row: the zombie keeps only the size */
    make_zombie(self, from, row[1] & SIZE_MASK);
    Py_RETURN_TRUE;
}

/* key_at(offset) -> the key published at that slot, or None. */
static PyObject *SlotIndex_key_at(SlotIndex *self, PyObject *arg) {
    uint64_t offset;
    if (hm_parse_u64(arg, "offset", &offset) < 0)
        return NULL;
    Py_ssize_t slot = slot_of(self, offset, "offset", 0);
    if (slot < 0)
        return NULL;
    const char *block = rec_key(&self->slots[slot]);
    if (!block)
        Py_RETURN_NONE;
    uint32_t len;
    memcpy(&len, block, sizeof len);
    return PyUnicode_DecodeUTF8(block + sizeof len, len, "strict");
}

/* rows_into(out_fps, out_rows) -> keys: every row (fps[i], rows[i]) and its key, in table order;
 * the arrays must hold exactly len(self) rows. */
static PyObject *SlotIndex_rows_into(SlotIndex *self, PyObject *const *args, Py_ssize_t nargs) {
    if (wrong_nargs(nargs, 2, "rows_into(out_fps, out_rows)") < 0)
        return NULL;
    borrowed bs = {.n = 0};
    uint64_t *fps, *rows;
    Py_ssize_t n = (Py_ssize_t)self->table.count;
    PyObject *keys = NULL;
    if (arg_u64(&bs, args[0], "out_fps", 1, n, &fps, NULL) < 0 ||
        arg_u64(&bs, args[1], "out_rows", 1, n * (Py_ssize_t)ROW_WORDS, &rows, NULL) < 0)
        goto done;
    hm_segtable_copy_out(&self->table, fps, rows, (size_t)n);
    keys = PyList_New(n);
    if (!keys)
        goto done;
    for (Py_ssize_t i = 0; i < n; i++) {
        uint64_t slot = rows[i * ROW_WORDS] >> self->shift;
        const char *block = slot < self->nslots ? rec_key(&self->slots[slot]) : NULL;
        if (!block) { /* a row's slot holds its key (invariant): never here */
            PyErr_Format(PyExc_SystemError, "SlotIndex: row %zd's slot holds no key", i);
            Py_CLEAR(keys);
            goto done;
        }
        uint32_t len;
        memcpy(&len, block, sizeof len);
        PyObject *key = PyUnicode_DecodeUTF8(block + sizeof len, len, "strict");
        if (!key) {
            Py_CLEAR(keys);
            goto done;
        }
        PyList_SET_ITEM(keys, i, key);
    }
done:
    release_all(&bs);
    return keys;
}

/* clear(): drops every row and its slot's key; a pinned slot becomes a zombie (pins and reads
 * stay: readers still hold slots). MemoryError and nothing changed when the rows cannot be
 * listed. */
static PyObject *SlotIndex_clear(SlotIndex *self, PyObject *unused) {
    (void)unused;
    size_t n = self->table.count;
    uint64_t *fps = malloc((n ? n : 1) * sizeof *fps), *rows = malloc((n ? n : 1) * ROW_WORDS * sizeof *rows);
    if (!fps || !rows || reserve_zombies(self, self->pinned) < 0) {
        free(fps);
        free(rows);
        return PyErr_Occurred() ? NULL : PyErr_NoMemory();
    }
    hm_segtable_copy_out(&self->table, fps, rows, n);
    for (size_t i = 0; i < n; i++) {
        slot_rec *rec = &self->slots[rows[i * ROW_WORDS] >> self->shift];
        if (rec->pins > 0)
            make_zombie(self, rec, rows[i * ROW_WORDS + 1] & SIZE_MASK);
        else
            drop_key(self, rec);
    }
    free(fps);
    free(rows);
    hm_segtable_clear(&self->table);
    Py_RETURN_NONE;
}

static Py_ssize_t SlotIndex_len(SlotIndex *self) {
    return (Py_ssize_t)self->table.count;
}

static PyObject *SlotIndex_get_nbytes(SlotIndex *self, void *closure) {
    (void)closure;
    return PyLong_FromSize_t(hm_segtable_nbytes(&self->table) + self->nslots * sizeof(slot_rec) + self->key_bytes);
}

static PyObject *SlotIndex_get_pinned_count(SlotIndex *self, void *closure) {
    (void)closure;
    return PyLong_FromSize_t(self->pinned);
}

static PyObject *SlotIndex_get_zombie_count(SlotIndex *self, void *closure) {
    (void)closure;
    return PyLong_FromSize_t(self->zombies);
}

static PyObject *SlotIndex_get_read_counts(SlotIndex *self, void *closure) {
    (void)closure;
    return Py_BuildValue("{sKsKsKsKsK}", "hits", (unsigned long long)self->hits, "hit_bytes",
                         (unsigned long long)self->hit_bytes, "misses", (unsigned long long)self->misses,
                         "size_mismatch", (unsigned long long)self->size_mismatch, "fingerprint_collisions",
                         (unsigned long long)self->collisions);
}

static PyMethodDef SlotIndex_methods[] = {
    {"lookup", HM_FASTCALL(SlotIndex_lookup), METH_FASTCALL, "lookup(keys, fps, out_found, out_occupied, out_rows)"},
    {"sizes", HM_FASTCALL(SlotIndex_sizes), METH_FASTCALL, "sizes(keys, fps, out_sizes) -> collisions"},
    {"read_into", HM_FASTCALL(SlotIndex_read_into), METH_FASTCALL,
     "read_into(keys, fps, arena, pages) -> (hits, hit, freed)"},
    {"take_freed", (PyCFunction)SlotIndex_take_freed, METH_NOARGS, "take_freed() -> list of (offset, size)"},
    {"pin", HM_FASTCALL(SlotIndex_pin), METH_FASTCALL, "pin(offsets, out_reads)"},
    {"pin_found", HM_FASTCALL(SlotIndex_pin_found), METH_FASTCALL,
     "pin_found(keys, fps, out_found, out_rows, out_reads) -> pinned"},
    {"count_reads", (PyCFunction)SlotIndex_count_reads, METH_O, "count_reads(offsets)"},
    {"unpin", (PyCFunction)SlotIndex_unpin, METH_O, "unpin(offsets) -> freed"},
    {"pinned", HM_FASTCALL(SlotIndex_pinned), METH_FASTCALL, "pinned(offsets, out)"},
    {"pinned_offsets", (PyCFunction)SlotIndex_pinned_offsets, METH_NOARGS, "pinned_offsets() -> list"},
    {"publish", HM_FASTCALL(SlotIndex_publish), METH_FASTCALL, "publish(keys, fps, rows, out_status)"},
    {"remove", HM_FASTCALL(SlotIndex_remove), METH_FASTCALL, "remove(fps, offsets, out_pinned) -> removed"},
    {"move", HM_FASTCALL(SlotIndex_move), METH_FASTCALL, "move(fp, key, old_offset, new_offset) -> bool"},
    {"key_at", (PyCFunction)SlotIndex_key_at, METH_O, "key_at(offset) -> str | None"},
    {"rows_into", HM_FASTCALL(SlotIndex_rows_into), METH_FASTCALL, "rows_into(out_fps, out_rows) -> keys"},
    {"clear", (PyCFunction)SlotIndex_clear, METH_NOARGS, "clear()"},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef SlotIndex_getset[] = {
    {"nbytes", (getter)SlotIndex_get_nbytes, NULL, "bytes of the table, the slot records and the keys", NULL},
    {"pinned_count", (getter)SlotIndex_get_pinned_count, NULL, "slots pinned now", NULL},
    {"zombie_count", (getter)SlotIndex_get_zombie_count, NULL, "zombies not yet taken (pinned or freed)", NULL},
    {"read_counts", (getter)SlotIndex_get_read_counts, NULL, "read_into's hits, hit_bytes, misses, size_mismatch, "
     "fingerprint_collisions", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PySequenceMethods SlotIndex_as_sequence = {
    .sq_length = (lenfunc)SlotIndex_len,
};

PyTypeObject hm_SlotIndexType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "hicache_mooncake.native._core.SlotIndex",
    .tp_basicsize = sizeof(SlotIndex),
    .tp_dealloc = (destructor)SlotIndex_dealloc,
    .tp_as_sequence = &SlotIndex_as_sequence,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "The DRAM tier's index: fingerprint -> (slot offset, size | type << 48, version), with the key, "
              "pins and reads of every slot (the caller serialises calls).",
    .tp_methods = SlotIndex_methods,
    .tp_getset = SlotIndex_getset,
    .tp_new = SlotIndex_new,
};
