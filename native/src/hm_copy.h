/* Batch copies between Python buffers, bounds-checked before any byte moves. */
#ifndef HM_COPY_H
#define HM_COPY_H

#include "hm_common.h"

PyObject *hm_py_copy_pages(PyObject *self, PyObject *const *args, Py_ssize_t nargs);
PyObject *hm_py_copy_pages_checksum(PyObject *self, PyObject *const *args, Py_ssize_t nargs);
PyObject *hm_py_view_spans(PyObject *self, PyObject *const *args, Py_ssize_t nargs);

#endif
