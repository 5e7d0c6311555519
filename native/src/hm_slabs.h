/* The Python type _core.SlabAllocator: the DRAM tier's size-class slab allocation of arena
 * offsets (bookkeeping only; it never touches the arena's bytes). */
#ifndef HM_SLABS_H
#define HM_SLABS_H

#include "hm_common.h"

extern PyTypeObject hm_SlabAllocatorType;

#endif
