/* The Python type _core.RecencyLog: one access order over 64-bit fingerprints, read through two
 * windows (the open observations: the `limit` most recently accessed distinct keys; the shadow:
 * the `shadow_size` most recent, what an LRU cache of that many keys holds after the same
 * accesses). The reuse policy's per-access bookkeeping (tiers/policy/reuse.py), one native call
 * per access. See hm_recency.c for the structure and its invariants. */
#ifndef HM_RECENCY_H
#define HM_RECENCY_H

#include "hm_common.h"

extern PyTypeObject hm_RecencyLogType;

#endif
