/* read_entries / write_entries / write_wait: whole SSD gets and puts on the I/O workers (see
 * hm_io.h; the workers: hm_iopool.h; an entry's layout and checks: hm_entry.h). */
#include "hm_io.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <unistd.h>

#include "hm_copy.h"
#include "hm_entry.h"
#include "hm_iopool.h"
#include "hm_xxh3.h"

#define MAX_RUN_BYTES (1ull << 30) /* one run of read_entries: one staging buffer */

/* One run of read_entries: read it whole into staging, then, while the batch is live, check each
 * entry (hm_entry_check) and copy a sound one's payload into its parts of the caller's buffer
 * right away, while it is still in cache from its hash. A caller abandoning the batch meanwhile
 * waits for the run's checks and copies under way (CPU work of one run: a few ms at most). */
static void run_entries(batch *b, Py_ssize_t i, char *st) {
    uint64_t first = b->run_first[i], end = b->run_first[i + 1];
    int64_t got = hm_io_do(0, b->fds[i], st, b->len[i], b->file_off[i]);
    if (!hm_io_copy_enter(b)) {
        hm_io_count_late_read();
        return; /* late: the caller's buffer is not ours any more */
    }
    uint64_t at = 0;
    int streamed = 0;
    for (uint64_t k = first; k < end && got >= 0; k++) {
        uint64_t key_at = k ? b->key_end[k - 1] : 0;
        uint64_t avail = at < (uint64_t)got ? (uint64_t)got - at : 0;
        b->verdict[k] = hm_entry_check(st + at, avail, b->keys + key_at, b->key_end[k] - key_at, b->plen[k],
                                       b->gen[k], b->seq[k], b->max_key, b->xxh3);
        if (b->verdict[k] == HM_ENTRY_OK) {
            const char *from = st + at + HM_ENTRY_BLOCK;
            for (uint64_t p = b->part_first[k]; p < b->part_first[k + 1]; p++) {
                hm_copy_streaming(b->buf + b->dst_off[p], from, (size_t)b->part_len[p]);
                from += b->part_len[p];
                streamed = 1;
            }
        }
        at += hm_entry_size(b->plen[k]);
    }
    if (streamed)
        hm_copy_fence();
    hm_io_copy_done(b, i, got); /* a failed read: batch_run gives its items the run's -errno */
}

/* pwritev of cnt segments from off, in calls of at most IOV_MAX segments, resumed after a
 * short write; iov is consumed. Returns bytes written or -errno. */
static int64_t do_writev(int fd, struct iovec *iov, int cnt, uint64_t off) {
    uint64_t done = 0;
    int at = 0;
    while (at < cnt) {
        if (iov[at].iov_len == 0) {
            at++;
            continue;
        }
        int k = cnt - at < IOV_MAX ? cnt - at : IOV_MAX;
        ssize_t r = pwritev(fd, iov + at, k, (off_t)(off + done));
        if (r < 0) {
            if (errno == EINTR)
                continue;
            return -(int64_t)errno;
        }
        if (r == 0)
            return -(int64_t)EIO;
        done += (uint64_t)r;
        size_t left = (size_t)r;
        while (left && at < cnt) {
            if (left >= iov[at].iov_len) {
                left -= iov[at].iov_len;
                at++;
            } else {
                iov[at].iov_base = (char *)iov[at].iov_base + left;
                iov[at].iov_len -= left;
                left = 0;
            }
        }
    }
    return (int64_t)done;
}

/* Ends run i of write_entries with result r: it is no longer writing; a write that ended after
 * the caller abandoned the batch is counted late. */
static void write_done(batch *b, Py_ssize_t i, int64_t r) {
    pthread_mutex_lock(&b->mu);
    if (b->abandoned)
        hm_io_count_late_write();
    b->writing--;
    b->res[i] = r;
    b->done[i] = 1;
    b->n_done++;
    pthread_cond_broadcast(&b->cv);
    pthread_mutex_unlock(&b->mu);
}

/* Whether entry k's parts lie back to back in memory (a borrowed payload hashed as one range). */
static int parts_adjacent(const batch *b, uint64_t k) {
    for (uint64_t q = b->part_first[k] + 1; q < b->part_first[k + 1]; q++)
        if (b->part_ptr[q] != b->part_ptr[q - 1] + b->part_len[q - 1])
            return 0;
    return 1;
}

