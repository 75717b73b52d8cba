/* The resampler (bilinear or bicubic) of _jpegcrop.crop_into, and the HWC -> CHW split (semantics: the header).
 *
 * Why our own and not Pillow's: crop_into decodes, resizes and writes the batch slot in one C call,
 * with no Pillow image, Python object or copy per sample in between. Measured per 224 px crop on the
 * ImageNet-like set (docs/benchmarks.md): Pillow-SIMD's resize plus the copy into the slot cost
 * ~150 us with their Python glue, this ~60-70 us (horizontal pass: SSE4.1, two taps per pmaddwd;
 * vertical pass and split: loops the compiler vectorises, AVX2 clones on x86-64).
 */
#include "jpegcrop_resample.h"

#include <math.h>
#include <string.h>

#include "simd.h"

static double triangle(double x) {
    x = x < 0 ? -x : x;
    return x < 1.0 ? 1.0 - x : 0.0;
}

/* Pillow's bicubic_filter (Resample.c): Keys' cubic convolution with a = -0.5, support 2. */
static double cubic(double x) {
    const double a = -0.5;
    x = x < 0 ? -x : x;
    if (x < 1.0)
        return ((a + 2.0) * x - (a + 3.0)) * x * x + 1;
    if (x < 2.0)
        return (((x - 5) * x + 8) * x - 4) * a;
    return 0.0;
}

static double filter_value(int filter, double x) {
    return filter == RESAMPLE_BICUBIC ? cubic(x) : triangle(x);
}

/* The filter's support in input pixels: its own (triangle 1, cubic 2) times the filter scale. */
static double filter_support(double in0, double in1, int out, int filter) {
    double scale = (in1 - in0) / out;
    return (filter == RESAMPLE_BICUBIC ? 2.0 : 1.0) * (scale < 1.0 ? 1.0 : scale);
}

int axis_taps(double in0, double in1, int out, int filter) {
    int ksize = (int)ceil(filter_support((float)in0, (float)in1, out, filter)) * 2 + 1;
    return (ksize + 3) & ~3;
}

size_t axis_bytes(int out, int taps) {
    return (size_t)out * (2 * sizeof(int) + (size_t)taps * sizeof(int16_t)) + (size_t)(out + 1) * taps * 8 + 32;
}

/* lanes[((j * taps / 2) + q) * 8 ...]: 4 x the pair of weights 2q, 2q+1 of pixel 2j, then of pixel 2j+1 */
static void axis_lanes(struct axis *a) {
    for (int j = 0; 2 * j + 1 < a->out; j++)
        for (int q = 0; q < a->taps / 2; q++)
            for (int lane = 0; lane < 2; lane++) {
                const int16_t *k = a->coef + (size_t)(2 * j + lane) * a->taps + 2 * q;
                int32_t pair = (int32_t)(((uint32_t)(uint16_t)k[1] << 16) | (uint16_t)k[0]);
                for (int c = 0; c < 4; c++)
                    a->lanes[((size_t)j * (a->taps / 2) + q) * 8 + 4 * lane + c] = pair;
            }
}

