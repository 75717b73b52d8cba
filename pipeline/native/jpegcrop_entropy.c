/* The own entropy decoder (jpegcrop_cells.c) in libjpeg's place, for the files it takes.
 *
 * libjpeg keeps doing everything else -- headers, the entry JPEG's geometry, IDCT, upsampling,
 * colour conversion, skipping and cropping -- and everything for the files the own decoder does
 * not take. After jpeg_start_decompress the own decoder decodes the cells of the MCU rows the
 * region needs (2 cells interleaved) into per-thread memory, and libjpeg's decode_mcu is replaced
 * by a copy out of it; libjpeg calls decode_mcu once per MCU in scan order (NULL blocks: a skipped
 * MCU), so a counter says which one it wants.
 *
 * Taken: one interleaved sequential Huffman scan of 8-bit data with restart markers (every stored
 * file has them), 3 components, luma sampled 1x1, 2x1 or 2x2 and chroma 1x1 (4:4:4, 4:2:2, 4:2:0:
 * the factors the tests cover). Anything else, or cells the own decoder flags as damaged (it flags
 * at least what libjpeg warns about; tests/train/loader/test_entropy.py), is decoded by libjpeg
 * from the start: the same pixels, and libjpeg's own word on damaged data. If libjpeg asks for an
 * MCU past those decoded (not seen: one MCU row below the region is decoded for the upsampler's
 * context), the decode stops with REGION_RETRY and the caller decodes again with libjpeg.
 *
 * The hook needs one private field: decode_mcu in jpegint.h's struct jpeg_entropy_decoder, which
 * is not installed. Its layout below is libjpeg-turbo's (the same from 1.x to 3.x, and IJG 6b's);
 * the build accepts only libjpeg-turbo 2.x/3.x headers, and at first use a self-test checks the
 * library actually loaded: that it is libjpeg-turbo (its copyright message names the project, or
 * in 2.0 its author), and that a JPEG made here with restart markers decodes through the hook, at
 * scales 8/8 and 4/8, with every MCU taken from the own decoder and the pixels byte-identical to
 * libjpeg's. Otherwise every decode takes libjpeg's path (entropy_default_path says why).
 *
 * IMAGENET_SHARDS_ENTROPY (read once, at first use): "libjpeg" turns the own decoder off for the
 * process (ENTROPY_DEFAULT); unset, empty or "own": on. The C calls also take the choice per call
 * (crop_into(entropy=...)), so tests and benchmarks compare both paths in one process.
 */
#include "jpegcrop_entropy.h"

#include <pthread.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "jpeg_errors.h"
#include "jpegcrop_cells.h"
#include "jpegcrop_region.h"

#if defined(LIBJPEG_TURBO_VERSION_NUMBER) && LIBJPEG_TURBO_VERSION_NUMBER >= 2000000 && \
    LIBJPEG_TURBO_VERSION_NUMBER < 4000000
#define HOOK_BUILT 1
#else
#define HOOK_BUILT 0
#endif

#define STREAMS 2 /* cells interleaved: measured best (docs/loader.md, issue 34) */
/* Coefficients held at most per thread (16 MiB: ~21,000 MCUs, a 4:2:0 region of ~2,900 x 1,900 px
 * from the top); a larger region is libjpeg's, which holds one MCU row at a time. */
#define MAX_COEF_BYTES ((size_t)16 << 20)
#define STRINGIFY_(x) #x
#define STRINGIFY(x) STRINGIFY_(x)

/* jpegint.h's struct jpeg_entropy_decoder (libjpeg-turbo 2.x/3.x; see the top) */
struct entropy_layout {
    void (*start_pass)(j_decompress_ptr cinfo);
    boolean (*decode_mcu)(j_decompress_ptr cinfo, JBLOCKROW *MCU_data);
    boolean insufficient_data;
};

_Static_assert(offsetof(struct region, cinfo) == 0, "copy_decode_mcu finds its region from cinfo");

static long counts[4];  /* own, not_taken, flagged, retried (atomic) */

static void count(int which) {
    __atomic_fetch_add(&counts[which], 1, __ATOMIC_RELAXED);
}

void entropy_get_counts(struct entropy_counts *out) {
    out->own = __atomic_load_n(&counts[0], __ATOMIC_RELAXED);
    out->not_taken = __atomic_load_n(&counts[1], __ATOMIC_RELAXED);
    out->flagged = __atomic_load_n(&counts[2], __ATOMIC_RELAXED);
    out->retried = __atomic_load_n(&counts[3], __ATOMIC_RELAXED);
}

void entropy_count_retry(void) {
    count(3);
}

/* ---- per-thread memory, kept between calls (like jpegcrop_region.c's arenas) ---- */
static _Thread_local struct cell_scan *scan;
static _Thread_local struct cell_work work;
static _Thread_local JCOEF *coef_mem;
static _Thread_local size_t coef_size;

