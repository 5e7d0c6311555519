/* Byte views of pages whose runs lie at affine addresses: run j of a page whose first index is f
 * at bases[j] + f * strides[j], sizes[j] bytes long, each checked to lie in one registered region. */
#ifndef HM_PAGEVIEWS_H
#define HM_PAGEVIEWS_H

#include "hm_common.h"

PyObject *hm_py_page_views(PyObject *self, PyObject *const *args, Py_ssize_t nargs);

#endif
