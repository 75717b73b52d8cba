/* The region decode of the loader's turbo path, with its entropy decoding swapped (issue 34's
 * prototype; built and driven by bench_entropy.py, never by the product).
 *
 *   entropy_bench CORPUS MODE REPS     time MODE over every record, REPS times: one JSON line each
 *   entropy_bench CORPUS check         coefficients and pixels of every mode against libjpeg's
 *   entropy_bench CORPUS flags         per mode, the records it rejects (damaged data: the probe)
 *
 * CORPUS (bench_entropy.py writes it): "JEC1", u32 count, then per record u32 size, 4 f64 (the crop
 * box top, left, height, width in original pixels, drawn by the loader's own sampler), the JPEG.
 * Each record goes through the loader's own code (jpegcrop_region.c, jpegcrop_entry.c,
 * jpegcrop_resample.c, compiled in unchanged): the crop box to the region its resampler reads and
 * the restart cells around it (crop_to_planes' geometry, repeated below), region_start (header,
 * entry JPEG, jpeg_start_decompress), region_read (the pixels). After region_start the entropy
 * decoder's decode_mcu is swapped, by MODE:
 *   lib      none: libjpeg-turbo 2.1.5 as the loader runs it (decode_mcu_slow for every MCU)
 *   patched  vendor/jdhuff_patched.c's decode_mcu (the fast path allowed inside a cell)
 *   own1/2/4 the loader's own decoder (pipeline/native/jpegcrop_cells.c, "cells.c" below) decodes
 *            the MCU rows the region needs, 1, 2 or 4 cells interleaved, into a buffer first;
 *            decode_mcu then only copies each MCU's blocks out of it
 *   product  none here: region_start with ENTROPY_OWN, the loader's own hook as built
 *            (jpegcrop_entropy.c: 2 cells, libjpeg for whatever it flags or does not take)
 * Per rep: region_us (per image: header, geometry, entry, entropy decode, IDCT, upsampling, colour
 * conversion: what the loader's profile calls region decode), own_us (the cells.c part of it, with
 * its table building and the split/unstuff pass), mcus (decode_mcu calls), own_mcus (MCUs cells.c
 * decoded). region_us - own_us of an own mode is the region decode with the entropy decode free.
 */
#define _GNU_SOURCE
#define JPEG_INTERNALS /* the entropy decoder's public part (jpegint.h, vendored: not installed) */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#ifndef BENCH_CLOCK
#define BENCH_CLOCK CLOCK_THREAD_CPUTIME_ID /* CPU time of this thread: the box is shared */
#endif

#include "jpegcrop_cells.h"
#include "jpegcrop_entropy.h"
#include "jpegcrop_entry.h"
#include "jpegcrop_region.h"
#include "jpegcrop_resample.h"

#define OUT_SIZE 224

extern boolean patched_decode_mcu(j_decompress_ptr cinfo, JBLOCKROW *MCU_data);
extern long patched_fast_tries, patched_fast_failures;

struct record {
    const unsigned char *data;
    size_t size;
    double top, left, height, width;
};

static struct record *records;
static int n_records;

static int load_corpus(const char *path) {
    FILE *f = fopen(path, "rb");
    if (f == NULL)
        return 0;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *buf = malloc((size_t)n);
    if (buf == NULL || fread(buf, 1, (size_t)n, f) != (size_t)n || n < 8 || memcmp(buf, "JEC1", 4) != 0) {
        fclose(f);
        return 0;
    }
    fclose(f);
    uint32_t count;
    memcpy(&count, buf + 4, 4);
    records = calloc(count, sizeof(*records));
    size_t at = 8;
    for (uint32_t i = 0; i < count; i++) {
        uint32_t size;
        double box[4];
        if (at + 4 + 32 > (size_t)n)
            return 0;
        memcpy(&size, buf + at, 4);
        memcpy(box, buf + at + 4, 32);
        at += 36;
        if (at + size > (size_t)n)
            return 0;
        records[i] = (struct record){buf + at, size, box[0], box[1], box[2], box[3]};
        at += size;
    }
    n_records = (int)count;
    return 1;
}

static double now_us(void) {
    struct timespec t;
    clock_gettime(BENCH_CLOCK, &t);
    return t.tv_sec * 1e6 + t.tv_nsec * 1e-3;
}

