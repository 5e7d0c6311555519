/* copy_pages (see hm_copy.h).
 *
 * All-or-nothing on bad input: the offsets and lengths are copied into memory of the call's own
 * (so a caller's thread changing its arrays meanwhile cannot move a range past the check), every
 * (offset, length) pair is checked against its buffer's size (overflow-safe) with the GIL held,
 * and only then may the GIL be released for the copies. Overlapping
 * ranges (dst and src the same buffer) are copied as by memmove. A large call writes with
 * non-temporal stores (HM_STREAM_MIN_TOTAL below).
 */
#include "hm_copy.h"

#include <string.h>

#if defined(__x86_64__) && defined(__SSE2__)
#include <emmintrin.h>
#define HM_HAVE_STREAMING 1
#endif


/* A call copying at least this much in all, in items of at least HM_STREAM_MIN_ITEM bytes, writes
 * with non-temporal stores: the bytes bypass the caches (nobody on this side reads them soon: a
 * page going to a tier, or to SGLang's pool on its way to the GPU), so a copy of many MiB neither
 * reads each destination line before writing it nor evicts the caller's working set (the
 * interpreter's objects the next Python step needs). */
#define HM_STREAM_MIN_TOTAL (1u << 20)
#define HM_STREAM_MIN_ITEM 4096u

/* Whether [a, a + n) and [b, b + n) share a byte (compared as addresses: they may lie in
 * different buffers). */
static int overlaps(const char *a, const char *b, size_t n) {
    uintptr_t x = (uintptr_t)a, y = (uintptr_t)b;
    return x < y + n && y < x + n;
}

void hm_copy_streaming(char *dst, const char *src, size_t n) {
#ifdef HM_HAVE_STREAMING
    size_t head = (size_t)(-(uintptr_t)dst & 15u);
    if (head > n)
        head = n;
    memcpy(dst, src, head);
    dst += head;
    src += head;
    n -= head;
    size_t blocks = n / 64;
    for (size_t i = 0; i < blocks; i++, dst += 64, src += 64) {
        __m128i x0 = _mm_loadu_si128((const __m128i *)src);
        __m128i x1 = _mm_loadu_si128((const __m128i *)(src + 16));
        __m128i x2 = _mm_loadu_si128((const __m128i *)(src + 32));
        __m128i x3 = _mm_loadu_si128((const __m128i *)(src + 48));
        _mm_stream_si128((__m128i *)dst, x0);
        _mm_stream_si128((__m128i *)(dst + 16), x1);
        _mm_stream_si128((__m128i *)(dst + 32), x2);
        _mm_stream_si128((__m128i *)(dst + 48), x3);
    }
    memcpy(dst, src, n % 64);
#else
    memcpy(dst, src, n);
#endif
}

void hm_copy_fence(void) {
#ifdef HM_HAVE_STREAMING
    _mm_sfence(); /* the non-temporal stores are visible before the call returns */
#endif
}

typedef struct {
    Py_buffer dst, src, doff, soff, len;
    int have_dst, have_src, have_doff, have_soff, have_len;
    Py_ssize_t n;
    uint64_t *own; /* 3 x n words: dst offsets, src offsets, lengths (the call's copies) */
} copy_args;

static void release(copy_args *a) {
    PyMem_Free(a->own);
    if (a->have_len)
        PyBuffer_Release(&a->len);
    if (a->have_soff)
        PyBuffer_Release(&a->soff);
    if (a->have_doff)
        PyBuffer_Release(&a->doff);
    if (a->have_src)
        PyBuffer_Release(&a->src);
    if (a->have_dst)
        PyBuffer_Release(&a->dst);
}

