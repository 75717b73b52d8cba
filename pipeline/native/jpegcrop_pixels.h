/* The pixel form's one call per sample (_jpegcrop.yuv_crop_into; pipeline/format/pixels.py). */
#ifndef JPEGCROP_PIXELS_H
#define JPEGCROP_PIXELS_H

#include <stdint.h>

/* The box (top, left, height, width: pixels of the W x H image, floats) of a KEY.yuv420 payload
 * (Y, then Cb, Cr at ceil(W/2) x ceil(H/2)) resampled to out_h x out_w and written as RGB CHW planes
 * into `dst`, mirrored left-right when `flip`. Y is resampled over the box, Cb and Cr over the box
 * halved (chroma sample i sits at luma 2i + 1 in pixel-edge coordinates), each with the turbo path's
 * filter (jpegcrop_resample.h: vertical pass then horizontal, each rounded to 8 bits), then JFIF's
 * inverse in libjpeg's 16-bit fixed point (jdcolor.c). `filter`: RESAMPLE_BILINEAR or RESAMPLE_BICUBIC.
 * 0: done; -1: out of memory. */
int yuv_crop_to_planes(const uint8_t *payload, int width, int height, double top, double left, double box_h,
                       double box_w, uint8_t *dst, int out_h, int out_w, int flip, int filter);

#endif
