/* The resampler of the turbo decoder's one-call path (_jpegcrop.crop_into).
 *
 * Semantics (docs/loader.md, "The resampler"): Pillow's `Image.resize(size, BILINEAR or BICUBIC,
 * box=...)` -- a triangle (support 1) or Keys cubic (a = -0.5, support 2) filter whose support grows
 * with the downscale factor (antialiased), the same taps and
 * weights computed in double as Pillow's `precompute_coeffs`, horizontal pass then vertical pass,
 * each rounded to 8 bits -- with the weights in 14-bit fixed point (Pillow: 22 bits), so that two
 * taps fit one `pmaddwd`. The output is within 1 level of the exact (float) two-pass filter and of
 * Pillow's own (tests/train/loader/test_decode.py bounds both). The SSE4.1 and the portable loops
 * do the same integer arithmetic, so they give the same bytes.
 */
#ifndef JPEGCROP_RESAMPLE_H
#define JPEGCROP_RESAMPLE_H

#include <stddef.h>
#include <stdint.h>

#define RESAMPLE_BITS 14

/* The filter of an axis: Pillow's BILINEAR and BICUBIC (timm's two train interpolations). */
enum resample_filter { RESAMPLE_BILINEAR = 0, RESAMPLE_BICUBIC = 1 };

/* One axis of a resample: output pixel i reads input pixels first[i] .. first[i] + count[i] - 1
 * (in the coordinates of the whole scaled image) with weights coef[i * taps ...], zero padded to
 * `taps`, a multiple of 4. */
struct axis {
    int out;
    int taps;
    int *first;
    int *count;
    int16_t *coef;
    int32_t *lanes;  /* the weights of pixels 2j and 2j+1 side by side, pairs repeated 4 times (AVX2) */
};

/* Taps per output pixel (a multiple of 4) and bytes of memory `axis_plan` needs for an axis of
 * `out` pixels sampling [in0, in1) with `filter` (a resample_filter). */
int axis_taps(double in0, double in1, int out, int filter);
size_t axis_bytes(int out, int taps);

/* Pillow's precompute_coeffs for `filter` (a resample_filter) over [in0, in1) of an input `in_size`
 * pixels long, into `mem` (axis_bytes long); then weights to RESAMPLE_BITS fixed point, rounded half
 * away from zero (Pillow's normalize_coeffs_8bpc; the cubic's lobes are negative). */
void axis_plan(struct axis *a, double in0, double in1, int in_size, int out, void *mem, int filter);
/* axis_plan without `lanes` (left unset): for a vertical axis, whose pass reads `coef` only. */
void axis_weights(struct axis *a, double in0, double in1, int in_size, int out, void *mem, int filter);

/* The lowest and one past the highest input pixel the axis reads. */
int axis_low(const struct axis *a);
int axis_high(const struct axis *a);

/* Resample RGBX pixels into the CHW planes `dst` (3 x v->out x h->out), mirrored left-right when
 * `flip`: the horizontal pass over the rows the vertical one reads, then the vertical pass (Pillow's
 * order). `src` holds rows y0.. of the image, each starting at column x0 (image coordinates), `stride`
 * bytes apart; it must cover [axis_low, axis_high) of both axes and be readable 64 bytes past the end
 * of its last row. `scratch`: resample_scratch(h, v) bytes. */
size_t resample_scratch(const struct axis *h, const struct axis *v);
void resample_planes(const uint8_t *src, size_t stride, int x0, int y0, const struct axis *h,
                     const struct axis *v, uint8_t *scratch, uint8_t *dst, int flip);

/* One output row of the vertical pass over any bytes (one plane, or RGBX): out[j] = the sum of the
 * `n` rows' byte j (`row_bytes` apart) times the weights k, rounded to 8 bits (the pixel form's
 * kernel, jpegcrop_pixels.c, runs it per plane). */
void resample_column(const uint8_t *rows, size_t row_bytes, int n, const int16_t *k, uint8_t *out, size_t width);

/* One row of 4-byte pixels (RGBX, or four planes' lines interleaved) horizontally: resample_planes'
 * first pass, on its own. `row` starts at column x0 and is readable 64 bytes past its end. */
void resample_row4(const uint8_t *row, int x0, const struct axis *h, uint8_t *out);

/* HWC(X) -> CHW planes, flipped when asked (to_planes, arrow_to_planes, resample_planes). */
void split_planes(const unsigned char *src, unsigned char *dst, ptrdiff_t h, ptrdiff_t w, int channels, int flip);

#endif
