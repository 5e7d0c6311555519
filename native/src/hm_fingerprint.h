/* Key fingerprints: xxh3_64 of the key's UTF-8 bytes, never 0 (0 marks an empty table slot). */
#ifndef HM_FINGERPRINT_H
#define HM_FINGERPRINT_H

#include "hm_common.h"

PyObject *hm_py_fingerprint(PyObject *self, PyObject *key);
PyObject *hm_py_fingerprints(PyObject *self, PyObject *const *args, Py_ssize_t nargs);
PyObject *hm_py_key_hashes(PyObject *self, PyObject *const *args, Py_ssize_t nargs);
PyObject *hm_py_set_test_fingerprint_mask(PyObject *self, PyObject *mask);

#endif
