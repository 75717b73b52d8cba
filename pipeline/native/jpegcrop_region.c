/* Decoding only the rows and columns of a JPEG a crop needs, with libjpeg-turbo.
 *
 * Pillow cannot reach these libjpeg-turbo calls:
 *   - entering at restart markers (jpegcrop_entry.c): on prepare-shards' grid, libjpeg is handed
 *     a JPEG made of only the cells around the region, so rows above and columns beside it are not
 *     even entropy-decoded;
 *   - jpeg_skip_scanlines: otherwise rows above the region are entropy-decoded (baseline JPEG has no
 *     row index) but never IDCT'd, upsampled or colour-converted;
 *   - jpeg_crop_scanline: only the iMCU columns that hold the region are IDCT'd and converted;
 *   - stopping after the region's last row (jpeg_abort_decompress): rows below are not decoded;
 *   - DCT-domain scaling by num/8;
 *   - output straight into RGBX.
 * Errors and warnings: libjpeg's error ends the decode (REGION_ERROR); a warning about the data
 * (jpeg_errors.h: libjpeg pads a damaged stream with grey and only warns) ends it
 * too, as REGION_CORRUPT: the caller counts a bad sample. Metadata warnings are ignored. Anything
 * unusual (grayscale, CMYK/YCCK) is declined, never guessed at. And crop_to_planes: a crop box to
 * its CHW batch slot, region decode plus the resampler (jpegcrop_resample.c). No Python here: the
 * caller releases the GIL around these calls.
 */
#include "jpegcrop_region.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "jpeg_errors.h"
#include "jpegcrop_entry.h"
#include "jpegcrop_resample.h"

/* What libjpeg's stop means here: a warning about the data is a corrupt sample, anything else an error. */
static int stopped(const struct region *r) {
    if (r->own.retry)
        return REGION_RETRY;
    return r->err.warning ? REGION_CORRUPT : REGION_ERROR;
}

int region_start(struct region *r, const unsigned char *data, size_t size, int num, const int *cells,
                 int left, int top, int right, int bottom, int fast, int entropy) {
    memset(r, 0, sizeof(*r));  /* so region_end is safe whatever failed */
    r->cinfo.err = jpeg_stop_init(&r->err);
    if (size < 4 || data[0] != 0xFF || data[1] != 0xD8)
        return REGION_DECLINED;
    if (setjmp(r->err.jump))
        return stopped(r);
    size_t entry_size = 0;
    int x_px = 0, y_px = 0;
    if (cells != NULL)
        r->entry = build_entry(data, size, cells[0], cells[1], cells[2], cells[3], &entry_size, &x_px, &y_px);
    jpeg_create_decompress(&r->cinfo);
    if (r->entry != NULL) {
        r->x_skip = x_px / 8 * num;  /* whole: intervals start at multiples of 8 pixels */
        r->y_skip = y_px / 8 * num;
        jpeg_mem_src(&r->cinfo, r->entry, (unsigned long)entry_size);
    } else {
        jpeg_mem_src(&r->cinfo, data, (unsigned long)size);
    }
    jpeg_read_header(&r->cinfo, TRUE);
    if (r->cinfo.num_components != 3 ||
        (r->cinfo.jpeg_color_space != JCS_YCbCr && r->cinfo.jpeg_color_space != JCS_RGB))
        return REGION_DECLINED;
    r->cinfo.out_color_space = JCS_EXT_RGBX;
    r->cinfo.scale_num = (unsigned int)num;
    r->cinfo.scale_denom = 8;
    r->cinfo.dct_method = fast ? JDCT_IFAST : JDCT_ISLOW;
    r->cinfo.do_fancy_upsampling = fast ? FALSE : TRUE;
    jpeg_start_decompress(&r->cinfo);
    int W = (int)r->cinfo.output_width, H = (int)r->cinfo.output_height;
    left -= r->x_skip;  /* coordinates of the stream decoded (the entry rectangle) */
    right -= r->x_skip;
    top -= r->y_skip;
    bottom -= r->y_skip;
    left = left < 0 ? 0 : left;
    top = top < 0 ? 0 : top;
    right = right > W ? W : right;
    bottom = bottom > H ? H : bottom;
    if (left >= right || top >= bottom)
        return REGION_DECLINED;
    JDIMENSION xoff = (JDIMENSION)left, width = (JDIMENSION)(right - left);
    if (xoff > 0 || width < r->cinfo.output_width)
        jpeg_crop_scanline(&r->cinfo, &xoff, &width);  /* widens to whole iMCU columns */
    r->x = (int)xoff + r->x_skip;
    r->width = (int)width;
    r->y_stream = top;
    r->y = top + r->y_skip;
    r->rows = bottom - top;
    entropy_begin(r, entropy);
    return REGION_OK;
}

