/* row_tuples: n instances of a tuple subclass (a NamedTuple) from shared and per-item fields, in one
 * call (the policies' AccessContext per key of a store call). */
#ifndef HM_ROWS_H
#define HM_ROWS_H

#include "hm_common.h"

PyObject *hm_py_row_tuples(PyObject *self, PyObject *const *args, Py_ssize_t nargs);

#endif
