/* copy_slots / page_sizes (see hm_slots.h).
 *
 * A batch of pages, each a sequence of parts (any C-contiguous buffers: views into SGLang's host
 * pool), moves to or from the slots of one arena in one call: page i's parts lie back to back from
 * slot_offsets[i] on. The parts are borrowed (Py_buffer) with the GIL held, every range is checked
 * against the arena (overflow-safe), and only then is the GIL released, once, for the copies. All
 * or nothing: a bad page, part or range fails the call before any byte moves. The borrowed
 * buffers keep their exporters alive until the copies end, so another thread dropping its last
 * reference to a part meanwhile frees nothing under the copy.
 */
#include "hm_slots.h"

#include <string.h>

#include "hm_copy.h"

/* As copy_pages: a call of at least HM_SLOT_STREAM_TOTAL bytes writes its parts of at least this
 * many bytes with non-temporal stores. */
#define HM_SLOT_STREAM_ITEM 4096u

void hm_pages_release(hm_pages *p) {
    for (Py_ssize_t i = 0; i < p->nparts; i++)
        PyBuffer_Release(&p->parts[i]);
    PyMem_Free(p->parts);
    PyMem_Free(p->first);
    PyMem_Free(p->bytes);
    memset(p, 0, sizeof *p);
}

/* Pages pick[0..m) of `outer` (a fast sequence; pick NULL: its first m) as a list of pages, each a
 * list or tuple (any other iterable page is made one); NULL with TypeError naming the first page
 * that is not iterable (ValueError for a pick outside `outer`). *total: the parts of those pages. */
static PyObject *fast_pages(PyObject *outer, const Py_ssize_t *pick, Py_ssize_t m, Py_ssize_t *total) {
    Py_ssize_t n = PySequence_Fast_GET_SIZE(outer);
    PyObject *pages = PyList_New(m);
    if (!pages)
        return NULL;
    PyObject **items = PySequence_Fast_ITEMS(outer);
    *total = 0;
    for (Py_ssize_t c = 0; c < m; c++) {
        Py_ssize_t i = pick ? pick[c] : c;
        if (i < 0 || i >= n) {
            PyErr_Format(PyExc_ValueError, "page %zd of %zd pages picked", i, n);
            Py_DECREF(pages);
            return NULL;
        }
        PyObject *page = PySequence_Fast(items[i], "a page must be a sequence of buffers");
        if (!page) {
            PyErr_Format(PyExc_TypeError, "pages[%zd] must be a sequence of buffers, got %.80s", i,
                         Py_TYPE(items[i])->tp_name);
            Py_DECREF(pages);
            return NULL;
        }
        PyList_SET_ITEM(pages, c, page);
        *total += PySequence_Fast_GET_SIZE(page);
    }
    return pages;
}

