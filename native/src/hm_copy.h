/* Batch copies between Python buffers, bounds-checked before any byte moves. */
#ifndef HM_COPY_H
#define HM_COPY_H

#include "hm_common.h"

/* memcpy of non-overlapping ranges with non-temporal stores where the platform has them (the
 * unaligned head and the tail are copied with memcpy): the bytes bypass the caches. Needs no GIL.
 * The caller calls hm_copy_fence() once after its copies and before it publishes them. */
void hm_copy_streaming(char *dst, const char *src, size_t n);
void hm_copy_fence(void);

PyObject *hm_py_copy_pages(PyObject *self, PyObject *const *args, Py_ssize_t nargs);
PyObject *hm_py_view_spans(PyObject *self, PyObject *const *args, Py_ssize_t nargs);

#endif
