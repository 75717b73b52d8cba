/* Lossless JPEG rewrite for prepare-shards: restart markers on a grid of MCU rows and columns.
 *
 * What `jpegtran -optimize -restart 1 -copy all` does, in process (a subprocess per image would
 * cost more than the rewrite). The DCT coefficients, quantization tables and sampling factors are
 * copied untouched, so every decoder produces exactly the pixels of the original (tested); what
 * changes is the entropy coding: sequential (a progressive original becomes baseline), standard
 * Huffman tables, and restart markers every `interval_mcus(MCUs per row)` MCUs: a grid of ~32
 * pixel wide cells, one MCU row high. The loader (_jpegcrop.c) hands libjpeg only
 * the cells around a crop, so rows above and columns beside it are never entropy-decoded
 * (docs/loader.md). APPn and COM segments (EXIF, ICC...) are kept, as a pass-through keeps them.
 *
 * Reading the coefficients entropy-decodes every block, so a rewrite that succeeds is also a
 * validation as strong as a full decode -- stronger than Pillow's: libjpeg only *warns* about
 * corrupt entropy-coded data (a bad Huffman code, a premature end of a segment, a lost restart
 * marker) and pads with grey, and Pillow drops its warnings. Here any error, and any warning but
 * the benign ones (about metadata: an unknown JFIF revision or Adobe transform code, a bad ICC
 * marker), declines with libjpeg's message, and `check` reads the same way (a 1/8-scaled decode)
 * without writing anything. The GIL is released while libjpeg runs.
 *
 * Beside it, `yuv420`: prepare-shards derive's RGB -> YUV 4:2:0 encoder (jpegtran_yuv.c), here because
 * this is prepare's one extension.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jpeglib.h>
#include <jerror.h>

#include "jpeg_errors.h"  /* the error manager: stops at errors and at warnings about the data */
#include "jpegtran_yuv.h"  /* the pixel form's encoder (prepare-shards derive) */

/* (None, None) or ("error" | "warning", libjpeg's message): why libjpeg stopped. */
static PyObject *verdict(int ok, const struct jpeg_stop *err) {
    if (ok)
        return Py_BuildValue("(OO)", Py_None, Py_None);
    return Py_BuildValue("(ss)", err->warning ? "warning" : "error", err->message);
}

/* Output memory, written by libjpeg through a pointer: kept outside the setjmp frame's locals. */
struct output {
    unsigned char *data;
    unsigned long size;
};

/* The restart interval, in MCUs, for an image `per_row` MCUs of `mcu_width` pixels wide: cells
 * of ~32 pixels, i.e. the divisor of `per_row` closest to 32 / mcu_width (ties: the larger) within
 * half to twice that, so the intervals tile every MCU row exactly; else the whole row. Finer cells
 * let a crop skip more, but each costs a marker, byte padding and a DC restart (~5-10 bytes).
 * Measured on the ImageNet-like set (docs/benchmarks.md): 64 -> 32 px cells, +0.77 % bytes and
 * 4.3 % fewer instructions per 224 px crop (the loader's Huffman decoding -7 %); 16 px cells, +2.2 %
 * bytes for 6.1 %. */
#define CELL_PIXELS 32
static int pick_interval(int per_row, int mcu_width) {
    int target = mcu_width >= CELL_PIXELS ? 1 : CELL_PIXELS / mcu_width, best = 0;
    if (per_row <= target)
        return per_row < 1 ? 1 : per_row;
    for (int d = (target + 1) / 2; d <= 2 * target; d++)
        if (per_row % d == 0 && (best == 0 || abs(d - target) <= abs(best - target)))
            best = d;
    return best ? best : per_row;
}

PyDoc_STRVAR(interval_mcus_doc,
"interval_mcus(mcus_per_row, mcu_width) -> int\n\n"
"The restart interval (in MCUs) prepare-shards writes for an image that many MCUs (of mcu_width\n"
"pixels: 16 at 4:2:0) wide.");

static PyObject *interval_mcus(PyObject *self, PyObject *args) {
    int per_row, mcu_width;
    (void)self;
    if (!PyArg_ParseTuple(args, "ii:interval_mcus", &per_row, &mcu_width))
        return NULL;
    if (per_row < 1 || mcu_width < 1) {
        PyErr_SetString(PyExc_ValueError, "mcus_per_row and mcu_width must be positive");
        return NULL;
    }
    return PyLong_FromLong(pick_interval(per_row, mcu_width));
}