int hm_pages_borrow(PyObject *arg, int writable, const Py_ssize_t *pick, Py_ssize_t m, hm_pages *out) {
    memset(out, 0, sizeof *out);
    PyObject *outer = PySequence_Fast(arg, "pages must be a sequence");
    if (!outer)
        return -1;
    if (!pick)
        m = PySequence_Fast_GET_SIZE(outer);
    Py_ssize_t total = 0;
    PyObject *pages = fast_pages(outer, pick, m, &total);
    Py_DECREF(outer); /* the picked pages are held by `pages` */
    if (!pages)
        return -1;
    Py_ssize_t n = m;
    out->pick = pick;
    size_t cap = total > 0 ? (size_t)total : 1;
    out->parts = PyMem_Malloc(cap * sizeof *out->parts);
    out->first = PyMem_Malloc(((size_t)n + 1) * sizeof *out->first);
    out->bytes = PyMem_Malloc((n > 0 ? (size_t)n : 1) * sizeof *out->bytes);
    if (!out->parts || !out->first || !out->bytes) {
        PyErr_NoMemory();
        goto fail;
    }
    int flags = PyBUF_C_CONTIGUOUS | (writable ? PyBUF_WRITABLE : 0);
    PyObject **items = PySequence_Fast_ITEMS(pages);
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *page = items[i];
        uint64_t bytes = 0;
        out->first[i] = out->nparts;
        /* the page's size and items are read again for every part, and each part is held while
         * it is borrowed: an exporter running code cannot leave a dangling pointer here */
        for (Py_ssize_t j = 0; j < PySequence_Fast_GET_SIZE(page); j++) {
            if ((size_t)out->nparts >= cap) { /* a page grew since it was counted */
                PyErr_SetString(PyExc_ValueError, "pages changed while they were borrowed");
                goto fail;
            }
            Py_buffer *b = &out->parts[out->nparts];
            PyObject *part = PySequence_Fast_ITEMS(page)[j];
            Py_INCREF(part);
            int got = PyObject_GetBuffer(part, b, flags);
            Py_DECREF(part); /* a borrowed buffer holds its own reference to its exporter */
            if (got < 0) {
                PyObject *type, *value, *tb;
                PyErr_Fetch(&type, &value, &tb);
                PyErr_Format(PyExc_BufferError, "pages[%zd][%zd]: not one %sC-contiguous buffer",
                             pick ? pick[i] : i, j, writable ? "writable " : "");
                Py_XDECREF(type);
                Py_XDECREF(value);
                Py_XDECREF(tb);
                goto fail;
            }
            out->nparts++;
            bytes += (uint64_t)b->len; /* each part is a live object: no overflow in practice */
        }
        out->bytes[i] = bytes;
    }
    out->first[n] = out->nparts;
    out->npages = n;
    Py_DECREF(pages);
    return 0;
fail:
    hm_pages_release(out);
    Py_DECREF(pages);
    return -1;
}

/* The page of the c-th copy. */
static inline Py_ssize_t page_of(const Py_ssize_t *which, Py_ssize_t c) {
    return which ? which[c] : c;
}

int hm_pages_check(const hm_pages *p, const Py_ssize_t *which, const uint64_t *slot, Py_ssize_t k, uint64_t size) {
    for (Py_ssize_t c = 0; c < k; c++) {
        Py_ssize_t i = page_of(which, c);
        uint64_t pos = slot[c];
        for (Py_ssize_t j = p->first[i]; j < p->first[i + 1]; j++) {
            uint64_t len = (uint64_t)p->parts[j].len;
            if (!hm_in_bounds(pos, len, size)) {
                PyErr_Format(PyExc_ValueError,
                             "pages[%zd][%zd]: arena offset %llu + length %llu outside an arena of %llu bytes",
                             p->pick ? p->pick[i] : i, j - p->first[i], (unsigned long long)pos,
                             (unsigned long long)len, (unsigned long long)size);
                return -1;
            }
            pos += len;
        }
    }
    return 0;
}

uint64_t hm_pages_total(const hm_pages *p, const Py_ssize_t *which, Py_ssize_t k) {
    uint64_t total = 0;
    for (Py_ssize_t c = 0; c < k; c++)
        total += p->bytes[page_of(which, c)]; /* each is inside the arena (checked): no overflow */
    return total;
}

void hm_pages_copy(const hm_pages *p, const Py_ssize_t *which, const uint64_t *slot, Py_ssize_t k, char *arena,
                   int into, int stream) {
    for (Py_ssize_t c = 0; c < k; c++) {
        Py_ssize_t i = page_of(which, c);
        char *at = arena + slot[c];
        for (Py_ssize_t j = p->first[i]; j < p->first[i + 1]; j++) {
            size_t len = (size_t)p->parts[j].len;
            char *to = into ? at : p->parts[j].buf;
            const char *from = into ? p->parts[j].buf : at;
            uintptr_t x = (uintptr_t)to, y = (uintptr_t)from;
            if (stream && len >= HM_SLOT_STREAM_ITEM && (x + len <= y || y + len <= x))
                hm_copy_streaming(to, from, len);
            else if (len)
                memmove(to, from, len);
            at += len;
        }
    }
    if (stream)
        hm_copy_fence();
}

