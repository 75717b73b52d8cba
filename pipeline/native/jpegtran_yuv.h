/* The pixel form's encoder (prepare-shards derive; semantics: pipeline/format/pixels.py `encode`). */
#ifndef JPEGTRAN_YUV_H
#define JPEGTRAN_YUV_H

#include <stddef.h>
#include <stdint.h>

/* Bytes of a KEY.yuv420 payload of a width x height image: Y, then Cb and Cr at ceil(W/2) x ceil(H/2). */
size_t yuv420_size(int width, int height);

/* A width x height RGB image (rows of 3 * width bytes, packed) -> its KEY.yuv420 payload in `out`
 * (yuv420_size bytes): JFIF's full-range YCbCr in libjpeg's 16-bit fixed point (jccolor.c), chroma
 * the rounded mean of each 2 x 2 block, an odd last row or column repeated. The same bytes as the
 * numpy reference. `scratch`: 4 * width bytes. */
void rgb_to_yuv420(const uint8_t *rgb, int width, int height, uint8_t *out, uint8_t *scratch);

#endif
