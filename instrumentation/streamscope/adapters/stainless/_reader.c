/* The stream hooks' sync reader, compiled: `StreamHooks.read` (stream.py) for a stream whose text
 * arrives as `Spec.deltas` events, where this module was built.
 *
 * Why: in Python the reader's own bytecode is most of streamscope's work per event (about 1,700
 * of some 3,400 instructions; docs/performance.md). Compiled, the same steps cost a few hundred.
 * What it does per event is `read`'s loop, step for step: the clock rule when the caller asks
 * (`StreamRecorder.asked`), the budget watch told that the caller waits and asked whether a
 * budget fired while it was away, the SDK's next event, its delivery time, the text delta's
 * steady state (`StreamRecorder.delta`'s first branch) or `observe` for any other event, and
 * `held`. Every way out goes to Python: the end of the stream (`done`), a failed read or a budget
 * that fired (`fail`, which ends the record and says what to raise). It writes the recorder's
 * slots directly (their offsets are read from the class at construction) and only where they
 * hold what the recorder puts there (exact floats and ints); anything else takes `observe`. A number
 * only its slot holds is changed in place (_slots.h): the steady state allocates one float per gap
 * kept (the chunk metric's list), nothing else.
 * Also `Pings` (_pings.c): keep-alives counted in the body's bytes, where the SDK's layers are not known.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>

#include "_slots.h"

static PyObject *s_delta, *s_type, *s_text, *s_text_delta, *s_reader, *s_attention, *s_attend;

enum { ORIGIN, HELD, FIRST_TEXT, CONTENT_EVENTS, MAX_GAP, GAPS, LAST_CONTENT, TEXT_CHARS, NSLOTS };
static const char *SLOT_NAMES[NSLOTS] = {
    "origin", "held", "first_text", "content_events", "max_gap", "gaps", "last_content", "text_chars",
};

typedef struct {
    PyObject_HEAD
    PyObject *events;   /* the SDK's iterator of parsed events */
    PyObject *rec;      /* the StreamRecorder */
    PyObject *deltas;   /* a tuple of the text delta event classes */
    PyObject *observe;  /* observe(rec, event, t): every other event (never raises) */
    PyObject *watch;    /* the SyncWatch, or None */
    PyObject *fired;    /* the exception class of a budget that fired while the caller was away */
    PyObject *fail;     /* fail(exc) -> the exception to raise instead, or None: `exc` itself */
    PyObject *done;     /* done(): the stream ended */
    PyObject *stream;   /* held, as `read` holds it: a temporary stream lives until its end */
    Py_ssize_t slots[NSLOTS];
    Py_ssize_t watch_reader, watch_attention; /* the watch's `reader` and `attention` slots, or 0: getattr */
    int running;
    int over;           /* ended or failed: as a generator that returned or raised, it yields no more */
} Reader;

/* `time.monotonic()`: Python's own clock (the budgets' watch reads it beside these), not the
 * platform's CLOCK_MONOTONIC, which is another clock on some systems (macOS). */
static inline double monotonic(void) {
#if PY_VERSION_HEX >= 0x030D0000
    PyTime_t t;
    (void)PyTime_MonotonicRaw(&t);
    return PyTime_AsSecondsDouble(t);
#else
    return _PyTime_AsSecondsDouble(_PyTime_GetMonotonicClock());
#endif
}

static inline PyObject *get_slot(Reader *self, int i) { return slot_get(self->rec, self->slots[i]); }

static inline void put_slot(Reader *self, int i, PyObject *value) { slot_put(self->rec, self->slots[i], value); }

/* `watch.reader = value`: straight into its slot where it has one (a store per event, not a look-up). */
static inline int put_reader(Reader *self, PyObject *value) {
    if (self->watch_reader == 0) return PyObject_SetAttr(self->watch, s_reader, value);
    slot_put(self->watch, self->watch_reader, Py_NewRef(value));
    return 0;
}

