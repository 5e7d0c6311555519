/* Page keys: the checks and the joins of a batch of SGLang page hashes into object keys. */
#ifndef HM_KEYS_H
#define HM_KEYS_H

#include "hm_common.h"

PyObject *hm_py_check_page_keys(PyObject *self, PyObject *const *args, Py_ssize_t nargs);
PyObject *hm_py_join_keys(PyObject *self, PyObject *const *args, Py_ssize_t nargs);

#endif