/* Borrows and checks (dst, dst_offsets, src, src_offsets, lengths). */
static int parse(PyObject *const *args, copy_args *a) {
    memset(a, 0, sizeof *a);
    Py_ssize_t n_soff, n_len;
    if (hm_get_bytes(args[0], "dst", 1, &a->dst) < 0)
        goto fail;
    a->have_dst = 1;
    if (hm_get_u64(args[1], "dst_offsets", 0, &a->doff, &a->n) < 0)
        goto fail;
    a->have_doff = 1;
    if (hm_get_bytes(args[2], "src", 0, &a->src) < 0)
        goto fail;
    a->have_src = 1;
    if (hm_get_u64(args[3], "src_offsets", 0, &a->soff, &n_soff) < 0)
        goto fail;
    a->have_soff = 1;
    if (hm_get_u64(args[4], "lengths", 0, &a->len, &n_len) < 0)
        goto fail;
    a->have_len = 1;
    if (hm_check_len("src_offsets", n_soff, "dst_offsets", a->n) < 0 ||
        hm_check_len("lengths", n_len, "dst_offsets", a->n) < 0)
        goto fail;
    size_t words = (size_t)a->n;
    a->own = PyMem_Malloc(3 * (words ? words : 1) * sizeof(uint64_t));
    if (!a->own) {
        PyErr_NoMemory();
        goto fail;
    }
    if (words) { /* an empty array's buffer may be NULL, which memcpy must not see */
        memcpy(a->own, a->doff.buf, words * sizeof(uint64_t));
        memcpy(a->own + words, a->soff.buf, words * sizeof(uint64_t));
        memcpy(a->own + 2 * words, a->len.buf, words * sizeof(uint64_t));
    }
    const uint64_t *d = a->own, *s = a->own + words, *l = a->own + 2 * words;
    uint64_t dsize = (uint64_t)a->dst.len, ssize = (uint64_t)a->src.len;
    for (Py_ssize_t i = 0; i < a->n; i++) {
        if (!hm_in_bounds(s[i], l[i], ssize)) {
            PyErr_Format(PyExc_ValueError, "copy %zd: src offset %llu + length %llu > buffer size %llu", i,
                         (unsigned long long)s[i], (unsigned long long)l[i], (unsigned long long)ssize);
            goto fail;
        }
        if (!hm_in_bounds(d[i], l[i], dsize)) {
            PyErr_Format(PyExc_ValueError, "copy %zd: dst offset %llu + length %llu > buffer size %llu", i,
                         (unsigned long long)d[i], (unsigned long long)l[i], (unsigned long long)dsize);
            goto fail;
        }
    }
    return 0;
fail:
    release(a);
    return -1;
}

/* copy_pages(dst, dst_offsets, src, src_offsets, lengths) -> None. */
PyObject *hm_py_copy_pages(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    if (nargs != 5) {
        PyErr_SetString(PyExc_TypeError, "copy_pages(dst, dst_offsets, src, src_offsets, lengths)");
        return NULL;
    }
    copy_args a;
    if (parse(args, &a) < 0)
        return NULL;
    char *dst = a.dst.buf;
    const char *src = a.src.buf;
    const uint64_t *d = a.own, *s = a.own + a.n, *l = a.own + 2 * a.n;
    Py_ssize_t n = a.n;
    if (n > 0) {
        uint64_t total = hm_total_len(l, n);
        int stream = total >= HM_STREAM_MIN_TOTAL;
        HM_MAYBE_WITHOUT_GIL(total > HM_GIL_KEEP_BYTES, for (Py_ssize_t i = 0; i < n; i++) {
            char *to = dst + d[i];
            const char *from = src + s[i];
            if (stream && l[i] >= HM_STREAM_MIN_ITEM && !overlaps(to, from, (size_t)l[i]))
                hm_copy_streaming(to, from, (size_t)l[i]);
            else if (l[i])
                memmove(to, from, (size_t)l[i]);
        } if (stream) hm_copy_fence());
    }
    release(&a);
    Py_RETURN_NONE;
}

/* view_spans(views: sequence, out: u64[2n]) -> bool.
 * out[2i] = the address of views[i]'s first byte, out[2i + 1] = its length, for views that are
 * each one writable, C-contiguous, non-empty buffer. False (out partly written, nothing else
 * done) as soon as one is not: read-only, empty, strided, released, or no buffer at all; the
 * caller then sorts the views one by one. Every buffer is borrowed and released within the call
 * (an address is valid for as long as the caller keeps the view alive). */
PyObject *hm_py_view_spans(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "view_spans(views, out)");
        return NULL;
    }
    PyObject *seq = PySequence_Fast(args[0], "views must be a sequence");
    if (!seq)
        return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    Py_buffer out;
    Py_ssize_t n_out;
    if (hm_get_u64(args[1], "out", 1, &out, &n_out) < 0) {
        Py_DECREF(seq);
        return NULL;
    }
    if (hm_check_len("out", n_out, "2 x views", 2 * n) < 0) {
        PyBuffer_Release(&out);
        Py_DECREF(seq);
        return NULL;
    }
    uint64_t *o = out.buf;
    PyObject **items = PySequence_Fast_ITEMS(seq);
    int all = 1;
    for (Py_ssize_t i = 0; i < n && all; i++) {
        Py_buffer b;
        if (PyObject_GetBuffer(items[i], &b, PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS) < 0) {
            PyErr_Clear(); /* not locatable here: the caller's slow path says why, if anything */
            all = 0;
            break;
        }
        if (b.len <= 0)
            all = 0;
        o[2 * i] = (uint64_t)(uintptr_t)b.buf;
        o[2 * i + 1] = (uint64_t)b.len;
        PyBuffer_Release(&b);
    }
    PyBuffer_Release(&out);
    Py_DECREF(seq);
    return PyBool_FromLong(all);
}