static int Reader_init(Reader *self, PyObject *args, PyObject *kwds) {
    PyObject *events, *rec, *deltas, *observe, *watch, *fired, *fail, *done, *stream;
    if (!PyArg_ParseTuple(args, "OOO!OOOOOO:Reader", &events, &rec, &PyTuple_Type, &deltas, &observe, &watch,
                          &fired, &fail, &done, &stream))
        return -1;
    PyTypeObject *cls = Py_TYPE(rec);
    for (int i = 0; i < NSLOTS; i++) {
        self->slots[i] = slot_offset(cls, SLOT_NAMES[i]);
        if (self->slots[i] == 0) {
            PyErr_Format(PyExc_TypeError, "the recorder has no slot %s", SLOT_NAMES[i]);
            return -1;
        }
    }
    self->watch_reader = self->watch_attention = 0;
    if (watch != Py_None) {
        self->watch_reader = slot_offset(Py_TYPE(watch), "reader");
        self->watch_attention = slot_offset(Py_TYPE(watch), "attention");
    }
    Py_XSETREF(self->events, Py_NewRef(events));
    Py_XSETREF(self->rec, Py_NewRef(rec));
    Py_XSETREF(self->deltas, Py_NewRef(deltas));
    Py_XSETREF(self->observe, Py_NewRef(observe));
    Py_XSETREF(self->watch, Py_NewRef(watch));
    Py_XSETREF(self->fired, Py_NewRef(fired));
    Py_XSETREF(self->fail, Py_NewRef(fail));
    Py_XSETREF(self->done, Py_NewRef(done));
    Py_XSETREF(self->stream, Py_NewRef(stream));
    return 0;
}

static int Reader_traverse(Reader *self, visitproc visit, void *arg) {
    Py_VISIT(self->events); Py_VISIT(self->rec); Py_VISIT(self->deltas); Py_VISIT(self->observe);
    Py_VISIT(self->watch); Py_VISIT(self->fired); Py_VISIT(self->fail); Py_VISIT(self->done);
    Py_VISIT(self->stream);
    return 0;
}

static int Reader_clear(Reader *self) {
    Py_CLEAR(self->events); Py_CLEAR(self->rec); Py_CLEAR(self->deltas); Py_CLEAR(self->observe);
    Py_CLEAR(self->watch); Py_CLEAR(self->fired); Py_CLEAR(self->fail); Py_CLEAR(self->done);
    Py_CLEAR(self->stream);
    return 0;
}