static int is_marker(const jpeg_saved_marker_ptr m, int code, const char *tag, unsigned int n) {
    return m->marker == code && m->data_length >= n && memcmp(m->data, tag, n) == 0;
}

PyDoc_STRVAR(restart_rows_doc,
"restart_rows(data) -> (bytes or None, kind, message)\n\n"
"The JPEG rewritten losslessly (same coefficients: the same pixels) as baseline with standard\n"
"Huffman tables and restart markers every interval_mcus(MCUs per row) MCUs, APPn/COM segments\n"
"kept. None: declined, with kind \"error\" or \"warning\" and libjpeg's message (not a JPEG\n"
"libjpeg reads without an error or a warning about its data); else kind and message are None.");

static PyObject *restart_rows(PyObject *self, PyObject *args) {
    Py_buffer buf;
    struct jpeg_decompress_struct src;
    struct jpeg_compress_struct dst;
    struct jpeg_stop err;
    struct output *out;
    volatile int ok = 0;
    (void)self;
    if (!PyArg_ParseTuple(args, "y*:restart_rows", &buf))
        return NULL;
    out = calloc(1, sizeof(*out));
    if (out == NULL) {
        PyBuffer_Release(&buf);
        return PyErr_NoMemory();
    }
    Py_BEGIN_ALLOW_THREADS
    memset(&src, 0, sizeof(src));  /* so the destroy calls are safe whatever failed */
    memset(&dst, 0, sizeof(dst));
    src.err = dst.err = jpeg_stop_init(&err);
    if (buf.len < 4)
        snprintf(err.message, sizeof(err.message), "%s", "not a JPEG (under 4 bytes)");
    else if (setjmp(err.jump) == 0) {
        jpeg_create_decompress(&src);
        jpeg_mem_src(&src, buf.buf, (unsigned long)buf.len);
        jpeg_save_markers(&src, JPEG_COM, 0xFFFF);
        for (int m = 0; m < 16; m++)
            jpeg_save_markers(&src, JPEG_APP0 + m, 0xFFFF);
        jpeg_read_header(&src, TRUE);
        jvirt_barray_ptr *coefficients = jpeg_read_coefficients(&src);
        jpeg_create_compress(&dst);
        jpeg_copy_critical_parameters(&src, &dst);
        dst.optimize_coding = FALSE;  /* TRUE: ~3 % smaller files, but ~2.8 ms instead of ~1.35 ms a 94 KB image */
        int mcu_width = 8 * src.max_h_samp_factor;
        dst.restart_interval = (unsigned int)pick_interval(((int)src.image_width + mcu_width - 1) / mcu_width,
                                                           mcu_width);
        jpeg_mem_dest(&dst, &out->data, &out->size);
        jpeg_write_coefficients(&dst, coefficients);
        for (jpeg_saved_marker_ptr m = src.marker_list; m != NULL; m = m->next) {
            /* libjpeg wrote its own JFIF / Adobe header where it writes one: not twice */
            if (dst.write_JFIF_header && is_marker(m, JPEG_APP0, "JFIF\0", 5))
                continue;
            if (dst.write_Adobe_marker && is_marker(m, JPEG_APP0 + 14, "Adobe", 5))
                continue;
            jpeg_write_marker(&dst, m->marker, m->data, m->data_length);
        }
        jpeg_finish_compress(&dst);
        jpeg_finish_decompress(&src);  /* reads to the end-of-image marker: a cut file warns */
        ok = 1;
    }
    jpeg_destroy_compress(&dst);
    jpeg_destroy_decompress(&src);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&buf);
    PyObject *data = ok ? PyBytes_FromStringAndSize((const char *)out->data, (Py_ssize_t)out->size)
                        : Py_NewRef(Py_None);
    free(out->data);
    free(out);
    PyObject *why = data == NULL ? NULL : verdict(ok, &err);
    if (why == NULL) {
        Py_XDECREF(data);
        return NULL;
    }
    PyObject *result = Py_BuildValue("(NOO)", data, PyTuple_GET_ITEM(why, 0), PyTuple_GET_ITEM(why, 1));
    Py_DECREF(why);
    return result;
}