static boolean copy_decode_mcu(j_decompress_ptr cinfo, JBLOCKROW *MCU_data) {
    struct region *r = (struct region *)cinfo;
    struct entropy_state *s = &r->own;
    long m = s->next_mcu++;
    if (m >= s->ready) {
        s->retry = 1;  /* jpegcrop_region.c's stopped(): REGION_RETRY */
        longjmp(r->err.jump, 1);
    }
    if (MCU_data != NULL)
        for (int b = 0; b < s->blocks_in_mcu; b++)
            memcpy(MCU_data[b], s->coef + ((size_t)m * s->blocks_in_mcu + b) * DCTSIZE2, DCTSIZE2 * sizeof(JCOEF));
    return TRUE;
}

/* The files the own decoder takes (cells_setup checks the scan itself). */
static int takes(j_decompress_ptr c) {
    if (c->num_components != 3 || c->comps_in_scan != 3 || c->unread_marker != 0 || c->src == NULL ||
        c->src->bytes_in_buffer == 0)
        return 0;
    int h = c->comp_info[0].h_samp_factor, v = c->comp_info[0].v_samp_factor;
    if (!((h == 1 && v == 1) || (h == 2 && v == 1) || (h == 2 && v == 2)))
        return 0;
    for (int ci = 1; ci < 3; ci++)
        if (c->comp_info[ci].h_samp_factor != 1 || c->comp_info[ci].v_samp_factor != 1)
            return 0;
    return 1;
}

/* The MCU rows libjpeg's region_read asks decode_mcu for: those up to the region's last row, plus
 * one for the fancy upsampling's context. */
int region_mcu_rows(const struct region *r) {
    const struct jpeg_decompress_struct *c = &r->cinfo;
    int imcu = c->max_v_samp_factor * c->min_DCT_scaled_size;
    int rows = (r->y_stream + r->rows + imcu - 1) / imcu + 1;
    return rows < (int)c->MCU_rows_in_scan ? rows : (int)c->MCU_rows_in_scan;
}

static void begin_own(struct region *r, int counted) {
    j_decompress_ptr c = &r->cinfo;
    struct entropy_layout *e = (struct entropy_layout *)c->entropy;
    if (scan == NULL)
        scan = malloc(sizeof(*scan));
    if (scan == NULL || e == NULL || e->decode_mcu == NULL || !takes(c) || !cells_setup(scan, c)) {
        if (counted)
            count(1);
        return;
    }
    int rows = region_mcu_rows(r);
    /* whole cells: up to one cell's MCUs past the rows */
    size_t need = ((size_t)scan->mcus_per_row * rows + scan->mcus_per_cell) * scan->blocks_in_mcu * DCTSIZE2;
    if (need * sizeof(JCOEF) > MAX_COEF_BYTES) {
        if (counted)
            count(1);
        return;
    }
    if (need > coef_size) {
        free(coef_mem);
        coef_mem = malloc(need * sizeof(JCOEF));
        coef_size = coef_mem != NULL ? need : 0;
    }
    if (coef_mem == NULL) {
        if (counted)
            count(1);
        return;
    }
    if (cells_decode(scan, &work, c->src->next_input_byte, c->src->bytes_in_buffer, rows, STREAMS, coef_mem) != 0) {
        if (counted)
            count(2);  /* libjpeg decodes it and says what it says */
        return;
    }
    r->own.active = 1;
    r->own.ready = (long)scan->mcus_per_row * rows;
    r->own.blocks_in_mcu = scan->blocks_in_mcu;
    r->own.coef = coef_mem;
    e->decode_mcu = copy_decode_mcu;
    if (counted)
        count(0);
}

/* ---- the process's choice, and the self-test behind ENTROPY_OWN ---- */
static pthread_once_t once = PTHREAD_ONCE_INIT;
static int hook_works, default_own;
static char hook_reason[200], default_reason[300];

/* A JPEG with restart markers (80x48, 4:2:0, q90, a marker every 2 MCUs) made with libjpeg, into
 * malloc'ed memory; NULL on failure. */
static unsigned char *test_jpeg(unsigned long *size) {
    struct jpeg_compress_struct c;
    struct jpeg_stop stop;
    unsigned char *out = NULL, row[80 * 3];
    *size = 0;
    c.err = jpeg_stop_init(&stop);
    if (setjmp(stop.jump)) {
        jpeg_destroy_compress(&c);
        free(out);
        return NULL;
    }
    jpeg_create_compress(&c);
    jpeg_mem_dest(&c, &out, size);
    c.image_width = 80;
    c.image_height = 48;
    c.input_components = 3;
    c.in_color_space = JCS_RGB;
    jpeg_set_defaults(&c);
    jpeg_set_quality(&c, 90, TRUE);
    c.restart_interval = 2;
    jpeg_start_compress(&c, TRUE);
    while (c.next_scanline < c.image_height) {
        unsigned y = c.next_scanline;
        for (unsigned x = 0; x < 80; x++) {  /* edges and texture: AC codes of many lengths */
            row[3 * x] = (unsigned char)((x * 7 + y * 3) ^ (x * y));
            row[3 * x + 1] = (unsigned char)(((x / 5 + y / 3) & 1) * 200 + x);
            row[3 * x + 2] = (unsigned char)(x * x + 5 * y);
        }
        JSAMPROW p = row;
        jpeg_write_scanlines(&c, &p, 1);
    }
    jpeg_finish_compress(&c);
    jpeg_destroy_compress(&c);
    return out;
}

