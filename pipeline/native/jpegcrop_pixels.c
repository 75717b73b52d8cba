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

static void yuv_row_plain(const uint8_t *restrict y, const uint8_t *restrict cb, const uint8_t *restrict cr, int w,
                          uint8_t *restrict dst, size_t plane, int flip) {
    uint8_t *restrict r = dst, *restrict g = dst + plane, *restrict b = dst + 2 * plane;
    if (flip)
        YUV_ROW(1)
    else
        YUV_ROW(0)
}

#if X86_SIMD
/* The same integers 16 bits wide, 32 pixels a step. Each coefficient above 2^15 is split as
 * k * 2^16 + c with |c| < 2^15, and (k * 2^16 * x + c * x + 2^15) >> 16 = k * x + ((c * x + 2^15) >> 16)
 * exactly, so the products that remain fit pmaddwd's int16 pairs: (c, 2^14) . (x, 2) and, for green,
 * (-22554, 18734) . (u, v) + 2^15. The sums stay within int16 and packus clips to 0..255 as clip255.
 * Why: on the 2-vCPU box (perf, 224 px crops) the compiler's 32-bit loops were ~35 % of the kernel's
 * time; with these the call went from ~130 to ~96 us (busy box). Checked when written against
 * yuv_row_plain on every (Y, Cb, Cr), both flips, nine widths of 1 to 256 (a throwaway harness); the tests
 * compare the kernel with its numpy twin on random planes (test_decode_pixels.py). */
__attribute__((target("avx2"))) static inline __m256i madd_shift(__m256i a, __m256i b, __m256i k) {
    __m256i lo = _mm256_srai_epi32(_mm256_madd_epi16(_mm256_unpacklo_epi16(a, b), k), 16);
    __m256i hi = _mm256_srai_epi32(_mm256_madd_epi16(_mm256_unpackhi_epi16(a, b), k), 16);
    return _mm256_packs_epi32(lo, hi);  /* per 128-bit lane, so the pixel order is kept */
}

__attribute__((target("avx2"))) static void yuv16(const uint8_t *y, const uint8_t *cb, const uint8_t *cr,
                                                  __m256i *r, __m256i *g, __m256i *b) {
    const __m256i c128 = _mm256_set1_epi16(128), two = _mm256_set1_epi16(2), half = _mm256_set1_epi32(32768);
    const __m256i kr = _mm256_set1_epi32((16384 << 16) | 26345);  /* 91881 = 2^16 + 26345 */
    const __m256i kb = _mm256_set1_epi32((16384 << 16) | (uint16_t)-14942);  /* 116130 = 2 * 2^16 - 14942 */
    const __m256i kg = _mm256_set1_epi32((18734 << 16) | (uint16_t)-22554);  /* -46802 = -2^16 + 18734 */
    __m256i yy = _mm256_cvtepu8_epi16(_mm_loadu_si128((const __m128i *)y));
    __m256i u = _mm256_sub_epi16(_mm256_cvtepu8_epi16(_mm_loadu_si128((const __m128i *)cb)), c128);
    __m256i v = _mm256_sub_epi16(_mm256_cvtepu8_epi16(_mm_loadu_si128((const __m128i *)cr)), c128);
    *r = _mm256_add_epi16(_mm256_add_epi16(yy, v), madd_shift(v, two, kr));
    *b = _mm256_add_epi16(_mm256_add_epi16(yy, _mm256_add_epi16(u, u)), madd_shift(u, two, kb));
    __m256i glo = _mm256_srai_epi32(_mm256_add_epi32(_mm256_madd_epi16(_mm256_unpacklo_epi16(u, v), kg), half), 16);
    __m256i ghi = _mm256_srai_epi32(_mm256_add_epi32(_mm256_madd_epi16(_mm256_unpackhi_epi16(u, v), kg), half), 16);
    *g = _mm256_add_epi16(_mm256_sub_epi16(yy, v), _mm256_packs_epi32(glo, ghi));
}

