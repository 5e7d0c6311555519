/* _core.ReuseLedger (see hm_reuse.h): the per-access bookkeeping of the reuse policy
 * (tiers/policy/reuse.py) for a whole batch of accesses in one call.
 *
 * Per access, in order (each step is what the policy's Python did per access before):
 *   stage 0: the access's class from its AccessContext (arrival, tail, request length, prefix
 *            hits, hint), the tick; a request's first page (depth 0) starts a new epoch and ends
 *            the previous request for the guard (its paired hit difference is summed). When the
 *            guard's test is due, the call returns ADAPT: the policy decides (Python), then
 *            resumes at stage 1.
 *   stage 1: one RecencyLog touch (the observation closed and opened, the LRU shadow) and the
 *            per-class counters (reuses, exposure, open observations). When the class values are
 *            due for a refresh, the call returns REFRESH: Python refreshes, resumes at stage 2.
 *   stage 2: the guard's hit counts, then the GreedyDual push: the access joins the current run
 *            (chain-monotone priority) or opens a new one, appended to `news` as
 *            (index, run id, priority, order, floor, class) for Python's runs and heap.
 * The resident count grows with each key new to the policy, and the observation limit with it.
 *
 * Memory: the per-class arrays and the class values are numpy arrays owned by the policy and
 * borrowed (buffer exports held) for the ledger's lifetime; the ledger owns its RecencyLog
 * reference and its last key. Errors: arguments are checked before any access is recorded
 * (TypeError / ValueError naming the item); a touch that fails (MemoryError) stops the batch
 * with `stopped_at` = the key's index, the keys before it recorded (in `news`). Not thread-safe:
 * the policy's store lock serialises calls; the GIL is held throughout except while the log's
 * table grows (RecencyLog's rule).
 *
 * Arithmetic is the Python version's, operation for operation (doubles, int64 ticks), so the
 * policy's decisions are the same (tests/policy/test_reuse_native.py holds them to the Python
 * reference). */
#include "hm_reuse.h"

#include <stdlib.h>
#include <string.h>
#include <structmember.h>

#include "hm_recency.h"

#define KINDS 3
#define KIND_NEW 0
#define KIND_HIT 2
#define DEPTH_MAX ((INT64_C(1) << 24) - 1)
#define EVENT_DONE 0
#define EVENT_ADAPT 1
#define EVENT_REFRESH 2
/* AccessContext's fields, positionally (tiers/policy/base.py; a test checks the order) */
#define CTX_FIELDS 10
#define CTX_POSITION 1
#define CTX_BATCH_LEN 2
#define CTX_PREFIX_HITS 3
#define CTX_PREV_KEY 5
#define CTX_PROMOTED 8
#define CTX_REQUEST_LEN 9

typedef struct {
    PyObject_HEAD
    PyObject *log; /* the policy's RecencyLog */
    Py_buffer pos_buf, expo_buf, open_n_buf, open_sum_buf, v_buf;
    int bufs; /* how many of the five are held */
    double *pos, *expo, *v;
    int64_t *open_n, *open_sum;
    Py_ssize_t classes;
    int64_t *kind_base; /* ((hint * 3 + kind) * 2 + tail) -> class base */
    Py_ssize_t kind_base_len;
    int64_t *lp; /* [min(length, lp_rows - 1)][min(prefix hits, lp_cols - 1)] -> class offset */
    Py_ssize_t lp_rows, lp_cols;
    unsigned bits;
    int64_t rewrite_shift;
    double horizon, warm;
    int guard;
    long long adapt_every;
    /* state read and written by the policy's Python (members) */
    long long tick, epoch, peak, obs_limit, next_refresh, next_adapt, warm_until, full_tick;
    long long next_rid, last_rid, real_hits, sh_hits, stopped_at;
    int sh_broken, last_run_alive;
    double far, zs, zq, zh, floor, last_prio;
    PyObject *last_key; /* NULL or None: no current run to join */
    /* the access a returned event interrupted */
    Py_ssize_t pend_index;
    int pend_valid, pend_new, pend_in_shadow;
    int64_t pend_cls, pend_kind, pend_depth;
} ReuseLedger;

