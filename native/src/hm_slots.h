/* Pages (sequences of buffers) copied to or from the slots of one arena, in one call. */
#ifndef HM_SLOTS_H
#define HM_SLOTS_H

#include "hm_common.h"

PyObject *hm_py_copy_slots(PyObject *self, PyObject *const *args, Py_ssize_t nargs);
PyObject *hm_py_page_sizes(PyObject *self, PyObject *const *args, Py_ssize_t nargs);

#endif
