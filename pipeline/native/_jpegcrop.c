/* The `turbo` decoder's C side (train/loader/decode.py): partial JPEG decoding with libjpeg-turbo,
 * and the one call per sample that decodes, crops, resizes and flips into the batch slot.
 *
 *   - crop_into: the crop box (pixels of the original) -> the uint8 CHW batch slot, in one call
 *     with the GIL released: the DCT scale (1/2, 1/4, 1/8 when the crop stays at least the output
 *     size, like Pillow's draft; or num/8 when asked), the region the resampler reads, decoded
 *     entering at the restart markers around it (jpegcrop_entry.c, jpegcrop_region.c), then the
 *     bilinear resample straight into the CHW planes, flipped when asked (jpegcrop_resample.c).
 *     No Pillow image, Python object or copy per sample.
 *   - decode_region: the region as RGBX bytes (the older path: Pillow resamples it; tests and
 *     bench/profile_loader.py compare the two).
 *   - header: image size and components from the JPEG header.
 *   - entropy_path / entropy_counts: which entropy decoder the calls use by default (libjpeg's, or
 *     the own one for our restart-marker files: jpegcrop_entropy.c) and how often each ran.
 *   - yuv_crop_into: the pixel form's crop box (YUV 4:2:0 planes, pipeline/format/pixels.py) -> the
 *     uint8 CHW slot, colour conversion fused into the resampler, in one call (jpegcrop_pixels.c).
 *   - to_planes / arrow_to_planes: a resized HWC(X) image (numpy, or Pillow's memory through its
 *     Arrow export) into its CHW slot, flipped when asked (the Pillow path).
 * libjpeg-turbo 2.1's M/8 IDCTs other than 1/2, 1/4, 1/8 are plain C: measured slower than a
 * full-scale SIMD decode, so crop_into uses them only when asked (scale=N, for benchmarks).
 *
 * What the extension cannot take is declined and the caller uses Pillow: not a 3-component
 * YCbCr/RGB JPEG (grayscale, CMYK), a libjpeg error. A libjpeg warning about the data (it pads a
 * damaged stream with grey and only warns; jpeg_errors.h) is reported as
 * ("corrupt", message): the loader skips and counts the sample.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "jpegcrop_entropy.h"
#include "jpegcrop_entry.h"
#include "jpegcrop_pixels.h"
#include "jpegcrop_region.h"
#include "jpegcrop_resample.h"

#if !defined(JCS_EXTENSIONS) || !defined(LIBJPEG_TURBO_VERSION)
#error "pipeline/native/_jpegcrop.c needs libjpeg-turbo (>= 2.0) headers, not IJG libjpeg"
#endif

/* The `entropy` keyword: None -> the process's choice, "own", "libjpeg"; -1 (ValueError set) else. */
static int entropy_choice(PyObject *value) {
    if (value == NULL || value == Py_None)
        return ENTROPY_DEFAULT;
    const char *name = PyUnicode_Check(value) ? PyUnicode_AsUTF8AndSize(value, NULL) : NULL;
    if (name != NULL && strcmp(name, "own") == 0)
        return ENTROPY_OWN;
    if (name != NULL && strcmp(name, "libjpeg") == 0)
        return ENTROPY_LIBJPEG;
    PyErr_Clear();
    PyErr_SetString(PyExc_ValueError, "entropy must be None, \"own\" or \"libjpeg\"");
    return -1;
}

static PyObject *status_result(int status, const char *message) {
    static const char *kinds[] = {NULL, "declined", "error", "corrupt", "out of memory"};
    if (status == REGION_NO_MEMORY)
        return PyErr_NoMemory();
    return Py_BuildValue("(ss)", kinds[status], message);
}

PyDoc_STRVAR(header_doc,
"header(data) -> (width, height, components) or None\n\n"
"Image size and component count from the JPEG header; None when it has none.");

