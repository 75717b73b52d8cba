/* Decoding only a region of a JPEG with libjpeg-turbo (the turbo decoder; see jpegcrop_region.c). */
#ifndef JPEGCROP_REGION_H
#define JPEGCROP_REGION_H

#include <stddef.h>

#include "jpeg_errors.h"
#include "jpegcrop_entropy.h"

enum region_status {
    REGION_OK = 0,
    REGION_DECLINED = 1,  /* not a 3-component YCbCr/RGB JPEG, or nothing of it in the region */
    REGION_ERROR = 2,     /* libjpeg stopped with an error (message) */
    REGION_CORRUPT = 3,   /* libjpeg warned about the entropy-coded data (message; jpeg_errors.h) */
    REGION_NO_MEMORY = 4,
    REGION_RETRY = 5,     /* the own entropy decoder ran short (jpegcrop_entropy.c): decode with libjpeg */
};

/* One region decode: region_start, then region_read (when it said REGION_OK), then region_end. */
struct region {
    struct jpeg_decompress_struct cinfo;  /* first: jpegcrop_entropy.c finds the region from it */
    struct jpeg_stop err;   /* jpeg_errors.h */
    unsigned char *entry;   /* the intervals the region needs, as a JPEG (jpegcrop_entry.c), or NULL */
    int x_skip, y_skip;     /* scaled pixels the entry leaves out left of and above its first one */
    /* what region_read writes, in pixels of the whole scaled image: columns [x, x + width), rows [y, y + rows) */
    int x, y, width, rows;
    int y_stream;           /* the first row in the decoded stream's own coordinates */
    struct entropy_state own;  /* jpegcrop_entropy.c */
};

/* Header, scale num/8 (num 1..16), and the region: columns [left, right) and rows [top, bottom) of
 * the scaled image (clipped to it), columns widened to whole iMCUs. `cells` (pixels of the full-size
 * image: left, top, right, bottom; NULL: none) is what must come out exact when entering at restart
 * markers; the caller's margins cover libjpeg's upsampling at the region's own edges (8 columns).
 * fast: the fast integer IDCT and plain upsampling. entropy: an entropy_choice (jpegcrop_entropy.h).
 * Returns a region_status. */
int region_start(struct region *r, const unsigned char *data, size_t size, int num, const int *cells,
                 int left, int top, int right, int bottom, int fast, int entropy);

/* The region's rows as RGBX, `stride` bytes apart; stops after the last (rows below are never decoded).
 * REGION_RETRY: region_end, then start again with ENTROPY_LIBJPEG. */
int region_read(struct region *r, unsigned char *pixels, size_t stride);

void region_end(struct region *r);

/* The crop box (top, left, height, width: pixels of the original) of `data` resampled to out_h x
 * out_w with `filter` (a resample_filter, jpegcrop_resample.h) into the CHW planes `dst`, flipped
 * when asked (the whole of _jpegcrop.crop_into): the DCT
 * scale num/8 (0: 1/8, 1/4, 1/2 when the crop stays at least the output size, else 8/8), the axes,
 * the region they read decoded (entering at restart markers unless `restarts` is 0), the resample.
 * entropy: an entropy_choice. Returns a region_status (never REGION_RETRY); `message` (JMSG_LENGTH_MAX) gets libjpeg's text for REGION_ERROR and
 * REGION_CORRUPT. `times` (or NULL): CPU seconds of the decode and of the resample are added to
 * times[0] and times[1]. Scratch memory is per thread, kept between calls. */
int crop_to_planes(const unsigned char *data, size_t size, double top, double left, double height, double width,
                   unsigned char *dst, int out_h, int out_w, int flip, int restarts, int num, int entropy,
                   char *message, double *times, int filter);

#endif
