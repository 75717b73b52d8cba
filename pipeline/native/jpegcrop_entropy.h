/* Which entropy decoder a region decode uses: libjpeg's own, or jpegcrop_cells.c's in its place
 * (see jpegcrop_entropy.c). */
#ifndef JPEGCROP_ENTROPY_H
#define JPEGCROP_ENTROPY_H

#include <stdio.h>

#include <jpeglib.h>

enum entropy_choice {
    ENTROPY_LIBJPEG = 0,  /* libjpeg's decode_mcu, as libjpeg ships it */
    ENTROPY_OWN = 1,      /* jpegcrop_cells.c for the files it takes, when the hook passed its self-test */
    ENTROPY_DEFAULT = 2,  /* the process's choice: IMAGENET_SHARDS_ENTROPY, read once (own unless "libjpeg") */
    ENTROPY_TRIAL = 3,    /* the self-test's own run: OWN without asking whether the hook works */
};

/* The own decoder's state for one region decode (part of struct region). */
struct entropy_state {
    int active;           /* decode_mcu is the copy below */
    int retry;            /* the copy ran out of decoded MCUs: decode again with libjpeg */
    long next_mcu, ready; /* the next MCU libjpeg asks for; how many are decoded */
    int blocks_in_mcu;
    const JCOEF *coef;    /* the decoded MCUs, MCU after MCU (per-thread memory) */
};

struct region;

/* After jpeg_start_decompress and the region's rows are known: puts the own decoder in libjpeg's
 * place when `choice` asks for it and the file is one it takes, and decodes the cells of the MCU
 * rows the region needs (or leaves libjpeg's path as it is: nothing to do for the caller). */
void entropy_begin(struct region *r, int choice);

/* The MCU rows libjpeg's region_read asks decode_mcu for (after region_start): those up to the
 * region's last row, plus one for the fancy upsampling's context. */
int region_mcu_rows(const struct region *r);

/* The path ENTROPY_DEFAULT takes in this process ("own" or "libjpeg") and why, one line; *usable:
 * whether ENTROPY_OWN can take the own path (the hook passed its self-test), whatever the default. */
const char *entropy_default_path(const char **reason, int *usable);

/* Counts since the process started: region decodes the own decoder did, and those it handed back
 * to libjpeg (the file not one it takes; the data flagged as damaged; libjpeg asked for more MCUs
 * than were decoded). */
struct entropy_counts {
    long own, not_taken, flagged, retried;
};
void entropy_get_counts(struct entropy_counts *out);
void entropy_count_retry(void);

#endif