/* Copies entry k's parts to `to`, zero pads them to the block and returns the payload's xxh3. */
static uint64_t stage_payload(const batch *b, uint64_t k, char *to) {
    char *at = to;
    for (uint64_t q = b->part_first[k]; q < b->part_first[k + 1]; q++) {
        memcpy(at, b->part_ptr[q], (size_t)b->part_len[q]);
        at += b->part_len[q];
    }
    memset(at, 0, (size_t)(hm_entry_size(b->plen[k]) - HM_ENTRY_BLOCK - b->plen[k]));
    return b->xxh3(to, (size_t)b->plen[k]);
}

/* One run of write_entries. While the batch is live (a copy section: an abandoning caller waits
 * for it), each entry's payload is hashed from the caller's memory (staged: copied into staging
 * first and hashed there) and its header block written; then the run is written with no lock
 * held. Staged, the run is laid out whole in staging. Borrowed, staging holds the header
 * blocks, one block of zeros (the padding) and the payloads whose parts do not lie back to back
 * (hashed after a copy: the hash is one range); the others are written in place, from the
 * caller's buffers, which the batch holds (srcs) until every write ended: a caller that reused
 * them meanwhile leaves an entry whose payload hash does not match (a miss, never other bytes).
 * A run the caller abandoned before its copy never writes. */
static void run_write_entries(batch *b, Py_ssize_t i, char *st) {
    uint64_t first = b->run_first[i], end = b->run_first[i + 1];
    pthread_mutex_lock(&b->mu);
    int live = !b->abandoned;
    if (live) {
        b->copying++;
        b->writing++;
    }
    pthread_mutex_unlock(&b->mu);
    if (!live)
        return; /* never started: stays -ETIMEDOUT */
    if (!b->borrow) {
        uint64_t at = 0;
        for (uint64_t k = first; k < end; k++) {
            uint64_t key_at = k ? b->key_end[k - 1] : 0;
            uint64_t h = stage_payload(b, k, st + at + HM_ENTRY_BLOCK);
            hm_entry_pack(st + at, b->keys + key_at, b->key_end[k] - key_at, b->plen[k], b->seq[k], b->gen[k], h,
                          b->xxh3);
            at += hm_entry_size(b->plen[k]);
        }
        hm_io_copy_leave(b);
        int64_t r = hm_io_do(1, b->fds[i], st, b->len[i], b->file_off[i]);
        write_done(b, i, r < 0 || (uint64_t)r == b->len[i] ? r : -(int64_t)EIO);
        return;
    }
    uint64_t nseg = 0;
    for (uint64_t k = first; k < end; k++)
        nseg += 2 + (b->part_first[k + 1] - b->part_first[k]);
    struct iovec *iov = malloc((size_t)nseg * sizeof *iov);
    if (!iov) {
        hm_io_copy_leave(b);
        write_done(b, i, -(int64_t)ENOMEM);
        return;
    }
    char *zeros = st + (end - first) * HM_ENTRY_BLOCK, *staged = zeros + HM_ENTRY_BLOCK;
    memset(zeros, 0, HM_ENTRY_BLOCK);
    int cnt = 0;
    for (uint64_t k = first; k < end; k++) {
        uint64_t key_at = k ? b->key_end[k - 1] : 0, plen = b->plen[k];
        uint64_t pad = hm_entry_size(plen) - HM_ENTRY_BLOCK - plen;
        char *hdr = st + (k - first) * HM_ENTRY_BLOCK;
        uint64_t h;
        iov[cnt].iov_base = hdr;
        iov[cnt++].iov_len = HM_ENTRY_BLOCK;
        if (parts_adjacent(b, k)) {
            h = b->xxh3(plen ? b->part_ptr[b->part_first[k]] : "", (size_t)plen);
            for (uint64_t q = b->part_first[k]; q < b->part_first[k + 1]; q++) {
                iov[cnt].iov_base = (void *)b->part_ptr[q];
                iov[cnt++].iov_len = (size_t)b->part_len[q];
            }
            iov[cnt].iov_base = zeros;
            iov[cnt++].iov_len = (size_t)pad;
        } else {
            h = stage_payload(b, k, staged);
            iov[cnt].iov_base = staged;
            iov[cnt++].iov_len = (size_t)(plen + pad);
            staged += plen + pad;
        }
        hm_entry_pack(hdr, b->keys + key_at, b->key_end[k] - key_at, plen, b->seq[k], b->gen[k], h, b->xxh3);
    }
    hm_io_copy_leave(b);
    int64_t r = do_writev(b->fds[i], iov, cnt, b->file_off[i]);
    free(iov);
    write_done(b, i, r < 0 || (uint64_t)r == b->len[i] ? r : -(int64_t)EIO);
}