static PyObject *header(PyObject *self, PyObject *args) {
    Py_buffer buf;
    int width = 0, height = 0, components = 0, ok;
    (void)self;
    if (!PyArg_ParseTuple(args, "y*:header", &buf))
        return NULL;
    ok = jpeg_frame_size(buf.buf, (size_t)buf.len, &width, &height, &components);
    PyBuffer_Release(&buf);
    if (!ok)
        Py_RETURN_NONE;
    return Py_BuildValue("(iii)", width, height, components);
}

PyDoc_STRVAR(decode_region_doc,
"decode_region(data, denom, left, top, right, bottom, fast=False, restarts=True)\n"
"    -> (rgbx: bytes, x, y, width, rows) or None\n\n"
"Decode the image scaled by 1/denom (denom in 1, 2, 4, 8) but only the pixels that cover\n"
"[left, right) x [top, bottom) of the scaled image (clipped to it), as RGBX rows of `width`\n"
"pixels. The region returned starts at (x, y) <= (left, top) and may be wider than asked\n"
"(libjpeg decodes whole iMCU columns). Its first and last 8 columns can differ from a full\n"
"decode where fancy upsampling lacks its neighbours, so ask for a margin.\n"
"fast=True: fast integer IDCT and plain chroma upsampling (full-size decodes only).\n"
"restarts=False: never enter at restart markers (tests compare both ways).\n"
"entropy: None (the process's choice, entropy_path()), \"own\" or \"libjpeg\" (tests compare them).\n"
"None: declined (not a 3-component YCbCr/RGB JPEG, or any libjpeg error or warning).");

static PyObject *decode_region(PyObject *self, PyObject *args, PyObject *kwargs) {
    static char *kwlist[] = {"data", "denom", "left", "top", "right", "bottom", "fast", "restarts", "entropy", NULL};
    Py_buffer buf;
    int denom, left, top, right, bottom, fast = 0, restarts = 1, status;
    struct region r;
    PyObject *out = NULL, *entropy_arg = Py_None;
    (void)self;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "y*iiiii|ppO:decode_region", kwlist, &buf, &denom,
                                     &left, &top, &right, &bottom, &fast, &restarts, &entropy_arg))
        return NULL;
    int entropy = entropy_choice(entropy_arg);
    if (entropy < 0) {
        PyBuffer_Release(&buf);
        return NULL;
    }
    if (denom != 1 && denom != 2 && denom != 4 && denom != 8) {
        PyBuffer_Release(&buf);
        PyErr_SetString(PyExc_ValueError, "denom must be 1, 2, 4 or 8");
        return NULL;
    }
    int cells[4] = {left * denom, top * denom, right * denom, bottom * denom};
    for (;;) {
        Py_BEGIN_ALLOW_THREADS
        status = region_start(&r, buf.buf, (size_t)buf.len, 8 / denom, restarts ? cells : NULL, left, top, right,
                              bottom, fast, entropy);
        Py_END_ALLOW_THREADS
        if (status == REGION_OK && out == NULL) {
            /* a fresh bytes object may be filled before it is shared */
            out = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)r.width * 4 * r.rows);
            if (out == NULL)
                status = REGION_NO_MEMORY;
        }
        Py_BEGIN_ALLOW_THREADS
        if (status == REGION_OK)
            status = region_read(&r, (unsigned char *)PyBytes_AS_STRING(out), (size_t)r.width * 4);
        region_end(&r);
        Py_END_ALLOW_THREADS
        if (status != REGION_RETRY)
            break;
        entropy_count_retry();  /* the own entropy decoder ran short: libjpeg's path from the start */
        entropy = ENTROPY_LIBJPEG;
    }
    PyBuffer_Release(&buf);
    if (status == REGION_NO_MEMORY)
        return NULL;  /* MemoryError is set */
    if (status != REGION_OK) {
        Py_XDECREF(out);
        Py_RETURN_NONE;
    }
    return Py_BuildValue("(Niiii)", out, r.x, r.y, r.width, r.rows);
}

