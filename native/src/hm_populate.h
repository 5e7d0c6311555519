/* Faulting memory in ahead of use (hm_populate.c). */
#ifndef HM_POPULATE_H
#define HM_POPULATE_H

#include "hm_common.h"

PyObject *hm_py_populate(PyObject *self, PyObject *arg);

#endif