static int get_f64(PyObject *obj, const char *what, Py_buffer *view, Py_ssize_t n) {
    if (PyObject_GetBuffer(obj, view, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT | PyBUF_WRITABLE) < 0)
        return -1;
    if (view->itemsize != 8 || !view->format || strcmp(view->format, "d") != 0 || view->len != n * 8) {
        PyErr_Format(PyExc_ValueError, "%s must be a writable float64 array of %zd items", what, n);
        PyBuffer_Release(view);
        return -1;
    }
    return 0;
}

static int get_i64_n(PyObject *obj, const char *what, int writable, Py_buffer *view, Py_ssize_t n) {
    Py_ssize_t got;
    if (hm_get_i64(obj, what, writable, view, &got) < 0)
        return -1;
    if (n >= 0 && got != n) {
        PyErr_Format(PyExc_ValueError, "%s must hold %zd items, got %zd", what, n, got);
        PyBuffer_Release(view);
        return -1;
    }
    return 0;
}

static int64_t *copy_i64(PyObject *obj, const char *what, Py_ssize_t *n) {
    Py_buffer view;
    if (get_i64_n(obj, what, 0, &view, -1) < 0)
        return NULL;
    *n = view.len / 8;
    int64_t *out = malloc((size_t)(*n ? *n : 1) * sizeof(int64_t));
    if (!out) {
        PyBuffer_Release(&view);
        PyErr_NoMemory();
        return NULL;
    }
    memcpy(out, view.buf, (size_t)view.len);
    PyBuffer_Release(&view);
    return out;
}

static void release_bufs(ReuseLedger *s) {
    Py_buffer *all[] = {&s->pos_buf, &s->expo_buf, &s->open_n_buf, &s->open_sum_buf, &s->v_buf};
    for (int i = 0; i < s->bufs; i++)
        PyBuffer_Release(all[i]);
    s->bufs = 0;
}

static void ReuseLedger_dealloc(ReuseLedger *s) {
    release_bufs(s);
    free(s->kind_base);
    free(s->lp);
    Py_XDECREF(s->log);
    Py_XDECREF(s->last_key);
    Py_TYPE(s)->tp_free((PyObject *)s);
}

/* ReuseLedger(log, pos, expo, open_n, open_sum, v, kind_base, lp, lp_cols, rewrite_shift,
 *             horizon, warm, guard, adapt_every) */
