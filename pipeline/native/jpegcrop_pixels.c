/* The pixel form's kernel: crop box of YUV 4:2:0 planes -> RGB CHW batch slot (semantics: the header).
 *
 * Four output rows of a plane at a time: the vertical pass of each over the box's columns
 * (resample_column, AVX2), the four lines interleaved as if they were the R, G, B, X of one RGBX
 * row, the turbo path's horizontal pass over that row (resample_row4: two taps per pmaddwd, four
 * rows in one go), the result split back into four rows; then JFIF's inverse of the Y, Cb, Cr rows
 * straight into the slot's R, G, B rows. Vertical first (the turbo path goes horizontal first,
 * Pillow's order) so that the horizontal pass runs on output rows only. Measured on 400 x 300
 * planes, one core: a one-plane horizontal pass per output pixel (SSE4.1, eight taps per pmaddwd
 * and a horizontal add) cost ~240 us per 160 px crop, this ~66 us (2 shared vCPUs; ~95 us before the
 * transposes and the colour loops were vectorised). The weights are the turbo path's
 * (axis_plan) and the sums integers throughout: the same bytes on every machine, and the numpy
 * fallback (train/loader/decode_pixels.py) computes the same integers.
 */
#include "jpegcrop_pixels.h"

#include <stdlib.h>
#include <string.h>

#include "jpegcrop_resample.h"

#include "simd.h"

/* libjpeg's jdcolor.c: FIX(x) = round(x * 2**16) */
#define CR_R 91881
#define CB_B 116130
#define CB_G 22554
#define CR_G 46802

static inline uint8_t clip255(int v) {
    return (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v);
}

/* JFIF's inverse of one row of Y, Cb, Cr into the R, G, B rows (`plane` bytes apart), mirrored when
 * `flip`: one loop per direction, so that the compiler vectorises both (a conditional index did not). */
#define YUV_ROW(FLIP)                                                                 \
    for (int j = 0; j < w; j++) {                                                     \
        int o = (FLIP) ? w - 1 - j : j, yy = y[j], u = cb[j] - 128, v = cr[j] - 128; \
        r[o] = clip255(yy + ((CR_R * v + 32768) >> 16));                              \
        g[o] = clip255(yy + ((-CB_G * u - CR_G * v + 32768) >> 16));                  \
        b[o] = clip255(yy + ((CB_B * u + 32768) >> 16));                              \
    }

VECTOR_CLONES
static void yuv_row(const uint8_t *restrict y, const uint8_t *restrict cb, const uint8_t *restrict cr, int w,
                    uint8_t *restrict dst, size_t plane, int flip) {
    uint8_t *restrict r = dst, *restrict g = dst + plane, *restrict b = dst + 2 * plane;
    if (flip)
        YUV_ROW(1)
    else
        YUV_ROW(0)
}

/* Four lines of n bytes (`stride` apart) -> one row of 4-byte pixels, and back (n pixels): 4 x 4
 * byte transposes (one pshufb each) where SSSE3 is there. */
