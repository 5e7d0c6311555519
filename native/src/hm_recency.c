/* _core.RecencyLog (see hm_recency.h).
 *
 * Structure: a segmented fingerprint table (hm_segtable, one value word) maps each observed key's
 * fingerprint to (tick << payload_bits) | payload of its latest access, and an append-only log
 * (fingerprints and ticks, two uint64 arrays) holds the access order. A log entry is *live* while
 * the table still holds its tick for its fingerprint; a later access of the key leaves a stale
 * entry behind (16 bytes, no Python object).
 * - head: entries before it are expired or stale. Expiring the oldest observation (the table is
 *   over `limit`) removes the first live entry's key from the head on; the head moves past it.
 * - shadow: the live entries at or after `bound` (a key is in the shadow iff its latest tick is at
 *   or after bound_tick; PAST while the boundary is the log's end). Admitting a key that was
 *   outside moves the boundary past the oldest live entry once the shadow is full; the boundary
 *   only moves forward, and never behind the head (an expired key leaves the shadow too).
 * - compaction: once the log is over twice the live keys plus `compact_slack`, a *pass* copies the
 *   live entries of the next `pass_window` entries into a new log every `pass_every` accesses
 *   (the old log keeps serving); at its end it takes the entries logged meanwhile and becomes the
 *   log, head and boundary found again by their ticks (ticks increase along the log, a copy keeps
 *   the order). No access does more than O(pass_window) work; the log stays O(live keys).
 * - drop_head: once the head is past half the log (and past compact_slack), the entries before it
 *   are dropped (one memmove).
 *
 * Ticks strictly increase from one touch to the next and stay below 2^(63 - payload_bits) (so
 * (tick << bits) | payload fits, and PAST is never a tick); payloads are below 2^payload_bits
 * (ValueError otherwise, nothing changed). The log's room is reserved before anything changes,
 * so a MemoryError leaves the log as it was; a compaction step that cannot get memory is put off
 * to a later access. Not thread-safe: the caller serialises calls (the reuse policy runs under
 * its store's lock). Every call keeps the GIL (O(1) amortised; a pass step copies `pass_window`
 * entries) except a touch whose insert must grow the table: one segment doubled or split (up to
 * ~7 ms at 2M keys on the project's VM) runs with the GIL released, as FpTable's growth does, and
 * a call from another thread meanwhile is refused (RuntimeError), never let touch the table.
 */
#include "hm_recency.h"

#include <stdlib.h>
#include <string.h>

#include "hm_segtable.h"

#define PAST UINT64_MAX
#define MAX_PAYLOAD_BITS 48u

typedef struct {
    uint64_t *fps;
    uint64_t *ticks;
    size_t len, cap;
} order_log;

struct hm_recency_log {
    PyObject_HEAD
    hm_segtable last; /* fingerprint -> (tick << bits) | payload of its latest access */
    int table_ready;
    unsigned bits;
    order_log log;
    size_t head;        /* entries before it are expired or stale */
    size_t bound;       /* the shadow: live entries at or after this index ... */
    uint64_t bound_tick; /* ... are those whose tick is at least this one's (PAST: none) */
    size_t shadow;      /* live entries at or after bound */
    int64_t compact_at; /* log length at which a compaction is considered */
    uint64_t last_tick;
    int touched;
    int pass_on; /* a compaction pass is under way: */
    order_log pass; /* the live entries of the old log's [head, pass_end) copied so far */
    size_t pass_at, pass_end;
    long pass_wait; /* accesses until its next step */
    size_t passes_done;
    size_t compact_slack, pass_window;
    long pass_every;
    int busy; /* a touch is growing the table without the GIL: every other call is refused */
};
typedef struct hm_recency_log RecencyLog;

/* ------------------------------------------------------------------ the log arrays */