/* ---- the decode_mcu replacements: state for the image being decoded ---- */
static JCOEF *own_coef;           /* cells.c's output, MCU after MCU */
static long own_mcus_ready;       /* how many MCUs it holds */
static long mcu_calls, mcu_short; /* decode_mcu calls; calls past what cells.c decoded */
static int blocks_in_mcu;
static boolean (*lib_decode_mcu)(j_decompress_ptr, JBLOCKROW *);
static boolean (*captured_decode_mcu)(j_decompress_ptr, JBLOCKROW *);
static JCOEF *capture;            /* check mode: what the wrapped decoder wrote, MCU after MCU */
static unsigned char *captured;   /* per MCU: 1 when it wrote into blocks (not a skip) */
static long capture_mcus;

static boolean copy_decode_mcu(j_decompress_ptr cinfo, JBLOCKROW *MCU_data) {
    (void)cinfo;
    long m = mcu_calls++;
    if (m >= own_mcus_ready) {
        mcu_short++;
        return TRUE;
    }
    if (MCU_data != NULL)
        for (int b = 0; b < blocks_in_mcu; b++)
            memcpy(MCU_data[b], own_coef + ((size_t)m * blocks_in_mcu + b) * 64, 64 * sizeof(JCOEF));
    return TRUE;
}

static boolean counting_decode_mcu(j_decompress_ptr cinfo, JBLOCKROW *MCU_data) {
    mcu_calls++;
    return lib_decode_mcu(cinfo, MCU_data);
}

static boolean capturing_decode_mcu(j_decompress_ptr cinfo, JBLOCKROW *MCU_data) {
    long m = mcu_calls++;
    boolean ok = captured_decode_mcu(cinfo, MCU_data);
    if (m < capture_mcus && MCU_data != NULL) {
        captured[m] = 1;
        for (int b = 0; b < cinfo->blocks_in_MCU; b++)
            memcpy(capture + ((size_t)m * cinfo->blocks_in_MCU + b) * 64, MCU_data[b], 64 * sizeof(JCOEF));
    }
    return ok;
}

/* ---- one image through the loader's region decode ---- */
enum mode { LIB, PATCHED, OWN1, OWN2, OWN4, PRODUCT, CAPTURE_LIB, CAPTURE_PATCHED, OWN_CAPTURE };

static int auto_scale(double w, double h, int out_w, int out_h) {  /* jpegcrop_region.c's */
    double k = fmin(w / out_w, h / out_h);
    return k >= 8 ? 1 : k >= 4 ? 2 : k >= 2 ? 4 : 8;
}

static unsigned char *axes_mem, *pixels;
static struct cell_work work;
static size_t coef_size;
static double own_us_total;
static long own_mcus_total;

/* own modes: cells.c decodes the region's MCU rows; the time goes into own_us_total */
static __attribute__((noinline)) int own_predecode(struct region *r, int streams, int all_rows) {
    double t0 = now_us();
    struct cell_scan sc;
    j_decompress_ptr c = &r->cinfo;
    if (!cells_setup(&sc, c))
        return -1;
    size_t need = (size_t)(sc.mcus_per_row * sc.mcu_rows + sc.mcus_per_cell) * sc.blocks_in_mcu * 64 * sizeof(JCOEF);
    if (need > coef_size) {
        free(own_coef);
        own_coef = malloc(need);
        coef_size = need;
    }
    int rows = all_rows ? sc.mcu_rows : region_mcu_rows(r);
    int status = cells_decode(&sc, &work, c->src->next_input_byte, c->src->bytes_in_buffer, rows, streams, own_coef);
    own_mcus_ready = (long)sc.mcus_per_row * rows;
    own_mcus_total += own_mcus_ready;
    blocks_in_mcu = sc.blocks_in_mcu;
    own_us_total += now_us() - t0;
    return status;
}

/* crop_to_planes' geometry (jpegcrop_region.c): the crop box to the region the resampler reads and
 * the cells that must come out exact, then region_start. */