/* The arguments of read_entries / write_entries, borrowed for the call. */
#define ENTRY_ARGS_MAX 16

typedef struct {
    Py_buffer v[ENTRY_ARGS_MAX];
    int have[ENTRY_ARGS_MAX];
    Py_ssize_t len[ENTRY_ARGS_MAX];
} entries_args;

static void entries_args_release(entries_args *a) {
    for (int i = 0; i < ENTRY_ARGS_MAX; i++)
        if (a->have[i])
            PyBuffer_Release(&a->v[i]);
}

static int borrow_u64(entries_args *a, PyObject *const *args, int i, const char *what) {
    if (hm_get_u64(args[i], what, 0, &a->v[i], &a->len[i]) < 0)
        return -1;
    a->have[i] = 1;
    return 0;
}

/* Checks that idx (length n_idx) starts at 0, never decreases (strictly increases when strict)
 * and ends at `last`. */
static int check_index(const uint64_t *idx, Py_ssize_t n_idx, uint64_t last, int strict, const char *what) {
    if (n_idx < 1 || idx[0] != 0 || idx[n_idx - 1] != last) {
        PyErr_Format(PyExc_ValueError, "%s must start at 0 and end at %llu", what, (unsigned long long)last);
        return -1;
    }
    for (Py_ssize_t i = 1; i < n_idx; i++)
        if (idx[i] < idx[i - 1] || (strict && idx[i] == idx[i - 1])) {
            PyErr_Format(PyExc_ValueError, "%s must %s (at %zd)", what, strict ? "increase" : "not decrease", i);
            return -1;
        }
    return 0;
}

/* The runs, entries and parts both calls take (the leading arguments, in this order). */
enum { EA_FDS, EA_RUN_OFFSETS, EA_RUN_ITEMS, EA_PLEN, EA_GEN, EA_SEQ, EA_KEY_ENDS, EA_KEYS, EA_PART_ITEMS, EA_COMMON };

/* Borrows and checks the common arguments: n runs of m entries with p parts in all (their
 * lengths in part_len, the index part_len_at of args, p = its length). Every index, key range
 * and part-length sum is checked; the caller checks where the parts lie. */
static int entries_args_common(entries_args *a, PyObject *const *args, int part_len_at, Py_ssize_t *n_out,
                               Py_ssize_t *m_out, Py_ssize_t *p_out, uint64_t max_key) {
    if (hm_get_i64(args[EA_FDS], "fds", 0, &a->v[EA_FDS], &a->len[EA_FDS]) < 0)
        return -1;
    a->have[EA_FDS] = 1;
    if (borrow_u64(a, args, EA_RUN_OFFSETS, "run_offsets") < 0 || borrow_u64(a, args, EA_RUN_ITEMS, "run_items") < 0 ||
        borrow_u64(a, args, EA_PLEN, "payload_lengths") < 0 || borrow_u64(a, args, EA_GEN, "gens") < 0 ||
        borrow_u64(a, args, EA_SEQ, "seqs") < 0 || borrow_u64(a, args, EA_KEY_ENDS, "key_ends") < 0 ||
        borrow_u64(a, args, EA_PART_ITEMS, "part_items") < 0 || borrow_u64(a, args, part_len_at, "part_lengths") < 0)
        return -1;
    if (hm_get_bytes(args[EA_KEYS], "keys", 0, &a->v[EA_KEYS]) < 0)
        return -1;
    a->have[EA_KEYS] = 1;
    Py_ssize_t n = a->len[EA_FDS], m = a->len[EA_PLEN], p = a->len[part_len_at];
    if (hm_check_len("run_offsets", a->len[EA_RUN_OFFSETS], "fds", n) < 0 ||
        hm_check_len("run_items", a->len[EA_RUN_ITEMS], "fds + 1", n + 1) < 0 ||
        hm_check_len("gens", a->len[EA_GEN], "payload_lengths", m) < 0 ||
        hm_check_len("seqs", a->len[EA_SEQ], "payload_lengths", m) < 0 ||
        hm_check_len("key_ends", a->len[EA_KEY_ENDS], "payload_lengths", m) < 0 ||
        hm_check_len("part_items", a->len[EA_PART_ITEMS], "payload_lengths + 1", m + 1) < 0)
        return -1;
    if (n > INT32_MAX / 2 || m > INT32_MAX) {
        PyErr_SetString(PyExc_ValueError, "more runs or entries than one call may hold");
        return -1;
    }
    const uint64_t *run_items = a->v[EA_RUN_ITEMS].buf, *plen = a->v[EA_PLEN].buf;
    const uint64_t *key_ends = a->v[EA_KEY_ENDS].buf, *part_items = a->v[EA_PART_ITEMS].buf;
    const uint64_t *part_len = a->v[part_len_at].buf;
    uint64_t keys_len = (uint64_t)a->v[EA_KEYS].len;
    if (check_index(run_items, n + 1, (uint64_t)m, 1, "run_items") < 0 ||
        check_index(part_items, m + 1, (uint64_t)p, 0, "part_items") < 0)
        return -1;
    for (Py_ssize_t k = 0; k < m; k++) {
        uint64_t key_at = k ? key_ends[k - 1] : 0;
        if (key_ends[k] < key_at || key_ends[k] > keys_len) {
            PyErr_Format(PyExc_ValueError, "item %zd: key_ends must not decrease and stay within keys (%llu bytes)",
                         k, (unsigned long long)keys_len);
            return -1;
        }
        if (key_ends[k] - key_at > max_key) {
            PyErr_Format(PyExc_ValueError, "item %zd: a key of %llu bytes is longer than %llu", k,
                         (unsigned long long)(key_ends[k] - key_at), (unsigned long long)max_key);
            return -1;
        }
        uint64_t sum = 0;
        for (uint64_t q = part_items[k]; q < part_items[k + 1]; q++)
            sum = part_len[q] > UINT64_MAX - sum ? UINT64_MAX : sum + part_len[q];
        if (sum != plen[k]) {
            PyErr_Format(PyExc_ValueError, "item %zd: its parts hold %llu bytes, its payload %llu", k,
                         (unsigned long long)sum, (unsigned long long)plen[k]);
            return -1;
        }
    }
    *n_out = n;
    *m_out = m;
    *p_out = p;
    return 0;
}

