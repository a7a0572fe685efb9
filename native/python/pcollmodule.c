/*
 * pcollmodule.c: _pcoll, the CPython extension behind stragglerlab.realrun.collectives (built beside the core by
 * stragglerlab.realrun.build, linked against libpcoll.so).
 *
 * One Handle per collective. post and wait each cross into C once and allocate nothing but the result tuple: a
 * C-contiguous float32 vector of the right length (the buffer protocol says so) goes straight to the core, and
 * the round's record becomes the binding's RoundInfo (a tuple subclass, filled in place) with its mask a tuple of
 * bools. Anything else is handed to the binding's `explain(what, x)`, which raises the error a user reads or
 * returns a vector that fits (a contiguous copy). The options arrive as integers and fill pcoll_options here, so
 * no C struct is mirrored in Python; the round records leave as bytes, whose layout the module states (ROUND_FIELDS,
 * ROUND_SIZE) for the binding to check against its own dtype.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stddef.h>
#include <string.h>

#include "pcoll.h"

/* Posts of at least this many floats release the GIL while they copy. */
enum { RELEASE_FROM = 16384 };

static const char *round_kinds[] = {"sync", "async", "group", "average"};

typedef struct {
    PyObject_HEAD
    pcoll_t *c;
    Py_ssize_t count;
    int size, posted;
    PyObject *info_type, *explain, *empty, *kinds[4];
    unsigned char *mask;
} Handle;

static PyObject *status_error(Handle *h, int status)
{
    const char *detail = h->c ? pcoll_last_error(h->c) : "";
    PyObject *kind = status == PCOLL_ERR_ARG ? PyExc_ValueError : PyExc_RuntimeError;
    if (detail[0])
        PyErr_Format(kind, "%s (%s)", pcoll_strerror(status), detail);
    else
        PyErr_SetString(kind, pcoll_strerror(status));
    return NULL;
}

static int live(Handle *h)
{
    if (h->c) return 1;
    PyErr_SetString(PyExc_RuntimeError, "the collective is closed");
    return 0;
}

static int handle_init(Handle *h, PyObject *args, PyObject *kwargs)
{
    static char *names[] = {"fcomm", "count", "kind", "late", "divide_by", "group_size", "sync_period", "seed",
                            "ring_min_bytes", "quorum", "info_type", "explain", "empty", NULL};
    int fcomm, kind, late, divide_by, group_size, quorum, status;
    Py_ssize_t count;
    unsigned long long sync_period, seed;
    Py_ssize_t ring_min_bytes;
    PyObject *info_type, *explain, *empty;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "iniiiiKKniOOO", names, &fcomm, &count, &kind, &late, &divide_by,
                                     &group_size, &sync_period, &seed, &ring_min_bytes, &quorum, &info_type,
                                     &explain, &empty))
        return -1;
    if (h->c) {
        PyErr_SetString(PyExc_RuntimeError, "the handle is already open");
        return -1;
    }
    pcoll_options opt;
    pcoll_options_default(&opt);
    opt.kind = kind;
    opt.late = late;
    opt.divide_by = divide_by;
    opt.group_size = group_size;
    opt.sync_period = sync_period;
    opt.seed = seed;
    opt.ring_min_bytes = (size_t)ring_min_bytes;
    opt.quorum = quorum;
    pcoll_t *c = NULL;
    Py_BEGIN_ALLOW_THREADS
    status = pcoll_create((MPI_Fint)fcomm, (size_t)count, &opt, &c);
    Py_END_ALLOW_THREADS
    if (status != PCOLL_OK) {
        status_error(h, status);
        return -1;
    }
    MPI_Comm_size(MPI_Comm_f2c((MPI_Fint)fcomm), &h->size);
    h->mask = PyMem_Calloc((size_t)h->size, 1);
    if (!h->mask) {
        pcoll_abort(c);
        PyErr_NoMemory();
        return -1;
    }
    h->c = c;
    h->count = count;
    Py_INCREF(info_type);
    Py_INCREF(explain);
    Py_INCREF(empty);
    h->info_type = info_type;
    h->explain = explain;
    h->empty = empty;
    for (int i = 0; i < 4; i++)
        if (!(h->kinds[i] = PyUnicode_InternFromString(round_kinds[i]))) return -1;
    return 0;
}