/* 16-bit pixels 0..15 and 16..31 -> 32 clipped bytes in order (reversed when `flip`). */
__attribute__((target("avx2"))) static inline void store32(uint8_t *dst, __m256i a, __m256i b, int flip) {
    __m256i x = _mm256_permute4x64_epi64(_mm256_packus_epi16(a, b), 0xD8);
    if (flip) {
        const __m256i rev = _mm256_setr_epi8(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0,
                                             15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0);
        x = _mm256_permute4x64_epi64(_mm256_shuffle_epi8(x, rev), 0x4E);
    }
    _mm256_storeu_si256((__m256i *)dst, x);
}

__attribute__((target("avx2"))) static void yuv_row_avx2(const uint8_t *restrict y, const uint8_t *restrict cb,
                                                         const uint8_t *restrict cr, int w, uint8_t *restrict dst,
                                                         size_t plane, int flip) {
    int j = 0;
    for (; j + 32 <= w; j += 32) {
        __m256i r0, g0, b0, r1, g1, b1;
        yuv16(y + j, cb + j, cr + j, &r0, &g0, &b0);
        yuv16(y + j + 16, cb + j + 16, cr + j + 16, &r1, &g1, &b1);
        size_t o = flip ? (size_t)(w - j - 32) : (size_t)j;
        store32(dst + o, r0, r1, flip);
        store32(dst + plane + o, g0, g1, flip);
        store32(dst + 2 * plane + o, b0, b1, flip);
    }
    if (j < w) {  /* the last w % 32 pixels: the plain loop on them (flipped, they land at the row's start) */
        size_t o = flip ? 0 : (size_t)j;
        yuv_row_plain(y + j, cb + j, cr + j, w - j, dst + o, plane, flip);
    }
}
#endif

static void yuv_row(const uint8_t *restrict y, const uint8_t *restrict cb, const uint8_t *restrict cr, int w,
                    uint8_t *restrict dst, size_t plane, int flip) {
#if X86_SIMD
    static int avx2 = -1;
    if (avx2 < 0) {
        __builtin_cpu_init();
        avx2 = __builtin_cpu_supports("avx2");
    }
    if (avx2) {
        yuv_row_avx2(y, cb, cr, w, dst, plane, flip);
        return;
    }
#endif
    yuv_row_plain(y, cb, cr, w, dst, plane, flip);
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
    /* 16 pixels a step: four 4 x 4 byte transposes, then a 4 x 4 transpose of their 32-bit words,
     * one 16-byte store per row (the word-by-word stores below cost ~11 % of a 224 px call) */
    for (; j + 16 <= n; j += 16) {
        __m128i a = _mm_shuffle_epi8(_mm_loadu_si128((const __m128i *)(quad + 4 * j)), t);
        __m128i b = _mm_shuffle_epi8(_mm_loadu_si128((const __m128i *)(quad + 4 * j + 16)), t);
        __m128i c = _mm_shuffle_epi8(_mm_loadu_si128((const __m128i *)(quad + 4 * j + 32)), t);
        __m128i d = _mm_shuffle_epi8(_mm_loadu_si128((const __m128i *)(quad + 4 * j + 48)), t);
        __m128i ab0 = _mm_unpacklo_epi32(a, b), ab1 = _mm_unpackhi_epi32(a, b);
        __m128i cd0 = _mm_unpacklo_epi32(c, d), cd1 = _mm_unpackhi_epi32(c, d);
        _mm_storeu_si128((__m128i *)(rows + j), _mm_unpacklo_epi64(ab0, cd0));
        _mm_storeu_si128((__m128i *)(rows + (size_t)n + j), _mm_unpackhi_epi64(ab0, cd0));
        _mm_storeu_si128((__m128i *)(rows + 2 * (size_t)n + j), _mm_unpacklo_epi64(ab1, cd1));
        _mm_storeu_si128((__m128i *)(rows + 3 * (size_t)n + j), _mm_unpackhi_epi64(ab1, cd1));
    }
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
    axis_weights(&p->v, top, top + box_h, hgt, out_h, mem, filter);
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