/* A batch of the n runs of the common arguments, with its own copies of them (run offsets, run
 * lengths computed from the entries, run_items, then per entry payload length, generation,
 * sequence, key end, then part_items and part lengths; `extra` more words per part follow, for
 * the caller) and its own dup of each run's fd. NULL with an exception set (ValueError for a run
 * too long or past the largest file offset, or without an fd). */
static batch *batch_of_entries(entries_args *a, int part_len_at, Py_ssize_t n, Py_ssize_t m, Py_ssize_t p,
                               int extra, uint64_t **extra_out) {
    uint64_t keys_len = (uint64_t)a->v[EA_KEYS].len;
    size_t words = (size_t)(3 * n + 1) + (size_t)(5 * m + 1) + (size_t)((1 + extra) * p);
    batch *b = calloc(1, sizeof *b);
    if (b) {
        b->words = malloc(words * sizeof(uint64_t));
        b->res = malloc((size_t)(n ? n : 1) * sizeof(int64_t));
        b->done = calloc((size_t)(n ? n : 1), 1);
        b->jobs = calloc((size_t)(n ? n : 1), sizeof(job));
        b->fds = malloc((size_t)(n ? n : 1) * sizeof(int));
        b->keys = malloc(keys_len ? (size_t)keys_len : 1);
    }
    if (!b || !b->words || !b->res || !b->done || !b->jobs || !b->fds || !b->keys) {
        if (b)
            hm_io_batch_free(b);
        PyErr_NoMemory();
        return NULL;
    }
    uint64_t *w = b->words;
    uint64_t *own_off = w, *own_len = w + n, *own_first = w + 2 * n;
    w += 3 * n + 1;
    uint64_t *own_plen = w, *own_gen = w + m, *own_seq = w + 2 * m, *own_key_end = w + 3 * m;
    uint64_t *own_part_first = w + 4 * m;
    w += 5 * m + 1;
    uint64_t *own_part_len = w;
    *extra_out = w + p;
    memcpy(own_off, a->v[EA_RUN_OFFSETS].buf, (size_t)n * sizeof(uint64_t));
    memcpy(own_first, a->v[EA_RUN_ITEMS].buf, (size_t)(n + 1) * sizeof(uint64_t));
    memcpy(own_plen, a->v[EA_PLEN].buf, (size_t)m * sizeof(uint64_t));
    memcpy(own_gen, a->v[EA_GEN].buf, (size_t)m * sizeof(uint64_t));
    memcpy(own_seq, a->v[EA_SEQ].buf, (size_t)m * sizeof(uint64_t));
    memcpy(own_key_end, a->v[EA_KEY_ENDS].buf, (size_t)m * sizeof(uint64_t));
    memcpy(own_part_first, a->v[EA_PART_ITEMS].buf, (size_t)(m + 1) * sizeof(uint64_t));
    memcpy(own_part_len, a->v[part_len_at].buf, (size_t)p * sizeof(uint64_t));
    if (keys_len)
        memcpy(b->keys, a->v[EA_KEYS].buf, (size_t)keys_len);
    const int64_t *fds = a->v[EA_FDS].buf;
    const char *bad = NULL;
    Py_ssize_t bad_at = 0;
    for (Py_ssize_t r = 0; r < n && !bad; r++) {
        uint64_t len = 0;
        for (uint64_t k = own_first[r]; k < own_first[r + 1]; k++) {
            uint64_t es = hm_entry_size(own_plen[k]);
            len = es > MAX_RUN_BYTES || len > MAX_RUN_BYTES - es ? MAX_RUN_BYTES + 1 : len + es;
        }
        own_len[r] = len;
        if (len > MAX_RUN_BYTES)
            bad = "holds more than 1 GiB of entries", bad_at = r;
        else if (!hm_in_bounds(own_off[r], len, (uint64_t)INT64_MAX))
            bad = "ends past the largest file offset", bad_at = r;
        else if (fds[r] < 0 || fds[r] > INT32_MAX)
            bad = "has no file descriptor (>= 0)", bad_at = r;
    }
    Py_ssize_t dups = 0;
    int dup_errno = 0;
    for (; !bad && dups < n; dups++) {
        b->fds[dups] = fcntl((int)fds[dups], F_DUPFD_CLOEXEC, 0);
        if (b->fds[dups] < 0) {
            dup_errno = errno;
            break;
        }
    }
    if (bad || dup_errno) {
        for (Py_ssize_t r = 0; r < dups; r++)
            close(b->fds[r]);
        hm_io_batch_free(b);
        if (bad) {
            PyErr_Format(PyExc_ValueError, "run %zd %s", bad_at, bad);
        } else {
            errno = dup_errno;
            PyErr_SetFromErrno(PyExc_OSError);
        }
        return NULL;
    }
    b->n = n;
    b->file_off = own_off;
    b->len = own_len;
    b->run_first = own_first;
    b->plen = own_plen;
    b->gen = own_gen;
    b->seq = own_seq;
    b->key_end = own_key_end;
    b->part_first = own_part_first;
    b->part_len = own_part_len;
    return b;
}


