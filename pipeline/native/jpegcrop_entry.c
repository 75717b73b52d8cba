/* Entering a JPEG at its restart markers: the intervals around a crop, as a JPEG of their own.
 *
 * prepare-shards writes restart markers on a grid of cells one MCU row high and ~32 px wide
 * (docs/format.md). Restart markers reset all decoder state (DC predictions, bit buffer), so a JPEG
 * made of a rectangle of those cells -- the original's headers with the SOF's size cut to the
 * rectangle, then the rectangle's intervals with their markers renumbered, then EOI -- decodes to
 * exactly the pixels of that rectangle, except where libjpeg's chroma upsampling (4:2:0, 4:2:2 at
 * full scale) lacks its neighbours: the rectangle's first and last column and row. So the
 * rectangle is chosen one pixel larger than what must be exact on every side that is not the
 * image's edge (tested: the crops equal those decoded from the top). Rows above and columns beside
 * are then never entropy-decoded, which is most of what a crop costs.
 */
#include "jpegcrop_entry.h"

#include <stdlib.h>
#include <string.h>

#define JPEG_RST0 0xD0
#define JPEG_EOI 0xD9

/* How a JPEG's restart intervals tile it: a baseline (SOF0/SOF1) 3-component image, one
 * interleaved scan, a restart interval that is either a whole number of MCU rows or a divisor of
 * one (so the intervals form a grid of `per_group` columns by groups of `group_rows` pixel rows). */
struct restart_map {
    size_t header_len;   /* bytes up to the end of the SOS segment: where entropy-coded data starts */
    size_t sof_at;       /* offset of the SOF's 2-byte height; the 2-byte width follows */
    int width, height;   /* image size in pixels */
    int group_rows;      /* pixel rows per group of intervals */
    int per_group;       /* intervals side by side in a group */
    int interval_cols;   /* pixel columns per interval (when per_group > 1) */
};

static int map_restarts(const unsigned char *p, size_t n, struct restart_map *m) {
    size_t i = 2;
    int interval = 0, sof = 0, hmax = 1, vmax = 1;
    while (i + 4 <= n) {
        if (p[i] != 0xFF)
            return 0;
        unsigned char mk = p[i + 1];
        if (mk == 0xFF) {  /* fill byte */
            i++;
            continue;
        }
        size_t len = ((size_t)p[i + 2] << 8) | p[i + 3];
        const unsigned char *seg = p + i + 4;
        if (len < 2 || i + 2 + len > n)
            return 0;
        if (mk == 0xC0 || mk == 0xC1) {  /* baseline / extended sequential, Huffman */
            if (len < 8 + 3 * 3 || seg[5] != 3)
                return 0;
            m->sof_at = i + 5;
            m->height = (seg[1] << 8) | seg[2];
            m->width = (seg[3] << 8) | seg[4];
            for (int c = 0; c < 3; c++) {
                int hs = seg[6 + 3 * c + 1] >> 4, vs = seg[6 + 3 * c + 1] & 15;
                hmax = hs > hmax ? hs : hmax;
                vmax = vs > vmax ? vs : vmax;
            }
            sof = 1;
        } else if (mk >= 0xC2 && mk <= 0xCF && mk != 0xC4 && mk != 0xC8 && mk != 0xCC) {
            return 0;  /* progressive, lossless, arithmetic-coded... */
        } else if (mk == 0xDD) {
            if (len != 4)
                return 0;
            interval = (seg[0] << 8) | seg[1];
        } else if (mk == 0xDA) {
            if (!sof || interval <= 0 || seg[0] != 3 || m->height <= 0 || m->width <= 0)
                return 0;
            int per_row = (m->width + 8 * hmax - 1) / (8 * hmax);  /* MCUs per MCU row */
            if (interval % per_row == 0) {
                m->group_rows = interval / per_row * 8 * vmax;
                m->per_group = 1;
                m->interval_cols = m->width;
            } else if (per_row % interval == 0) {
                m->group_rows = 8 * vmax;
                m->per_group = per_row / interval;
                m->interval_cols = interval * 8 * hmax;
            } else {
                return 0;
            }
            m->header_len = i + 2 + len;
            return 1;
        } else if (mk == 0xD9 || (mk >= 0xD0 && mk <= 0xD8) || mk == 0x01) {
            return 0;  /* no stand-alone markers belong in the header */
        }
        i += 2 + len;
    }
    return 0;
}

/* The entropy-coded bytes of intervals [first, last] (numbered from 0 in scan order), found by
 * walking the restart markers from `at`: starts[k], ends[k] for interval first + k. 0 when the
 * markers are out of sequence or another marker comes first (then the caller decodes from the top). */