static int log_reserve(order_log *l, size_t want) {
    if (want <= l->cap)
        return 0;
    /* grows by a quarter (glibc moves large blocks with mremap, not a copy): at most a quarter of
     * the entries' 16 bytes is room not yet used, where doubling left up to as much again */
    size_t cap = l->cap ? l->cap : 1024;
    while (cap < want) {
        if (cap > SIZE_MAX / 4 / sizeof(uint64_t))
            return -1;
        cap += cap / 4;
    }
    uint64_t *f = realloc(l->fps, cap * sizeof *f);
    if (!f)
        return -1;
    l->fps = f; /* larger than cap says until the ticks follow: harmless */
    uint64_t *t = realloc(l->ticks, cap * sizeof *t);
    if (!t)
        return -1;
    l->ticks = t;
    l->cap = cap;
    return 0;
}

/* Gives back most of a log's room once it holds far less than it could (after a drop or a pass). */
static void log_trim(order_log *l) {
    if (l->cap <= 4096 || l->cap / 2 <= l->len)
        return;
    size_t cap = l->len + l->len / 4 > 1024 ? l->len + l->len / 4 : 1024;
    uint64_t *f = realloc(l->fps, cap * sizeof *f);
    if (f)
        l->fps = f;
    uint64_t *t = realloc(l->ticks, cap * sizeof *t);
    if (t)
        l->ticks = t;
    if (f && t)
        l->cap = cap;
}

static void log_free(order_log *l) {
    free(l->fps);
    free(l->ticks);
    memset(l, 0, sizeof *l);
}