/* read_entries' own arguments, after the common ones. */
enum { RE_DST = EA_COMMON, RE_DST_OFFSETS, RE_PART_LENGTHS, RE_MAX_KEY, RE_TIMEOUT, RE_OUT, RE_NARGS };


/* read_entries(fds, run_offsets, run_items, payload_lengths, gens, seqs, key_ends, keys,
 *              part_items, dst, dst_offsets, part_lengths, max_key, timeout_s, out) -> None
 * See native/io.py. */
PyObject *hm_py_read_entries(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    if (nargs != RE_NARGS) {
        PyErr_SetString(PyExc_TypeError, "read_entries(fds, run_offsets, run_items, payload_lengths, gens, seqs, "
                                         "key_ends, keys, part_items, dst, dst_offsets, part_lengths, max_key, "
                                         "timeout_s, out)");
        return NULL;
    }
    hm_xxh3_fn xxh3 = hm_xxh3_require();
    if (!xxh3)
        return NULL;
    uint64_t max_key;
    double timeout;
    if (hm_parse_u64(args[RE_MAX_KEY], "max_key", &max_key) < 0 ||
        hm_io_parse_timeout(args[RE_TIMEOUT], "read_entries", &timeout) < 0)
        return NULL;
    entries_args a;
    memset(&a, 0, sizeof a);
    Py_ssize_t n, m, p;
    if (entries_args_common(&a, args, RE_PART_LENGTHS, &n, &m, &p, UINT64_MAX) < 0 ||
        borrow_u64(&a, args, RE_DST_OFFSETS, "dst_offsets") < 0)
        goto fail;
    if (hm_get_bytes(args[RE_DST], "dst", 1, &a.v[RE_DST]) < 0)
        goto fail;
    a.have[RE_DST] = 1;
    if (hm_get_i64(args[RE_OUT], "out", 1, &a.v[RE_OUT], &a.len[RE_OUT]) < 0)
        goto fail;
    a.have[RE_OUT] = 1;
    if (hm_check_len("dst_offsets", a.len[RE_DST_OFFSETS], "part_lengths", p) < 0 ||
        hm_check_len("out", a.len[RE_OUT], "payload_lengths", m) < 0)
        goto fail;
    const uint64_t *dst_off = a.v[RE_DST_OFFSETS].buf, *part_len = a.v[RE_PART_LENGTHS].buf;
    uint64_t dst_len = (uint64_t)a.v[RE_DST].len;
    for (Py_ssize_t q = 0; q < p; q++)
        if (!hm_in_bounds(dst_off[q], part_len[q], dst_len)) {
            PyErr_Format(PyExc_ValueError, "part %zd: dst offset %llu + length %llu > dst size %llu", q,
                         (unsigned long long)dst_off[q], (unsigned long long)part_len[q],
                         (unsigned long long)dst_len);
            goto fail;
        }
    int64_t *out = a.v[RE_OUT].buf;
    for (Py_ssize_t k = 0; k < m; k++)
        out[k] = -ETIMEDOUT;
    uint64_t *own_dst_off;
    batch *b = batch_of_entries(&a, RE_PART_LENGTHS, n, m, p, 1, &own_dst_off);
    if (!b)
        goto fail;
    b->verdict = malloc((size_t)(m ? m : 1) * sizeof(int64_t));
    if (!b->verdict || n == 0 || timeout <= 0) { /* nothing to read, or the deadline has passed */
        int nomem = !b->verdict;
        hm_io_batch_drop_unsubmitted(b);
        entries_args_release(&a);
        if (nomem)
            return PyErr_NoMemory();
        Py_RETURN_NONE;
    }
    memcpy(own_dst_off, dst_off, (size_t)p * sizeof(uint64_t));
    b->run = run_entries;
    b->dst_off = own_dst_off;
    b->buf = a.v[RE_DST].buf;
    b->max_key = max_key;
    b->xxh3 = xxh3;
    hm_io_batch_init(b, n);
    int64_t *run_res = PyMem_Malloc((size_t)n * sizeof(int64_t));
    if (!run_res) {
        b->abandoned = 1; /* never submitted: only the caller's reference and the jobs' */
        b->refs = 1;
        hm_io_batch_unref(b);
        PyErr_NoMemory();
        goto fail;
    }
    int err;
    Py_BEGIN_ALLOW_THREADS
    err = hm_io_batch_run(b, timeout, run_res, out);
    Py_END_ALLOW_THREADS
    PyMem_Free(run_res);
    if (err != 0) {
        errno = err;
        PyErr_SetFromErrno(PyExc_OSError);
        goto fail;
    }
    entries_args_release(&a);
    Py_RETURN_NONE;
fail:
    entries_args_release(&a);
    return NULL;
}

