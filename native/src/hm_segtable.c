/* The segmented fingerprint table (see hm_segtable.h). */
#include "hm_segtable.h"

#include <stdlib.h>
#include <string.h>

/* A bijective finalizer (the splitmix64 constants): the directory's bits, independent of the
 * in-segment home (hm_table multiplies the key by another constant and takes its top bits). */
static inline uint64_t mix(uint64_t k) {
    k ^= k >> 30;
    k *= UINT64_C(0xBF58476D1CE4E5B9);
    k ^= k >> 27;
    k *= UINT64_C(0x94D049BB133111EB);
    return k ^ (k >> 31);
}

static inline size_t dir_index(const hm_segtable *s, uint64_t key) {
    return s->depth ? (size_t)(mix(key) >> (64u - s->depth)) : 0;
}

static inline hm_segment *segment_of(const hm_segtable *s, uint64_t key) { return s->dir[dir_index(s, key)]; }

/* How many directory entries the segment at `i` serves (they start at `i` when `i` is its first). */
static inline size_t span(const hm_segtable *s, const hm_segment *g) { return (size_t)1 << (s->depth - g->depth); }

size_t hm_segtable_round_segment_slots(size_t want, unsigned value_words) {
    return hm_table_round_capacity(want, value_words);
}

static hm_segment *new_segment(unsigned value_words, size_t capacity, unsigned depth, uint64_t prefix) {
    hm_segment *g = malloc(sizeof(*g));
    if (!g)
        return NULL;
    if (hm_table_init(&g->table, value_words, capacity) < 0) {
        free(g);
        return NULL;
    }
    g->depth = depth;
    g->prefix = prefix;
    return g;
}

static void free_segment(hm_segment *g) {
    hm_table_free(&g->table);
    free(g);
}

/* Frees every segment and the directory. */
static void free_all(hm_segtable *s) {
    if (!s->dir)
        return;
    size_t n = (size_t)1 << s->depth;
    for (size_t i = 0; i < n;) {
        hm_segment *g = s->dir[i];
        i += span(s, g);
        free_segment(g);
    }
    free(s->dir);
    s->dir = NULL;
}

/* Builds the initial layout into *s (fields other than the layout are set by the caller). */
static int build(hm_segtable *s) {
    size_t capacity = s->initial_capacity, seg = s->segment_slots;
    unsigned depth = capacity > seg ? hm_log2_of(capacity / seg) : 0;
    if (depth > HM_SEGTABLE_MAX_DEPTH)
        return -1;
    size_t n = (size_t)1 << depth;
    s->dir = calloc(n, sizeof(*s->dir));
    if (!s->dir)
        return -1;
    s->depth = depth;
    s->segments = 0;
    s->slots = 0;
    s->count = 0;
    for (size_t i = 0; i < n; i++) {
        s->dir[i] = new_segment(s->value_words, depth ? seg : capacity, depth, (uint64_t)i);
        if (!s->dir[i]) {
            for (size_t j = 0; j < i; j++)
                free_segment(s->dir[j]);
            free(s->dir);
            s->dir = NULL;
            return -1;
        }
        s->segments++;
        s->slots += s->dir[i]->table.capacity;
    }
    return 0;
}

int hm_segtable_init(hm_segtable *s, unsigned value_words, size_t capacity, size_t segment_slots) {
    memset(s, 0, sizeof(*s));
    s->value_words = value_words;
    s->segment_slots = segment_slots;
    s->initial_capacity = capacity;
    return build(s);
}

void hm_segtable_free(hm_segtable *s) { free_all(s); }

void hm_segtable_prefetch(const hm_segtable *s, uint64_t key) { hm_table_prefetch(&segment_of(s, key)->table, key); }

uint64_t *hm_segtable_find(const hm_segtable *s, uint64_t key) {
    return (uint64_t *)hm_table_find(&segment_of(s, key)->table, key);
}

/* Doubles the directory: entry i of the new one is entry i / 2 of the old one. */
static int double_dir(hm_segtable *s) {
    size_t n = (size_t)1 << s->depth;
    hm_segment **dir = malloc(2 * n * sizeof(*dir));
    if (!dir)
        return -1;
    for (size_t i = 0; i < 2 * n; i++)
        dir[i] = s->dir[i >> 1];
    free(s->dir);
    s->dir = dir;
    s->depth++;
    return 0;
}

