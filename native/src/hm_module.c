/* The extension module hicache_mooncake.native._core: the mechanism of the data plane.
 * Python (native/__init__.py and its modules) wraps every function with typed arrays. */
#include "hm_common.h"
#include "hm_copy.h"
#include "hm_fingerprint.h"
#include "hm_fptable.h"
#include "hm_entry.h"
#include "hm_io.h"
#include "hm_keys.h"
#include "hm_keyorder.h"
#include "hm_pageviews.h"
#include "hm_populate.h"
#include "hm_recency.h"
#include "hm_rows.h"
#include "hm_reuse.h"
#include "hm_slabs.h"
#include "hm_slotindex.h"
#include "hm_slots.h"
#include "hm_staging.h"
#include "hm_wire.h"
#include "hm_xxh3.h"

/* The hash of native/src this module was built from (setup.py; native/_source_hash.py). */
#ifndef HM_SOURCE_HASH
#define HM_SOURCE_HASH ""
#endif

static PyMethodDef module_methods[] = {
    {"set_xxh3_library", HM_FASTCALL(hm_py_set_xxh3_library), METH_FASTCALL,
     "set_xxh3_library(path, symbol): load xxh3_64 from a shared library"},
    {"xxh3_library", hm_py_xxh3_library, METH_NOARGS, "xxh3_library() -> (path, symbol) | None"},
    {"xxh3_64", hm_py_xxh3_64, METH_O, "xxh3_64(buf) -> int"},
    {"xxh3_batch", HM_FASTCALL(hm_py_xxh3_batch), METH_FASTCALL, "xxh3_batch(buf, offsets, lengths, out)"},
    {"fingerprint", hm_py_fingerprint, METH_O, "fingerprint(key) -> int"},
    {"fingerprints", HM_FASTCALL(hm_py_fingerprints), METH_FASTCALL, "fingerprints(keys, out)"},
    {"key_hashes", HM_FASTCALL(hm_py_key_hashes), METH_FASTCALL,
     "key_hashes(keys, out): xxh3_64 of each key's UTF-8 bytes, as object headers carry it"},
    {"check_page_keys", HM_FASTCALL(hm_py_check_page_keys), METH_FASTCALL,
     "check_page_keys(hashes, max_chars) -> index of the first item not a str of 1..max_chars characters, or -1"},
    {"join_keys", HM_FASTCALL(hm_py_join_keys), METH_FASTCALL,
     "join_keys(prefix, hashes, tail) -> [prefix + h + tail for h in hashes]"},
    {"set_test_fingerprint_mask", hm_py_set_test_fingerprint_mask, METH_O,
     "set_test_fingerprint_mask(mask): TEST-ONLY"},
    {"row_tuples", HM_FASTCALL(hm_py_row_tuples), METH_FASTCALL,
     "row_tuples(cls, n, fields, kinds) -> n instances of the tuple subclass cls (kinds: 0 shared, 1 per item, 2 index)"},
    {"copy_pages", HM_FASTCALL(hm_py_copy_pages), METH_FASTCALL,
     "copy_pages(dst, dst_offsets, src, src_offsets, lengths)"},
    {"copy_slots", HM_FASTCALL(hm_py_copy_slots), METH_FASTCALL,
     "copy_slots(arena, slot_offsets, pages, into_arena): page i's parts back to back at slot_offsets[i]"},
    {"page_sizes", HM_FASTCALL(hm_py_page_sizes), METH_FASTCALL,
     "page_sizes(pages, out): the bytes of each page's parts together"},
    {"page_views", HM_FASTCALL(hm_py_page_views), METH_FASTCALL,
     "page_views(indices, page_size, pages, index_limit, bases, strides, sizes, region_starts, region_ends) "
     "-> each page's run views"},
    {"view_spans", HM_FASTCALL(hm_py_view_spans), METH_FASTCALL,
     "view_spans(views, out) -> whether every view is one writable contiguous non-empty buffer"},
    {"pread_batch", HM_FASTCALL(hm_py_pread_batch), METH_FASTCALL,
     "pread_batch(fd, buf, buf_offsets, lengths, file_offsets, timeout_s, out)"},
    {"pwrite_batch", HM_FASTCALL(hm_py_pwrite_batch), METH_FASTCALL,
     "pwrite_batch(fd, buf, buf_offsets, lengths, file_offsets, timeout_s, out)"},
    {"read_entries", HM_FASTCALL(hm_py_read_entries), METH_FASTCALL,
     "read_entries(fds, run_offsets, run_items, payload_lengths, gens, seqs, key_ends, keys, part_items, dst, "
     "dst_offsets, part_lengths, max_key, timeout_s, out)"},
    {"write_entries", HM_FASTCALL(hm_py_write_entries), METH_FASTCALL,
     "write_entries(fds, run_offsets, run_items, payload_lengths, gens, seqs, key_ends, keys, part_items, srcs, "
     "part_srcs, src_offsets, part_lengths, borrow, timeout_s, out) -> None | writes in flight"},
    {"write_wait", HM_FASTCALL(hm_py_write_wait), METH_FASTCALL,
     "write_wait(writes, timeout_s) -> whether no write of the call is in flight any more"},
    {"reserve_io_staging", HM_FASTCALL(hm_py_reserve_io_staging), METH_FASTCALL,
     "reserve_io_staging(count, nbytes) -> buffers made for the I/O workers' staging"},
    {"set_io_threads", hm_py_set_io_threads, METH_O, "set_io_threads(n): grow the I/O pool to n workers"},
    {"wire_encode_keyed", HM_FASTCALL(hm_py_wire_encode_keyed), METH_FASTCALL,
     "wire_encode_keyed(keys, trailers, trailer_size, max_key_len) -> bytes"},
    {"wire_decode_keyed", HM_FASTCALL(hm_py_wire_decode_keyed), METH_FASTCALL,
     "wire_decode_keyed(meta, offset, trailer_size, max_key_len, max_batch) -> (keys, trailers, end)"},
    {"populate", hm_py_populate, METH_O,
     "populate(buf): fault a writable buffer's pages in for writing (GIL released); OSError"},
    {"io_threads", hm_py_io_threads, METH_NOARGS, "io_threads() -> the I/O pool's size"},
    {"io_late_items", hm_py_io_late_items, METH_NOARGS,
     "io_late_items() -> (late reads discarded, late writes done) since start"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef core_module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "hicache_mooncake.native._core",
    .m_doc = "Native data plane of hicache-mooncake (fingerprints, tables, copies, checksums, I/O).",
    .m_size = -1,
    .m_methods = module_methods,
};

PyMODINIT_FUNC PyInit__core(void) {
    if (PyType_Ready(&hm_FpTableType) < 0 || PyType_Ready(&hm_RecencyLogType) < 0 ||
        PyType_Ready(&hm_SlotIndexType) < 0 || PyType_Ready(&hm_ReuseLedgerType) < 0 ||
        PyType_Ready(&hm_KeyOrderType) < 0 || PyType_Ready(&hm_SlabAllocatorType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&core_module);
    if (!m)
        return NULL;
    if (PyModule_AddObjectRef(m, "FpTable", (PyObject *)&hm_FpTableType) < 0 ||
        PyModule_AddObjectRef(m, "RecencyLog", (PyObject *)&hm_RecencyLogType) < 0 ||
        PyModule_AddObjectRef(m, "SlotIndex", (PyObject *)&hm_SlotIndexType) < 0 ||
        PyModule_AddObjectRef(m, "ReuseLedger", (PyObject *)&hm_ReuseLedgerType) < 0 ||
        PyModule_AddObjectRef(m, "KeyOrder", (PyObject *)&hm_KeyOrderType) < 0 ||
        PyModule_AddObjectRef(m, "SlabAllocator", (PyObject *)&hm_SlabAllocatorType) < 0 ||
        PyModule_AddIntConstant(m, "ENTRY_OK", HM_ENTRY_OK) < 0 ||
        PyModule_AddIntConstant(m, "ENTRY_SHORT", HM_ENTRY_SHORT) < 0 ||
        PyModule_AddIntConstant(m, "ENTRY_BAD_HEADER", HM_ENTRY_BAD_HEADER) < 0 ||
        PyModule_AddIntConstant(m, "ENTRY_STALE", HM_ENTRY_STALE) < 0 ||
        PyModule_AddIntConstant(m, "ENTRY_OTHER_KEY", HM_ENTRY_OTHER_KEY) < 0 ||
        PyModule_AddIntConstant(m, "ENTRY_BAD_PAYLOAD", HM_ENTRY_BAD_PAYLOAD) < 0 ||
        PyModule_AddIntConstant(m, "STAGING_KEEP_BYTES", HM_STAGING_KEEP) < 0 ||
        PyModule_AddStringConstant(m, "SOURCE_HASH", HM_SOURCE_HASH) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