void axis_weights(struct axis *a, double in0_d, double in1_d, int in_size, int out, void *mem, int filter) {
    /* Pillow takes the box as C floats */
    double in0 = (float)in0_d, in1 = (float)in1_d;
    double scale = (in1 - in0) / out, filterscale = scale < 1.0 ? 1.0 : scale;
    double support = filter_support(in0, in1, out, filter), weights[64];
    a->out = out;
    a->taps = axis_taps(in0_d, in1_d, out, filter);
    a->first = mem;
    a->count = a->first + out;
    a->coef = (int16_t *)(a->count + out);
    a->lanes = (int32_t *)(((uintptr_t)(a->coef + (size_t)out * a->taps) + 31) & ~(uintptr_t)31);
    memset(a->coef, 0, (size_t)out * a->taps * sizeof(int16_t));
    int ksize = (int)ceil(support) * 2 + 1;
    for (int i = 0; i < out; i++) {
        double center = in0 + (i + 0.5) * scale, ww = 0.0, ss = 1.0 / filterscale;
        int lo = (int)(center - support + 0.5), hi = (int)(center + support + 0.5);
        lo = lo < 0 ? 0 : lo;
        hi = hi > in_size ? in_size : hi;
        int n = hi - lo;
        n = n > ksize ? ksize : n < 0 ? 0 : n;
        double *w = ksize <= 64 ? weights : NULL;
        int16_t *k = a->coef + (size_t)i * a->taps;
        for (int x = 0; x < n; x++) {
            double v = filter_value(filter, (x + lo - center + 0.5) * ss);
            if (w != NULL)
                w[x] = v;
            ww += v;
        }
        for (int x = 0; x < n; x++) {
            double v = w != NULL ? w[x] : filter_value(filter, (x + lo - center + 0.5) * ss);
            if (ww != 0.0)
                v /= ww;
            /* |v| < 2 (a cut cubic renormalised stays near 1): fits int16 at 14 bits */
            k[x] = (int16_t)(v < 0 ? -0.5 + v * (1 << RESAMPLE_BITS) : 0.5 + v * (1 << RESAMPLE_BITS));
        }
        a->first[i] = lo;
        a->count[i] = n;
    }
}

void axis_plan(struct axis *a, double in0, double in1, int in_size, int out, void *mem, int filter) {
    axis_weights(a, in0, in1, in_size, out, mem, filter);
    axis_lanes(a);
}

int axis_low(const struct axis *a) {
    int lo = a->first[0];
    for (int i = 1; i < a->out; i++)
        lo = a->first[i] < lo ? a->first[i] : lo;
    return lo;
}

int axis_high(const struct axis *a) {
    int hi = 0;
    for (int i = 0; i < a->out; i++)
        hi = a->first[i] + a->count[i] > hi ? a->first[i] + a->count[i] : hi;
    return hi;
}

size_t resample_scratch(const struct axis *h, const struct axis *v) {
    size_t rows = (size_t)(axis_high(v) - axis_low(v)), row = (size_t)h->out * 4;
    return rows * row + row + 64;
}

static inline uint8_t clip8(int32_t v) {
    v >>= RESAMPLE_BITS;
    return (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v);
}

/* One row, horizontally: output pixel i = the sum of the row's pixels first[i] - x0 ... times its
 * weights, in steps of 4 taps, or 2 for the last one or two (the padding weighs 0). Portable version. */
static void hrow_plain(const uint8_t *row, int x0, const struct axis *h, uint8_t *out) {
    for (int i = 0; i < h->out; i++) {
        const uint8_t *p = row + 4 * (size_t)(h->first[i] - x0);
        const int16_t *k = h->coef + (size_t)i * h->taps;
        int n = (h->count[i] + 1) & ~1;
        int32_t r = 1 << (RESAMPLE_BITS - 1), g = r, b = r, x = r;
        for (int t = 0; t < n; t++) {
            r += p[4 * t] * k[t];
            g += p[4 * t + 1] * k[t];
            b += p[4 * t + 2] * k[t];
            x += p[4 * t + 3] * k[t];
        }
        out[4 * i] = clip8(r);
        out[4 * i + 1] = clip8(g);
        out[4 * i + 2] = clip8(b);
        out[4 * i + 3] = clip8(x);
    }
}

/* One output row, vertically: the sum of `n` rows of `width` bytes, `row_bytes` apart, with weights k. */
static void vrow_plain(const uint8_t *rows, size_t row_bytes, int n, const int16_t *k, uint8_t *out, size_t width) {
    for (size_t j = 0; j < width; j++) {
        int32_t acc = 1 << (RESAMPLE_BITS - 1);
        for (int t = 0; t < n; t++)
            acc += rows[(size_t)t * row_bytes + j] * k[t];
        out[j] = clip8(acc);
    }
}