/* Index of the first of l's ticks (increasing) at or after `tick` (PAST: the end). */
static size_t first_at(const order_log *l, uint64_t tick) {
    if (tick == PAST)
        return l->len;
    size_t lo = 0, hi = l->len;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (l->ticks[mid] < tick)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* ------------------------------------------------------------------ the structure's steps */

static inline int live_at(const RecencyLog *s, const order_log *l, size_t i) {
    const uint64_t *v = hm_segtable_find(&s->last, l->fps[i]);
    return v && (v[0] >> s->bits) == l->ticks[i];
}

static void move_bound(RecencyLog *s, size_t i) {
    s->bound = i;
    s->bound_tick = i < s->log.len ? s->log.ticks[i] : PAST;
}

/* Index of the first live entry at or after i (the log's length if none). */
static size_t next_live(const RecencyLog *s, size_t i) {
    while (i < s->log.len && !live_at(s, &s->log, i))
        i++;
    return i;
}

static void drop_head(RecencyLog *s) {
    size_t h = s->head, keep = s->log.len - h;
    memmove(s->log.fps, s->log.fps + h, keep * sizeof(uint64_t));
    memmove(s->log.ticks, s->log.ticks + h, keep * sizeof(uint64_t));
    s->log.len = keep;
    s->head = 0;
    s->bound = s->bound > h ? s->bound - h : 0;
    s->compact_at -= (int64_t)h;
    if (s->pass_on) { /* its range moves with the entries */
        s->pass_at = s->pass_at > h ? s->pass_at - h : 0;
        s->pass_end = s->pass_end > h ? s->pass_end - h : 0;
    }
    log_trim(&s->log);
}

/* Closes the oldest open observation; its value in *value. -1 (RuntimeError) only if none is open
 * (callers expire only while the table is over its limit, so one is). */
static int expire_oldest(RecencyLog *s, uint64_t *value) {
    size_t i = s->head;
    for (; i < s->log.len; i++) {
        const uint64_t *v = hm_segtable_find(&s->last, s->log.fps[i]);
        if (v && (v[0] >> s->bits) == s->log.ticks[i]) {
            *value = v[0];
            hm_segtable_remove(&s->last, s->log.fps[i], NULL);
            break;
        }
    }
    if (i >= s->log.len) {
        PyErr_SetString(PyExc_RuntimeError, "RecencyLog: no open observation to expire (internal error)");
        return -1;
    }
    s->head = i + 1;
    if (s->bound <= i) { /* the shadow never reaches behind the observations */
        move_bound(s, i + 1);
        if (s->shadow)
            s->shadow--;
    }
    if (s->head > s->compact_slack && 2 * s->head > s->log.len)
        drop_head(s);
    return 0;
}

/* The copy becomes the log: the entries logged since the pass started are appended as they are;
 * head and boundary are the first entries whose ticks are at least theirs. Put off (0) when the
 * memory for the tail cannot be had. */
static void pass_finish(RecencyLog *s) {
    size_t end = s->pass_end <= s->log.len ? s->pass_end : s->log.len, tail = s->log.len - end;
    if (log_reserve(&s->pass, s->pass.len + tail) < 0)
        return; /* the next access tries again */
    memcpy(s->pass.fps + s->pass.len, s->log.fps + end, tail * sizeof(uint64_t));
    memcpy(s->pass.ticks + s->pass.len, s->log.ticks + end, tail * sizeof(uint64_t));
    s->pass.len += tail;
    uint64_t head_tick = s->head < s->log.len ? s->log.ticks[s->head] : PAST;
    s->head = first_at(&s->pass, head_tick);
    s->bound = first_at(&s->pass, s->bound_tick);
    log_free(&s->log);
    s->log = s->pass;
    memset(&s->pass, 0, sizeof s->pass);
    s->pass_on = 0;
    s->passes_done++;
    s->compact_at = (int64_t)(s->log.len + s->last.count + s->compact_slack);
    log_trim(&s->log);
}

/* Copies the live entries of the pass's next window (entries before the head are expired or
 * stale: skipped); at the end of its range, finishes. */
static void pass_step(RecencyLog *s) {
    s->pass_wait = s->pass_every;
    size_t at = s->pass_at > s->head ? s->pass_at : s->head;
    size_t end = s->pass_end <= s->log.len ? s->pass_end : s->log.len;
    size_t stop = at + s->pass_window < end ? at + s->pass_window : end;
    if (at < stop) {
        if (log_reserve(&s->pass, s->pass.len + (stop - at)) < 0)
            return; /* put off to a later access */
        for (size_t j = at; j < stop; j++) {
            if (live_at(s, &s->log, j)) {
                s->pass.fps[s->pass.len] = s->log.fps[j];
                s->pass.ticks[s->pass.len] = s->log.ticks[j];
                s->pass.len++;
            }
        }
    }
    s->pass_at = stop > at ? stop : at;
    if (s->pass_at >= end)
        pass_finish(s);
}

/* ------------------------------------------------------------------ the Python type */

/* -1 (RuntimeError) while a touch of another thread grows the table with the GIL released: the
 * caller broke the one-thread-at-a-time rule, and the table must not be read or changed then. */
static int refuse_if_busy(const RecencyLog *s) {
    if (!s->busy)
        return 0;
    PyErr_SetString(PyExc_RuntimeError, "RecencyLog is in use by another thread (callers serialise its calls)");
    return -1;
}

static int parse_key(PyObject *obj, uint64_t *fp) {
    if (!PyLong_Check(obj)) {
        PyErr_Format(PyExc_TypeError, "key_hash must be an int, got %.80s", Py_TYPE(obj)->tp_name);
        return -1;
    }
    uint64_t v = PyLong_AsUnsignedLongLongMask(obj); /* its unsigned low 64 bits (hash() may be < 0) */
    if (v == (uint64_t)-1 && PyErr_Occurred())
        return -1;
    *fp = v ? v : 1; /* 0 marks an empty slot */
    return 0;
}

static int parse_below(PyObject *obj, const char *what, uint64_t limit, uint64_t *out) {
    if (hm_parse_u64(obj, what, out) < 0)
        return -1;
    if (*out >= limit) {
        PyErr_Format(PyExc_ValueError, "%s must be below %llu, got %llu", what, (unsigned long long)limit,
                     (unsigned long long)*out);
        return -1;
    }
    return 0;
}

static PyObject *RecencyLog_new(PyTypeObject *type, PyObject *args, PyObject *kwds) {
    static char *kwlist[] = {"payload_bits", "compact_slack", "pass_window", "pass_every", NULL};
    int bits = 0;
    Py_ssize_t slack = 4096, window = 16384, every = 128;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "i|nnn:RecencyLog", kwlist, &bits, &slack, &window, &every))
        return NULL;
    if (bits < 0 || bits > (int)MAX_PAYLOAD_BITS) {
        PyErr_Format(PyExc_ValueError, "payload_bits must be in 0..%u, got %d", MAX_PAYLOAD_BITS, bits);
        return NULL;
    }
    if (slack < 1 || window < 1 || every < 1) {
        PyErr_Format(PyExc_ValueError, "compact_slack, pass_window and pass_every must be >= 1, got %zd, %zd, %zd",
                     slack, window, every);
        return NULL;
    }
    RecencyLog *self = (RecencyLog *)type->tp_alloc(type, 0);
    if (!self)
        return NULL;
    self->bits = (unsigned)bits;
    self->bound_tick = PAST;
    self->compact_slack = (size_t)slack;
    self->pass_window = (size_t)window;
    self->pass_every = (long)every;
    self->compact_at = (int64_t)slack;
    size_t cap = hm_table_round_capacity(1024, 1);
    size_t seg = hm_segtable_round_segment_slots(HM_SEGTABLE_DEFAULT_SEGMENT_SLOTS, 1);
    if (cap == 0 || seg == 0 || hm_segtable_init(&self->last, 1, cap, seg) < 0) {
        Py_DECREF(self);
        return PyErr_NoMemory();
    }
    self->table_ready = 1;
    return (PyObject *)self;
}

