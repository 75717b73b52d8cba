/* The one libjpeg error manager of both extensions, and the one rule of which warnings say a stored
 * JPEG is damaged: prepare-shards' validation and rewrite (_jpegtran.c, also audit-shards --deep
 * through its `check`) and the loader's decoder (jpegcrop_region.c).
 *
 * libjpeg only *warns* about corrupt entropy-coded data (a bad Huffman code, a segment that ends
 * early, a lost restart marker, extraneous bytes before a marker) and pads with grey; Pillow drops
 * those warnings. Warnings about metadata say nothing about the pixels and are benign. Every other
 * one is about the entropy-coded data -- including "extraneous bytes before marker 0xd9": a scan
 * that ends before its data does is how a corrupt baseline scan usually shows (Huffman codes
 * resynchronise, so garbage mid-scan decodes to wrong blocks without any other complaint).
 *
 * So libjpeg stops at an error *and* at a warning that is not benign: either one longjmps to the
 * caller's setjmp(stop.jump) with `warning` (1: a warning about the data, 0: an error) and
 * libjpeg's text in `message`. Usage:
 *     struct jpeg_stop stop;
 *     cinfo.err = jpeg_stop_init(&stop);
 *     if (setjmp(stop.jump)) { ... stop.warning, stop.message ... }
 */
#ifndef IMAGENET_SHARDS_JPEG_ERRORS_H
#define IMAGENET_SHARDS_JPEG_ERRORS_H

#include <setjmp.h>
#include <stdio.h>
#include <jpeglib.h>
#include <jerror.h>

struct jpeg_stop {
    struct jpeg_error_mgr pub;
    jmp_buf jump;
    int warning;                     /* 1: stopped at a warning about the data, 0: at an error */
    char message[JMSG_LENGTH_MAX];   /* libjpeg's text for it */
};

static inline int jpeg_warning_is_benign(j_common_ptr cinfo) {
    int code = cinfo->err->msg_code;
    return code == JWRN_JFIF_MAJOR || code == JWRN_ADOBE_XFORM || code == JWRN_BOGUS_ICC;
}

static inline void jpeg_stop_on_error(j_common_ptr cinfo) {
    struct jpeg_stop *stop = (struct jpeg_stop *)cinfo->err;
    stop->warning = 0;
    (*cinfo->err->format_message)(cinfo, stop->message);
    longjmp(stop->jump, 1);
}

static inline void jpeg_stop_on_message(j_common_ptr cinfo, int level) {
    if (level >= 0 || jpeg_warning_is_benign(cinfo))
        return;  /* trace messages, and warnings about metadata */
    struct jpeg_stop *stop = (struct jpeg_stop *)cinfo->err;
    stop->warning = 1;
    (*cinfo->err->format_message)(cinfo, stop->message);
    longjmp(stop->jump, 1);
}

/* libjpeg's standard manager with our two handlers; returns what cinfo.err takes. */
static inline struct jpeg_error_mgr *jpeg_stop_init(struct jpeg_stop *stop) {
    jpeg_std_error(&stop->pub);
    stop->pub.error_exit = jpeg_stop_on_error;
    stop->pub.emit_message = jpeg_stop_on_message;
    stop->warning = 0;
    stop->message[0] = 0;
    return &stop->pub;
}

#endif