static PyObject *ReuseLedger_new(PyTypeObject *type, PyObject *args, PyObject *kwds) {
    static char *kwlist[] = {"log",     "pos",           "expo",    "open_n", "open_sum", "v",           "kind_base",
                             "lp",      "lp_cols",       "rewrite_shift",     "horizon",  "warm",        "guard",
                             "adapt_every", NULL};
    PyObject *log, *pos, *expo, *open_n, *open_sum, *v, *kind_base, *lp;
    Py_ssize_t lp_cols;
    long long rewrite_shift, adapt_every;
    double horizon, warm;
    int guard;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "O!OOOOOOOnLddpL:ReuseLedger", kwlist, &hm_RecencyLogType, &log,
                                     &pos, &expo, &open_n, &open_sum, &v, &kind_base, &lp, &lp_cols, &rewrite_shift,
                                     &horizon, &warm, &guard, &adapt_every))
        return NULL;
    if (adapt_every < 1 || lp_cols < 1) {
        PyErr_Format(PyExc_ValueError, "adapt_every and lp_cols must be >= 1, got %lld, %zd", adapt_every, lp_cols);
        return NULL;
    }
    ReuseLedger *s = (ReuseLedger *)type->tp_alloc(type, 0);
    if (!s)
        return NULL;
    Py_INCREF(log);
    s->log = log;
    s->bits = hm_recency_bits((hm_recency_log *)log);
    if (PyObject_GetBuffer(pos, &s->pos_buf, PyBUF_C_CONTIGUOUS) < 0)
        goto fail;
    s->classes = s->pos_buf.len / 8;
    PyBuffer_Release(&s->pos_buf);
    if (s->classes < 1 || (uint64_t)s->classes > ((uint64_t)1 << s->bits)) {
        PyErr_Format(PyExc_ValueError, "pos must hold 1 to 2**payload_bits classes, got %zd", s->classes);
        goto fail;
    }
    if (get_f64(pos, "pos", &s->pos_buf, s->classes) < 0)
        goto fail;
    s->bufs = 1;
    if (get_f64(expo, "expo", &s->expo_buf, s->classes) < 0)
        goto fail;
    s->bufs = 2;
    if (get_i64_n(open_n, "open_n", 1, &s->open_n_buf, s->classes) < 0)
        goto fail;
    s->bufs = 3;
    if (get_i64_n(open_sum, "open_sum", 1, &s->open_sum_buf, s->classes) < 0)
        goto fail;
    s->bufs = 4;
    if (get_f64(v, "v", &s->v_buf, s->classes) < 0)
        goto fail;
    s->bufs = 5;
    s->pos = s->pos_buf.buf;
    s->expo = s->expo_buf.buf;
    s->open_n = s->open_n_buf.buf;
    s->open_sum = s->open_sum_buf.buf;
    s->v = s->v_buf.buf;
    Py_ssize_t lp_len;
    if (!(s->kind_base = copy_i64(kind_base, "kind_base", &s->kind_base_len)) ||
        !(s->lp = copy_i64(lp, "lp", &lp_len)))
        goto fail;
    s->lp_cols = lp_cols;
    s->lp_rows = lp_len / lp_cols;
    if (s->lp_rows < 1 || lp_len % lp_cols) {
        PyErr_Format(PyExc_ValueError, "lp must hold rows of %zd items, got %zd items", lp_cols, lp_len);
        goto fail;
    }
    if (s->kind_base_len % (KINDS * 2) != 0 || s->kind_base_len == 0) {
        PyErr_Format(PyExc_ValueError, "kind_base must hold hints x 3 arrivals x 2 tails, got %zd", s->kind_base_len);
        goto fail;
    }
    /* every class a context can produce must be one of the arrays' (checked once here) */
    for (Py_ssize_t k = 0; k < s->kind_base_len; k++) {
        for (Py_ssize_t j = 0; j < lp_len; j++) {
            int64_t c = s->kind_base[k] + (k >= KINDS * 2 ? 0 : s->lp[j]);
            int64_t shifted = (k / 2) % KINDS == KIND_NEW ? c + rewrite_shift : c;
            if (c < 0 || c >= s->classes || shifted < 0 || shifted >= s->classes) {
                PyErr_Format(PyExc_ValueError, "kind_base/lp/rewrite_shift make class %lld outside 0..%zd",
                             (long long)(c < 0 || c >= s->classes ? c : shifted), s->classes - 1);
                goto fail;
            }
        }
    }
    s->rewrite_shift = rewrite_shift;
    s->horizon = horizon;
    s->warm = warm;
    s->guard = guard;
    s->adapt_every = adapt_every;
    s->full_tick = -1;
    s->last_rid = -1;
    s->stopped_at = -1;
    return (PyObject *)s;
fail:
    Py_DECREF(s);
    return NULL;
}

/* ------------------------------------------------------------------ one batch */

typedef struct {
    long long position, batch_len, prefix_hits, request_len;
    int promoted;
    PyObject *prev;
} ctx_fields;