/* Splits `g` (local depth < HM_SEGTABLE_MAX_DEPTH) in two by the next bit of mix(key). The halves
 * have g's capacity, so moving g's entries into them never grows them. */
static int split(hm_segtable *s, hm_segment *g) {
    if (g->depth == s->depth && double_dir(s) < 0)
        return -1;
    unsigned d = g->depth;
    size_t cap = g->table.capacity;
    hm_segment *lo = new_segment(s->value_words, cap, d + 1, g->prefix << 1);
    hm_segment *hi = lo ? new_segment(s->value_words, cap, d + 1, (g->prefix << 1) | 1) : NULL;
    if (!hi) {
        if (lo)
            free_segment(lo);
        return -1;
    }
    const hm_table *t = &g->table;
    for (size_t i = 0; i < t->capacity; i++) {
        const uint64_t *slot = t->slots + i * t->stride;
        if (slot[0]) {
            hm_segment *to = (mix(slot[0]) >> (63u - d)) & 1 ? hi : lo;
            (void)hm_table_put(&to->table, slot[0], slot + 1); /* cannot grow: see above */
        }
    }
    size_t first = (size_t)g->prefix << (s->depth - d), half = span(s, g) / 2;
    for (size_t i = 0; i < half; i++) {
        s->dir[first + i] = lo;
        s->dir[first + half + i] = hi;
    }
    s->slots += cap; /* two segments of cap slots replace one */
    s->segments++;
    free_segment(g);
    return 0;
}

int hm_segtable_put(hm_segtable *s, uint64_t key, const uint64_t *value, int may_grow) {
    for (;;) {
        hm_segment *g = segment_of(s, key);
        hm_table *t = &g->table;
        int r;
        if ((t->count + 1) * 4 <= t->capacity * 3 || hm_table_find(t, key) != NULL) {
            r = hm_table_put(t, key, value); /* no growth: room, or an update */
        } else if (!may_grow) {
            return HM_SEGTABLE_NEEDS_GROWTH;
        } else if (t->capacity < s->segment_slots || g->depth >= HM_SEGTABLE_MAX_DEPTH) {
            size_t before = t->capacity;
            r = hm_table_put(t, key, value); /* doubles this segment first */
            if (r >= 0)
                s->slots += t->capacity - before;
        } else {
            if (split(s, g) < 0)
                return -1;
            continue; /* the key's segment is one of the halves now (perhaps full again) */
        }
        if (r == 0)
            s->count++;
        return r;
    }
}

int hm_segtable_remove(hm_segtable *s, uint64_t key, const uint64_t *expected_word0) {
    int r = hm_table_remove(&segment_of(s, key)->table, key, expected_word0);
    if (r)
        s->count--;
    return r;
}

void hm_segtable_clear(hm_segtable *s) {
    hm_segtable fresh = *s;
    fresh.dir = NULL;
    if (build(&fresh) == 0) {
        free_all(s);
        *s = fresh;
        return;
    }
    size_t n = (size_t)1 << s->depth;
    for (size_t i = 0; i < n;) {
        hm_segment *g = s->dir[i];
        i += span(s, g);
        hm_table_clear(&g->table, g->table.capacity);
    }
    s->count = 0;
}

size_t hm_segtable_copy_out(const hm_segtable *s, uint64_t *keys, uint64_t *vals, size_t room) {
    size_t n = (size_t)1 << s->depth, j = 0, w = s->value_words;
    for (size_t i = 0; i < n && j < room;) {
        const hm_segment *g = s->dir[i];
        i += span(s, g);
        const hm_table *t = &g->table;
        for (size_t k = 0; k < t->capacity && j < room; k++) {
            const uint64_t *slot = t->slots + k * t->stride;
            if (slot[0]) {
                keys[j] = slot[0];
                memcpy(vals + j * w, slot + 1, w * sizeof(uint64_t));
                j++;
            }
        }
    }
    return j;
}

size_t hm_segtable_nbytes(const hm_segtable *s) {
    return s->slots * (1 + (size_t)s->value_words) * sizeof(uint64_t) +
           ((size_t)1 << s->depth) * sizeof(hm_segment *) + s->segments * sizeof(hm_segment);
}