PyDoc_STRVAR(crop_into_doc,
"crop_into(data, out, top, left, height, width, flip=False, *, restarts=True, scale=0, times=None,\n"
"          entropy=None, filter=\"bilinear\")\n"
"    -> None or (kind, message)\n\n"
"The crop box (top, left, height, width: pixels of the original, floats) of the JPEG `data`,\n"
"resampled with `filter` (\"bilinear\" or \"bicubic\": Pillow's antialiased BILINEAR or BICUBIC;\n"
"jpegcrop_resample.h) to the size of `out` -- a writable C-contiguous uint8 buffer of shape\n"
"(3, H, W) -- and written there as CHW planes,\n"
"mirrored left-right when `flip`. Decodes only what the filter reads, at DCT scale 1/2, 1/4 or 1/8\n"
"when the crop stays at least the output size after it (scale=N: N/8, N in 1..16).\n"
"restarts=False: never enter at restart markers (tests compare both ways).\n"
"entropy: None (the process's choice, entropy_path()), \"own\" or \"libjpeg\" (tests compare them).\n"
"times: a writable buffer of 2 float64 to which the CPU seconds of the decode (header, geometry,\n"
"region) and of the resample are added (bench/profile_loader.py).\n"
"None: done. Else nothing usable was written and kind says why: \"declined\" (not a JPEG this\n"
"decoder takes: use another), \"error\" (libjpeg failed: message), \"corrupt\" (libjpeg warned\n"
"about the entropy-coded data: message).");

static PyObject *crop_into(PyObject *self, PyObject *args, PyObject *kwargs) {
    static char *kwlist[] = {"data", "out", "top", "left", "height", "width", "flip", "restarts", "scale", "times",
                             "entropy", "filter", NULL};
    Py_buffer buf, out, clock = {0};
    PyObject *target, *times = Py_None, *entropy_arg = Py_None;
    const char *filter_name = "bilinear";
    double top, left, height, width;
    int flip = 0, restarts = 1, num = 0, status = REGION_OK;
    char message[JMSG_LENGTH_MAX] = "";
    (void)self;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "y*Odddd|p$piOOs:crop_into", kwlist, &buf, &target, &top, &left,
                                     &height, &width, &flip, &restarts, &num, &times, &entropy_arg,
                                     &filter_name))
        return NULL;
    int entropy = entropy_choice(entropy_arg);
    if (entropy < 0) {
        PyBuffer_Release(&buf);
        return NULL;
    }
    if (times != Py_None && PyObject_GetBuffer(times, &clock, PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS) < 0) {
        PyBuffer_Release(&buf);
        return NULL;
    }
    if (PyObject_GetBuffer(target, &out, PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0) {
        PyBuffer_Release(&buf);
        if (clock.obj != NULL)
            PyBuffer_Release(&clock);
        return NULL;
    }
    const char *bad = NULL;
    if (out.ndim != 3 || out.shape[0] != 3 || out.shape[1] < 1 || out.shape[2] < 1 || out.itemsize != 1
        || (out.format != NULL && strcmp(out.format, "B") != 0))
        bad = "out must be a C-contiguous uint8 buffer of shape (3, H, W)";
    else if (num < 0 || num > 16)
        bad = "scale must be 0 (automatic) or N in 1..16 (N/8)";
    else if (!(height > 0 && width > 0 && isfinite(top) && isfinite(left) && isfinite(height) && isfinite(width)))
        bad = "the crop box must be finite with a positive height and width";
    else if (clock.obj != NULL && clock.len != 2 * (Py_ssize_t)sizeof(double))
        bad = "times must be a buffer of 2 float64";
    else if (strcmp(filter_name, "bilinear") != 0 && strcmp(filter_name, "bicubic") != 0)
        bad = "filter must be \"bilinear\" or \"bicubic\"";
    int filter = strcmp(filter_name, "bicubic") == 0 ? RESAMPLE_BICUBIC : RESAMPLE_BILINEAR;
    if (bad == NULL) {
        Py_BEGIN_ALLOW_THREADS
        status = crop_to_planes(buf.buf, (size_t)buf.len, top, left, height, width, out.buf, (int)out.shape[1],
                      (int)out.shape[2], flip, restarts, num, entropy, message,
                      clock.obj != NULL ? (double *)clock.buf : NULL, filter);
        Py_END_ALLOW_THREADS
    }
    PyBuffer_Release(&out);
    PyBuffer_Release(&buf);
    if (clock.obj != NULL)
        PyBuffer_Release(&clock);
    if (bad != NULL) {
        PyErr_SetString(PyExc_ValueError, bad);
        return NULL;
    }
    if (status == REGION_OK)
        Py_RETURN_NONE;
    return status_result(status, message);
}

