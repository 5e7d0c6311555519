/* The SSD entry's on-disk header (ssd/format.py documents the format) checked without the GIL.
 *
 * An entry is [header block of HM_ENTRY_BLOCK bytes][payload, zero padded to a multiple of the
 * block]. Its header (little endian): magic u32, version u16, flags u16, key length u32, pad u32,
 * payload length u64, sequence u64, generation u64, xxh3 of the payload u64, then xxh3 of the
 * preceding 48 bytes followed by the key bytes u64, then the key.
 *
 * hm_entry_check reads only [entry, entry + avail): every length from disk is bounds-checked
 * against avail and the block before use.
 */
#ifndef HM_ENTRY_H
#define HM_ENTRY_H

#include "hm_common.h" /* Python.h first, as it must be */
#include "hm_xxh3.h"

#define HM_ENTRY_BLOCK 4096u

/* Verdicts of one entry read back (read_entries' per-item results; negative values there are
 * -errno of the entry's read, -ETIMEDOUT when it was not done by the deadline). */
enum {
    HM_ENTRY_OK = 0,          /* the entry is the key's, sound: its payload was copied out */
    HM_ENTRY_SHORT = 1,       /* the file ended before the entry's payload did */
    HM_ENTRY_BAD_HEADER = 2,  /* no entry magic, a key length out of range, a header checksum
                                 mismatch or an unknown format version */
    HM_ENTRY_STALE = 3,       /* a sound header of another write: dead, or another generation,
                                 sequence number or payload length than the index says */
    HM_ENTRY_OTHER_KEY = 4,   /* a sound entry of another key (a fingerprint collision) */
    HM_ENTRY_BAD_PAYLOAD = 5, /* the payload's xxh3 differs from the header's */
};

/* Bytes an entry with a payload of plen bytes occupies (header block + padded payload);
 * UINT64_MAX when that does not fit in 64 bits. */
static inline uint64_t hm_entry_size(uint64_t plen) {
    if (plen > UINT64_MAX - 2 * HM_ENTRY_BLOCK)
        return UINT64_MAX;
    return HM_ENTRY_BLOCK + (plen + HM_ENTRY_BLOCK - 1) / HM_ENTRY_BLOCK * HM_ENTRY_BLOCK;
}

/* The verdict on the entry at `entry` (avail bytes of it were read) expected to hold `key`
 * (klen bytes) with payload length plen, generation gen and sequence seq. max_key: the longest
 * key a header may name. Needs no GIL. */
int hm_entry_check(const char *entry, uint64_t avail, const char *key, uint64_t klen, uint64_t plen, uint64_t gen,
                   uint64_t seq, uint64_t max_key, hm_xxh3_fn xxh3);

/* Writes the header block of an entry (key of klen <= HM_ENTRY_BLOCK - 56 bytes, payload length
 * plen, sequence seq, generation gen, payload xxh3 payload_hash) into block[0, HM_ENTRY_BLOCK),
 * zeroing the rest of the block. Needs no GIL. */
void hm_entry_pack(char *block, const char *key, uint64_t klen, uint64_t plen, uint64_t seq, uint64_t gen,
                   uint64_t payload_hash, hm_xxh3_fn xxh3);

/* The longest key a header block holds. */
#define HM_ENTRY_MAX_KEY (HM_ENTRY_BLOCK - 56u)

#endif