#if X86_SIMD
/* The same sums with SSE4.1: the bytes of two neighbouring pixels are paired per channel
 * (R0 R1 G0 G1 ...), widened to 16 bits and multiplied-and-added with the pair of weights. */
__attribute__((target("sse4.1"))) static void hrow_sse41(const uint8_t *row, int x0, const struct axis *h,
                                                         uint8_t *out) {
    const __m128i pair = _mm_setr_epi8(0, 4, 1, 5, 2, 6, 3, 7, 8, 12, 9, 13, 10, 14, 11, 15);
    for (int i = 0; i < h->out; i++) {
        const uint8_t *p = row + 4 * (size_t)(h->first[i] - x0);
        const int16_t *k = h->coef + (size_t)i * h->taps;
        int n = h->count[i];
        __m128i acc = _mm_set1_epi32(1 << (RESAMPLE_BITS - 1));
        for (int t = 0; t < n; t += 4) {
            int32_t k01, k23;
            memcpy(&k01, k + t, 4);
            if (n - t <= 2) {  /* the last one or two taps */
                __m128i px = _mm_shuffle_epi8(_mm_loadl_epi64((const __m128i *)(p + 4 * t)), pair);
                acc = _mm_add_epi32(acc, _mm_madd_epi16(_mm_cvtepu8_epi16(px), _mm_set1_epi32(k01)));
                break;
            }
            memcpy(&k23, k + t + 2, 4);
            __m128i px = _mm_shuffle_epi8(_mm_loadu_si128((const __m128i *)(p + 4 * t)), pair);
            acc = _mm_add_epi32(acc, _mm_madd_epi16(_mm_cvtepu8_epi16(px), _mm_set1_epi32(k01)));
            acc = _mm_add_epi32(acc, _mm_madd_epi16(_mm_cvtepu8_epi16(_mm_srli_si128(px, 8)), _mm_set1_epi32(k23)));
        }
        acc = _mm_srai_epi32(acc, RESAMPLE_BITS);
        acc = _mm_packus_epi16(_mm_packs_epi32(acc, acc), acc);
        int32_t v = _mm_cvtsi128_si32(acc);
        memcpy(out + 4 * i, &v, 4);
    }
}

/* hrow_sse41 for two output pixels at a time, one per 128-bit lane. */
__attribute__((target("avx2"))) static void hrow_avx2(const uint8_t *row, int x0, const struct axis *h,
                                                      uint8_t *restrict out) {
    const __m256i pair = _mm256_setr_epi8(0, 4, 1, 5, 2, 6, 3, 7, 8, 12, 9, 13, 10, 14, 11, 15,
                                          0, 4, 1, 5, 2, 6, 3, 7, 8, 12, 9, 13, 10, 14, 11, 15);
    const __m256i zero = _mm256_setzero_si256(), half = _mm256_set1_epi32(1 << (RESAMPLE_BITS - 1));
    const __m256i gather = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
    const int *first = h->first, *count = h->count, size = h->out, step = h->taps / 2;
    const __m256i *k = (const __m256i *)h->lanes;
    const uint8_t *base = row - 4 * (ptrdiff_t)x0;
    int i = 0;
    for (; i + 1 < size; i += 2, k += step) {
        const uint8_t *pa = base + 4 * (ptrdiff_t)first[i], *pb = base + 4 * (ptrdiff_t)first[i + 1];
        int n = count[i] > count[i + 1] ? count[i] : count[i + 1];
        __m256i acc = half;
        const __m256i *kk = k;
        for (int t = 0; t < n; t += 4, kk += 2, pa += 16, pb += 16) {
            __m256i px = _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_loadu_si128((const __m128i *)pa)),
                                                 _mm_loadu_si128((const __m128i *)pb), 1);
            px = _mm256_shuffle_epi8(px, pair);
            acc = _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_unpacklo_epi8(px, zero), _mm256_load_si256(kk)));
            if (n - t > 2)
                acc = _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_unpackhi_epi8(px, zero), _mm256_load_si256(kk + 1)));
        }
        acc = _mm256_srai_epi32(acc, RESAMPLE_BITS);
        acc = _mm256_packus_epi16(_mm256_packs_epi32(acc, acc), acc);  /* pixel i in dword 0, i + 1 in dword 4 */
        _mm_storel_epi64((__m128i *)(out + 4 * i), _mm256_castsi256_si128(_mm256_permutevar8x32_epi32(acc, gather)));
    }
    if (i < size) {  /* an odd last pixel */
        struct axis one = *h;
        one.out = 1;
        one.first += i;
        one.count += i;
        one.coef += (size_t)i * h->taps;
        hrow_sse41(row, x0, &one, out + 4 * i);
    }
}

