/* Force-included (cc -include) by scripts/gpu_check/build_gpu_wheel.py when it builds our C extensions against
 * Python's limited API (abi3), so one build imports under every CPython >= 3.11. The sources use a
 * few macros that only the full API defines; here they become the limited API's functions, which
 * do the same thing with a call instead of a struct access. The normal build (setup.py) never sees
 * this file. Anything else outside the limited API fails that build with a named symbol
 * (-Werror=implicit-function-declaration): add its limited equivalent here. */
#ifndef IMAGENET_SHARDS_ABI3_COMPAT_H
#define IMAGENET_SHARDS_ABI3_COMPAT_H
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#ifndef PyBytes_AS_STRING
#define PyBytes_AS_STRING(o) PyBytes_AsString(o)
#endif
#ifndef PyBytes_GET_SIZE
#define PyBytes_GET_SIZE(o) PyBytes_Size(o)
#endif
#ifndef PyTuple_GET_ITEM
#define PyTuple_GET_ITEM(t, i) PyTuple_GetItem((t), (i))
#endif
#ifndef PyTuple_GET_SIZE
#define PyTuple_GET_SIZE(t) PyTuple_Size(t)
#endif
#ifndef PyTuple_SET_ITEM
#define PyTuple_SET_ITEM(t, i, v) PyTuple_SetItem((t), (i), (v))
#endif
#ifndef PyList_GET_ITEM
#define PyList_GET_ITEM(l, i) PyList_GetItem((l), (i))
#endif
#ifndef PyList_GET_SIZE
#define PyList_GET_SIZE(l) PyList_Size(l)
#endif
#ifndef PyList_SET_ITEM
#define PyList_SET_ITEM(l, i, v) PyList_SetItem((l), (i), (v))
#endif
#endif
