"""The argument checks of a direct launch, in C, and the call of the compiled launcher.

A direct launch must check, per call, that Triton would pick its binary: each tensor's
class, dtype, device and 16-byte alignment, each integer's class. In Python those checks
and the reads they need cost more than Triton's own C launcher spends on the same
arguments (``benchmarks/device/launch_parts.py`` on the H200: 1.4-1.9 us of 10-14 us
for kernels of 12-18 arguments). Here one C call reads the arguments, checks
them, takes each tensor's address and calls the launcher, with no Python frame between.

The module is built from ``SOURCE`` by Triton's own ``compile_module_from_src``, so it is
cached as Triton's launchers are (keyed by the source and the platform): warmup builds it
into the cache (``jitkern.build.host_modules.build_launcher``), the lock covers it, and cache wheels
and Redis carry it. A plan (``jitkern.launch.direct``) describes one binary's parameters,
one 4-byte code each:

- ``c`` a constexpr: passed as given in the plan;
- ``t`` a tensor: its exact class one of the plan's two, the plan's dtype, on the GPU (or
  not, when the plan says so); byte 3, its address: 0 any, 1 a multiple of 16, 2 not;
- ``i`` an int of exact class int: byte 1 its class (0 i32, 1 i64, 2 u64, Triton's
  ranges), byte 2 set when it must not be 1 (Triton's constexpr 1), byte 3 its value: 0
  any, 1 a multiple of 16, 2 not;
- ``f`` exactly a float; ``b`` a bool; ``n`` None; ``1`` exactly the int 1.

``launch_by_name(plan, kwargs, grid, stream, metadata, enter, exit)`` reads the runtime
arguments from ``kwargs`` (exactly these names) and checks everything;
``launch_checked(plan, arguments, ...)`` takes them as a tuple, in order, from a caller
that checked each tensor's class, dtype and device (``jitkern.launch.plans``). Both return
False, launching nothing, for arguments the binary cannot take, and True once launched.
"""

from __future__ import annotations

import functools
from typing import Any

NAME = "jitkern_launch"

