/* row_tuples(cls, n, fields, kinds) -> list of n instances of cls (a tuple subclass of the same
 * layout as tuple: a NamedTuple), item i's field j being, by kinds[j]: 0 fields[j] (shared),
 * 1 fields[j][i] (a sequence of n), 2 the int i. What tuple.__new__(cls, row) of each row makes,
 * without a Python-level pass: one reference per field, no copy. The GIL held (objects are made).
 * Errors name what is wrong; nothing is made then. */
#include "hm_rows.h"

enum { ROW_SHARED = 0, ROW_PER_ITEM = 1, ROW_INDEX = 2 };

PyObject *hm_py_row_tuples(PyObject *Py_UNUSED(self), PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 4) {
        PyErr_SetString(PyExc_TypeError, "row_tuples(cls, n, fields, kinds)");
        return NULL;
    }
    PyObject *cls = args[0], *fields = args[2], *kinds = args[3];
    if (!PyType_Check(cls) || !PyType_IsSubtype((PyTypeObject *)cls, &PyTuple_Type) ||
        ((PyTypeObject *)cls)->tp_basicsize != PyTuple_Type.tp_basicsize ||
        ((PyTypeObject *)cls)->tp_itemsize != PyTuple_Type.tp_itemsize) {
        PyErr_SetString(PyExc_TypeError, "row_tuples: cls must be a tuple subclass laid out as tuple");
        return NULL;
    }
    Py_ssize_t n = PyLong_AsSsize_t(args[1]);
    if (n == -1 && PyErr_Occurred())
        return NULL;
    if (n < 0) {
        PyErr_SetString(PyExc_ValueError, "row_tuples: n must be >= 0");
        return NULL;
    }
    if (!PyTuple_Check(fields) || !PyBytes_Check(kinds) || PyBytes_GET_SIZE(kinds) != PyTuple_GET_SIZE(fields)) {
        PyErr_SetString(PyExc_TypeError, "row_tuples: fields must be a tuple and kinds bytes of its length");
        return NULL;
    }
    Py_ssize_t k = PyTuple_GET_SIZE(fields);
    const char *kind = PyBytes_AS_STRING(kinds);
    PyObject **cols = PyMem_Calloc((size_t)(k ? k : 1), sizeof(PyObject *)); /* per-item fields, fast */
    PyObject *out = NULL;
    if (!cols)
        return PyErr_NoMemory();
    for (Py_ssize_t j = 0; j < k; j++) {
        if (kind[j] == ROW_PER_ITEM) {
            cols[j] = PySequence_Fast(PyTuple_GET_ITEM(fields, j), "row_tuples: a per-item field must be a sequence");
            if (!cols[j])
                goto done;
            if (PySequence_Fast_GET_SIZE(cols[j]) != n) {
                PyErr_Format(PyExc_ValueError, "row_tuples: field %zd holds %zd items for %zd rows", j,
                             PySequence_Fast_GET_SIZE(cols[j]), n);
                goto done;
            }
        } else if (kind[j] != ROW_SHARED && kind[j] != ROW_INDEX) {
            PyErr_Format(PyExc_ValueError, "row_tuples: kind %d of field %zd is not 0, 1 or 2", kind[j], j);
            goto done;
        }
    }
    out = PyList_New(n);
    if (!out)
        goto done;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *row = ((PyTypeObject *)cls)->tp_alloc((PyTypeObject *)cls, k);
        if (!row) {
            Py_CLEAR(out);
            goto done;
        }
        for (Py_ssize_t j = 0; j < k; j++) {
            PyObject *v;
            if (kind[j] == ROW_SHARED)
                v = Py_NewRef(PyTuple_GET_ITEM(fields, j));
            else if (kind[j] == ROW_PER_ITEM)
                v = Py_NewRef(PySequence_Fast_ITEMS(cols[j])[i]);
            else if (!(v = PyLong_FromSsize_t(i))) {
                Py_DECREF(row); /* its unset items are NULL: tuple's dealloc skips them */
                Py_CLEAR(out);
                goto done;
            }
            PyTuple_SET_ITEM(row, j, v);
        }
        PyList_SET_ITEM(out, i, row);
    }
done:
    for (Py_ssize_t j = 0; j < k; j++)
        Py_XDECREF(cols[j]);
    PyMem_Free(cols);
    return out;
}