int region_read(struct region *r, unsigned char *pixels, size_t stride) {
    if (setjmp(r->err.jump))
        return stopped(r);
    if (r->y_stream > 0)
        jpeg_skip_scanlines(&r->cinfo, (JDIMENSION)r->y_stream);
    JSAMPROW ptrs[16];
    int end = r->y_stream + r->rows;
    while ((int)r->cinfo.output_scanline < end) {
        int done = (int)r->cinfo.output_scanline - r->y_stream;
        int n = end - (int)r->cinfo.output_scanline;
        n = n > 16 ? 16 : n;
        for (int i = 0; i < n; i++)
            ptrs[i] = pixels + (size_t)(done + i) * stride;
        jpeg_read_scanlines(&r->cinfo, ptrs, (JDIMENSION)n);
    }
    jpeg_abort_decompress(&r->cinfo);  /* rows below are never decoded */
    return REGION_OK;
}

void region_end(struct region *r) {
    jpeg_destroy_decompress(&r->cinfo);
    free(r->entry);
    r->entry = NULL;
}

/* Per-thread scratch memory, kept between calls: a fresh ~0.5 MB block per crop would cost its page
 * faults every time. Grows to what the largest crop needed (a few MB at most), never shrinks. */
struct arena {
    unsigned char *data;
    size_t size;
};

static _Thread_local struct arena axes_memory, pixel_memory;

static unsigned char *arena_get(struct arena *a, size_t size) {
    if (size > a->size) {
        free(a->data);
        a->data = malloc(size);
        a->size = a->data != NULL ? size : 0;
    }
    return a->data;
}

/* DCT scale num/8 like Pillow's draft: the largest of 1/8, 1/4, 1/2 that keeps the crop at least
 * the output size, else 8/8 (decode.py's _dct_reduction is the same rule). */
static int auto_scale(double w, double h, int out_w, int out_h) {
    double k = fmin(w / out_w, h / out_h);
    return k >= 8 ? 1 : k >= 4 ? 2 : k >= 2 ? 4 : 8;
}

static double thread_cpu_seconds(void) {
    struct timespec t;
    return clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t) == 0 ? t.tv_sec + t.tv_nsec * 1e-9 : 0.0;
}

int crop_to_planes(const unsigned char *data, size_t size, double top, double left, double height, double width,
                unsigned char *dst, int out_h, int out_w, int flip, int restarts, int num, int entropy,
                char *message, double *times, int filter) {
    double t0 = times != NULL ? thread_cpu_seconds() : 0.0;
    int W, H, comps;
    if (!jpeg_frame_size(data, size, &W, &H, &comps) || comps != 3)
        return REGION_DECLINED;
    if (num == 0)
        num = auto_scale(width, height, out_w, out_h);
    double f = num / 8.0;
    int Ws = (W * num + 7) / 8, Hs = (H * num + 7) / 8;  /* libjpeg's scaled size: rounded up */
    struct axis h, v;
    int ht = axis_taps(left * f, (left + width) * f, out_w, filter);
    int vt = axis_taps(top * f, (top + height) * f, out_h, filter);
    size_t hb = axis_bytes(out_w, ht);
    unsigned char *mem = arena_get(&axes_memory, hb + axis_bytes(out_h, vt));
    if (mem == NULL)
        return REGION_NO_MEMORY;
    axis_plan(&h, left * f, (left + width) * f, Ws, out_w, mem, filter);
    axis_plan(&v, top * f, (top + height) * f, Hs, out_h, mem + hb, filter);
    int x0 = axis_low(&h), x1 = axis_high(&h), y0 = axis_low(&v), y1 = axis_high(&v);
    if (x0 >= x1 || y0 >= y1)
        return REGION_DECLINED;
    /* exact at full size: the scaled pixels' footprint, rounded outwards */
    int cells[4] = {x0 * 8 / num, y0 * 8 / num, (x1 * 8 + num - 1) / num, (y1 * 8 + num - 1) / num};
    struct region r;
    int status;
    size_t stride, pixels;
    unsigned char *buf;
    for (;;) {
        status = region_start(&r, data, size, num, restarts ? cells : NULL, x0 - 8, y0, x1 + 8, y1, 0, entropy);
        if (status == REGION_OK && (r.x > x0 || r.x + r.width < x1 || r.y > y0 || r.y + r.rows < y1))
            status = REGION_DECLINED;  /* the header's size is not the frame's: not ours to guess */
        stride = (size_t)r.width * 4;
        pixels = stride * r.rows + 4 * (size_t)ht + 64;
        buf = status == REGION_OK ? arena_get(&pixel_memory, pixels + resample_scratch(&h, &v)) : NULL;
        if (status == REGION_OK && buf == NULL)
            status = REGION_NO_MEMORY;
        if (status == REGION_OK)
            status = region_read(&r, buf, stride);
        if (status != REGION_RETRY)
            break;
        region_end(&r);  /* the own entropy decoder ran short: libjpeg's path from the start */
        entropy_count_retry();
        entropy = ENTROPY_LIBJPEG;
    }
    double t1 = times != NULL ? thread_cpu_seconds() : 0.0;
    if (status == REGION_OK)
        resample_planes(buf, stride, r.x, r.y, &h, &v, buf + pixels, dst, flip);
    if (times != NULL) {  /* CPU seconds: the header, geometry and region decode; the resample */
        times[0] += t1 - t0;
        times[1] += thread_cpu_seconds() - t1;
    }
    if (status == REGION_ERROR || status == REGION_CORRUPT)
        memcpy(message, r.err.message, JMSG_LENGTH_MAX);
    region_end(&r);
    return status;
}