SOURCE = r"""
#define PY_SSIZE_T_CLEAN
#include <Python.h>

/* plan: (names, codes, extras, tensor classes, Tensor.data_ptr, on GPU, run, head, runtime count) */
enum { NAMES, CODES, EXTRAS, CLASSES, DATA_PTR, ON_GPU, RUN, HEAD, RUNTIME };
enum { SMALL = 64 };

static PyObject *dtype_name, *is_cuda_name, *one;

/* 1 when the int fits the code's class and value rules, 0 when not, -1 on error. */
static int int_fits(PyObject *value, const char *code) {
  int overflow;
  long long v = PyLong_AsLongLongAndOverflow(value, &overflow);
  unsigned long long low = (unsigned long long)v;
  if (v == -1 && PyErr_Occurred()) return -1;
  if (code[1] == 2) { /* u64: [2**63, 2**64) */
    if (overflow <= 0) return 0;
    low = PyLong_AsUnsignedLongLong(value);
    if (low == (unsigned long long)-1 && PyErr_Occurred()) {
      if (!PyErr_ExceptionMatches(PyExc_OverflowError)) return -1;
      PyErr_Clear();
      return 0;
    }
  } else {
    int in_i32 = !overflow && v >= -2147483648LL && v < 2147483648LL;
    if (overflow || (code[1] == 0) != in_i32) return 0;
  }
  if (code[2] && !overflow && v == 1) return 0;
  if (code[3] && ((low & 15) ? code[3] == 1 : code[3] == 2)) return 0;
  return 1;
}

/* The launcher argument of a tensor (a new reference to its address), NULL with no error
   when the tensor does not fit, NULL with an error on failure. */
static PyObject *tensor_address(PyObject *plan, PyObject *value, Py_ssize_t i, const char *code, int check) {
  if (check) {
    PyObject *classes = PyTuple_GET_ITEM(plan, CLASSES), *cls = (PyObject *)Py_TYPE(value), *got;
    if (cls != PyTuple_GET_ITEM(classes, 0) && cls != PyTuple_GET_ITEM(classes, 1)) return NULL;
    if (!(got = PyObject_GetAttr(value, dtype_name))) return NULL;
    Py_DECREF(got);
    if (got != PyTuple_GET_ITEM(PyTuple_GET_ITEM(plan, EXTRAS), i)) return NULL;
    if (!(got = PyObject_GetAttr(value, is_cuda_name))) return NULL;
    Py_DECREF(got);
    if ((got == Py_True) != (PyTuple_GET_ITEM(plan, ON_GPU) == Py_True)) return NULL;
  }
  PyObject *address = PyObject_Vectorcall(PyTuple_GET_ITEM(plan, DATA_PTR), &value, 1, NULL);
  if (!address || !code[3]) return address;
  unsigned long long low = PyLong_AsUnsignedLongLongMask(address);
  if (low == (unsigned long long)-1 && PyErr_Occurred()) { Py_DECREF(address); return NULL; }
  if ((low & 15) ? code[3] == 1 : code[3] == 2) { Py_DECREF(address); return NULL; }
  return address;
}

/* The launcher argument of parameter i (a new reference), NULL with no error when the
   value does not fit, NULL with an error on failure. */
static PyObject *argument(PyObject *plan, PyObject *value, Py_ssize_t i, const char *code, int check) {
  int fits = 0;
  switch (code[0]) {
    case 't': return tensor_address(plan, value, i, code, check);
    case 'i': fits = PyLong_CheckExact(value) ? int_fits(value, code) : 0; break;
    case '1': {
      int overflow;
      fits = PyLong_CheckExact(value) && PyLong_AsLongLongAndOverflow(value, &overflow) == 1 && !overflow;
      break;
    }
    case 'f': fits = PyFloat_CheckExact(value); break;
    case 'b': fits = PyBool_Check(value); break;
    case 'n': fits = value == Py_None; break;
    default: fits = 0;
  }
  if (fits <= 0) return NULL;
  Py_INCREF(value);
  return value;
}

static PyObject *launch(PyObject *const *args, Py_ssize_t nargs, int by_name) {
  if (nargs != 7) {
    PyErr_SetString(PyExc_TypeError, "expected (plan, arguments, grid, stream, metadata, enter, exit)");
    return NULL;
  }
  PyObject *plan = args[0], *given = args[1], *grid = args[2];
  PyObject *names = PyTuple_GET_ITEM(plan, NAMES), *extras = PyTuple_GET_ITEM(plan, EXTRAS);
  PyObject *head = PyTuple_GET_ITEM(plan, HEAD);
  const char *codes = PyBytes_AS_STRING(PyTuple_GET_ITEM(plan, CODES));
  Py_ssize_t params = PyTuple_GET_SIZE(names), heads = PyTuple_GET_SIZE(head);
  Py_ssize_t runtime = PyLong_AsSsize_t(PyTuple_GET_ITEM(plan, RUNTIME));
  if (!PyTuple_CheckExact(grid) && !PyList_CheckExact(grid)) Py_RETURN_FALSE;
  Py_ssize_t dims = PySequence_Fast_GET_SIZE(grid);
  if (dims < 1 || dims > 3) Py_RETURN_FALSE;
  if (by_name ? !PyDict_CheckExact(given) || PyDict_GET_SIZE(given) != runtime
              : !PyTuple_CheckExact(given) || PyTuple_GET_SIZE(given) != runtime)
    Py_RETURN_FALSE;

  Py_ssize_t first = 4 + heads + 3, total = first + params, made = 0, next = 0;
  PyObject *small[SMALL], **stack = total <= SMALL ? small : PyMem_New(PyObject *, total);
  if (!stack) return PyErr_NoMemory();
  PyObject *result = NULL;
  for (; made < params; made++) {
    const char *code = codes + 4 * made;
    PyObject *value;
    if (code[0] == 'c') {
      value = PyTuple_GET_ITEM(extras, made);
      Py_INCREF(value);
    } else {
      PyObject *given_value = by_name ? PyDict_GetItemWithError(given, PyTuple_GET_ITEM(names, made))
                                      : PyTuple_GET_ITEM(given, next++);
      if (!given_value) break;
      Py_INCREF(given_value); /* held while a getter (a torch function mode) may run Python */
      value = argument(plan, given_value, made, code, by_name);
      Py_DECREF(given_value);
      if (!value) break;
    }
    stack[first + made] = value;
  }
  if (made == params) {
    for (Py_ssize_t d = 0; d < 3; d++) stack[d] = d < dims ? PySequence_Fast_ITEMS(grid)[d] : one;
    stack[3] = args[3];
    for (Py_ssize_t h = 0; h < heads; h++) stack[4 + h] = PyTuple_GET_ITEM(head, h);
    stack[4 + heads] = args[4];
    stack[5 + heads] = args[5];
    stack[6 + heads] = args[6];
    result = PyObject_Vectorcall(PyTuple_GET_ITEM(plan, RUN), stack, total, NULL);
  }
  for (Py_ssize_t i = 0; i < made; i++) Py_DECREF(stack[first + i]);
  if (stack != small) PyMem_Free(stack);
  if (made < params) {
    if (PyErr_Occurred()) return NULL;
    Py_RETURN_FALSE;
  }
  if (!result) return NULL;
  Py_DECREF(result);
  Py_RETURN_TRUE;
}

static PyObject *launch_by_name(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
  return launch(args, nargs, 1);
}

static PyObject *launch_checked(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
  return launch(args, nargs, 0);
}

static PyMethodDef methods[] = {
  {"launch_by_name", (PyCFunction)(void (*)(void))launch_by_name, METH_FASTCALL, NULL},
  {"launch_checked", (PyCFunction)(void (*)(void))launch_checked, METH_FASTCALL, NULL},
  {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "jitkern_launch", NULL, -1, methods};

PyMODINIT_FUNC PyInit_jitkern_launch(void) {
  dtype_name = PyUnicode_InternFromString("dtype");
  is_cuda_name = PyUnicode_InternFromString("is_cuda");
  one = PyLong_FromLong(1); /* a grid's missing dimensions */
  if (!dtype_name || !is_cuda_name || !one) return NULL;
  return PyModule_Create(&module);
}
"""


@functools.cache
def module() -> Any:
    """The built module: from Triton's cache, or built into it (the host C compiler, once
    per platform and cache)."""
    from triton.runtime.build import compile_module_from_src

    return compile_module_from_src(SOURCE, NAME)