/* A C-contiguous float32 vector of count elements in x, or else what explain makes of it: it raises for anything
 * unusable, or returns a replacement to read from (never to write to: a writable x must fit as it is). *view is
 * filled, and *keep holds a replacement to release after use. */
static int vector(Handle *h, const char *what, PyObject *x, int writable, Py_buffer *view, PyObject **keep)
{
    int flags = PyBUF_C_CONTIGUOUS | PyBUF_FORMAT | (writable ? PyBUF_WRITABLE : 0);
    *keep = NULL;
    if (PyObject_GetBuffer(x, view, flags) == 0) {
        const char *f = view->format;
        if (f[0] == '<' || f[0] == '=' || f[0] == '@') f++;
        if (view->ndim == 1 && view->shape[0] == h->count && view->itemsize == 4 && f[0] == 'f' && !f[1]) return 0;
        PyBuffer_Release(view);
    } else {
        PyErr_Clear();
    }
    PyObject *fit = PyObject_CallFunction(h->explain, "sO", what, x);
    if (!fit) return -1;
    if (writable) {
        Py_DECREF(fit);
        PyErr_Format(PyExc_ValueError, "%s needs a writable C-contiguous float32 array", what);
        return -1;
    }
    if (PyObject_GetBuffer(fit, view, flags) != 0) {
        Py_DECREF(fit);
        return -1;
    }
    *keep = fit;
    return 0;
}

static PyObject *handle_post(Handle *h, PyObject *x)
{
    if (!live(h)) return NULL;
    Py_buffer view;
    PyObject *keep;
    if (vector(h, "post", x, 0, &view, &keep)) return NULL;
    int status;
    if (h->posted) {
        status = -1;
    } else if (h->count >= RELEASE_FROM) {
        Py_BEGIN_ALLOW_THREADS
        status = pcoll_post(h->c, view.buf);
        Py_END_ALLOW_THREADS
    } else {
        status = pcoll_post(h->c, view.buf);
    }
    PyBuffer_Release(&view);
    Py_XDECREF(keep);
    if (status < 0) {
        PyErr_SetString(PyExc_RuntimeError, "post: the previous call was not waited for");
        return NULL;
    }
    if (status != PCOLL_OK) return status_error(h, status);
    h->posted = 1;
    Py_RETURN_NONE;
}

/* The RoundInfo of record rec: round, kind, contributors, fresh, gradients, mask, group, initiator. */
static PyObject *round_info(Handle *h, const pcoll_round *rec, int fresh)
{
    PyObject *mask = PyTuple_New(h->size);
    if (!mask) return NULL;
    for (int j = 0; j < h->size; j++) PyTuple_SET_ITEM(mask, j, Py_NewRef(h->mask[j] ? Py_True : Py_False));
    PyTypeObject *type = (PyTypeObject *)h->info_type;
    PyObject *info = type->tp_alloc(type, 8);
    if (!info) {
        Py_DECREF(mask);
        return NULL;
    }
    PyObject *items[8] = {PyLong_FromUnsignedLongLong(rec->round),
                          Py_NewRef(h->kinds[rec->kind >= 0 && rec->kind < 4 ? rec->kind : 1]),
                          PyLong_FromLong(rec->contributors),
                          Py_NewRef(fresh ? Py_True : Py_False),
                          PyLong_FromLong(rec->gradients),
                          mask,
                          PyLong_FromLong(rec->group),
                          PyLong_FromLong(rec->initiator)};
    int ok = 1;
    for (int i = 0; i < 8; i++) {
        ok &= items[i] != NULL;
        PyTuple_SET_ITEM(info, i, items[i]);
    }
    if (!ok) Py_CLEAR(info);
    return info;
}