PyDoc_STRVAR(check_doc,
"check(data) -> (kind, message)\n\n"
"Entropy-decode every block (a 1/8-scaled decode: next to no IDCT or colour work, no coefficient\n"
"arrays), writing nothing: (None, None) when libjpeg reads it without an error or a warning\n"
"about its data, else (\"error\" | \"warning\", message).");

static PyObject *check(PyObject *self, PyObject *args) {
    Py_buffer buf;
    struct jpeg_decompress_struct src;
    struct jpeg_stop err;
    JSAMPLE *volatile row = NULL;
    volatile int ok = 0;
    (void)self;
    if (!PyArg_ParseTuple(args, "y*:check", &buf))
        return NULL;
    Py_BEGIN_ALLOW_THREADS
    memset(&src, 0, sizeof(src));
    src.err = jpeg_stop_init(&err);
    if (buf.len < 4)
        snprintf(err.message, sizeof(err.message), "%s", "not a JPEG (under 4 bytes)");
    else if (setjmp(err.jump) == 0) {
        jpeg_create_decompress(&src);
        jpeg_mem_src(&src, buf.buf, (unsigned long)buf.len);
        jpeg_read_header(&src, TRUE);
        src.scale_num = 1;
        src.scale_denom = 8;
        jpeg_start_decompress(&src);
        row = malloc((size_t)src.output_width * (size_t)src.output_components);
        if (row == NULL) {
            snprintf(err.message, sizeof(err.message), "%s", "out of memory");
        } else {
            JSAMPROW rows[1] = {row};
            while (src.output_scanline < src.output_height)
                jpeg_read_scanlines(&src, rows, 1);
            jpeg_finish_decompress(&src);  /* reads to the end-of-image marker: a cut file warns */
            ok = 1;
        }
    }
    jpeg_destroy_decompress(&src);
    free(row);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&buf);
    return verdict(ok, &err);
}

PyDoc_STRVAR(yuv420_doc,
"yuv420(rgb, width, height) -> bytes\n\n"
"The KEY.yuv420 payload (docs/format.md, 'Pixel form') of a height x width RGB image given as\n"
"height * width * 3 packed bytes (a C-contiguous H x W x 3 uint8 array): the bytes of\n"
"pipeline/format/pixels.py's encode, which is the reference. ValueError if the sizes disagree.");

static PyObject *yuv420(PyObject *self, PyObject *args) {
    Py_buffer buf;
    int width, height;
    (void)self;
    if (!PyArg_ParseTuple(args, "y*ii:yuv420", &buf, &width, &height))
        return NULL;
    /* width <= len / 3 / height first: then width * height * 3 cannot overflow */
    if (width < 1 || height < 1 || width > buf.len / 3 / height || buf.len != (Py_ssize_t)width * height * 3) {
        PyErr_Format(PyExc_ValueError, "yuv420: %zd bytes are not a %d x %d RGB image (height * width * 3 bytes)",
                     buf.len, width, height);
        PyBuffer_Release(&buf);
        return NULL;
    }
    PyObject *out = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)yuv420_size(width, height));
    uint8_t *scratch = malloc(4 * (size_t)width);
    if (out == NULL || scratch == NULL) {
        Py_XDECREF(out);
        free(scratch);
        PyBuffer_Release(&buf);
        return out == NULL ? NULL : PyErr_NoMemory();
    }
    uint8_t *dst = (uint8_t *)PyBytes_AS_STRING(out);
    Py_BEGIN_ALLOW_THREADS
    rgb_to_yuv420(buf.buf, width, height, dst, scratch);
    Py_END_ALLOW_THREADS
    free(scratch);
    PyBuffer_Release(&buf);
    return out;
}

static PyMethodDef methods[] = {
    {"restart_rows", restart_rows, METH_VARARGS, restart_rows_doc},
    {"interval_mcus", interval_mcus, METH_VARARGS, interval_mcus_doc},
    {"check", check, METH_VARARGS, check_doc},
    {"yuv420", yuv420, METH_VARARGS, yuv420_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_jpegtran",
    "Lossless JPEG rewrite with restart markers on a grid of MCU rows and columns (libjpeg-turbo); the pixel "
    "form's RGB -> YUV 4:2:0 encoder.",
    -1, methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__jpegtran(void) {
    return PyModule_Create(&module);
}