/* copy_slots(arena, slot_offsets: u64[n], pages, into_arena: bool) -> None. */
PyObject *hm_py_copy_slots(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    if (nargs != 4) {
        PyErr_SetString(PyExc_TypeError, "copy_slots(arena, slot_offsets, pages, into_arena)");
        return NULL;
    }
    int into = PyObject_IsTrue(args[3]);
    if (into < 0)
        return NULL;
    Py_buffer arena, slots;
    Py_ssize_t n_slots;
    if (hm_get_bytes(args[0], "arena", into, &arena) < 0)
        return NULL;
    if (hm_get_u64(args[1], "slot_offsets", 0, &slots, &n_slots) < 0) {
        PyBuffer_Release(&arena);
        return NULL;
    }
    uint64_t *slot = NULL;
    hm_pages pages;
    PyObject *result = NULL;
    if (hm_pages_borrow(args[2], !into, NULL, 0, &pages) < 0)
        goto released;
    Py_ssize_t n = pages.npages;
    if (hm_check_len("slot_offsets", n_slots, "pages", n) < 0)
        goto done;
    /* the call's own copy: another thread changing the array cannot move a range past the check */
    slot = PyMem_Malloc((n > 0 ? (size_t)n : 1) * sizeof *slot);
    if (!slot) {
        PyErr_NoMemory();
        goto done;
    }
    if (n > 0)
        memcpy(slot, slots.buf, (size_t)n * sizeof *slot);
    if (hm_pages_check(&pages, NULL, slot, n, (uint64_t)arena.len) < 0)
        goto done;
    uint64_t total = hm_pages_total(&pages, NULL, n);
    char *base = arena.buf;
    HM_MAYBE_WITHOUT_GIL(total > HM_GIL_KEEP_BYTES,
                         hm_pages_copy(&pages, NULL, slot, n, base, into, total >= HM_SLOT_STREAM_TOTAL));
    result = Py_NewRef(Py_None);
done:
    hm_pages_release(&pages);
released:
    PyMem_Free(slot);
    PyBuffer_Release(&slots);
    PyBuffer_Release(&arena);
    return result;
}

/* page_sizes(pages, out: u64[n]) -> None: out[i] = the bytes of page i's parts together. */
PyObject *hm_py_page_sizes(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "page_sizes(pages, out)");
        return NULL;
    }
    Py_ssize_t total_parts = 0;
    PyObject *outer = PySequence_Fast(args[0], "pages must be a sequence");
    if (!outer)
        return NULL;
    PyObject *pages = fast_pages(outer, NULL, PySequence_Fast_GET_SIZE(outer), &total_parts);
    Py_DECREF(outer);
    if (!pages)
        return NULL;
    Py_buffer out;
    Py_ssize_t n_out;
    if (hm_get_u64(args[1], "out", 1, &out, &n_out) < 0) {
        Py_DECREF(pages);
        return NULL;
    }
    Py_ssize_t n = PySequence_Fast_GET_SIZE(pages);
    PyObject *result = NULL;
    if (hm_check_len("out", n_out, "pages", n) < 0)
        goto done;
    uint64_t *o = out.buf;
    PyObject **items = PySequence_Fast_ITEMS(pages);
    for (Py_ssize_t i = 0; i < n; i++) {
        uint64_t sum = 0;
        for (Py_ssize_t j = 0; j < PySequence_Fast_GET_SIZE(items[i]); j++) {
            Py_buffer b; /* any buffer, strided or read-only: only its length is read */
            PyObject *part = PySequence_Fast_ITEMS(items[i])[j];
            Py_INCREF(part);
            int got = PyObject_GetBuffer(part, &b, PyBUF_FULL_RO);
            Py_DECREF(part);
            if (got < 0) {
                PyObject *type, *value, *tb;
                PyErr_Fetch(&type, &value, &tb);
                PyErr_Format(PyExc_BufferError, "pages[%zd][%zd]: not a buffer", i, j);
                Py_XDECREF(type);
                Py_XDECREF(value);
                Py_XDECREF(tb);
                goto done;
            }
            sum += (uint64_t)b.len;
            PyBuffer_Release(&b);
        }
        o[i] = sum;
    }
    result = Py_None;
    Py_INCREF(result);
done:
    PyBuffer_Release(&out);
    Py_DECREF(pages);
    return result;
}