static PyObject *handle_wait(Handle *h, PyObject *const *args, Py_ssize_t nargs)
{
    if (!live(h)) return NULL;
    if (nargs > 1) {
        PyErr_SetString(PyExc_TypeError, "wait() takes at most one argument (out)");
        return NULL;
    }
    PyObject *out = nargs && args[0] != Py_None ? Py_NewRef(args[0]) : PyObject_CallNoArgs(h->empty), *keep = NULL;
    if (!out) return NULL;
    Py_buffer view;
    if (vector(h, "wait(out=...)", out, 1, &view, &keep)) {
        Py_DECREF(out);
        return NULL;
    }
    if (!h->posted) {
        PyBuffer_Release(&view);
        Py_DECREF(out);
        PyErr_SetString(PyExc_RuntimeError, "wait: no call was posted");
        return NULL;
    }
    pcoll_round rec;
    int fresh = 0, status;
    Py_BEGIN_ALLOW_THREADS
    status = pcoll_wait(h->c, view.buf, &rec, &fresh, h->mask);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&view);
    if (status != PCOLL_OK) {
        Py_DECREF(out);
        return status_error(h, status);
    }
    h->posted = 0;
    PyObject *info = round_info(h, &rec, fresh);
    if (!info) {
        Py_DECREF(out);
        return NULL;
    }
    PyObject *pair = PyTuple_Pack(2, out, info);
    Py_DECREF(out);
    Py_DECREF(info);
    return pair;
}

static PyObject *handle_test(Handle *h, PyObject *unused)
{
    (void)unused;
    if (!live(h)) return NULL;
    int ready = 0, status;
    Py_BEGIN_ALLOW_THREADS
    status = pcoll_test(h->c, &ready);
    Py_END_ALLOW_THREADS
    if (status != PCOLL_OK) return status_error(h, status);
    return PyBool_FromLong(ready);
}

static PyObject *handle_num_rounds(Handle *h, PyObject *unused)
{
    (void)unused;
    if (!live(h)) return NULL;
    return PyLong_FromSize_t(pcoll_num_rounds(h->c));
}

/* The records from index `first` on, as bytes (ROUND_SIZE each). */
static PyObject *handle_records(Handle *h, PyObject *arg)
{
    if (!live(h)) return NULL;
    Py_ssize_t first = PyLong_AsSsize_t(arg);
    if (first < 0) {
        if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "records: first must be >= 0");
        return NULL;
    }
    size_t total = pcoll_num_rounds(h->c), n = (size_t)first < total ? total - (size_t)first : 0;
    PyObject *raw = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)(n * sizeof(pcoll_round)));
    if (!raw) return NULL;
    int status = pcoll_get_rounds(h->c, (size_t)first, n, (pcoll_round *)PyBytes_AS_STRING(raw));
    if (status != PCOLL_OK) {
        Py_DECREF(raw);
        return status_error(h, status);
    }
    return raw;
}

static PyObject *handle_close(Handle *h, PyObject *unused)
{
    (void)unused;
    if (!h->c) Py_RETURN_NONE;
    pcoll_t *c = h->c;
    int status;
    h->c = NULL;
    Py_BEGIN_ALLOW_THREADS
    status = pcoll_close(c);
    Py_END_ALLOW_THREADS
    if (status != PCOLL_OK) {
        PyErr_Format(PyExc_RuntimeError, "%s (%s)", pcoll_strerror(status), pcoll_last_error(c));
        return NULL;
    }
    Py_RETURN_NONE;
}

/* Local: stop the progress thread (for error paths and interpreter exit; MPI's objects are left as they are). */
static PyObject *handle_abort(Handle *h, PyObject *unused)
{
    (void)unused;
    if (h->c) {
        pcoll_t *c = h->c;
        h->c = NULL;
        Py_BEGIN_ALLOW_THREADS
        pcoll_abort(c);
        Py_END_ALLOW_THREADS
    }
    Py_RETURN_NONE;
}

