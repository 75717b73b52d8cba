/* Entering a JPEG at its restart markers (the turbo decoder, _jpegcrop.c). */
#ifndef JPEGCROP_ENTRY_H
#define JPEGCROP_ENTRY_H

#include <stddef.h>

/* The size and component count from the first SOFn segment, without libjpeg (0: none found). */
int jpeg_frame_size(const unsigned char *p, size_t n, int *width, int *height, int *components);

/* A JPEG made of only the restart intervals that cover [left, right) x [top, bottom) (pixels of the
 * full-size image) exactly -- see jpegcrop_entry.c -- malloc'ed, with its size and the pixel offset of
 * its top-left corner in the image; NULL when the JPEG has no usable grid of restart markers or the
 * rectangle needs (nearly) all of it. */
unsigned char *build_entry(const unsigned char *p, size_t n, int left, int top, int right, int bottom,
                           size_t *size, int *x_shift, int *y_shift);

#endif