static int start_region(const struct record *rec, struct region *r, int entropy) {
    int W, H, comps;
    if (!jpeg_frame_size(rec->data, rec->size, &W, &H, &comps) || comps != 3) {
        memset(r, 0, sizeof(*r));
        return REGION_DECLINED;
    }
    int num = auto_scale(rec->width, rec->height, OUT_SIZE, OUT_SIZE);
    double f = num / 8.0;
    int Ws = (W * num + 7) / 8, Hs = (H * num + 7) / 8;
    struct axis h, v;
    int ht = axis_taps(rec->left * f, (rec->left + rec->width) * f, OUT_SIZE, RESAMPLE_BILINEAR);
    size_t hb = axis_bytes(OUT_SIZE, ht);
    axis_plan(&h, rec->left * f, (rec->left + rec->width) * f, Ws, OUT_SIZE, axes_mem, RESAMPLE_BILINEAR);
    axis_plan(&v, rec->top * f, (rec->top + rec->height) * f, Hs, OUT_SIZE, axes_mem + hb, RESAMPLE_BILINEAR);
    int x0 = axis_low(&h), x1 = axis_high(&h), y0 = axis_low(&v), y1 = axis_high(&v);
    int cells[4] = {x0 * 8 / num, y0 * 8 / num, (x1 * 8 + num - 1) / num, (y1 * 8 + num - 1) / num};
    return region_start(r, rec->data, rec->size, num, cells, x0 - 8, y0, x1 + 8, y1, 0, entropy);
}

/* The image through region_start / region_read with MODE's decode_mcu; REGION_* status, -1 when
 * cells.c flagged the data. `stride`, `rows` (or NULL) get the pixels' layout in `pixels`. */
static int decode_image(const struct record *rec, enum mode mode, size_t *stride_out, int *rows_out) {
    struct region r;
    int status = start_region(rec, &r, mode == PRODUCT ? ENTROPY_OWN : ENTROPY_LIBJPEG);
    if (status == REGION_OK && mode == PRODUCT) {
        mcu_calls = mcu_short = 0;
    } else if (status == REGION_OK) {
        mcu_calls = 0;
        mcu_short = 0;
        lib_decode_mcu = r.cinfo.entropy->decode_mcu;
        switch (mode) {
        case LIB:
            r.cinfo.entropy->decode_mcu = counting_decode_mcu;
            break;
        case PATCHED:
            lib_decode_mcu = patched_decode_mcu;
            r.cinfo.entropy->decode_mcu = counting_decode_mcu;
            break;
        case CAPTURE_LIB:
        case CAPTURE_PATCHED:
            captured_decode_mcu = mode == CAPTURE_LIB ? lib_decode_mcu : patched_decode_mcu;
            r.cinfo.entropy->decode_mcu = capturing_decode_mcu;
            break;
        default:
            if (own_predecode(&r, mode == OWN4 ? 4 : mode == OWN2 ? 2 : 1, 0) != 0)
                status = -1;
            r.cinfo.entropy->decode_mcu = copy_decode_mcu;
        }
    }
    size_t stride = (size_t)r.width * 4;
    if (status == REGION_OK)
        status = region_read(&r, pixels, stride);
    if (status == REGION_RETRY) {  /* the product's own path ran short: libjpeg's, as crop_to_planes does */
        region_end(&r);
        if ((status = start_region(rec, &r, ENTROPY_LIBJPEG)) == REGION_OK)
            status = region_read(&r, pixels, stride = (size_t)r.width * 4);
    }
    if (stride_out != NULL) {
        *stride_out = stride;
        *rows_out = r.rows;
    }
    region_end(&r);
    return status;
}

/* ---- timing ---- */
static __attribute__((noinline)) void run_images(enum mode mode, double *region_us, long *mcus, int *failed) {
    double total = 0;
    for (int i = 0; i < n_records; i++) {
        double t0 = now_us();
        int status = decode_image(&records[i], mode, NULL, NULL);
        total += now_us() - t0;
        *mcus += mcu_calls;
        *failed += status != REGION_OK || mcu_short != 0;
    }
    *region_us = total;
}

/* ---- check: every mode against libjpeg ---- */

/* libjpeg's own coefficients of the whole entry JPEG the region decode read (jpeg_read_coefficients),
 * against cells.c's of every MCU row, `streams` at a time: the number of blocks that differ. */
