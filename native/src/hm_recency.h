/* The Python type _core.RecencyLog: one access order over 64-bit fingerprints, read through two
 * windows (the open observations: the `limit` most recently accessed distinct keys; the shadow:
 * the `shadow_size` most recent, what an LRU cache of that many keys holds after the same
 * accesses). The reuse policy's per-access bookkeeping (tiers/policy/reuse.py), one native call
 * per access. See hm_recency.c for the structure and its invariants. */
#ifndef HM_RECENCY_H
#define HM_RECENCY_H

#include "hm_common.h"

extern PyTypeObject hm_RecencyLogType;

typedef struct hm_recency_log hm_recency_log;

/* What one touch found: the key's previous value (when `had`), whether it was in the shadow, and
 * the value of the observation it expired (when `has_expired`). */
typedef struct {
    int had, in_shadow, has_expired;
    uint64_t old, expired;
} hm_recency_touched;

/* RecencyLog.touch without the Python arguments (the reuse ledger's batch calls it per access):
 * `fp` nonzero, `tick` increasing and below 2^(63 - bits), payloads below 2^bits. 0, or -1 with a
 * Python error set and nothing changed. May release the GIL while the table grows (see .c). */
/* The payload bits the log was made with. */
unsigned hm_recency_bits(const hm_recency_log *s);

int hm_recency_touch(hm_recency_log *s, uint64_t fp, uint64_t tick, uint64_t payload, int has_seen, uint64_t seen,
                     uint64_t shadow_size, uint64_t limit, hm_recency_touched *out);

#endif
