/* The Python type _core.SlotIndex: the DRAM tier's index (fingerprint -> slot, size, version) with
 * the full key, the pins and the reads of every slot kept natively. */
#ifndef HM_SLOTINDEX_H
#define HM_SLOTINDEX_H

#include "hm_common.h"

extern PyTypeObject hm_SlotIndexType;

#endif