static long full_compare(struct region *r, int streams) {
    const unsigned char *base = r->entry != NULL ? r->entry : NULL;
    j_decompress_ptr c = &r->cinfo;
    const unsigned char *end = c->src->next_input_byte + c->src->bytes_in_buffer;
    if (base == NULL)
        return -2;
    struct jpeg_decompress_struct d;
    struct jpeg_error_mgr jerr;
    d.err = jpeg_std_error(&jerr);
    jpeg_create_decompress(&d);
    jpeg_mem_src(&d, base, (unsigned long)(end - base));
    jpeg_read_header(&d, TRUE);
    jvirt_barray_ptr *arrays = jpeg_read_coefficients(&d);
    if (own_predecode(r, streams, 1) != 0) {
        jpeg_destroy_decompress(&d);
        return -1;
    }
    long diff = 0;
    for (long m = 0; m < own_mcus_ready; m++) {
        int my = (int)(m / c->MCUs_per_row), mx = (int)(m % c->MCUs_per_row), b = 0;
        for (int ci = 0; ci < d.num_components; ci++) {
            jpeg_component_info *comp = &d.comp_info[ci];
            for (int yy = 0; yy < comp->v_samp_factor; yy++) {
                JBLOCKARRAY rows = d.mem->access_virt_barray((j_common_ptr)&d, arrays[ci],
                                                             (JDIMENSION)(my * comp->v_samp_factor + yy), 1, FALSE);
                for (int xx = 0; xx < comp->h_samp_factor; xx++, b++) {
                    JCOEF *lib = rows[0][mx * comp->h_samp_factor + xx];
                    diff += memcmp(lib, own_coef + ((size_t)m * blocks_in_mcu + b) * 64, 64 * sizeof(JCOEF)) != 0;
                }
            }
        }
    }
    jpeg_destroy_decompress(&d);
    return diff;
}

static int check(void) {
    long images = 0, entries = 0, bad[8] = {0}, mcus_lib = 0, mcus_own = 0, pix_bad[8] = {0}, full_bad[3] = {0};
    unsigned char *ref = malloc(8u << 20);
    JCOEF *ref_coef = NULL;
    unsigned char *ref_captured = NULL;
    for (int i = 0; i < n_records; i++) {
        const struct record *rec = &records[i];
        size_t stride, stride2;
        int rows, rows2;
        capture_mcus = 1 << 12;
        free(capture);
        free(captured);
        capture = calloc((size_t)capture_mcus * D_MAX_BLOCKS_IN_MCU * 64, sizeof(JCOEF));
        captured = calloc((size_t)capture_mcus, 1);
        if (decode_image(rec, CAPTURE_LIB, &stride, &rows) != REGION_OK) {
            fprintf(stderr, "record %d: libjpeg's region decode failed\n", i);
            bad[0]++;
            continue;
        }
        images++;
        mcus_lib += mcu_calls;
        memcpy(ref, pixels, stride * rows);
        free(ref_coef);
        free(ref_captured);
        ref_coef = capture;
        ref_captured = captured;
        long ref_mcus = mcu_calls;
        capture = calloc((size_t)capture_mcus * D_MAX_BLOCKS_IN_MCU * 64, sizeof(JCOEF));
        captured = calloc((size_t)capture_mcus, 1);
        /* patched jdhuff.c: coefficients (every MCU libjpeg wrote) and pixels */
        int st = decode_image(rec, CAPTURE_PATCHED, &stride2, &rows2);
        if (st != REGION_OK || mcu_calls != ref_mcus ||
            memcmp(captured, ref_captured, (size_t)ref_mcus) != 0 ||
            memcmp(capture, ref_coef, (size_t)ref_mcus * D_MAX_BLOCKS_IN_MCU * 64 * sizeof(JCOEF)) != 0)
            bad[1]++;
        if (st == REGION_OK && memcmp(pixels, ref, stride * rows) != 0)
            pix_bad[1]++;
        /* cells.c, 1 / 2 / 4 streams: the region's MCUs against the captured ones, and the pixels */
        for (int k = 0; k < 3; k++) {
            enum mode mode = k == 0 ? OWN1 : k == 1 ? OWN2 : OWN4;
            st = decode_image(rec, mode, &stride2, &rows2);
            if (k == 0)
                mcus_own += own_mcus_ready;
            long differ = st != REGION_OK || mcu_short != 0;
            for (long m = 0; m < ref_mcus && !differ; m++)
                if (ref_captured[m])
                    differ = memcmp(own_coef + (size_t)m * blocks_in_mcu * 64,
                                    ref_coef + (size_t)m * blocks_in_mcu * 64, (size_t)blocks_in_mcu * 64 * sizeof(JCOEF)) != 0;
            bad[2 + k] += differ != 0;
            if (st == REGION_OK && memcmp(pixels, ref, stride * rows) != 0)
                pix_bad[2 + k]++;
            if (differ && bad[2 + k] <= 3)
                fprintf(stderr, "record %d: cells.c (%d streams) differs from libjpeg\n", i, 1 << k);
        }
        /* the product's hook (region_start with ENTROPY_OWN): the pixels */
        st = decode_image(rec, PRODUCT, &stride2, &rows2);
        if (st != REGION_OK || stride2 != stride || rows2 != rows || memcmp(pixels, ref, stride * rows) != 0)
            pix_bad[5]++;
        /* cells.c over the whole entry JPEG (the same one) against jpeg_read_coefficients */
        {
            struct region r;
            if (start_region(rec, &r, ENTROPY_LIBJPEG) == REGION_OK &&
                r.entry != NULL) {
                entries++;
                for (int k = 0; k < 3; k++)
                    full_bad[k] += full_compare(&r, 1 << k) != 0;
            }
            region_end(&r);
        }
    }
    printf("{\"images\": %ld, \"lib_failed\": %ld, \"patched_differs\": %ld, \"own1_differs\": %ld, "
           "\"own2_differs\": %ld, \"own4_differs\": %ld, \"pixels_differ\": [%ld, %ld, %ld, %ld], "
           "\"entries\": %ld, \"full_entry_differs\": [%ld, %ld, %ld], \"mcus_lib\": %ld, \"mcus_own\": %ld, "
           "\"product_pixels_differ\": %ld}\n",
           images, bad[0], bad[1], bad[2], bad[3], bad[4], pix_bad[1], pix_bad[2], pix_bad[3], pix_bad[4], entries,
           full_bad[0], full_bad[1], full_bad[2], mcus_lib, mcus_own, pix_bad[5]);
    return bad[0] || bad[1] || bad[2] || bad[3] || bad[4] || pix_bad[1] || pix_bad[2] || pix_bad[3] || pix_bad[4] ||
                   pix_bad[5] ||
                   full_bad[0] || full_bad[1] || full_bad[2]
               ? 1
               : 0;
}

