/* A fingerprint table that grows one bounded segment at a time (extendible hashing over hm_table).
 *
 * Why: one flat table of millions of entries doubles by rehashing every entry in one call (124 ms
 * at 3M entries, 266 ms at 6M on the project's VM, a second or more at the SSD index's 10M), and
 * the caller holding the store's lock waits for all of it. Here a segment holds at most
 * `segment_slots` slots (65536 by default): below that it doubles in place, at that size it
 * splits in two, so no insert rehashes more than one segment's entries, whatever the table holds.
 *
 * Layout: a directory of 2^depth segment pointers, indexed by the top `depth` bits of mix(key)
 * (a bijective 64-bit finalizer, independent of the in-segment home, which is hm_table's
 * Fibonacci hash of the key). A segment of local depth d serves the 2^(depth-d) contiguous
 * directory entries whose top d bits equal its prefix. A split of a segment at the directory's
 * depth doubles the directory first (an array of pointers: 8 bytes x 2^depth). Depth is capped at
 * HM_SEGTABLE_MAX_DEPTH; a segment that cannot split further (keys whose mixes agree on that many
 * top bits: not a hash's fingerprints) doubles in place instead: correct, just not bounded.
 * Segments never merge; clear() goes back to the initial layout. The caller serialises access.
 */
#ifndef HM_SEGTABLE_H
#define HM_SEGTABLE_H

#include <stddef.h>
#include <stdint.h>

#include "hm_table.h"

#define HM_SEGTABLE_MAX_DEPTH 20u /* a directory of at most 8 MiB; 2^20 segments of 65536 slots */
#define HM_SEGTABLE_DEFAULT_SEGMENT_SLOTS 65536u
/* hm_segtable_put's answer when an insert needs a growth (a doubling or a split) and the caller
 * did not allow one (it holds the GIL: growth waits until it has given it away). */
#define HM_SEGTABLE_NEEDS_GROWTH 2

typedef struct {
    hm_table table;
    unsigned depth;  /* local depth */
    uint64_t prefix; /* the top `depth` bits of mix(key) of every key here */
} hm_segment;

typedef struct {
    hm_segment **dir; /* 2^depth entries */
    unsigned depth;
    unsigned value_words;
    size_t segments;
    size_t count;
    size_t slots; /* the segments' capacities together */
    size_t segment_slots;
    size_t initial_capacity;
} hm_segtable;

/* The capacity and segment size a table is built with, rounded up to powers of two (0 when too
 * large); segment_slots >= HM_TABLE_MIN_CAPACITY. */
size_t hm_segtable_round_segment_slots(size_t want, unsigned value_words);

/* 0, or -1 when an allocation failed (nothing to free then). `capacity` and `segment_slots` are
 * already rounded; a capacity above segment_slots starts with that many slots in full segments. */
int hm_segtable_init(hm_segtable *s, unsigned value_words, size_t capacity, size_t segment_slots);
void hm_segtable_free(hm_segtable *s);

/* Starts loading the slot where `key`'s probe begins (hm_table_prefetch). */
void hm_segtable_prefetch(const hm_segtable *s, uint64_t key);

/* The value words of `key` (key != 0), or NULL when absent. */
uint64_t *hm_segtable_find(const hm_segtable *s, uint64_t key);

/* Upsert: 1 when the key was present, 0 when inserted, -1 when a needed growth failed to allocate
 * (the table holds what it held), HM_SEGTABLE_NEEDS_GROWTH when a growth is needed and
 * `may_grow` is 0 (nothing changed). */
int hm_segtable_put(hm_segtable *s, uint64_t key, const uint64_t *value, int may_grow);

/* Removes `key`; with expected_word0 != NULL only when value word 0 equals it. 1 when removed. */
int hm_segtable_remove(hm_segtable *s, uint64_t key, const uint64_t *expected_word0);

/* Drops every entry and goes back to the initial layout (empties the segments in place when the
 * new layout cannot be allocated). */
void hm_segtable_clear(hm_segtable *s);

/* Copies up to `room` entries out (keys[i], vals[i * value_words ...]); returns how many. */
size_t hm_segtable_copy_out(const hm_segtable *s, uint64_t *keys, uint64_t *vals, size_t room);

/* Bytes of the slot arrays, the directory and the segment headers. */
size_t hm_segtable_nbytes(const hm_segtable *s);

#endif
