/* xxh3_64 (seed 0), resolved at run time from an installed library; no xxhash source here.
 *
 * native/__init__.py calls set_xxh3_library once at import with python-xxhash's own extension
 * (symbol XXH3_64bits_dispatch: picks AVX2/SSE2 at run time) or the system libxxhash.so.0
 * (XXH3_64bits). Until then hm_xxh3 is NULL and every hashing call raises RuntimeError.
 */
#ifndef HM_XXH3_H
#define HM_XXH3_H

#include "hm_common.h"

typedef uint64_t (*hm_xxh3_fn)(const void *data, size_t len);

/* The loaded function (NULL before set_xxh3_library succeeded). Read without the GIL. */
hm_xxh3_fn hm_xxh3_get(void);

/* Returns hm_xxh3_get(), or NULL with RuntimeError set. Needs the GIL. */
hm_xxh3_fn hm_xxh3_require(void);

PyObject *hm_py_set_xxh3_library(PyObject *self, PyObject *const *args, Py_ssize_t nargs);
PyObject *hm_py_xxh3_library(PyObject *self, PyObject *unused);
PyObject *hm_py_xxh3_64(PyObject *self, PyObject *arg);
PyObject *hm_py_xxh3_batch(PyObject *self, PyObject *const *args, Py_ssize_t nargs);

#endif
