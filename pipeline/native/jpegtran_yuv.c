/* The pixel form's encoder: RGB -> KEY.yuv420 (Y, then Cb, Cr at half size), for prepare-shards derive.
 *
 * The numpy reference (pipeline/format/pixels.py `encode`) is what the bytes must be, and a test
 * compares the two byte for byte (tests/pipeline/prepare/test_pixel_encoder.py). Two image rows at a
 * time: Y straight into its plane, Cb and Cr into two scratch rows each, then each pair of scratch
 * rows averaged over 2 x 2 blocks into the chroma planes. Integers only, as libjpeg's jccolor.c: every
 * value is already in 0..255 before it is stored (the Y weights sum to 2**16, each chroma's
 * negative weights to -2**15), so nothing is clipped. The loops are plain C that GCC vectorises
 * (VECTOR_CLONES: an AVX2 clone; size_t indices, since with Python's -fwrapv an int index kept it from
 * vectorising: 0.23 -> 0.074 ms a 400 x 300 image). Measured in bench/bench_derive.py (one core of the
 * shared 2-vCPU box): 118 us an image against numpy's 477 us over 100 decoded ImageNet-like images
 * (docs/benchmarks.md, "prepare-shards derive per core").
 */
#include "jpegtran_yuv.h"

#include "simd.h"

/* libjpeg's jccolor.c: FIX(x) = round(x * 2**16) */
#define SCALE 16
#define HALF (1 << (SCALE - 1))
#define CHROMA_OFFSET ((128 << SCALE) + HALF - 1) /* CBCR_OFFSET + ONE_HALF - 1 */

size_t yuv420_size(int width, int height) {
    size_t cw = (size_t)(width + 1) / 2, ch = (size_t)(height + 1) / 2;
    return (size_t)width * height + 2 * cw * ch;
}

/* One RGB row -> its Y row and full-width Cb and Cr rows. */
VECTOR_CLONES
static void convert_row(const uint8_t *restrict rgb, size_t w, uint8_t *restrict y, uint8_t *restrict cb,
                        uint8_t *restrict cr) {
    for (size_t x = 0; x < w; x++) {  /* size_t: with -fwrapv (Python's CFLAGS) an int index kept GCC from vectorising */
        int32_t r = rgb[3 * x], g = rgb[3 * x + 1], b = rgb[3 * x + 2];
        y[x] = (uint8_t)((19595 * r + 38470 * g + 7471 * b + HALF) >> SCALE);
        cb[x] = (uint8_t)((-11059 * r - 21709 * g + 32768 * b + CHROMA_OFFSET) >> SCALE);
        cr[x] = (uint8_t)((32768 * r - 27439 * g - 5329 * b + CHROMA_OFFSET) >> SCALE);
    }
}

/* Two full-width chroma rows -> one half-width row: the rounded mean of each 2 x 2 block, the last
 * column repeated when w is odd. */
VECTOR_CLONES
static void subsample_rows(const uint8_t *restrict a, const uint8_t *restrict b, size_t w, uint8_t *restrict out) {
    size_t pairs = w / 2;
    for (size_t i = 0; i < pairs; i++)
        out[i] = (uint8_t)((a[2 * i] + a[2 * i + 1] + b[2 * i] + b[2 * i + 1] + 2) >> 2);
    if (w & 1)
        out[pairs] = (uint8_t)((2 * a[w - 1] + 2 * b[w - 1] + 2) >> 2);
}

void rgb_to_yuv420(const uint8_t *rgb, int width, int height, uint8_t *out, uint8_t *scratch) {
    size_t w = (size_t)width, cw = (w + 1) / 2, ch = ((size_t)height + 1) / 2;
    uint8_t *plane_cb = out + w * (size_t)height, *plane_cr = plane_cb + cw * ch;
    uint8_t *cb0 = scratch, *cb1 = scratch + w, *cr0 = scratch + 2 * w, *cr1 = scratch + 3 * w;
    for (size_t row = 0; row < ch; row++) {
        size_t top = 2 * row;
        convert_row(rgb + 3 * w * top, w, out + w * top, cb0, cr0);
        if (top + 1 < (size_t)height)
            convert_row(rgb + 3 * w * (top + 1), w, out + w * (top + 1), cb1, cr1);
        else  /* an odd last row: its own edge repeated */
            cb1 = cb0, cr1 = cr0;
        subsample_rows(cb0, cb1, w, plane_cb + cw * row);
        subsample_rows(cr0, cr1, w, plane_cr + cw * row);
    }
}