static int read_ctx(PyObject *ctx, Py_ssize_t i, ctx_fields *f) {
    if (!PyTuple_Check(ctx) || PyTuple_GET_SIZE(ctx) < CTX_FIELDS) {
        PyErr_Format(PyExc_TypeError, "ctxs[%zd] must be an AccessContext, got %.80s", i, Py_TYPE(ctx)->tp_name);
        return -1;
    }
    static const int at[4] = {CTX_POSITION, CTX_BATCH_LEN, CTX_PREFIX_HITS, CTX_REQUEST_LEN};
    static const char *names[4] = {"position", "batch_len", "prefix_hits", "request_len"};
    long long *out[4] = {&f->position, &f->batch_len, &f->prefix_hits, &f->request_len};
    for (int k = 0; k < 4; k++) {
        PyObject *o = PyTuple_GET_ITEM(ctx, at[k]);
        long long x = PyLong_Check(o) ? PyLong_AsLongLong(o) : -1;
        if (x < 0 || x > (INT64_C(1) << 40)) {
            PyErr_Clear();
            PyErr_Format(PyExc_ValueError, "ctxs[%zd].%s must be an int in 0..2**40", i, names[k]);
            return -1;
        }
        *out[k] = x;
    }
    PyObject *promoted = PyTuple_GET_ITEM(ctx, CTX_PROMOTED);
    if (!PyBool_Check(promoted)) {
        PyErr_Format(PyExc_TypeError, "ctxs[%zd].promoted must be a bool", i);
        return -1;
    }
    f->promoted = promoted == Py_True;
    f->prev = PyTuple_GET_ITEM(ctx, CTX_PREV_KEY);
    if (f->prev != Py_None && !PyUnicode_Check(f->prev)) {
        PyErr_Format(PyExc_TypeError, "ctxs[%zd].prev_key must be a str or None", i);
        return -1;
    }
    return 0;
}

static int warming(const ReuseLedger *s) {
    return s->full_tick < 0 || (double)s->tick < (double)s->full_tick + s->warm * (double)s->peak;
}

static void grow(ReuseLedger *s, long long resident) {
    s->peak = resident;
    s->obs_limit = (long long)((s->horizon > 1.0 ? s->horizon : 1.0) * (double)resident) + 1024;
}

static PyObject *event(Py_ssize_t i, int stage, int what) {
    return Py_BuildValue("(nii)", i, stage, what);
}

/* access(keys, ctxs, start, stage, read, in_where, hints, news, resident) -> (index, stage, event)
 *
 * Records the accesses of keys[start:] (resuming key `start` at `stage` after an event).
 * `in_where`: per key 1 if the policy already tracks it (bytes; None for reads: all tracked);
 * `hints`: per key its hint state (bytes; None: no hint); `resident`: the tracked keys now. New
 * runs are appended to `news`. Returns at the first event (ADAPT before the touch of key
 * `index`, REFRESH before its push; resume at the returned stage) or DONE with index len(keys). */
