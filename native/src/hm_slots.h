/* Pages (sequences of buffers) copied to or from the slots of one arena, in one call. */
#ifndef HM_SLOTS_H
#define HM_SLOTS_H

#include "hm_common.h"

/* A batch of pages borrowed for one call: every part of every page (Py_buffer, each holding its
 * exporter alive), page by page, and each page's bytes. */
typedef struct {
    Py_buffer *parts;  /* parts[first[i] .. first[i + 1]) are page i's, in order (empty ones too) */
    Py_ssize_t *first; /* npages + 1 entries */
    uint64_t *bytes;   /* page i's parts together */
    const Py_ssize_t *pick; /* page i is the caller's page pick[i] (NULL: page i); the caller's */
    Py_ssize_t npages, nparts;
} hm_pages;

/* Borrows every part of the pages pick[0..m) of `pages` (pick NULL: every page; m is then
 * ignored), a sequence of sequences of C-contiguous buffers (writable when `writable`: they are
 * copied into), GIL held; `pick` must outlive `out`. 0, or -1 with the error set (TypeError naming
 * a page that is not a sequence, BufferError naming a part, ValueError for a pick outside the
 * pages) and nothing held. */
int hm_pages_borrow(PyObject *pages, int writable, const Py_ssize_t *pick, Py_ssize_t m, hm_pages *out);
void hm_pages_release(hm_pages *p);

/* Checks that borrowed page which[c]'s parts (which NULL: page c) lie inside an arena of `size`
 * bytes back to back from slot[c], for c < k (overflow-safe); -1 with ValueError naming the
 * caller's page and part. */
int hm_pages_check(const hm_pages *p, const Py_ssize_t *which, const uint64_t *slot, Py_ssize_t k, uint64_t size);

/* The bytes of the k pages (which as for hm_pages_check; checked pages: no overflow). */
uint64_t hm_pages_total(const hm_pages *p, const Py_ssize_t *which, Py_ssize_t k);

/* Copies the k checked pages into the arena at base `arena` (`into`), or out of it into their
 * parts; `stream`: large parts with non-temporal stores. Touches no Python object: it may run
 * with the GIL released. */
void hm_pages_copy(const hm_pages *p, const Py_ssize_t *which, const uint64_t *slot, Py_ssize_t k, char *arena,
                   int into, int stream);

/* Whether a call copying `total` bytes writes with non-temporal stores. */
#define HM_SLOT_STREAM_TOTAL (1u << 20)

PyObject *hm_py_copy_slots(PyObject *self, PyObject *const *args, Py_ssize_t nargs);
PyObject *hm_py_page_sizes(PyObject *self, PyObject *const *args, Py_ssize_t nargs);

#endif
