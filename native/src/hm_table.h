/* An open-addressing hash table over 64-bit fingerprints (pure C, no Python, no locking).
 *
 * Slots: capacity (a power of two, >= 8) x stride words, stride = 1 + value_words; word 0 is the
 * key (0 = empty), words 1..value_words the value. Linear probing from home(key) (Fibonacci
 * hashing of the key, so sequential keys spread too); deletion shifts the following run back
 * (no tombstones), so a probe stops at the first empty slot. The load stays <= 0.75: an insert
 * that would pass it first doubles the capacity (rehash). The caller serialises access.
 */
#ifndef HM_TABLE_H
#define HM_TABLE_H

#include <stddef.h>
#include <stdint.h>

#define HM_TABLE_MIN_CAPACITY 8u
#define HM_TABLE_MAX_VALUE_WORDS 4u

typedef struct {
    uint64_t *slots;
    size_t capacity; /* power of two */
    unsigned shift;  /* 64 - log2(capacity) */
    size_t count;
    unsigned stride; /* 1 + value_words */
} hm_table;

/* log2 of a power of two (the smallest r with 2^r >= pow2 for any other value). */
static inline unsigned hm_log2_of(size_t pow2) {
    unsigned r = 0;
    while (((size_t)1 << r) < pow2)
        r++;
    return r;
}

/* The smallest power of two >= want (and >= HM_TABLE_MIN_CAPACITY); 0 when too large. */
size_t hm_table_round_capacity(size_t want, unsigned value_words);

/* 0, or -1 when the allocation failed. */
int hm_table_init(hm_table *t, unsigned value_words, size_t capacity);
void hm_table_free(hm_table *t);

/* Starts loading the slot where `key`'s probe begins (a batch prefetches all its keys first, so
 * their cache misses overlap instead of coming one after the other). */
void hm_table_prefetch(const hm_table *t, uint64_t key);

/* The value words of `key` (key != 0), or NULL when absent. */
const uint64_t *hm_table_find(const hm_table *t, uint64_t key);

/* Upsert. Returns 1 when the key was present, 0 when inserted, -1 when a needed growth failed
 * to allocate (the table is unchanged). */
int hm_table_put(hm_table *t, uint64_t key, const uint64_t *value);

/* Removes `key`; with expected_word0 != NULL only when value word 0 equals *expected_word0.
 * Returns 1 when removed. */
int hm_table_remove(hm_table *t, uint64_t key, const uint64_t *expected_word0);

/* Drops every entry and goes back to `capacity` slots (keeps the old array when that fails). */
void hm_table_clear(hm_table *t, size_t capacity);

static inline size_t hm_table_nbytes(const hm_table *t) {
    return t->capacity * t->stride * sizeof(uint64_t);
}

#endif
