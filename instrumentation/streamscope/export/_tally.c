/* A stream's chunk gaps counted into histogram buckets in one pass, compiled (chunk_histogram.py).
 *
 * Why: the gaps a stream kept are put into the chunk histogram once, at its end; counting them per
 * bucket by sorting them first cost about 270 instructions per gap (the sort's compares and merges),
 * more than anything else streamscope did for a text delta. Here each gap finds its bucket by a
 * binary search over the bounds (the SDK's own `bisect_left(boundaries, value)`): a few compares.
 * The sum is added in the same pass, value by value in order (what `+=` per value gives, bit for
 * bit): a second pass in Python (`sum()` over a slice) had cost some 70 instructions per gap.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <stdlib.h>

#define MAX_BOUNDS 1024

/* tally(values, boundaries, start, total) -> (counts, low, high, total): of `values[start:]` (a
 * list of floats), the count per bucket (a value counts in the first bucket whose bound is >= it;
 * one more bucket past the last bound), the least and the greatest (NaN where a value is not a
 * number), and `total` plus each value in order. */
static PyObject *tally(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 4 || !PyList_CheckExact(args[0])) {
        PyErr_SetString(PyExc_TypeError, "tally(values: list[float], boundaries, start: int, total: float)");
        return NULL;
    }
    double total = PyFloat_AsDouble(args[3]);
    if (total == -1.0 && PyErr_Occurred()) return NULL;
    PyObject *values = args[0];
    PyObject *bounds_seq = PySequence_Fast(args[1], "boundaries must be a sequence of numbers");
    if (bounds_seq == NULL) return NULL;
    Py_ssize_t nb = PySequence_Fast_GET_SIZE(bounds_seq), start = PyLong_AsSsize_t(args[2]);
    if ((start == -1 && PyErr_Occurred()) || nb > MAX_BOUNDS) {
        Py_DECREF(bounds_seq);
        if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "too many bucket bounds");
        return NULL;
    }
    double bounds[MAX_BOUNDS];
    for (Py_ssize_t i = 0; i < nb; i++) {
        bounds[i] = PyFloat_AsDouble(PySequence_Fast_GET_ITEM(bounds_seq, i));
        if (bounds[i] == -1.0 && PyErr_Occurred()) {
            Py_DECREF(bounds_seq);
            return NULL;
        }
    }
    Py_DECREF(bounds_seq);
    Py_ssize_t *counts = PyMem_Calloc((size_t)nb + 1, sizeof(Py_ssize_t));
    if (counts == NULL) return PyErr_NoMemory();
    double low = INFINITY, high = -INFINITY;
    int not_a_number = 0;
    for (Py_ssize_t k = start < 0 ? 0 : start; k < PyList_GET_SIZE(values); k++) {
        PyObject *item = PyList_GET_ITEM(values, k);
        double v;
        if (PyFloat_CheckExact(item)) v = PyFloat_AS_DOUBLE(item);
        else {
            v = PyFloat_AsDouble(item);
            if (v == -1.0 && PyErr_Occurred()) {
                PyMem_Free(counts);
                return NULL;
            }
        }
        Py_ssize_t lo = 0, hi = nb; /* bisect_left(bounds, v) */
        while (lo < hi) {
            Py_ssize_t mid = (lo + hi) / 2;
            if (bounds[mid] < v) lo = mid + 1;
            else hi = mid;
        }
        counts[lo]++;
        total += v;
        if (isnan(v)) not_a_number = 1;
        if (v < low) low = v;
        if (v > high) high = v;
    }
    if (not_a_number) low = high = NAN;
    PyObject *listed = PyList_New(nb + 1);
    if (listed == NULL) {
        PyMem_Free(counts);
        return NULL;
    }
    for (Py_ssize_t i = 0; i <= nb; i++) {
        PyObject *n = PyLong_FromSsize_t(counts[i]);
        if (n == NULL) {
            Py_DECREF(listed);
            PyMem_Free(counts);
            return NULL;
        }
        PyList_SET_ITEM(listed, i, n);
    }
    PyMem_Free(counts);
    return Py_BuildValue("(Nddd)", listed, low, high, total);
}

static PyMethodDef methods[] = {
    {"tally", (PyCFunction)(void (*)(void))tally, METH_FASTCALL,
     "tally(values, boundaries, start, total) -> (counts, low, high, total): the chunk gaps per bucket, in one pass."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_tally", "Chunk gaps counted into histogram buckets, compiled (see chunk_histogram.py).",
    -1, methods,
};

PyMODINIT_FUNC PyInit__tally(void) { return PyModule_Create(&module); }