static void Reader_dealloc(Reader *self) {
    PyObject_GC_UnTrack(self);
    Reader_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* The read failed with the exception set (or, none set, a budget fired while the caller was
 * away): `fail` ends the record and says what to raise; NULL, with that exception set. */
static PyObject *failed(Reader *self) {
    PyObject *type, *value, *tb;
    if (PyErr_Occurred()) {
        PyErr_Fetch(&type, &value, &tb);
        PyErr_NormalizeException(&type, &value, &tb);
        if (tb != NULL) PyException_SetTraceback(value, tb);
    } else {
        value = PyObject_CallNoArgs(self->fired);
        if (value == NULL) return NULL;
        type = Py_NewRef((PyObject *)Py_TYPE(value));
        tb = NULL;
    }
    PyObject *instead = PyObject_CallOneArg(self->fail, value);
    if (instead == NULL) { /* `fail` raised: that is what the caller gets */
        Py_XDECREF(type); Py_XDECREF(value); Py_XDECREF(tb);
        return NULL;
    }
    if (instead != Py_None && PyExceptionInstance_Check(instead)) {
        PyException_SetContext(instead, value); /* steals `value`: raised while handling it */
        Py_XDECREF(type); Py_XDECREF(tb);
        PyException_SetCause(instead, NULL); /* `raise ... from None` */
        PyErr_SetObject((PyObject *)Py_TYPE(instead), instead);
        Py_DECREF(instead);
        return NULL;
    }
    Py_DECREF(instead);
    PyErr_Restore(type, value, tb);
    return NULL;
}

/* Tell the watch that the caller waits; 1 when a budget fired while it was away, -1 on an error. */
static int attend(Reader *self) {
    if (put_reader(self, Py_True) < 0) return -1;
    PyObject *attention = self->watch_attention == 0 ? NULL : slot_get(self->watch, self->watch_attention);
    int pending;
    if (attention == Py_False) return 0; /* the steady state: nothing fired */
    if (attention != NULL) pending = PyObject_IsTrue(attention);
    else {
        attention = PyObject_GetAttr(self->watch, s_attention);
        if (attention == NULL) return -1;
        pending = PyObject_IsTrue(attention);
        Py_DECREF(attention);
    }
    if (pending <= 0) return pending;
    PyObject *fired = PyObject_CallMethodNoArgs(self->watch, s_attend);
    if (fired == NULL) return -1;
    int yes = PyObject_IsTrue(fired);
    Py_DECREF(fired);
    return yes;
}

/* The text delta's length, or -1: not a plain text delta (or text has not begun), `observe` takes it. */
static Py_ssize_t text_delta(Reader *self, PyObject *event) {
    PyObject *cls = (PyObject *)Py_TYPE(event);
    Py_ssize_t i, n = PyTuple_GET_SIZE(self->deltas), found = -1;
    for (i = 0; i < n; i++)
        if (PyTuple_GET_ITEM(self->deltas, i) == cls) break;
    PyObject *first_text = get_slot(self, FIRST_TEXT);
    if (i == n || first_text == NULL || first_text == Py_None) return -1;
    PyObject *fields = PyObject_GenericGetDict(event, NULL);
    if (fields == NULL) { PyErr_Clear(); return -1; }
    PyObject *delta = PyDict_GetItemWithError(fields, s_delta); /* borrowed: `fields` holds it */
    PyObject *inner = delta == NULL ? NULL : PyObject_GenericGetDict(delta, NULL);
    if (inner != NULL) {
        PyObject *type = PyDict_GetItemWithError(inner, s_type);
        if (type != NULL && PyUnicode_CheckExact(type) && PyUnicode_Compare(type, s_text_delta) == 0) {
            PyObject *text = PyDict_GetItemWithError(inner, s_text);
            if (text != NULL && PyUnicode_CheckExact(text)) found = PyUnicode_GET_LENGTH(text);
        }
        Py_DECREF(inner);
    }
    Py_DECREF(fields);
    PyErr_Clear();
    return found;
}

/* `StreamRecorder.delta`'s first branch for `n` visible characters at `t`: 0, or -1 where a slot does
 * not hold what the recorder puts there (nothing is written then; `observe` takes the event). What
 * may fail (an allocation) comes before any write; a number only its slot holds changes in place. */
static int steady(Reader *self, double t, Py_ssize_t n) {
    PyObject *origin = get_slot(self, ORIGIN), *max_gap = get_slot(self, MAX_GAP);
    PyObject *counted = get_slot(self, CONTENT_EVENTS), *chars = get_slot(self, TEXT_CHARS);
    PyObject *gaps = get_slot(self, GAPS), *last = get_slot(self, LAST_CONTENT);
    if (origin == NULL || !PyFloat_CheckExact(origin) || max_gap == NULL || !PyFloat_CheckExact(max_gap) ||
        counted == NULL || !PyLong_CheckExact(counted) || chars == NULL || !PyLong_CheckExact(chars) ||
        gaps == NULL || (gaps != Py_None && !PyList_CheckExact(gaps)))
        return -1;
    Py_ssize_t count = PyLong_AsSsize_t(counted), total = PyLong_AsSsize_t(chars);
    if ((count == -1 || total == -1) && PyErr_Occurred()) { PyErr_Clear(); return -1; }
    count += 1;
    total += n;
    double gap = t - PyFloat_AS_DOUBLE(origin);
    int longer = gap > PyFloat_AS_DOUBLE(max_gap);
    /* A new number for each slot whose own cannot change in place (NULL: it can, or nothing to write). */
    PyObject *gap_value = gaps == Py_None ? NULL : PyFloat_FromDouble(gap);
    PyObject *new_count = own_count(counted, count) ? NULL : PyLong_FromSsize_t(count);
    PyObject *new_total = own_count(chars, total) ? NULL : PyLong_FromSsize_t(total);
    PyObject *new_origin = own_float(origin) ? NULL : PyFloat_FromDouble(t);
    PyObject *new_last = own_float(last) ? NULL : PyFloat_FromDouble(t);
    PyObject *new_max = !longer || own_float(max_gap) ? NULL
                        : gap_value != NULL ? Py_NewRef(gap_value) : PyFloat_FromDouble(gap);
    if (PyErr_Occurred() || (gap_value != NULL && PyList_Append(gaps, gap_value) < 0)) {
        Py_XDECREF(gap_value); Py_XDECREF(new_count); Py_XDECREF(new_total);
        Py_XDECREF(new_origin); Py_XDECREF(new_last); Py_XDECREF(new_max);
        PyErr_Clear();
        return -1;
    }
    Py_XDECREF(gap_value); /* the list holds it */
    if (new_count == NULL) set_count(counted, count); else put_slot(self, CONTENT_EVENTS, new_count);
    if (new_total == NULL) set_count(chars, total); else put_slot(self, TEXT_CHARS, new_total);
    if (longer && new_max == NULL) set_float(max_gap, gap);
    else if (longer) put_slot(self, MAX_GAP, new_max);
    if (new_last == NULL) set_float(last, t); else put_slot(self, LAST_CONTENT, new_last);
    if (new_origin == NULL) set_float(origin, t); else put_slot(self, ORIGIN, new_origin);
    return 0;
}

static PyObject *next_event(Reader *self) {
    /* The clock rule: the time the caller held the last event (or the stream) is not the provider's. */
    PyObject *origin = get_slot(self, ORIGIN), *held = get_slot(self, HELD);
    double asked = monotonic();
    if (origin != NULL && held != NULL && PyFloat_CheckExact(origin) && PyFloat_CheckExact(held)) {
        double moved = PyFloat_AS_DOUBLE(origin) + asked - PyFloat_AS_DOUBLE(held);
        if (slot_set_float(self->rec, self->slots[ORIGIN], moved) < 0) return failed(self);
    } else {
        PyObject *at = PyFloat_FromDouble(asked);
        PyObject *r = at == NULL ? NULL : PyObject_CallMethod(self->rec, "asked", "O", at);
        Py_XDECREF(at);
        if (r == NULL) return failed(self); /* as `read`, whose `try` holds every step */
        Py_DECREF(r);
    }
    if (self->watch != Py_None) {
        int fired = attend(self);
        if (fired != 0) return failed(self); /* an error set, or none: a budget fired */
    }
    PyObject *event = PyIter_Next(self->events);
    if (event == NULL) {
        if (PyErr_Occurred()) return failed(self);
        PyObject *r = PyObject_CallNoArgs(self->done);
        if (r == NULL) PyErr_Clear(); /* `end` never raises; should it, the caller still sees the end */
        Py_XDECREF(r);
        return NULL;
    }
    double t = monotonic();
    if (self->watch != Py_None && put_reader(self, Py_False) < 0) PyErr_Clear();
    Py_ssize_t n = text_delta(self, event);
    if (n >= 0 && steady(self, t, n) == 0) { /* the steady state: `held` set in place too */
        if (slot_set_float(self->rec, self->slots[HELD], t) == 0) return event;
        Py_DECREF(event);
        return failed(self);
    }
    PyObject *at = PyFloat_FromDouble(t);
    if (at == NULL) {
        Py_DECREF(event);
        return failed(self);
    }
    PyObject *r = PyObject_CallFunctionObjArgs(self->observe, self->rec, event, at, NULL);
    if (r == NULL) PyErr_Clear(); /* `observe` is guarded and never raises */
    Py_XDECREF(r);
    put_slot(self, HELD, at);
    return event;
}

static PyObject *Reader_next(Reader *self) {
    if (self->running) {
        PyErr_SetString(PyExc_ValueError, "generator already executing");
        return NULL;
    }
    if (self->over || self->events == NULL) return NULL;
    self->running = 1;
    PyObject *event = next_event(self);
    self->running = 0;
    if (event == NULL) self->over = 1;
    return event;
}

/* A generator's other methods, for callers that treat `iter(stream)` as the generator it is without
 * streamscope (`close()` in a `finally`, `contextlib.closing`): the same effects as on `read`'s. */
static PyObject *Reader_send(Reader *self, PyObject *value) {
    PyObject *event = Reader_next(self);
    if (event == NULL && !PyErr_Occurred()) PyErr_SetNone(PyExc_StopIteration);
    return event;
}

static PyObject *Reader_close(Reader *self, PyObject *unused) {
    if (self->running) {
        PyErr_SetString(PyExc_ValueError, "generator already executing");
        return NULL;
    }
    self->over = 1; /* as `read` closed at its `yield`: the record is the stream's to end */
    Py_RETURN_NONE;
}

static PyObject *Reader_throw(Reader *self, PyObject *args) {
    PyObject *type, *value = NULL, *tb = NULL;
    if (!PyArg_UnpackTuple(args, "throw", 1, 3, &type, &value, &tb)) return NULL;
    if (self->running) {
        PyErr_SetString(PyExc_ValueError, "generator already executing");
        return NULL;
    }
    if (PyExceptionInstance_Check(type)) PyErr_SetObject((PyObject *)Py_TYPE(type), type);
    else if (PyExceptionClass_Check(type)) PyErr_SetObject(type, value);
    else {
        PyErr_SetString(PyExc_TypeError, "exceptions must be classes or instances deriving from BaseException");
        return NULL;
    }
    if (self->over || self->events == NULL) return NULL; /* a generator that ended raises it as it is */
    self->over = 1; /* thrown in at its `yield`, it ends the record as a failed read does */
    self->running = 1;
    PyObject *r = failed(self);
    self->running = 0;
    return r;
}

static PyMethodDef Reader_methods[] = {
    {"send", (PyCFunction)Reader_send, METH_O, NULL},
    {"throw", (PyCFunction)Reader_throw, METH_VARARGS, NULL},
    {"close", (PyCFunction)Reader_close, METH_NOARGS, NULL},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject ReaderType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "streamscope.adapters.stainless._reader.Reader",
    .tp_doc = PyDoc_STR("Reader(events, rec, deltas, observe, watch, fired, fail, done, stream): `read`, compiled."),
    .tp_basicsize = sizeof(Reader),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Reader_init,
    .tp_dealloc = (destructor)Reader_dealloc,
    .tp_traverse = (traverseproc)Reader_traverse,
    .tp_clear = (inquiry)Reader_clear,
    .tp_iter = PyObject_SelfIter,
    .tp_iternext = (iternextfunc)Reader_next,
    .tp_methods = Reader_methods,
};

extern PyTypeObject PingsType; /* _pings.c: keep-alives counted in the body's bytes */

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_reader",
    "The stream hooks' sync reader and keep-alive counter, compiled (see stream.py, pings.py).", -1, NULL,
};

PyMODINIT_FUNC PyInit__reader(void) {
    if (PyType_Ready(&ReaderType) < 0 || PyType_Ready(&PingsType) < 0) return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m == NULL) return NULL;
    s_delta = PyUnicode_InternFromString("delta");
    s_type = PyUnicode_InternFromString("type");
    s_text = PyUnicode_InternFromString("text");
    s_text_delta = PyUnicode_InternFromString("text_delta");
    s_reader = PyUnicode_InternFromString("reader");
    s_attention = PyUnicode_InternFromString("attention");
    s_attend = PyUnicode_InternFromString("attend");
    if (!s_delta || !s_type || !s_text || !s_text_delta || !s_reader || !s_attention || !s_attend ||
        PyModule_AddObjectRef(m, "Reader", (PyObject *)&ReaderType) < 0 ||
        PyModule_AddObjectRef(m, "Pings", (PyObject *)&PingsType) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