/* write_entries' own arguments, after the common ones. */
enum { WE_SRCS = EA_COMMON, WE_PART_SRCS, WE_SRC_OFFSETS, WE_PART_LENGTHS, WE_BORROW, WE_TIMEOUT, WE_OUT, WE_NARGS };

#define WRITES_CAPSULE "hicache_mooncake.native.WritesInFlight"

/* Waits (no GIL) until no run of b is writing, or `timeout` seconds passed; 1 when none is. */
static int writes_wait(batch *b, double timeout) {
    struct timespec deadline;
    hm_io_deadline_after(&deadline, timeout);
    pthread_mutex_lock(&b->mu);
    while (b->writing > 0)
        if (pthread_cond_timedwait(&b->cv, &b->mu, &deadline) == ETIMEDOUT)
            break;
    int idle = b->writing == 0;
    pthread_mutex_unlock(&b->mu);
    return idle;
}

/* Gives the caller's source buffers back, unless a write may still read them: then they stay
 * exported (held for good: a leak, never a write from freed memory). Needs the GIL. */
static void writes_release_srcs(batch *b) {
    pthread_mutex_lock(&b->mu);
    int idle = b->writing == 0;
    pthread_mutex_unlock(&b->mu);
    if (!idle)
        return;
    for (Py_ssize_t i = 0; i < b->n_srcs; i++)
        PyBuffer_Release(&b->srcs[i]);
    b->n_srcs = 0;
}