#if X86_SIMD
__attribute__((target("ssse3"))) static void interleave4(const uint8_t *restrict lines, size_t stride, int n,
                                                         uint8_t *restrict out) {
    const __m128i t = _mm_setr_epi8(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
    int j = 0;
    for (; j + 4 <= n; j += 4) {
        int32_t a, b, c, d;
        memcpy(&a, lines + j, 4);
        memcpy(&b, lines + stride + j, 4);
        memcpy(&c, lines + 2 * stride + j, 4);
        memcpy(&d, lines + 3 * stride + j, 4);
        _mm_storeu_si128((__m128i *)(out + 4 * j), _mm_shuffle_epi8(_mm_setr_epi32(a, b, c, d), t));
    }
    for (; j < n; j++)
        for (int r = 0; r < 4; r++)
            out[4 * j + r] = lines[r * stride + j];
}

__attribute__((target("ssse3"))) static void split4(const uint8_t *restrict quad, int n, uint8_t *restrict rows) {
    const __m128i t = _mm_setr_epi8(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
    int j = 0;
    for (; j + 4 <= n; j += 4) {
        __m128i v = _mm_shuffle_epi8(_mm_loadu_si128((const __m128i *)(quad + 4 * j)), t);
        for (int r = 0; r < 4; r++) {
            int32_t x = _mm_cvtsi128_si32(_mm_srli_si128(v, 0));
            memcpy(rows + (size_t)r * n + j, &x, 4);
            v = _mm_srli_si128(v, 4);
        }
    }
    for (; j < n; j++)
        for (int r = 0; r < 4; r++)
            rows[(size_t)r * n + j] = quad[4 * j + r];
}
#else
static void interleave4(const uint8_t *restrict lines, size_t stride, int n, uint8_t *restrict out) {
    for (int j = 0; j < n; j++)
        for (int r = 0; r < 4; r++)
            out[4 * j + r] = lines[r * stride + j];
}

static void split4(const uint8_t *restrict quad, int n, uint8_t *restrict rows) {
    for (int j = 0; j < n; j++)
        for (int r = 0; r < 4; r++)
            rows[(size_t)r * n + j] = quad[4 * j + r];
}
#endif

struct plane_plan {
    const uint8_t *src;
    int stride, lo, span;
    struct axis h, v;
};

static size_t plan_bytes(double in0, double in1, int out, int filter) {
    return axis_bytes(out, axis_taps(in0, in1, out, filter));
}

static unsigned char *plan_plane(struct plane_plan *p, const uint8_t *src, int w, int hgt, double top, double left,
                                 double box_h, double box_w, int out_h, int out_w, unsigned char *mem, int filter) {
    p->src = src;
    p->stride = w;
    axis_plan(&p->h, left, left + box_w, w, out_w, mem, filter);
    mem += plan_bytes(left, left + box_w, out_w, filter);
    axis_plan(&p->v, top, top + box_h, hgt, out_h, mem, filter);
    mem += plan_bytes(top, top + box_h, out_h, filter);
    p->lo = axis_low(&p->h);
    p->span = axis_high(&p->h) - p->lo;
    return mem;
}

/* Output rows i .. i + n - 1 (n <= 4) of one plane into `rows` (4 x out_w bytes). `lines`: 4 lines
 * of `stride` bytes; `quad`, `quad_out`: 4 x stride + 64 and 4 x out_w bytes. */
static void plane_rows(const struct plane_plan *p, int i, int n, uint8_t *lines, size_t stride, uint8_t *quad,
                       uint8_t *quad_out, uint8_t *rows) {
    for (int r = 0; r < 4; r++) {
        int k = i + (r < n ? r : n - 1);
        resample_column(p->src + (size_t)p->v.first[k] * p->stride + p->lo, (size_t)p->stride, p->v.count[k],
                        p->v.coef + (size_t)k * p->v.taps, lines + r * stride, (size_t)p->span);
    }
    interleave4(lines, stride, p->span, quad);
    resample_row4(quad, p->lo, &p->h, quad_out);
    split4(quad_out, p->h.out, rows);
}

int yuv_crop_to_planes(const uint8_t *payload, int width, int height, double top, double left, double box_h,
                       double box_w, uint8_t *dst, int out_h, int out_w, int flip, int filter) {
    int cw = (width + 1) / 2, ch = (height + 1) / 2;
    size_t axes = plan_bytes(left, left + box_w, out_w, filter) + plan_bytes(top, top + box_h, out_h, filter)
                  + plan_bytes(left / 2, (left + box_w) / 2, out_w, filter)
                  + plan_bytes(top / 2, (top + box_h) / 2, out_h, filter);
    size_t stride = (size_t)width + 64, quad = 4 * stride + 64, rows = 4 * (size_t)out_w;
    unsigned char *mem = malloc(axes + 4 * stride + quad + rows * 4);
    if (mem == NULL)
        return -1;
    struct plane_plan y, cb, cr;
    const uint8_t *cb_src = payload + (size_t)width * height, *cr_src = cb_src + (size_t)cw * ch;
    unsigned char *next = plan_plane(&y, payload, width, height, top, left, box_h, box_w, out_h, out_w, mem, filter);
    plan_plane(&cb, cb_src, cw, ch, top / 2, left / 2, box_h / 2, box_w / 2, out_h, out_w, next, filter);
    cr = cb;
    cr.src = cr_src;
    uint8_t *lines = mem + axes, *q = lines + 4 * stride, *q_out = q + quad, *yr = q_out + rows;
    uint8_t *ur = yr + rows, *vr = ur + rows;
    memset(lines, 0, 4 * stride + quad);
    size_t plane = (size_t)out_h * out_w;
    for (int i = 0; i < out_h; i += 4) {
        int n = out_h - i < 4 ? out_h - i : 4;
        plane_rows(&y, i, n, lines, stride, q, q_out, yr);
        plane_rows(&cb, i, n, lines, stride, q, q_out, ur);
        plane_rows(&cr, i, n, lines, stride, q, q_out, vr);
        for (int r = 0; r < n; r++)
            yuv_row(yr + (size_t)r * out_w, ur + (size_t)r * out_w, vr + (size_t)r * out_w, out_w,
                    dst + (size_t)(i + r) * out_w, plane, flip);
    }
    free(mem);
    return 0;
}