static void handle_dealloc(Handle *h)
{
    if (h->c) pcoll_abort(h->c);
    Py_XDECREF(h->info_type);
    Py_XDECREF(h->explain);
    Py_XDECREF(h->empty);
    for (int i = 0; i < 4; i++) Py_XDECREF(h->kinds[i]);
    PyMem_Free(h->mask);
    Py_TYPE(h)->tp_free((PyObject *)h);
}

static PyMethodDef handle_methods[] = {
    {"post", (PyCFunction)handle_post, METH_O, "post(x): this rank's contribution of the next call (copied in)."},
    {"wait", (PyCFunction)(void (*)(void))handle_wait, METH_FASTCALL,
     "wait(out=None) -> (out, RoundInfo): the result of the posted call's round."},
    {"test", (PyCFunction)handle_test, METH_NOARGS, "test() -> bool: whether wait would return at once."},
    {"num_rounds", (PyCFunction)handle_num_rounds, METH_NOARGS, "Rounds completed on this rank so far."},
    {"records", (PyCFunction)handle_records, METH_O, "records(first) -> bytes: the round records from first on."},
    {"close", (PyCFunction)handle_close, METH_NOARGS, "Collective: complete every round, then free the handle."},
    {"abort", (PyCFunction)handle_abort, METH_NOARGS, "Local: stop the progress thread."},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject HandleType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "_pcoll.Handle",
    .tp_basicsize = sizeof(Handle),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "A partial collective of the native core (see stragglerlab.realrun.collectives).",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)handle_init,
    .tp_dealloc = (destructor)handle_dealloc,
    .tp_methods = handle_methods,
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_pcoll", "The native core's Python binding.", -1, NULL,
                                    NULL, NULL, NULL, NULL};

/* (name, offset, size) of a pcoll_round field */
#define FIELD(name) \
    Py_BuildValue("(snn)", #name, (Py_ssize_t)offsetof(pcoll_round, name), (Py_ssize_t)sizeof(((pcoll_round *)0)->name))

static PyObject *round_fields(void)
{
    PyObject *items[] = {FIELD(round),     FIELD(kind),      FIELD(initiator), FIELD(group),     FIELD(contributors),
                         FIELD(fresh),     FIELD(gradients), FIELD(hops),      FIELD(t_trigger), FIELD(t_done)};
    Py_ssize_t n = (Py_ssize_t)(sizeof items / sizeof *items);
    PyObject *fields = PyTuple_New(n);
    for (Py_ssize_t i = 0; i < n; i++) {
        if (fields && items[i])
            PyTuple_SET_ITEM(fields, i, items[i]);
        else
            Py_XDECREF(items[i]);
    }
    for (Py_ssize_t i = 0; fields && i < n; i++)
        if (!items[i]) Py_CLEAR(fields);
    return fields;
}

static const struct {
    const char *name;
    int value;
} constants[] = {
    {"QUORUM", PCOLL_QUORUM},
    {"MAJORITY", PCOLL_MAJORITY},
    {"WAGMA", PCOLL_WAGMA},
    {"LATE_ACCUMULATE", PCOLL_LATE_ACCUMULATE},
    {"LATE_DROP", PCOLL_LATE_DROP},
    {"DIVIDE_WORKERS", PCOLL_DIVIDE_WORKERS},
    {"DIVIDE_CONTRIBUTORS", PCOLL_DIVIDE_CONTRIBUTORS},
    {"ROUND_SIZE", (int)sizeof(pcoll_round)},
};

PyMODINIT_FUNC PyInit__pcoll(void)
{
    if (PyType_Ready(&HandleType) < 0) return NULL;
    PyObject *m = PyModule_Create(&module), *fields = m ? round_fields() : NULL;
    int ok = fields && PyModule_AddObjectRef(m, "Handle", (PyObject *)&HandleType) == 0 &&
             PyModule_AddObjectRef(m, "ROUND_FIELDS", fields) == 0;
    for (size_t i = 0; ok && i < sizeof constants / sizeof *constants; i++)
        ok = PyModule_AddIntConstant(m, constants[i].name, constants[i].value) == 0;
    Py_XDECREF(fields);
    if (!ok) Py_CLEAR(m);
    return m;
}