static PyObject *ReuseLedger_access(ReuseLedger *s, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 9) {
        PyErr_SetString(PyExc_TypeError,
                        "ReuseLedger.access(keys, ctxs, start, stage, read, in_where, hints, news, resident)");
        return NULL;
    }
    PyObject *keys_obj = args[0], *ctxs_obj = args[1], *news = args[7];
    if (!PyList_Check(keys_obj) && !PyTuple_Check(keys_obj)) {
        PyErr_SetString(PyExc_TypeError, "keys must be a list or tuple");
        return NULL;
    }
    if (!PyList_Check(ctxs_obj) && !PyTuple_Check(ctxs_obj)) {
        PyErr_SetString(PyExc_TypeError, "ctxs must be a list or tuple");
        return NULL;
    }
    if (!PyList_Check(news)) {
        PyErr_SetString(PyExc_TypeError, "news must be a list");
        return NULL;
    }
    Py_ssize_t n = PySequence_Fast_GET_SIZE(keys_obj);
    if (PySequence_Fast_GET_SIZE(ctxs_obj) != n) {
        PyErr_Format(PyExc_ValueError, "%zd keys, %zd contexts", n, PySequence_Fast_GET_SIZE(ctxs_obj));
        return NULL;
    }
    PyObject **keys = PySequence_Fast_ITEMS(keys_obj), **ctxs = PySequence_Fast_ITEMS(ctxs_obj);
    Py_ssize_t start = PyLong_AsSsize_t(args[2]);
    long stage = PyLong_AsLong(args[3]);
    int read = PyObject_IsTrue(args[4]);
    long long resident = PyLong_AsLongLong(args[8]);
    if (PyErr_Occurred() || read < 0)
        return NULL;
    if (start < 0 || start > n || stage < 0 || stage > 2 || resident < 0) {
        PyErr_Format(PyExc_ValueError, "start %zd / stage %ld / resident %lld out of range", start, stage, resident);
        return NULL;
    }
    if (stage && (start >= n || !s->pend_valid || s->pend_index != start)) {
        PyErr_Format(PyExc_ValueError, "no access of index %zd is waiting at stage %ld", start, stage);
        return NULL;
    }
    Py_buffer where_buf = {0}, hints_buf = {0};
    const unsigned char *in_where = NULL, *hints = NULL;
    PyObject *result = NULL;
    if (args[5] != Py_None) {
        if (hm_get_bytes(args[5], "in_where", 0, &where_buf) < 0)
            return NULL;
        in_where = where_buf.buf;
        if (where_buf.len != n) {
            PyErr_Format(PyExc_ValueError, "in_where holds %zd flags for %zd keys", where_buf.len, n);
            goto done;
        }
    } else if (!read) {
        PyErr_SetString(PyExc_ValueError, "in_where is required for writes");
        return NULL;
    }
    if (args[6] != Py_None) {
        if (hm_get_bytes(args[6], "hints", 0, &hints_buf) < 0)
            goto done;
        hints = hints_buf.buf;
        if (hints_buf.len != n) {
            PyErr_Format(PyExc_ValueError, "hints holds %zd states for %zd keys", hints_buf.len, n);
            goto done;
        }
    }
    Py_ssize_t hint_states = s->kind_base_len / (KINDS * 2);
    for (Py_ssize_t i = start; i < n; i++) { /* every argument checked before anything is recorded */
        ctx_fields f;
        if (!PyUnicode_Check(keys[i])) {
            PyErr_Format(PyExc_TypeError, "keys[%zd] must be a str, got %.80s", i, Py_TYPE(keys[i])->tp_name);
            goto done;
        }
        if (read_ctx(ctxs[i], i, &f) < 0)
            goto done;
        if (hints && hints[i] >= hint_states) {
            PyErr_Format(PyExc_ValueError, "hints[%zd] = %d is not a hint state (0..%zd)", i, hints[i], hint_states - 1);
            goto done;
        }
    }
    if ((uint64_t)(s->tick + (n - start)) >= ((uint64_t)1 << (63 - s->bits))) {
        PyErr_SetString(PyExc_OverflowError, "ReuseLedger: ticks exhausted");
        goto done;
    }
    s->stopped_at = -1;
    for (Py_ssize_t i = start; i < n; i++, stage = 0) {
        PyObject *key = keys[i];
        ctx_fields f;
        read_ctx(ctxs[i], i, &f); /* checked above */
        if (stage == 0) {
            long long ph, length, depth;
            int tail;
            if (read) {
                ph = f.batch_len;
                length = f.request_len < ph ? ph : f.request_len;
                tail = 0;
                depth = f.position;
            } else {
                ph = f.prefix_hits;
                length = ph + f.batch_len;
                tail = f.position == f.batch_len - 1;
                depth = ph + f.position;
            }
            int hint = hints ? hints[i] : 0;
            int kind = read || in_where[i] || f.promoted ? KIND_HIT : KIND_NEW;
            int64_t cls = s->kind_base[(hint * KINDS + kind) * 2 + tail];
            if (!hint) {
                Py_ssize_t row = length < s->lp_rows - 1 ? (Py_ssize_t)length : s->lp_rows - 1;
                Py_ssize_t col = ph < s->lp_cols - 1 ? (Py_ssize_t)ph : s->lp_cols - 1;
                cls += s->lp[row * s->lp_cols + col];
            }
            s->tick++;
            s->pend_index = i;
            s->pend_valid = 1;
            s->pend_cls = cls;
            s->pend_kind = kind;
            s->pend_depth = depth;
            s->pend_new = !read && !in_where[i];
            if (depth == 0) { /* a new request: the previous one is complete */
                s->epoch++;
                if (s->guard) {
                    if (s->tick >= s->warm_until && !warming(s)) {
                        double d = (double)(s->real_hits - s->sh_hits);
                        s->zs += d;
                        s->zq += d * d;
                        s->zh += (double)s->sh_hits;
                    }
                    s->real_hits = s->sh_hits = 0;
                    s->sh_broken = 0;
                    if (s->tick >= s->next_adapt) {
                        s->next_adapt = s->tick + s->adapt_every;
                        result = event(i, 1, EVENT_ADAPT);
                        goto done;
                    }
                }
            }
            stage = 1;
        }
        int64_t cls = s->pend_cls;
        if (stage == 1) {
            /* the observation: close the key's previous one (a reuse), open a new one; the same
             * touch moves the key to the front of the LRU shadow */
            Py_hash_t h = PyObject_Hash(key);
            uint64_t fp = (uint64_t)h ? (uint64_t)h : 1;
            int has_seen = s->pend_kind == KIND_NEW;
            uint64_t seen = has_seen ? (uint64_t)(cls + s->rewrite_shift) : 0;
            hm_recency_touched t;
            if (h == -1 || hm_recency_touch((hm_recency_log *)s->log, fp, (uint64_t)s->tick, (uint64_t)cls, has_seen,
                                            seen, (uint64_t)s->peak, (uint64_t)s->obs_limit, &t) < 0) {
                s->stopped_at = i;
                goto done;
            }
            /* the touch may have let other threads run (the table grew without the GIL): the
             * borrowed items are fetched again, and a caller that changed the lists is refused */
            if (PySequence_Fast_GET_SIZE(keys_obj) != n || PySequence_Fast_GET_SIZE(ctxs_obj) != n) {
                PyErr_SetString(PyExc_RuntimeError, "keys or ctxs changed during ReuseLedger.access");
                s->stopped_at = i;
                goto done;
            }
            keys = PySequence_Fast_ITEMS(keys_obj);
            ctxs = PySequence_Fast_ITEMS(ctxs_obj);
            key = keys[i];
            if (!PyUnicode_Check(key) || read_ctx(ctxs[i], i, &f) < 0) {
                if (!PyErr_Occurred())
                    PyErr_Format(PyExc_TypeError, "keys[%zd] changed during ReuseLedger.access", i);
                s->stopped_at = i;
                goto done;
            }
            uint64_t mask = ((uint64_t)1 << s->bits) - 1;
            if (t.had) {
                if (has_seen)
                    cls += s->rewrite_shift;
                uint64_t oc = t.old & mask;
                long long ot = (long long)(t.old >> s->bits);
                s->pos[oc] += 1.0;
                s->open_n[oc] -= 1;
                s->open_sum[oc] -= ot;
                s->expo[oc] += (double)(s->tick - ot);
                if (s->tick - ot > s->peak)
                    s->far += 1.0;
            }
            s->open_n[cls] += 1;
            s->open_sum[cls] += s->tick;
            if (t.has_expired) {
                uint64_t oc = t.expired & mask;
                long long ot = (long long)(t.expired >> s->bits);
                s->open_n[oc] -= 1;
                s->open_sum[oc] -= ot;
                s->expo[oc] += (double)(s->tick - ot);
            }
            s->pend_cls = cls;
            s->pend_in_shadow = t.in_shadow;
            if (s->tick >= s->next_refresh) {
                result = event(i, 2, EVENT_REFRESH);
                goto done;
            }
        }
        /* stage 2: the guard's LRU shadow hit run of this request, then the GreedyDual push */
        s->pend_valid = 0;
        if (s->guard) {
            if (read)
                s->real_hits++;
            if (!s->pend_in_shadow)
                s->sh_broken = 1;
            else if (!s->sh_broken)
                s->sh_hits++;
        }
        double prio = s->floor + s->v[cls];
        int join = 0;
        if (f.prev != Py_None && s->last_key && s->last_key != Py_None) {
            int eq = PyObject_RichCompareBool(f.prev, s->last_key, Py_EQ);
            if (eq < 0) {
                s->stopped_at = i;
                goto done;
            }
            if (eq && prio >= s->last_prio) {
                if (s->last_run_alive)
                    join = 1;
                else
                    prio = s->last_prio;
            }
        }
        if (!join) {
            long long rid = s->next_rid;
            long long depth = s->pend_depth < DEPTH_MAX ? s->pend_depth : DEPTH_MAX;
            long long order = (s->epoch << 24) + DEPTH_MAX - depth;
            PyObject *item = Py_BuildValue("(nLdLdL)", i, rid, prio, order, s->floor, (long long)cls);
            if (!item || PyList_Append(news, item) < 0) {
                Py_XDECREF(item);
                s->stopped_at = i;
                goto done;
            }
            Py_DECREF(item);
            s->next_rid = rid + 1;
            s->last_rid = rid;
            s->last_prio = prio;
            s->last_run_alive = 1;
        }
        Py_INCREF(key);
        Py_XSETREF(s->last_key, key);
        if (s->pend_new)
            resident++;
        if (resident > s->peak)
            grow(s, resident);
    }
    result = event(n, 0, EVENT_DONE);