static int find_intervals(const unsigned char *p, size_t n, size_t at, int first, int last,
                          size_t *starts, size_t *ends) {
    const unsigned char *q = p + at, *end = p + n;
    int index = 0;  /* the interval that starts at `at` */
    size_t start = at;
    while (end - q >= 2) {
        q = memchr(q, 0xFF, (size_t)(end - q - 1));
        if (q == NULL)
            return 0;
        unsigned char b = q[1];
        if (b == 0x00) {  /* a stuffed 0xFF data byte */
            q += 2;
            continue;
        }
        if (b == 0xFF) {  /* fill byte */
            q += 1;
            continue;
        }
        int restart = b >= 0xD0 && b <= 0xD7;
        if (restart && b != 0xD0 + (index & 7))
            return 0;
        if (!restart && (b != JPEG_EOI || index != last))
            return 0;  /* only the image's last interval may end at the end-of-image marker */
        if (index >= first) {
            starts[index - first] = start;
            ends[index - first] = (size_t)(q - p);
        }
        if (index == last)
            return 1;
        index++;
        q += 2;
        start = (size_t)(q - p);
    }
    return 0;
}


int jpeg_frame_size(const unsigned char *p, size_t n, int *width, int *height, int *components) {
    size_t i = 2;
    if (n < 4 || p[0] != 0xFF || p[1] != 0xD8)
        return 0;
    while (i + 4 <= n) {
        if (p[i] != 0xFF)
            return 0;
        unsigned char mk = p[i + 1];
        if (mk == 0xFF) {
            i++;
            continue;
        }
        size_t len = ((size_t)p[i + 2] << 8) | p[i + 3];
        if (len < 2 || i + 2 + len > n || mk == 0xDA || mk == 0xD9)
            return 0;  /* a scan or the end before any frame header */
        if (mk >= 0xC0 && mk <= 0xCF && mk != 0xC4 && mk != 0xC8 && mk != 0xCC) {
            if (len < 8)
                return 0;
            *height = (p[i + 5] << 8) | p[i + 6];
            *width = (p[i + 7] << 8) | p[i + 8];
            *components = p[i + 9];
            return *width > 0 && *height > 0;
        }
        i += 2 + len;
    }
    return 0;
}

/* The first and one-past-last cell (of `size` pixels, `count` of them) whose union covers
 * [lo, hi) with one pixel to spare on each side that is not the image's edge. */
static void cells(int lo, int hi, int size, int count, int *first, int *end) {
    *first = lo <= 0 ? 0 : (lo - 1) / size;
    *end = hi < 0 ? 0 : hi / size + 1;
    if (*end > count)
        *end = count;
}

unsigned char *build_entry(const unsigned char *p, size_t n, int left, int top, int right, int bottom,
                           size_t *size, int *x_shift, int *y_shift) {
    struct restart_map m = {0};
    if (!map_restarts(p, n, &m))
        return NULL;
    int groups = (m.height + m.group_rows - 1) / m.group_rows, g0, g1, c0 = 0, c1 = m.per_group;
    cells(top, bottom, m.group_rows, groups, &g0, &g1);
    if (m.per_group > 1)
        cells(left, right, m.interval_cols, m.per_group, &c0, &c1);
    if (g0 >= g1 || c0 >= c1 || (g0 == 0 && c0 == 0 && c1 == m.per_group))
        return NULL;  /* nothing to leave out above or beside: the plain path stops below by itself */
    int first = g0 * m.per_group + c0, last = (g1 - 1) * m.per_group + c1 - 1;
    int count = last - first + 1;
    size_t *starts = malloc(2 * (size_t)count * sizeof(size_t));
    unsigned char *out = NULL;
    if (starts == NULL)
        return NULL;
    size_t *ends = starts + count;
    if (find_intervals(p, n, m.header_len, first, last, starts, ends)) {
        size_t total = m.header_len + 2;
        for (int k = 0; k < count; k++)
            total += ends[k] - starts[k] + 2;
        out = malloc(total);
    }
    if (out != NULL) {
        int width = c1 == m.per_group ? m.width - c0 * m.interval_cols : (c1 - c0) * m.interval_cols;
        int height = (g1 * m.group_rows < m.height ? g1 * m.group_rows : m.height) - g0 * m.group_rows;
        memcpy(out, p, m.header_len);
        out[m.sof_at] = (unsigned char)(height >> 8);
        out[m.sof_at + 1] = (unsigned char)(height & 0xFF);
        out[m.sof_at + 2] = (unsigned char)(width >> 8);
        out[m.sof_at + 3] = (unsigned char)(width & 0xFF);
        size_t o = m.header_len;
        int written = 0;
        for (int g = g0; g < g1; g++) {
            for (int c = c0; c < c1; c++) {
                int k = g * m.per_group + c - first;
                if (written > 0) {  /* renumbered: libjpeg counts from RST0 */
                    out[o++] = 0xFF;
                    out[o++] = (unsigned char)(JPEG_RST0 + ((written - 1) & 7));
                }
                memcpy(out + o, p + starts[k], ends[k] - starts[k]);
                o += ends[k] - starts[k];
                written++;
            }
        }
        out[o++] = 0xFF;
        out[o++] = JPEG_EOI;
        *size = o;
        *x_shift = c0 * m.interval_cols;
        *y_shift = g0 * m.group_rows;
    }
    free(starts);
    return out;
}
