/* page_views (see hm_pageviews.h).
 *
 * The zero-copy path from a host pool's indices to the views of its pages, in one call and with
 * the GIL held throughout (microseconds: a call that gave the GIL up would wait a switch interval
 * to get it back). Nothing is dereferenced here: the call computes addresses, checks each against
 * the index limit and the registered regions (overflow-safe), and slices each run out of its
 * region's memoryview. All or nothing: the first bad page raises (IndexError: a first index
 * outside the pool; ValueError: a run outside every region, or bad arguments) and no view is
 * returned.
 *
 * Each view is a slice of its region's memoryview, so it keeps that region's exporter alive and
 * names it (`memoryview.obj`): the SSD engine finds a batch's common buffer by it and reads and
 * writes there in one call. Each region is borrowed once per call and must still lie at its
 * registered start with its registered length (ValueError otherwise).
 */
#include "hm_pageviews.h"

#include <string.h>

/* The region that holds [addr, addr + len), by bisection over the sorted starts: its index, or -1. */
static Py_ssize_t find_region(const uint64_t *starts, const uint64_t *ends, Py_ssize_t n, uint64_t addr,
                              uint64_t len) {
    Py_ssize_t lo = 0, hi = n; /* the last start <= addr lies below hi */
    while (lo < hi) {
        Py_ssize_t mid = lo + (hi - lo) / 2;
        if (starts[mid] <= addr)
            lo = mid + 1;
        else
            hi = mid;
    }
    Py_ssize_t r = lo - 1;
    if (r < 0 || ends[r] < starts[r] || !hm_in_bounds(addr - starts[r], len, ends[r] - starts[r]))
        return -1;
    return r;
}

/* Checks that regions[r] is a writable 1-D memoryview of bytes at starts[r] with ends[r] - starts[r]
 * bytes, for every r; -1 with ValueError / TypeError naming the first that is not. */