static void RecencyLog_dealloc(RecencyLog *self) {
    if (self->table_ready)
        hm_segtable_free(&self->last);
    log_free(&self->log);
    log_free(&self->pass);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *or_none(int present, uint64_t value) {
    if (!present)
        Py_RETURN_NONE;
    return PyLong_FromUnsignedLongLong(value);
}

unsigned hm_recency_bits(const RecencyLog *s) { return s->bits; }

int hm_recency_touch(RecencyLog *s, uint64_t fp, uint64_t tick, uint64_t payload, int has_seen, uint64_t seen,
                     uint64_t shadow_size, uint64_t limit, hm_recency_touched *out) {
    if (refuse_if_busy(s) < 0)
        return -1;
    if (tick >= (uint64_t)1 << (63 - s->bits) || payload >= (uint64_t)1 << s->bits ||
        (has_seen && seen >= (uint64_t)1 << s->bits)) {
        PyErr_Format(PyExc_ValueError, "RecencyLog: tick %llu or payload %llu out of range for %u payload bits",
                     (unsigned long long)tick, (unsigned long long)(has_seen ? seen : payload), s->bits);
        return -1;
    }
    if (s->touched && tick <= s->last_tick) {
        PyErr_Format(PyExc_ValueError, "ticks must increase: %llu after %llu", (unsigned long long)tick,
                     (unsigned long long)s->last_tick);
        return -1;
    }
    if (log_reserve(&s->log, s->log.len + 1) < 0) {
        PyErr_NoMemory();
        return -1;
    }
    uint64_t stamp = tick << s->bits, old = 0;
    uint64_t *v = hm_segtable_find(&s->last, fp);
    int had = v != NULL;
    if (v) {
        old = v[0];
        v[0] = stamp | (has_seen ? seen : payload);
    } else {
        uint64_t value = stamp | payload;
        int r = hm_segtable_put(&s->last, fp, &value, 0);
        if (r == HM_SEGTABLE_NEEDS_GROWTH) { /* a segment doubles or splits: not with the GIL */
            s->busy = 1;
            Py_BEGIN_ALLOW_THREADS
            r = hm_segtable_put(&s->last, fp, &value, 1);
            Py_END_ALLOW_THREADS
            s->busy = 0;
        }
        if (r < 0) { /* nothing changed */
            PyErr_NoMemory();
            return -1;
        }
    }
    int in_shadow = had && s->bound_tick != PAST && (old >> s->bits) >= s->bound_tick;
    s->log.fps[s->log.len] = fp;
    s->log.ticks[s->log.len] = tick;
    s->log.len++;
    s->last_tick = tick;
    s->touched = 1;
    if (s->bound_tick == PAST) /* the boundary was at the end: it is this entry now */
        s->bound_tick = tick;
    if (!in_shadow) {
        if (s->shadow < shadow_size) {
            s->shadow++;
        } else { /* the oldest live entry of the shadow leaves it (usually the one at the boundary) */
            size_t i = s->bound;
            if (i >= s->log.len || !live_at(s, &s->log, i))
                i = next_live(s, i + 1);
            move_bound(s, i < s->log.len ? i + 1 : s->log.len);
        }
    }
    uint64_t expired = 0;
    int has_expired = 0;
    if (s->last.count > limit) {
        if (expire_oldest(s, &expired) < 0)
            return -1;
        has_expired = 1;
    }
    if (s->pass_on) {
        if (--s->pass_wait <= 0)
            pass_step(s);
    } else if ((int64_t)s->log.len >= s->compact_at) {
        if (s->log.len - s->head > 2 * s->last.count + s->compact_slack) {
            s->pass_on = 1;
            s->pass.len = 0;
            s->pass_at = s->head;
            s->pass_end = s->log.len;
            pass_step(s);
        } else {
            s->compact_at = (int64_t)(s->log.len + s->last.count + s->compact_slack);
        }
    }
    out->had = had;
    out->old = old;
    out->in_shadow = in_shadow;
    out->has_expired = has_expired;
    out->expired = expired;
    return 0;
}

/* touch(key_hash, tick, payload, shadow_size, limit, seen_payload=None)
 *   -> (previous value | None, was in the shadow, expired value | None) */
static PyObject *RecencyLog_touch(RecencyLog *s, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs < 5 || nargs > 6) {
        PyErr_SetString(PyExc_TypeError, "RecencyLog.touch(key_hash, tick, payload, shadow_size, limit, seen_payload=None)");
        return NULL;
    }
    if (refuse_if_busy(s) < 0)
        return NULL;
    uint64_t fp, tick, payload, seen = 0, shadow_size, limit;
    uint64_t payload_limit = (uint64_t)1 << s->bits;
    int has_seen = nargs == 6 && args[5] != Py_None;
    if (parse_key(args[0], &fp) < 0 || parse_below(args[1], "tick", (uint64_t)1 << (63 - s->bits), &tick) < 0 ||
        parse_below(args[2], "payload", payload_limit, &payload) < 0 ||
        hm_parse_u64(args[3], "shadow_size", &shadow_size) < 0 || hm_parse_u64(args[4], "limit", &limit) < 0 ||
        (has_seen && parse_below(args[5], "seen_payload", payload_limit, &seen) < 0))
        return NULL;
    hm_recency_touched t;
    if (hm_recency_touch(s, fp, tick, payload, has_seen, seen, shadow_size, limit, &t) < 0)
        return NULL;
    int had = t.had, in_shadow = t.in_shadow, has_expired = t.has_expired;
    uint64_t old = t.old, expired = t.expired;
    PyObject *a = or_none(had, old);
    PyObject *c = a ? or_none(has_expired, expired) : NULL;
    if (!c) {
        Py_XDECREF(a);
        return NULL;
    }
    PyObject *out = PyTuple_New(3);
    if (!out) {
        Py_DECREF(a);
        Py_DECREF(c);
        return NULL;
    }
    PyObject *b = in_shadow ? Py_True : Py_False;
    Py_INCREF(b);
    PyTuple_SET_ITEM(out, 0, a);
    PyTuple_SET_ITEM(out, 1, b);
    PyTuple_SET_ITEM(out, 2, c);
    return out;
}

