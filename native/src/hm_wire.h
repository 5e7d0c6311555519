/* The wire protocol's counted key lists (transport/wire.py documents the frames).
 *
 * A keyed list is: count u32 | per item: key length u16 | the key's UTF-8 bytes | a fixed trailer
 * of `trailer_size` bytes (the item's numbers, big-endian, laid out by the caller). All integers
 * are big-endian (network order). Both functions run with the GIL held (they read or make str
 * objects); neither keeps a reference to its arguments.
 */
#ifndef HM_WIRE_H
#define HM_WIRE_H

#include "hm_common.h"

/* wire_encode_keyed(keys: sequence of str, trailers: bytes-like, trailer_size, max_key_len)
 * -> bytes. trailers holds len(keys) * trailer_size bytes (item i's at i * trailer_size).
 * ValueError naming the item for a key that is empty, longer than max_key_len bytes in UTF-8 or
 * not encodable as UTF-8 (a lone surrogate); TypeError for an item that is not a str. */
PyObject *hm_py_wire_encode_keyed(PyObject *self, PyObject *const *args, Py_ssize_t nargs);

/* wire_decode_keyed(meta: bytes-like, offset, trailer_size, max_key_len, max_batch)
 * -> (keys: list[str], trailers: bytes, end: int). Parses one keyed list starting at meta[offset]
 * and returns where it ended. ValueError (the message says what: truncated meta, a count over
 * max_batch, a key length outside 1..max_key_len, a key that is not UTF-8) for anything that is
 * not a well-formed list within the buffer; no byte outside meta is read. */
PyObject *hm_py_wire_decode_keyed(PyObject *self, PyObject *const *args, Py_ssize_t nargs);

#endif