/* The whole test JPEG at scale num/8 through `choice`; REGION_* status; *hooked: every MCU came from
 * the own decoder. */
static int test_decode(const unsigned char *data, unsigned long size, int num, int choice, unsigned char *pixels,
                       int *hooked) {
    struct region r;
    int W = (80 * num + 7) / 8, H = (48 * num + 7) / 8;
    int status = region_start(&r, data, size, num, NULL, 0, 0, W, H, 0, choice);
    if (status == REGION_OK)
        status = region_read(&r, pixels, (size_t)W * 4);
    *hooked = r.own.active && r.own.next_mcu == (long)r.cinfo.MCUs_per_row * (long)r.cinfo.MCU_rows_in_scan;
    region_end(&r);
    return status;
}

static void self_test(void) {
    struct jpeg_error_mgr jerr;
    jpeg_std_error(&jerr);
    const char *copyright = jerr.jpeg_message_table != NULL && jerr.last_jpeg_message >= JMSG_COPYRIGHT
                                ? jerr.jpeg_message_table[JMSG_COPYRIGHT]
                                : NULL;
    if (!HOOK_BUILT) {
        snprintf(hook_reason, sizeof(hook_reason), "built against headers other than libjpeg-turbo 2.x/3.x");
        return;
    }
    if (copyright == NULL || (strstr(copyright, "libjpeg-turbo") == NULL && strstr(copyright, "D. R. Commander") == NULL)) {
        snprintf(hook_reason, sizeof(hook_reason), "the libjpeg loaded is not libjpeg-turbo");
        return;
    }
    unsigned long size;
    unsigned char *jpeg = test_jpeg(&size);
    unsigned char *a = malloc(80 * 48 * 4), *b = malloc(80 * 48 * 4);
    int ok = jpeg != NULL && a != NULL && b != NULL;
    for (int num = 8; ok && num >= 4; num -= 4) {
        int hooked = 0, plain = 0;
        memset(a, 0, 80 * 48 * 4);
        memset(b, 1, 80 * 48 * 4);
        ok = test_decode(jpeg, size, num, ENTROPY_LIBJPEG, a, &plain) == REGION_OK && !plain &&
             test_decode(jpeg, size, num, ENTROPY_TRIAL, b, &hooked) == REGION_OK && hooked &&
             memcmp(a, b, (size_t)((80 * num + 7) / 8) * ((48 * num + 7) / 8) * 4) == 0;
    }
    free(jpeg);
    free(a);
    free(b);
    if (ok) {
        hook_works = 1;
        snprintf(hook_reason, sizeof(hook_reason), "libjpeg-turbo %s, hook self-test passed",
                 STRINGIFY(LIBJPEG_TURBO_VERSION));
    } else {
        snprintf(hook_reason, sizeof(hook_reason), "the hook's self-test failed against the libjpeg loaded");
    }
}

static void decide(void) {
    self_test();
    const char *env = getenv("IMAGENET_SHARDS_ENTROPY");
    if (env != NULL && strcmp(env, "libjpeg") == 0) {
        snprintf(default_reason, sizeof(default_reason), "IMAGENET_SHARDS_ENTROPY=libjpeg");
    } else if (env != NULL && env[0] != 0 && strcmp(env, "own") != 0) {
        snprintf(default_reason, sizeof(default_reason),
                 "error: IMAGENET_SHARDS_ENTROPY=%.60s is neither own nor libjpeg (unset it or pick one)", env);
    } else if (!hook_works) {
        snprintf(default_reason, sizeof(default_reason), "own decoder unavailable: %s", hook_reason);
    } else {
        default_own = 1;
        snprintf(default_reason, sizeof(default_reason), "own decoder, %d cells interleaved (%s)", STREAMS,
                 hook_reason);
    }
}

const char *entropy_default_path(const char **reason, int *usable) {
    pthread_once(&once, decide);
    if (reason != NULL)
        *reason = default_reason;
    if (usable != NULL)
        *usable = hook_works;
    return default_own ? "own" : "libjpeg";
}

void entropy_begin(struct region *r, int choice) {
    memset(&r->own, 0, sizeof(r->own));
    if (choice == ENTROPY_DEFAULT || choice == ENTROPY_OWN) {
        pthread_once(&once, decide);
        choice = (choice == ENTROPY_DEFAULT ? default_own : hook_works) ? ENTROPY_OWN : ENTROPY_LIBJPEG;
    }
    if (choice != ENTROPY_LIBJPEG)
        begin_own(r, choice != ENTROPY_TRIAL);
}