static void writes_capsule_free(PyObject *capsule) {
    batch *b = PyCapsule_GetPointer(capsule, WRITES_CAPSULE);
    if (!b)
        return;
    writes_release_srcs(b);
    hm_io_batch_unref(b);
}

/* write_entries(fds, run_offsets, run_items, payload_lengths, gens, seqs, key_ends, keys,
 *               part_items, srcs, part_srcs, src_offsets, part_lengths, borrow, timeout_s, out)
 *   -> None, or a capsule of the writes still in flight (write_wait)
 * See native/io.py. */
PyObject *hm_py_write_entries(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    if (nargs != WE_NARGS) {
        PyErr_SetString(PyExc_TypeError, "write_entries(fds, run_offsets, run_items, payload_lengths, gens, seqs, "
                                         "key_ends, keys, part_items, srcs, part_srcs, src_offsets, part_lengths, "
                                         "borrow, timeout_s, out)");
        return NULL;
    }
    hm_xxh3_fn xxh3 = hm_xxh3_require();
    if (!xxh3)
        return NULL;
    int borrow = PyObject_IsTrue(args[WE_BORROW]);
    double timeout;
    if (borrow < 0 || hm_io_parse_timeout(args[WE_TIMEOUT], "write_entries", &timeout) < 0)
        return NULL;
    PyObject *srcs = PySequence_Fast(args[WE_SRCS], "write_entries: srcs must be a sequence of buffers");
    if (!srcs)
        return NULL;
    entries_args a;
    memset(&a, 0, sizeof a);
    batch *b = NULL;
    Py_ssize_t n_srcs = PySequence_Fast_GET_SIZE(srcs), held = 0, n, m, p;
    Py_buffer *views = PyMem_Calloc((size_t)(n_srcs ? n_srcs : 1), sizeof(Py_buffer));
    if (!views) {
        PyErr_NoMemory();
        goto fail;
    }
    for (; held < n_srcs; held++)
        if (hm_get_bytes(PySequence_Fast_GET_ITEM(srcs, held), "srcs", 0, &views[held]) < 0)
            goto fail;
    if (entries_args_common(&a, args, WE_PART_LENGTHS, &n, &m, &p, HM_ENTRY_MAX_KEY) < 0 ||
        borrow_u64(&a, args, WE_PART_SRCS, "part_srcs") < 0 || borrow_u64(&a, args, WE_SRC_OFFSETS, "src_offsets") < 0)
        goto fail;
    if (hm_get_i64(args[WE_OUT], "out", 1, &a.v[WE_OUT], &a.len[WE_OUT]) < 0)
        goto fail;
    a.have[WE_OUT] = 1;
    if (hm_check_len("part_srcs", a.len[WE_PART_SRCS], "part_lengths", p) < 0 ||
        hm_check_len("src_offsets", a.len[WE_SRC_OFFSETS], "part_lengths", p) < 0 ||
        hm_check_len("out", a.len[WE_OUT], "fds", n) < 0)
        goto fail;
    const uint64_t *part_src = a.v[WE_PART_SRCS].buf, *src_off = a.v[WE_SRC_OFFSETS].buf;
    const uint64_t *part_len = a.v[WE_PART_LENGTHS].buf;
    for (Py_ssize_t q = 0; q < p; q++) {
        if (part_src[q] >= (uint64_t)n_srcs) {
            PyErr_Format(PyExc_ValueError, "part %zd: source %llu of %zd", q, (unsigned long long)part_src[q], n_srcs);
            goto fail;
        }
        if (!hm_in_bounds(src_off[q], part_len[q], (uint64_t)views[part_src[q]].len)) {
            PyErr_Format(PyExc_ValueError, "part %zd: src offset %llu + length %llu > its source's size %zd", q,
                         (unsigned long long)src_off[q], (unsigned long long)part_len[q], views[part_src[q]].len);
            goto fail;
        }
    }
    int64_t *out = a.v[WE_OUT].buf;
    for (Py_ssize_t r = 0; r < n; r++)
        out[r] = -ETIMEDOUT;
    uint64_t *unused;
    b = batch_of_entries(&a, WE_PART_LENGTHS, n, m, p, 0, &unused);
    if (!b)
        goto fail;
    b->part_ptr = malloc((size_t)(p ? p : 1) * sizeof(char *));
    if (!b->part_ptr || n == 0 || timeout <= 0) { /* nothing to write, or the deadline has passed */
        int nomem = !b->part_ptr;
        hm_io_batch_drop_unsubmitted(b);
        b = NULL;
        if (nomem) {
            PyErr_NoMemory();
            goto fail;
        }
        goto none;
    }
    for (Py_ssize_t q = 0; q < p; q++)
        b->part_ptr[q] = (const char *)views[part_src[q]].buf + src_off[q];
    if (borrow) {
        b->stage_len = malloc((size_t)n * sizeof(uint64_t));
        if (!b->stage_len) {
            hm_io_batch_drop_unsubmitted(b);
            b = NULL;
            PyErr_NoMemory();
            goto fail;
        }
        for (Py_ssize_t r = 0; r < n; r++) {
            uint64_t want = (b->run_first[r + 1] - b->run_first[r] + 1) * HM_ENTRY_BLOCK;
            uint64_t segments = 2 * (b->run_first[r + 1] - b->run_first[r]) +
                                (b->part_first[b->run_first[r + 1]] - b->part_first[b->run_first[r]]);
            for (uint64_t k = b->run_first[r]; k < b->run_first[r + 1]; k++)
                if (!parts_adjacent(b, k))
                    want += hm_entry_size(b->plen[k]) - HM_ENTRY_BLOCK; /* within a 1 GiB run */
            b->stage_len[r] = want;
            if (segments > INT32_MAX / 2) { /* a run's iovec count is an int */
                hm_io_batch_drop_unsubmitted(b);
                b = NULL;
                PyErr_Format(PyExc_ValueError, "run %zd: more parts than one write may hold", r);
                goto fail;
            }
        }
    }
    b->run = run_write_entries;
    b->is_write = 1;
    b->borrow = borrow;
    b->xxh3 = xxh3;
    b->srcs = (Py_buffer *)malloc((size_t)(n_srcs ? n_srcs : 1) * sizeof(Py_buffer));
    if (!b->srcs) {
        hm_io_batch_drop_unsubmitted(b);
        b = NULL;
        PyErr_NoMemory();
        goto fail;
    }
    hm_io_batch_init(b, n);
    b->refs++; /* the caller's second reference: the capsule's, or dropped below */
    int err;
    Py_BEGIN_ALLOW_THREADS
    err = hm_io_batch_run(b, timeout, out, NULL);
    Py_END_ALLOW_THREADS
    if (err != 0) {
        hm_io_batch_unref(b);
        b = NULL;
        errno = err;
        PyErr_SetFromErrno(PyExc_OSError);
        goto fail;
    }
    /* The batch holds the sources from here on (released when no write may read them). */
    memcpy(b->srcs, views, (size_t)n_srcs * sizeof(Py_buffer));
    b->n_srcs = n_srcs;
    held = 0;
    pthread_mutex_lock(&b->mu);
    int in_flight = b->writing > 0;
    pthread_mutex_unlock(&b->mu);
    entries_args_release(&a);
    PyMem_Free(views);
    Py_DECREF(srcs);
    if (in_flight) {
        PyObject *capsule = PyCapsule_New(b, WRITES_CAPSULE, writes_capsule_free);
        if (capsule)
            return capsule;
        /* no capsule: keep the sources exported for good and drop our reference */
        b->n_srcs = 0;
        hm_io_batch_unref(b);
        return NULL;
    }
    writes_release_srcs(b);
    hm_io_batch_unref(b);
    Py_RETURN_NONE;
none:
    entries_args_release(&a);
    for (Py_ssize_t i = 0; i < held; i++)
        PyBuffer_Release(&views[i]);
    PyMem_Free(views);
    Py_DECREF(srcs);
    Py_RETURN_NONE;
fail:
    entries_args_release(&a);
    for (Py_ssize_t i = 0; i < held; i++)
        PyBuffer_Release(&views[i]);
    PyMem_Free(views);
    Py_DECREF(srcs);
    return NULL;
}

/* write_wait(capsule, timeout_s) -> whether no write of the capsule's batch is in flight any
 * more (the GIL released while waiting); then its sources are given back. */
PyObject *hm_py_write_wait(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "write_wait(writes, timeout_s)");
        return NULL;
    }
    batch *b = PyCapsule_GetPointer(args[0], WRITES_CAPSULE);
    double timeout;
    if (!b || hm_io_parse_timeout(args[1], "write_wait", &timeout) < 0)
        return NULL;
    int idle;
    Py_BEGIN_ALLOW_THREADS
    idle = writes_wait(b, timeout);
    Py_END_ALLOW_THREADS
    if (idle)
        writes_release_srcs(b);
    return PyBool_FromLong(idle);
}