static const char *names[] = {"lib", "patched", "own1", "own2", "own4", "product"};
#define N_MODES 6

/* ---- flags: which records each mode rejects (a status other than REGION_OK) ---- */
static int flags(void) {
    printf("{");
    for (int m = 0; m < N_MODES; m++) {
        printf("%s\"%s\": [", m ? ", " : "", names[m]);
        int first = 1;
        for (int i = 0; i < n_records; i++) {
            int status = decode_image(&records[i], (enum mode)m, NULL, NULL);
            if (status != REGION_OK || mcu_short != 0) {
                printf(first ? "%d" : ", %d", i);
                first = 0;
            }
        }
        printf("]");
    }
    printf("}\n");
    return 0;
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: entropy_bench CORPUS lib|patched|own1|own2|own4|product REPS | "
                        "entropy_bench CORPUS check|flags\n");
        return 2;
    }
    if (!load_corpus(argv[1])) {
        fprintf(stderr, "error: cannot read the corpus %s (write it with bench_entropy.py)\n", argv[1]);
        return 2;
    }
    axes_mem = malloc(1 << 20);
    pixels = malloc(8u << 20);
    if (strcmp(argv[2], "check") == 0)
        return check();
    if (strcmp(argv[2], "flags") == 0)
        return flags();
    int mode = -1;
    for (int m = 0; m < N_MODES; m++)
        if (strcmp(argv[2], names[m]) == 0)
            mode = m;
    int reps = argc > 3 ? atoi(argv[3]) : 1;
    if (mode < 0 || reps < 1) {
        fprintf(stderr, "error: unknown mode %s or reps (lib, patched, own1, own2, own4, product; REPS >= 1)\n",
                argv[2]);
        return 2;
    }
    for (int rep = 0; rep < reps; rep++) {
        double region = 0;
        long mcus = 0;
        int failed = 0;
        own_us_total = 0;
        own_mcus_total = 0;
        patched_fast_tries = patched_fast_failures = 0;
        run_images((enum mode)mode, &region, &mcus, &failed);
        printf("{\"mode\": \"%s\", \"images\": %d, \"region_us\": %.2f, \"own_us\": %.2f, \"mcus\": %ld, "
               "\"own_mcus\": %ld, \"failed\": %d, \"fast_tries\": %ld, \"fast_failures\": %ld}\n",
               names[mode], n_records, region / n_records, own_us_total / n_records, mcus, own_mcus_total, failed,
               patched_fast_tries, patched_fast_failures);
        fflush(stdout);
    }
    return 0;
}
