/* Another object's `__slots__` read and written from C, and the numbers in them changed in place
 * where nothing else holds them (_reader.c: the recorder's and the budget watch's slots).
 *
 * Why in place: each text delta moves the provider's clock twice, closes a gap and adds to two
 * counts; a new float or int for each is an allocation and, an event later, a free: about 300
 * instructions per event, more than the rest of the compiled reader. A number that only the slot
 * holds cannot be seen by anyone else (whoever reads the slot holds a reference of its own, and a
 * number two slots share, or a list holds, is held twice), so changing it where it is is the same
 * as replacing it. Not where the interpreter runs without its lock: a count of references is not
 * exact there.
 */
#ifndef STREAMSCOPE_SLOTS_H
#define STREAMSCOPE_SLOTS_H

#include <Python.h>
#include <structmember.h>

/* The offset of a slot of `cls`'s own that holds any object (as `__slots__` makes), or 0. */
static Py_ssize_t slot_offset(PyTypeObject *cls, const char *name) {
    PyObject *d = PyDict_GetItemString(cls->tp_dict, name);
    if (d == NULL || !PyObject_TypeCheck(d, &PyMemberDescr_Type) ||
        ((PyMemberDescrObject *)d)->d_member->type != T_OBJECT_EX)
        return 0;
    return ((PyMemberDescrObject *)d)->d_member->offset;
}

static inline PyObject *slot_get(PyObject *obj, Py_ssize_t offset) { /* borrowed, or NULL: unset */
    return *(PyObject **)((char *)obj + offset);
}

static inline void slot_put(PyObject *obj, Py_ssize_t offset, PyObject *value) { /* steals `value` */
    PyObject **p = (PyObject **)((char *)obj + offset);
    PyObject *old = *p;
    *p = value;
    Py_XDECREF(old);
}

/* Whether the float `o` may be changed where it is. */
static inline int own_float(PyObject *o) {
#ifdef Py_GIL_DISABLED
    (void)o;
    return 0;
#else
    return o != NULL && Py_REFCNT(o) == 1 && PyFloat_CheckExact(o);
#endif
}

/* Whether the int `o` may be changed to `v` where it is: on the one layout this is written for
 * (3.11's: `ob_size` digits of PyLong_SHIFT bits), an int of one digit, staying above the small
 * ints (which are shared, so never held once). */
#if !defined(Py_GIL_DISABLED) && PY_VERSION_HEX >= 0x030B0000 && PY_VERSION_HEX < 0x030C0000
#define STREAMSCOPE_INTS_IN_PLACE 1
#endif

static inline int own_count(PyObject *o, Py_ssize_t v) {
#ifdef STREAMSCOPE_INTS_IN_PLACE
    return o != NULL && Py_REFCNT(o) == 1 && PyLong_CheckExact(o) && Py_SIZE(o) == 1 && v > 256 &&
           v < ((Py_ssize_t)1 << PyLong_SHIFT);
#else
    (void)o; (void)v;
    return 0;
#endif
}

static inline void set_count(PyObject *o, Py_ssize_t v) { /* only where `own_count` said so */
#ifdef STREAMSCOPE_INTS_IN_PLACE
    ((PyLongObject *)o)->ob_digit[0] = (digit)v;
#else
    (void)o; (void)v;
#endif
}

static inline void set_float(PyObject *o, double v) { /* only where `own_float` said so */
    ((PyFloatObject *)o)->ob_fval = v;
}

/* The float slot at `offset` to hold `v`: its own number changed in place, or a new one. -1: no memory. */
static inline int slot_set_float(PyObject *obj, Py_ssize_t offset, double v) {
    PyObject *o = slot_get(obj, offset);
    if (own_float(o)) {
        set_float(o, v);
        return 0;
    }
    PyObject *fresh = PyFloat_FromDouble(v);
    if (fresh == NULL) return -1;
    slot_put(obj, offset, fresh);
    return 0;
}

#endif
