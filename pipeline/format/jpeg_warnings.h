/* Which libjpeg warnings say a stored JPEG is damaged: the one rule, shared by prepare-shards'
 * validation (pipeline/prepare/_jpegtran.c, also audit-shards --deep through its `check`) and the
 * loader's decoder (train/loader/_jpegcrop.c).
 *
 * libjpeg only *warns* about corrupt entropy-coded data (a bad Huffman code, a segment that ends
 * early, a lost restart marker, extraneous bytes before a marker) and pads with grey; Pillow drops
 * those warnings. Warnings about metadata say nothing about the pixels and are benign. Every other
 * one is about the entropy-coded data -- including "extraneous bytes before marker 0xd9": a scan
 * that ends before its data does is how a corrupt baseline scan usually shows (Huffman codes
 * resynchronise, so garbage mid-scan decodes to wrong blocks without any other complaint).
 */
#ifndef IMAGENET_SHARDS_JPEG_WARNINGS_H
#define IMAGENET_SHARDS_JPEG_WARNINGS_H

#include <stdio.h>
#include <jpeglib.h>
#include <jerror.h>

static int jpeg_warning_is_benign(j_common_ptr cinfo) {
    int code = cinfo->err->msg_code;
    return code == JWRN_JFIF_MAJOR || code == JWRN_ADOBE_XFORM || code == JWRN_BOGUS_ICC;
}

#endif