/* The vertical sums with AVX2, 16 bytes at a time: the bytes of two rows interleaved, widened to
 * 16 bits, multiplied-and-added with the pair of weights; accumulators stay in registers. */
__attribute__((target("avx2"))) static void vrow_avx2(const uint8_t *rows, size_t row_bytes, int n,
                                                      const int16_t *restrict k, uint8_t *restrict out,
                                                      size_t width) {
    size_t j = 0;
    const __m128i zero = _mm_setzero_si128();
    __m256i pairs[32];
    int npairs = (n + 1) / 2;
    if (npairs > 32) {  /* a shrink by more than ~30 after the DCT scaling: rare, the portable loop */
        vrow_plain(rows, row_bytes, n, k, out, width);
        return;
    }
    for (int q = 0; q < npairs; q++) {
        uint16_t k1 = 2 * q + 1 < n ? (uint16_t)k[2 * q + 1] : 0;
        pairs[q] = _mm256_set1_epi32((int32_t)(((uint32_t)k1 << 16) | (uint16_t)k[2 * q]));
    }
    for (; j + 16 <= width; j += 16) {
        __m256i a0 = _mm256_set1_epi32(1 << (RESAMPLE_BITS - 1)), a1 = a0;
        const uint8_t *s = rows + j;
        int t = 0;
        for (; t + 2 <= n; t += 2, s += 2 * row_bytes) {
            __m128i r0 = _mm_loadu_si128((const __m128i *)s), r1 = _mm_loadu_si128((const __m128i *)(s + row_bytes));
            a0 = _mm256_add_epi32(a0, _mm256_madd_epi16(_mm256_cvtepu8_epi16(_mm_unpacklo_epi8(r0, r1)), pairs[t / 2]));
            a1 = _mm256_add_epi32(a1, _mm256_madd_epi16(_mm256_cvtepu8_epi16(_mm_unpackhi_epi8(r0, r1)), pairs[t / 2]));
        }
        if (t < n) {
            __m128i r0 = _mm_loadu_si128((const __m128i *)s);
            a0 = _mm256_add_epi32(a0, _mm256_madd_epi16(_mm256_cvtepu8_epi16(_mm_unpacklo_epi8(r0, zero)), pairs[t / 2]));
            a1 = _mm256_add_epi32(a1, _mm256_madd_epi16(_mm256_cvtepu8_epi16(_mm_unpackhi_epi8(r0, zero)), pairs[t / 2]));
        }
        __m256i p = _mm256_packs_epi32(_mm256_srai_epi32(a0, RESAMPLE_BITS), _mm256_srai_epi32(a1, RESAMPLE_BITS));
        p = _mm256_permute4x64_epi64(p, 0xD8);
        _mm_storeu_si128((__m128i *)(out + j), _mm_packus_epi16(_mm256_castsi256_si128(p), _mm256_extracti128_si256(p, 1)));
    }
    if (j < width)
        vrow_plain(rows + j, row_bytes, n, k, out + j, width - j);
}

#endif

typedef void (*hrow_fn)(const uint8_t *, int, const struct axis *, uint8_t *);
typedef void (*vrow_fn)(const uint8_t *, size_t, int, const int16_t *, uint8_t *, size_t);