/* value(key_hash) -> int | None: the value of the key's open observation. */
static PyObject *RecencyLog_value(RecencyLog *s, PyObject *arg) {
    uint64_t fp;
    if (refuse_if_busy(s) < 0 || parse_key(arg, &fp) < 0)
        return NULL;
    const uint64_t *v = hm_segtable_find(&s->last, fp);
    return or_none(v != NULL, v ? v[0] : 0);
}

static int RecencyLog_contains(RecencyLog *s, PyObject *arg) {
    uint64_t fp;
    if (refuse_if_busy(s) < 0 || parse_key(arg, &fp) < 0)
        return -1;
    return hm_segtable_find(&s->last, fp) != NULL;
}

static Py_ssize_t RecencyLog_len(RecencyLog *s) {
    if (refuse_if_busy(s) < 0)
        return -1;
    return (Py_ssize_t)s->last.count;
}

/* live_fingerprints() -> list[int]: the fingerprints of the open observations, oldest access
 * first (what the log's live entries say; O(log length): for tests and inspection). */
static PyObject *RecencyLog_live_fingerprints(RecencyLog *s, PyObject *unused) {
    (void)unused;
    if (refuse_if_busy(s) < 0)
        return NULL;
    PyObject *out = PyList_New(0);
    if (!out)
        return NULL;
    for (size_t i = s->head; i < s->log.len; i++) {
        if (!live_at(s, &s->log, i))
            continue;
        PyObject *fp = PyLong_FromUnsignedLongLong(s->log.fps[i]);
        if (!fp || PyList_Append(out, fp) < 0) {
            Py_XDECREF(fp);
            Py_DECREF(out);
            return NULL;
        }
        Py_DECREF(fp);
    }
    return out;
}

