/* populate(buf): madvise(MADV_POPULATE_WRITE) over a writable buffer's pages, the GIL released.
 *
 * Faults the page-table entries of [buf, buf + len) in for writing (allocating what is not
 * backed yet) without changing a byte, so later copies into the memory take no page faults. The
 * range is the buffer's own: its first page is found by rounding its address down (the page
 * holding the buffer's first byte is mapped), and the kernel rounds the length up. A kernel
 * without the advice (Linux < 5.14) fails with EINVAL, a range it cannot back with ENOMEM or
 * EFAULT: OSError with that errno, nothing else done.
 */
#include "hm_populate.h"

#include <errno.h>
#include <sys/mman.h>
#include <unistd.h>

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23 /* Linux 5.14 uapi value, for older headers */
#endif

PyObject *hm_py_populate(PyObject *self, PyObject *arg) {
    (void)self;
    Py_buffer view;
    if (hm_get_bytes(arg, "buf", 1, &view) < 0)
        return NULL;
    int err = 0;
    if (view.len > 0) {
        uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
        uintptr_t addr = (uintptr_t)view.buf;
        uintptr_t start = addr - addr % page;
        size_t len = (size_t)(addr - start) + (size_t)view.len;
        Py_BEGIN_ALLOW_THREADS
        if (madvise((void *)start, len, MADV_POPULATE_WRITE) != 0)
            err = errno;
        Py_END_ALLOW_THREADS
    }
    PyBuffer_Release(&view);
    if (err) {
        errno = err;
        return PyErr_SetFromErrno(PyExc_OSError);
    }
    Py_RETURN_NONE;
}