/* One plane-splitting loop per channel count and direction, so the compiler sees constant strides
 * and vectorises it. The flipped loop only vectorises with AVX2 (reversed stores), hence the AVX2
 * clone beside the baseline one, picked at load time: measured ~7 us per 224 px crop either way
 * with AVX2, ~44 us flipped without. `plane`: bytes from one plane to the next. */
#define SPLIT(C, FLIP)                                                          \
    for (ptrdiff_t y = 0; y < h; y++) {                                         \
        const unsigned char *s = src + (size_t)y * w * (C);                     \
        unsigned char *r = dst + (size_t)y * w, *g = r + plane, *b = g + plane; \
        for (ptrdiff_t x = 0; x < w; x++) {                                     \
            ptrdiff_t o = (FLIP) ? w - 1 - x : x;                               \
            r[o] = s[(C) * x];                                                  \
            g[o] = s[(C) * x + 1];                                              \
            b[o] = s[(C) * x + 2];                                              \
        }                                                                       \
    }

VECTOR_CLONES
static void split_rows(const unsigned char *restrict src, unsigned char *restrict dst, ptrdiff_t h, ptrdiff_t w, size_t plane,
                       int channels, int flip) {
    if (channels == 4 && !flip) SPLIT(4, 0)
    else if (channels == 4) SPLIT(4, 1)
    else if (!flip) SPLIT(3, 0)
    else SPLIT(3, 1)
}

void split_planes(const unsigned char *src, unsigned char *dst, ptrdiff_t h, ptrdiff_t w, int channels, int flip) {
    split_rows(src, dst, h, w, (size_t)h * w, channels, flip);
}

/* The row loops this CPU runs (AVX2, SSE4.1 or portable: the same integer arithmetic). */
static void pick_rows(hrow_fn *hrow, vrow_fn *vrow) {
    *hrow = hrow_plain;
    *vrow = vrow_plain;
#if X86_SIMD
    static int sse41 = -1, avx2 = -1;
    if (sse41 < 0) {
        __builtin_cpu_init();
        avx2 = __builtin_cpu_supports("avx2");
        sse41 = __builtin_cpu_supports("sse4.1");
    }
    *hrow = avx2 ? hrow_avx2 : sse41 ? hrow_sse41 : *hrow;
    *vrow = avx2 ? vrow_avx2 : *vrow;
#endif
}

void resample_planes(const uint8_t *src, size_t stride, int x0, int y0, const struct axis *h,
                     const struct axis *v, uint8_t *scratch, uint8_t *dst, int flip) {
    hrow_fn hrow;
    vrow_fn vrow;
    pick_rows(&hrow, &vrow);
    int lo = axis_low(v), rows = axis_high(v) - lo;
    size_t row_bytes = (size_t)h->out * 4, plane = (size_t)v->out * h->out;
    uint8_t *tmp = scratch, *line = tmp + (size_t)rows * row_bytes;
    for (int y = 0; y < rows; y++)  /* horizontal pass, then vertical: Pillow's order (and measured faster) */
        hrow(src + (size_t)(lo + y - y0) * stride, x0, h, tmp + (size_t)y * row_bytes);
    for (int i = 0; i < v->out; i++) {
        vrow(tmp + (size_t)(v->first[i] - lo) * row_bytes, row_bytes, v->count[i], v->coef + (size_t)i * v->taps,
             line, row_bytes);
        split_rows(line, dst + (size_t)i * h->out, 1, h->out, plane, 4, flip);
    }
}

void resample_column(const uint8_t *rows, size_t row_bytes, int n, const int16_t *k, uint8_t *out, size_t width) {
    hrow_fn hrow;
    vrow_fn vrow;
    pick_rows(&hrow, &vrow);
    vrow(rows, row_bytes, n, k, out, width);
}

void resample_row4(const uint8_t *row, int x0, const struct axis *h, uint8_t *out) {
    hrow_fn hrow;
    vrow_fn vrow;
    pick_rows(&hrow, &vrow);
    hrow(row, x0, h, out);
}
