/* Part of the `_reader` extension module (which adds the type, see _reader.c). */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <string.h>

/* Keep-alives counted in a response's bytes, on their way to the SDK (`pings.py`), where the SDK's
 * own layers are not the ones streamscope knows and its `_iter_events` runs as it is: a line
 * `event: ping` (or `event:ping`), found per chunk with `memchr`, instead of a Python generator and
 * the event's `event` property per server-sent event. A line may be split between chunks: the
 * start of a chunk's last line, where it is short enough to become one, is kept (`partial`). */

#define PING_MAX 12 /* "event: ping" and its line break */

typedef struct {
    PyObject_HEAD
    PyObject *chunks;       /* the body's iterator of bytes */
    PyObject *pinged;       /* pinged(): one keep-alive seen (never raises) */
    char partial[PING_MAX]; /* the line begun in the previous chunks and not yet ended */
    Py_ssize_t npartial;    /* its length (0: the next byte begins a line), -1: too long to be one */
} Pings;

static inline int line_break(char c) { return c == '\n' || c == '\r'; }

/* Whether a keep-alive line begins at `buf[p]` (`starts`: a line begins there) and ends in `buf`:
 * `event:`, at most one space, `ping`, a line break. */
static inline int ping_line(const char *buf, Py_ssize_t n, Py_ssize_t p, int starts) {
    if (!starts || n - p < 11 || buf[p] != 'e' || memcmp(buf + p + 1, "vent:", 5) != 0) return 0;
    p += 6;
    if (buf[p] == ' ') p++;
    return n - p >= 5 && memcmp(buf + p, "ping", 4) == 0 && line_break(buf[p + 4]);
}

/* The keep-alive lines that begin in `buf` and end in it (`before`: a line begins at `buf[0]`).
 * Lines are found with `memchr` on LF; a chunk with a CR in it (a stream whose lines end in CR
 * or CRLF) is read byte by byte. */
static int count_pings(const char *buf, Py_ssize_t n, int before) {
    int found = 0;
    if (memchr(buf, '\r', (size_t)n) != NULL) {
        for (Py_ssize_t p = 0; p < n; p++)
            found += ping_line(buf, n, p, p == 0 ? before : line_break(buf[p - 1]));
        return found;
    }
    Py_ssize_t p = 0;
    int starts = before;
    for (;;) {
        found += ping_line(buf, n, p, starts);
        const char *lf = memchr(buf + p, '\n', (size_t)(n - p));
        if (lf == NULL) return found;
        p = lf - buf + 1;
        starts = 1;
    }
}

/* Whether `ping` is in `buf` at all, found by its last letter (rare in the JSON of text deltas):
 * most chunks hold no keep-alive, and this is one `memchr` over them. */
static int has_ping(const char *buf, Py_ssize_t n) {
    const char *p = buf + 3, *end = buf + n;
    while (p < end && (p = memchr(p, 'g', (size_t)(end - p))) != NULL) {
        if (memcmp(p - 3, "pin", 3) == 0) return 1;
        p++;
    }
    return 0;
}

static PyObject *Pings_new(PyTypeObject *type, PyObject *args, PyObject *kwds) {
    PyObject *chunks, *pinged;
    if (!PyArg_ParseTuple(args, "OO:Pings", &chunks, &pinged)) return NULL;
    Pings *self = PyObject_GC_New(Pings, type);
    if (self == NULL) return NULL;
    self->chunks = Py_NewRef(chunks);
    self->pinged = Py_NewRef(pinged);
    self->npartial = 0;
    PyObject_GC_Track(self);
    return (PyObject *)self;
}

static int Pings_traverse(Pings *self, visitproc visit, void *arg) {
    Py_VISIT(self->chunks);
    Py_VISIT(self->pinged);
    return 0;
}

static int Pings_clear(Pings *self) {
    Py_CLEAR(self->chunks);
    Py_CLEAR(self->pinged);
    return 0;
}

static void Pings_dealloc(Pings *self) {
    PyObject_GC_UnTrack(self);
    Pings_clear(self);
    PyObject_GC_Del(self);
}

static PyObject *Pings_next(Pings *self) {
    if (self->chunks == NULL) return NULL;
    PyObject *chunk = PyIter_Next(self->chunks);
    if (chunk == NULL || !PyBytes_Check(chunk)) return chunk; /* the end, an error, or not ours to read */
    const char *buf = PyBytes_AS_STRING(chunk);
    Py_ssize_t n = PyBytes_GET_SIZE(chunk), had = self->npartial;
    if (n == 0) return chunk;
    int found = 0;
    if (had > 0) { /* the line the previous chunks began, ended here */
        char joined[2 * PING_MAX];
        Py_ssize_t head = n < PING_MAX ? n : PING_MAX;
        memcpy(joined, self->partial, (size_t)had);
        memcpy(joined + had, buf, (size_t)head);
        found += ping_line(joined, had + head, 0, 1);
    }
    if (has_ping(buf, n)) found += count_pings(buf, n, had == 0); /* a keep-alive line has `ping` whole */
    /* the chunk's last line, unless a line break ends the chunk or it is too long to become one */
    Py_ssize_t i = n;
    while (i > 0 && n - i < PING_MAX && !line_break(buf[i - 1])) i--;
    if (i > 0 && line_break(buf[i - 1])) {
        self->npartial = n - i;
        memcpy(self->partial, buf + i, (size_t)(n - i));
    } else if (i == 0 && had >= 0 && had + n < PING_MAX) { /* no line break in it: the line goes on */
        memcpy(self->partial + had, buf, (size_t)n);
        self->npartial = had + n;
    } else {
        self->npartial = -1;
    }
    for (; found > 0; found--) {
        PyObject *r = PyObject_CallNoArgs(self->pinged);
        if (r == NULL) PyErr_Clear(); /* `pinged` never raises; the bytes go on either way */
        Py_XDECREF(r);
    }
    return chunk;
}

PyTypeObject PingsType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "streamscope.adapters.stainless._reader.Pings",
    .tp_doc = PyDoc_STR("Pings(chunks, pinged): the body's chunks, passed on as they are, keep-alives counted."),
    .tp_basicsize = sizeof(Pings),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_new = Pings_new,
    .tp_dealloc = (destructor)Pings_dealloc,
    .tp_traverse = (traverseproc)Pings_traverse,
    .tp_clear = (inquiry)Pings_clear,
    .tp_iter = PyObject_SelfIter,
    .tp_iternext = (iternextfunc)Pings_next,
};
