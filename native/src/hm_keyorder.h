/* The Python type _core.KeyOrder: an insertion-ordered map of str/int keys to int64 values with
 * batch calls (the placement's resident and DRAM orders, the LRU policy's order). */
#ifndef HM_KEYORDER_H
#define HM_KEYORDER_H

#include "hm_common.h"

extern PyTypeObject hm_KeyOrderType;

#endif