done:
    if (where_buf.obj)
        PyBuffer_Release(&where_buf);
    if (hints_buf.obj)
        PyBuffer_Release(&hints_buf);
    return result;
}

static PyMethodDef ReuseLedger_methods[] = {
    {"access", HM_FASTCALL(ReuseLedger_access), METH_FASTCALL,
     "access(keys, ctxs, start, stage, read, in_where, hints, news, resident) -> (index, stage, event)"},
    {NULL, NULL, 0, NULL},
};

#define M_LL(name, doc) {#name, T_LONGLONG, offsetof(ReuseLedger, name), 0, doc}
#define M_D(name, doc) {#name, T_DOUBLE, offsetof(ReuseLedger, name), 0, doc}
static PyMemberDef ReuseLedger_members[] = {
    M_LL(tick, "accesses recorded"),
    M_LL(epoch, "requests begun"),
    M_LL(peak, "the largest resident count seen"),
    M_LL(obs_limit, "the observations kept"),
    M_LL(next_refresh, "the tick at which REFRESH is returned"),
    M_LL(next_adapt, "the tick from which a request's end returns ADAPT"),
    M_LL(warm_until, "the tick until which the guard's test ignores requests"),
    M_LL(full_tick, "the tick of the first eviction (-1: none yet)"),
    M_LL(next_rid, "the next run id"),
    M_LL(last_rid, "the current run"),
    M_LL(real_hits, "the current request's hits"),
    M_LL(sh_hits, "the current request's hits of the LRU shadow"),
    M_LL(stopped_at, "the key at which the last call failed (-1: none)"),
    {"sh_broken", T_INT, offsetof(ReuseLedger, sh_broken), 0, "the shadow's hit run is broken"},
    {"last_run_alive", T_INT, offsetof(ReuseLedger, last_run_alive), 0, "the current run still exists"},
    M_D(far, "reuses further apart than the capacity (decayed)"),
    M_D(zs, "the guard's decayed sum of paired differences"),
    M_D(zq, "... of their squares"),
    M_D(zh, "... of the shadow's hits"),
    M_D(floor, "GreedyDual's L: the priority of the last victim"),
    M_D(last_prio, "the current run's priority"),
    {"last_key", T_OBJECT, offsetof(ReuseLedger, last_key), 0, "the key last pushed (None: no run to join)"},
    {NULL, 0, 0, 0, NULL},
};

PyTypeObject hm_ReuseLedgerType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "hicache_mooncake.native._core.ReuseLedger",
    .tp_basicsize = sizeof(ReuseLedger),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "The reuse policy's per-access bookkeeping, a batch per call (see native/reuse_ledger.py).",
    .tp_new = ReuseLedger_new,
    .tp_dealloc = (destructor)ReuseLedger_dealloc,
    .tp_methods = ReuseLedger_methods,
    .tp_members = ReuseLedger_members,
};