static int check_regions(PyObject *const *regions, Py_ssize_t n, const uint64_t *starts, const uint64_t *ends) {
    for (Py_ssize_t r = 0; r < n; r++) {
        if (!PyMemoryView_Check(regions[r])) {
            PyErr_Format(PyExc_TypeError, "regions[%zd] must be a memoryview, got %.80s", r,
                         Py_TYPE(regions[r])->tp_name);
            return -1;
        }
        Py_buffer b;
        if (PyObject_GetBuffer(regions[r], &b, PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0)
            return -1;
        int ok = b.ndim == 1 && b.itemsize == 1 && (uint64_t)(uintptr_t)b.buf == starts[r] &&
                 ends[r] >= starts[r] && (uint64_t)b.len == ends[r] - starts[r];
        PyBuffer_Release(&b);
        if (!ok) {
            PyErr_Format(PyExc_ValueError, "regions[%zd] is not the %llu bytes registered at %#llx", r,
                         (unsigned long long)(ends[r] - starts[r]), (unsigned long long)starts[r]);
            return -1;
        }
    }
    return 0;
}

/* page_views(indices, page_size, pages, index_limit, bases, strides, sizes, region_starts,
 *            region_ends, regions) -> list of `pages` lists of len(bases) writable memoryviews.
 * indices: int64, pages * page_size of them (page p addressed by indices[p * page_size]);
 * bases, strides, sizes: int64, one per run of a page; region_starts / region_ends: uint64,
 * sorted by start, not overlapping; regions: the memoryview of each region, in that order. */
PyObject *hm_py_page_views(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    if (nargs != 10) {
        PyErr_SetString(PyExc_TypeError,
                        "page_views(indices, page_size, pages, index_limit, bases, strides, sizes, "
                        "region_starts, region_ends, regions) takes 10 arguments");
        return NULL;
    }
    uint64_t page_size, pages, limit;
    if (hm_parse_u64(args[1], "page_size", &page_size) < 0 || hm_parse_u64(args[2], "pages", &pages) < 0 ||
        hm_parse_u64(args[3], "index_limit", &limit) < 0)
        return NULL;
    if (page_size == 0) {
        PyErr_SetString(PyExc_ValueError, "page_size must be at least 1");
        return NULL;
    }
    Py_buffer idx_b, base_b, stride_b, size_b, start_b, end_b;
    Py_ssize_t n_idx, n_runs, n_strides, n_sizes, n_regions, n_ends;
    if (hm_get_i64(args[0], "indices", 0, &idx_b, &n_idx) < 0)
        return NULL;
    PyObject *out = NULL, *regions = NULL;
    int held = 1;
    if (hm_get_i64(args[4], "bases", 0, &base_b, &n_runs) < 0)
        goto done_idx;
    held = 2;
    if (hm_get_i64(args[5], "strides", 0, &stride_b, &n_strides) < 0)
        goto done;
    held = 3;
    if (hm_get_i64(args[6], "sizes", 0, &size_b, &n_sizes) < 0)
        goto done;
    held = 4;
    if (hm_get_u64(args[7], "region_starts", 0, &start_b, &n_regions) < 0)
        goto done;
    held = 5;
    if (hm_get_u64(args[8], "region_ends", 0, &end_b, &n_ends) < 0)
        goto done;
    held = 6;
    if (hm_check_len("strides", n_strides, "bases", n_runs) < 0 ||
        hm_check_len("sizes", n_sizes, "bases", n_runs) < 0 ||
        hm_check_len("region_ends", n_ends, "region_starts", n_regions) < 0)
        goto done;
    if (pages > (uint64_t)PY_SSIZE_T_MAX / page_size || (uint64_t)n_idx != pages * page_size) {
        PyErr_Format(PyExc_ValueError, "%zd indices for %llu pages of %llu", n_idx, (unsigned long long)pages,
                     (unsigned long long)page_size);
        goto done;
    }
    const int64_t *idx = idx_b.buf, *bases = base_b.buf, *strides = stride_b.buf, *sizes = size_b.buf;
    const uint64_t *starts = start_b.buf, *ends = end_b.buf;
    for (Py_ssize_t j = 0; j < n_runs; j++) {
        if (sizes[j] < 0) {
            PyErr_Format(PyExc_ValueError, "sizes[%zd] is negative: %lld", j, (long long)sizes[j]);
            goto done;
        }
    }
    for (Py_ssize_t r = 1; r < n_regions; r++) {
        if (starts[r] < ends[r - 1]) {
            PyErr_Format(PyExc_ValueError, "region_starts[%zd] lies before the end of the region before it", r);
            goto done;
        }
    }
    regions = PySequence_Fast(args[9], "regions must be a sequence of memoryviews");
    if (!regions || hm_check_len("regions", PySequence_Fast_GET_SIZE(regions), "region_starts", n_regions) < 0 ||
        check_regions(PySequence_Fast_ITEMS(regions), n_regions, starts, ends) < 0)
        goto done;
    PyObject **region_views = PySequence_Fast_ITEMS(regions);
    out = PyList_New((Py_ssize_t)pages);
    if (!out)
        goto done;
    for (uint64_t p = 0; p < pages; p++) {
        int64_t first = idx[p * page_size];
        /* the page addresses indices [first, first + page_size): all of them inside the pool */
        if (first < 0 || (uint64_t)first >= limit || page_size > limit - (uint64_t)first) {
            PyErr_Format(PyExc_IndexError, "page %llu: host index %lld (+%llu) outside a pool of %llu slots",
                         (unsigned long long)p, (long long)first, (unsigned long long)(page_size - 1),
                         (unsigned long long)limit);
            goto fail;
        }
        PyObject *page = PyList_New(n_runs);
        if (!page)
            goto fail;
        PyList_SET_ITEM(out, (Py_ssize_t)p, page);
        for (Py_ssize_t j = 0; j < n_runs; j++) {
            int64_t scaled, addr;
            Py_ssize_t r = -1;
            if (__builtin_mul_overflow(first, strides[j], &scaled) ||
                __builtin_add_overflow(bases[j], scaled, &addr) || addr < 0 ||
                (r = find_region(starts, ends, n_regions, (uint64_t)addr, (uint64_t)sizes[j])) < 0) {
                PyErr_Format(PyExc_ValueError, "page %llu run %zd: %lld bytes at %lld + %lld * %lld outside the "
                             "registered regions",
                             (unsigned long long)p, j, (long long)sizes[j], (long long)bases[j], (long long)first,
                             (long long)strides[j]);
                goto fail;
            }
            Py_ssize_t at = (Py_ssize_t)((uint64_t)addr - starts[r]);
            PyObject *view = PySequence_GetSlice(region_views[r], at, at + (Py_ssize_t)sizes[j]);
            if (!view)
                goto fail;
            PyList_SET_ITEM(page, j, view);
        }
    }
    goto done;
fail:
    Py_CLEAR(out);
done:
    Py_XDECREF(regions);
    if (held >= 6)
        PyBuffer_Release(&end_b);
    if (held >= 5)
        PyBuffer_Release(&start_b);
    if (held >= 4)
        PyBuffer_Release(&size_b);
    if (held >= 3)
        PyBuffer_Release(&stride_b);
    if (held >= 2)
        PyBuffer_Release(&base_b);
done_idx:
    PyBuffer_Release(&idx_b);
    return out;
}
