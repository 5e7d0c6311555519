/* Batch file I/O on a native worker pool, with a deadline the caller never waits past.
 *
 * pread_batch / pwrite_batch take a whole batch: the calling thread releases the GIL once,
 * queues one job per item and waits (CLOCK_MONOTONIC) until every item is done or the deadline
 * passes. Workers never touch the caller's buffer after the call returned: a read lands in the
 * worker's own aligned staging buffer and is copied into the caller's buffer only while the
 * batch is live; a write is copied from the caller's buffer into staging while the batch is
 * live, then written. At the deadline the caller marks the batch abandoned (waiting only for
 * copies already under way); items not done come back as -ETIMEDOUT. A late write may still
 * reach the file after its -ETIMEDOUT (its outcome is unknown to the caller); an item not
 * started by then never runs. Each batch works on its own dup() of the fd, so a caller closing
 * its fd cannot send a late write to a file that reuses the number.
 *
 * Files: hm_io.c (pread_batch, pwrite_batch, reserve_io_staging), hm_entries_io.c (read_entries,
 * write_entries, write_wait), hm_iopool.c (the workers and their batches, set_io_threads,
 * io_threads, io_late_items), hm_staging.c (the workers' staging buffers).
 */
#ifndef HM_IO_H
#define HM_IO_H

#include "hm_common.h"

PyObject *hm_py_pread_batch(PyObject *self, PyObject *const *args, Py_ssize_t nargs);
PyObject *hm_py_pwrite_batch(PyObject *self, PyObject *const *args, Py_ssize_t nargs);
/* read_entries: SSD entries read, checked (hm_entry.h) and copied out in one call, one job per
 * run of entries back to back in a file (native/io.py documents the arguments). */
PyObject *hm_py_read_entries(PyObject *self, PyObject *const *args, Py_ssize_t nargs);
/* write_entries: SSD entries laid out (header blocks, payload xxh3) and written in one call, one
 * job per run; write_wait: waits for the writes of a call that were still in flight at its
 * deadline (native/io.py documents both). */
PyObject *hm_py_write_entries(PyObject *self, PyObject *const *args, Py_ssize_t nargs);
PyObject *hm_py_write_wait(PyObject *self, PyObject *const *args, Py_ssize_t nargs);
PyObject *hm_py_reserve_io_staging(PyObject *self, PyObject *const *args, Py_ssize_t nargs);
PyObject *hm_py_set_io_threads(PyObject *self, PyObject *arg);
PyObject *hm_py_io_threads(PyObject *self, PyObject *unused);
PyObject *hm_py_io_late_items(PyObject *self, PyObject *unused);

#endif
