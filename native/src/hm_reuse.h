/* The Python type _core.ReuseLedger: the reuse policy's per-access bookkeeping for a batch of
 * accesses in one call (tiers/policy/reuse.py keeps every decision: refresh of the class values,
 * the guard's tests, the runs and the heap of runs). See hm_reuse.c. */
#ifndef HM_REUSE_H
#define HM_REUSE_H

#include "hm_common.h"

extern PyTypeObject hm_ReuseLedgerType;

#endif