static PyObject *RecencyLog_get_nbytes(RecencyLog *s, void *closure) {
    (void)closure;
    if (refuse_if_busy(s) < 0)
        return NULL;
    size_t arrays = (s->log.cap + s->pass.cap) * 2 * sizeof(uint64_t);
    return PyLong_FromSize_t(hm_segtable_nbytes(&s->last) + arrays);
}

static PyObject *RecencyLog_get_shadow_len(RecencyLog *s, void *closure) {
    (void)closure;
    return PyLong_FromSize_t(s->shadow);
}

static PyObject *RecencyLog_get_log_len(RecencyLog *s, void *closure) {
    (void)closure;
    return PyLong_FromSize_t(s->log.len);
}

static PyObject *RecencyLog_get_passes_done(RecencyLog *s, void *closure) {
    (void)closure;
    return PyLong_FromSize_t(s->passes_done);
}

static PyMethodDef RecencyLog_methods[] = {
    {"touch", HM_FASTCALL(RecencyLog_touch), METH_FASTCALL,
     "touch(key_hash, tick, payload, shadow_size, limit, seen_payload=None) -> (old, in_shadow, expired)"},
    {"value", (PyCFunction)RecencyLog_value, METH_O, "value(key_hash) -> int | None"},
    {"live_fingerprints", (PyCFunction)RecencyLog_live_fingerprints, METH_NOARGS,
     "live_fingerprints() -> the open observations' fingerprints, oldest access first"},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef RecencyLog_getset[] = {
    {"nbytes", (getter)RecencyLog_get_nbytes, NULL, "bytes of the table and the log arrays", NULL},
    {"shadow_len", (getter)RecencyLog_get_shadow_len, NULL, "keys in the shadow", NULL},
    {"log_len", (getter)RecencyLog_get_log_len, NULL, "log entries, stale ones included", NULL},
    {"passes_done", (getter)RecencyLog_get_passes_done, NULL, "compaction passes finished", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PySequenceMethods RecencyLog_as_sequence = {
    .sq_length = (lenfunc)RecencyLog_len,
    .sq_contains = (objobjproc)RecencyLog_contains,
};

PyTypeObject hm_RecencyLogType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "hicache_mooncake.native._core.RecencyLog",
    .tp_basicsize = sizeof(RecencyLog),
    .tp_dealloc = (destructor)RecencyLog_dealloc,
    .tp_as_sequence = &RecencyLog_as_sequence,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "One access order over fingerprints: open observations and an LRU shadow (not thread-safe).",
    .tp_methods = RecencyLog_methods,
    .tp_getset = RecencyLog_getset,
    .tp_new = RecencyLog_new,
};
