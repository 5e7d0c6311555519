/* The fingerprint table's algorithm (see hm_table.h). */
#include "hm_table.h"

#include <stdlib.h>
#include <string.h>

#define FIB UINT64_C(0x9E3779B97F4A7C15)

static inline size_t home(const hm_table *t, uint64_t key) { return (size_t)((key * FIB) >> t->shift); }

static inline uint64_t *slot(const hm_table *t, size_t i) { return t->slots + i * t->stride; }

size_t hm_table_round_capacity(size_t want, unsigned value_words) {
    size_t bytes_per_slot = (1 + (size_t)value_words) * sizeof(uint64_t);
    size_t limit = SIZE_MAX / 4 / bytes_per_slot; /* room to double once more */
    size_t cap = HM_TABLE_MIN_CAPACITY;
    while (cap < want) {
        if (cap > limit / 2)
            return 0;
        cap <<= 1;
    }
    return cap;
}

static int alloc_slots(hm_table *t, size_t capacity) {
    uint64_t *s = calloc(capacity, t->stride * sizeof(uint64_t));
    if (!s)
        return -1;
    t->slots = s;
    t->capacity = capacity;
    t->shift = 64u - hm_log2_of(capacity);
    return 0;
}

int hm_table_init(hm_table *t, unsigned value_words, size_t capacity) {
    t->stride = 1 + value_words;
    t->count = 0;
    t->slots = NULL;
    return alloc_slots(t, capacity);
}

void hm_table_free(hm_table *t) {
    free(t->slots);
    t->slots = NULL;
    t->count = 0;
}

/* Index of `key`'s slot, or of the empty slot where it would go. */
static size_t probe(const hm_table *t, uint64_t key) {
    size_t mask = t->capacity - 1;
    size_t i = home(t, key);
    for (;;) {
        uint64_t k = slot(t, i)[0];
        if (k == key || k == 0)
            return i;
        i = (i + 1) & mask;
    }
}

void hm_table_prefetch(const hm_table *t, uint64_t key) { __builtin_prefetch(slot(t, home(t, key))); }

const uint64_t *hm_table_find(const hm_table *t, uint64_t key) {
    uint64_t *s = slot(t, probe(t, key));
    return s[0] == key ? s + 1 : NULL;
}

static int grow(hm_table *t) {
    if (t->capacity > SIZE_MAX / 4 / (t->stride * sizeof(uint64_t)))
        return -1;
    hm_table old = *t;
    if (alloc_slots(t, old.capacity * 2) < 0) {
        *t = old;
        return -1;
    }
    for (size_t i = 0; i < old.capacity; i++) {
        const uint64_t *s = slot(&old, i);
        if (s[0])
            memcpy(slot(t, probe(t, s[0])), s, t->stride * sizeof(uint64_t));
    }
    free(old.slots);
    return 0;
}

int hm_table_put(hm_table *t, uint64_t key, const uint64_t *value) {
    size_t words = t->stride - 1;
    uint64_t *s = slot(t, probe(t, key));
    if (s[0] == key) {
        memcpy(s + 1, value, words * sizeof(uint64_t));
        return 1;
    }
    /* Inserting would make the load count+1 / capacity; keep it <= 3/4. */
    if ((t->count + 1) * 4 > t->capacity * 3) {
        if (grow(t) < 0)
            return -1;
        s = slot(t, probe(t, key));
    }
    s[0] = key;
    memcpy(s + 1, value, words * sizeof(uint64_t));
    t->count++;
    return 0;
}

int hm_table_remove(hm_table *t, uint64_t key, const uint64_t *expected_word0) {
    size_t mask = t->capacity - 1;
    size_t i = probe(t, key);
    uint64_t *s = slot(t, i);
    if (s[0] != key)
        return 0;
    if (expected_word0 && s[1] != *expected_word0)
        return 0;
    /* Backward shift: walk the run after the hole; an entry whose home is not in (hole, j]
     * cyclically may fill the hole (it stays reachable from its home), then the hole moves. */
    size_t j = i;
    for (;;) {
        j = (j + 1) & mask;
        uint64_t *sj = slot(t, j);
        if (sj[0] == 0)
            break;
        size_t dist_home = (j - home(t, sj[0])) & mask;
        size_t dist_hole = (j - i) & mask;
        if (dist_home >= dist_hole) {
            memcpy(slot(t, i), sj, t->stride * sizeof(uint64_t));
            i = j;
        }
    }
    memset(slot(t, i), 0, t->stride * sizeof(uint64_t));
    t->count--;
    return 1;
}

void hm_table_clear(hm_table *t, size_t capacity) {
    uint64_t *old = t->slots;
    size_t old_capacity = t->capacity;
    if (capacity != old_capacity && alloc_slots(t, capacity) == 0) {
        free(old);
    } else {
        t->slots = old;
        t->capacity = old_capacity;
        t->shift = 64u - hm_log2_of(old_capacity);
        memset(old, 0, old_capacity * t->stride * sizeof(uint64_t));
    }
    t->count = 0;
}