PyDoc_STRVAR(yuv_crop_into_doc,
"yuv_crop_into(payload, width, height, out, top, left, box_height, box_width, flip=False, filter=\"bilinear\")\n\n"
"The crop box (pixels of the width x height image, floats) of a KEY.yuv420 payload resampled to\n"
"the size of `out` (a writable C-contiguous uint8 buffer of shape (3, H, W)) as RGB CHW planes,\n"
"mirrored left-right when `flip`, with `filter` (\"bilinear\" or \"bicubic\", as crop_into) (jpegcrop_pixels.h).\n"
"ValueError when the payload is not the size\n"
"width x height implies, or the box is not finite and positive.");

static PyObject *yuv_crop_into(PyObject *self, PyObject *args) {
    Py_buffer buf, out;
    PyObject *target;
    int width, height, flip = 0, status = 0;
    double top, left, box_h, box_w;
    const char *filter_name = "bilinear";
    (void)self;
    if (!PyArg_ParseTuple(args, "y*iiOdddd|ps:yuv_crop_into", &buf, &width, &height, &target, &top, &left, &box_h,
                          &box_w, &flip, &filter_name))
        return NULL;
    if (PyObject_GetBuffer(target, &out, PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0) {
        PyBuffer_Release(&buf);
        return NULL;
    }
    Py_ssize_t cw = (width + 1) / 2, ch = (height + 1) / 2;
    const char *bad = NULL;
    if (out.ndim != 3 || out.shape[0] != 3 || out.shape[1] < 1 || out.shape[2] < 1 || out.itemsize != 1
        || (out.format != NULL && strcmp(out.format, "B") != 0))
        bad = "out must be a C-contiguous uint8 buffer of shape (3, H, W)";
    else if (width < 1 || height < 1 || buf.len != (Py_ssize_t)width * height + 2 * cw * ch)
        bad = "the payload is not the size of a width x height yuv420 image";
    else if (!(box_h > 0 && box_w > 0 && isfinite(top) && isfinite(left) && isfinite(box_h) && isfinite(box_w)))
        bad = "the crop box must be finite with a positive height and width";
    else if (strcmp(filter_name, "bilinear") != 0 && strcmp(filter_name, "bicubic") != 0)
        bad = "filter must be \"bilinear\" or \"bicubic\"";
    int filter = strcmp(filter_name, "bicubic") == 0 ? RESAMPLE_BICUBIC : RESAMPLE_BILINEAR;
    if (bad == NULL) {
        Py_BEGIN_ALLOW_THREADS
        status = yuv_crop_to_planes(buf.buf, width, height, top, left, box_h, box_w, out.buf, (int)out.shape[1],
                                    (int)out.shape[2], flip, filter);
        Py_END_ALLOW_THREADS
    }
    PyBuffer_Release(&out);
    PyBuffer_Release(&buf);
    if (bad != NULL) {
        PyErr_SetString(PyExc_ValueError, bad);
        return NULL;
    }
    if (status != 0)
        return PyErr_NoMemory();
    Py_RETURN_NONE;
}

PyDoc_STRVAR(to_planes_doc,
"to_planes(src, dst, height, width, channels, flip)\n\n"
"Write the C-contiguous HWC uint8 pixels `src` (height x width x channels, channels 3 or 4; a\n"
"4th channel is ignored) into the C-contiguous CHW uint8 buffer `dst` (3 x height x width),\n"
"mirrored left-right when `flip` is true.");

static PyObject *to_planes(PyObject *self, PyObject *args) {
    Py_buffer src, dst;
    Py_ssize_t h, w;
    int channels, flip;
    (void)self;
    if (!PyArg_ParseTuple(args, "y*w*nnip:to_planes", &src, &dst, &h, &w, &channels, &flip))
        return NULL;
    const char *bad = NULL;
    if (channels != 3 && channels != 4)
        bad = "channels must be 3 or 4";
    else if (h <= 0 || w <= 0)
        bad = "height and width must be positive";
    else if (src.len != h * w * channels)
        bad = "src is not height x width x channels bytes";
    else if (dst.len != 3 * h * w)
        bad = "dst is not 3 x height x width bytes";
    else if (!PyBuffer_IsContiguous(&src, 'C') || !PyBuffer_IsContiguous(&dst, 'C'))
        bad = "src and dst must be C-contiguous";
    if (bad == NULL) {
        Py_BEGIN_ALLOW_THREADS
        split_planes(src.buf, dst.buf, h, w, channels, flip);
        Py_END_ALLOW_THREADS
    }
    PyBuffer_Release(&src);
    PyBuffer_Release(&dst);
    if (bad != NULL) {
        PyErr_SetString(PyExc_ValueError, bad);
        return NULL;
    }
    Py_RETURN_NONE;
}

/* The Arrow C data interface structs (https://arrow.apache.org/docs/format/CDataInterface.html):
 * a stable ABI, declared here rather than pulling in an Arrow header. */
struct ArrowSchema {
    const char *format;
    const char *name;
    const char *metadata;
    int64_t flags;
    int64_t n_children;
    struct ArrowSchema **children;
    struct ArrowSchema *dictionary;
    void (*release)(struct ArrowSchema *);
    void *private_data;
};

struct ArrowArray {
    int64_t length;
    int64_t null_count;
    int64_t offset;
    int64_t n_buffers;
    int64_t n_children;
    const void **buffers;
    struct ArrowArray **children;
    struct ArrowArray *dictionary;
    void (*release)(struct ArrowArray *);
    void *private_data;
};

PyDoc_STRVAR(arrow_to_planes_doc,
"arrow_to_planes(schema, array, dst, height, width, flip) -> bool\n\n"
"Like to_planes, reading the pixels of a Pillow image through the capsules of its\n"
"__arrow_c_array__() (an RGB/RGBX image: fixed_size_list<uint8>[4] per pixel). False, with\n"
"nothing written, when the capsules hold anything else (the caller then copies the slow way).");

static PyObject *arrow_to_planes(PyObject *self, PyObject *args) {
    PyObject *schema_capsule, *array_capsule;
    Py_buffer dst;
    Py_ssize_t h, w;
    int flip;
    (void)self;
    if (!PyArg_ParseTuple(args, "OOw*nnp:arrow_to_planes", &schema_capsule, &array_capsule, &dst, &h, &w, &flip))
        return NULL;
    struct ArrowSchema *schema = PyCapsule_IsValid(schema_capsule, "arrow_schema")
        ? PyCapsule_GetPointer(schema_capsule, "arrow_schema") : NULL;
    struct ArrowArray *array = PyCapsule_IsValid(array_capsule, "arrow_array")
        ? PyCapsule_GetPointer(array_capsule, "arrow_array") : NULL;
    const struct ArrowArray *child = NULL;
    int ok = h > 0 && w > 0 && dst.len == 3 * h * w && PyBuffer_IsContiguous(&dst, 'C')
        && schema != NULL && array != NULL && schema->release != NULL && array->release != NULL
        && schema->format != NULL && strcmp(schema->format, "+w:4") == 0 && schema->n_children == 1
        && schema->children[0]->format != NULL && strcmp(schema->children[0]->format, "C") == 0
        && array->length == h * w && array->offset == 0 && array->null_count == 0 && array->n_children == 1;
    if (ok) {
        child = array->children[0];
        ok = child != NULL && child->n_buffers == 2 && child->buffers[1] != NULL && child->length == 4 * h * w
            && child->null_count == 0;
    }
    if (ok) {
        const unsigned char *src = (const unsigned char *)child->buffers[1] + child->offset;
        Py_BEGIN_ALLOW_THREADS
        split_planes(src, dst.buf, h, w, 4, flip);
        Py_END_ALLOW_THREADS
    }
    PyBuffer_Release(&dst);
    return PyBool_FromLong(ok);
}

PyDoc_STRVAR(entropy_path_doc,
"entropy_path() -> (path, reason, own_usable)\n\n"
"The entropy decoder crop_into and decode_region use when not told: \"own\" (jpegcrop_cells.c, for\n"
"the restart-marker files it takes; libjpeg's for the rest) or \"libjpeg\", and why, one line\n"
"(IMAGENET_SHARDS_ENTROPY=libjpeg turns it off; read once; the hook's self-test). A reason that\n"
"starts with \"error:\" names a bad IMAGENET_SHARDS_ENTROPY. own_usable: whether entropy=\"own\"\n"
"takes the own path (the hook passed its self-test), whatever the default.");

static PyObject *entropy_path(PyObject *self, PyObject *args) {
    const char *reason, *path;
    int usable;
    (void)self;
    (void)args;
    Py_BEGIN_ALLOW_THREADS
    path = entropy_default_path(&reason, &usable);
    Py_END_ALLOW_THREADS
    return Py_BuildValue("(ssN)", path, reason, PyBool_FromLong(usable));
}

PyDoc_STRVAR(entropy_counts_doc,
"entropy_counts() -> dict\n\n"
"Region decodes since the process started: own (the own entropy decoder did it), not_taken (it\n"
"was asked but the file is not one it takes), flagged (it found the data damaged: libjpeg decoded\n"
"it), retried (libjpeg asked for more MCUs than it had decoded: decoded again with libjpeg).");

static PyObject *entropy_counts(PyObject *self, PyObject *args) {
    struct entropy_counts c;
    (void)self;
    (void)args;
    entropy_get_counts(&c);
    return Py_BuildValue("{sl,sl,sl,sl}", "own", c.own, "not_taken", c.not_taken, "flagged", c.flagged,
                         "retried", c.retried);
}

static PyMethodDef methods[] = {
    {"entropy_path", entropy_path, METH_NOARGS, entropy_path_doc},
    {"entropy_counts", entropy_counts, METH_NOARGS, entropy_counts_doc},
    {"arrow_to_planes", arrow_to_planes, METH_VARARGS, arrow_to_planes_doc},
    {"to_planes", to_planes, METH_VARARGS, to_planes_doc},
    {"yuv_crop_into", yuv_crop_into, METH_VARARGS, yuv_crop_into_doc},
    {"header", header, METH_VARARGS, header_doc},
    {"crop_into", (PyCFunction)(void (*)(void))crop_into, METH_VARARGS | METH_KEYWORDS, crop_into_doc},
    {"decode_region", (PyCFunction)(void (*)(void))decode_region, METH_VARARGS | METH_KEYWORDS,
     decode_region_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_jpegcrop",
    "Partial JPEG decoding with libjpeg-turbo, resized and flipped into a batch slot in one call.", -1, methods,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__jpegcrop(void) {
    PyObject *m = PyModule_Create(&module);
    if (m != NULL && PyModule_AddStringConstant(m, "LIBJPEG_TURBO_VERSION",
                                                 Py_STRINGIFY(LIBJPEG_TURBO_VERSION)) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
