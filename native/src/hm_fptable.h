/* The Python type _core.FpTable: hm_segtable behind a pthread rwlock, one GIL release per call. */
#ifndef HM_FPTABLE_H
#define HM_FPTABLE_H

#include "hm_common.h"

extern PyTypeObject hm_FpTableType;

#endif
