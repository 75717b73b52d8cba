/* A table-driven Huffman decoder for the restart cells of a baseline JPEG, one stream at a time or
 * 2 / 4 cells interleaved in one core (the loader's entropy decoder: jpegcrop_entropy.c hooks it
 * into libjpeg; bench/jpeg_entropy/ measures it; see jpegcrop_cells.c). */
#ifndef JPEGCROP_CELLS_H
#define JPEGCROP_CELLS_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <jpeglib.h>

#define CELLS_LOOKAHEAD 10 /* bits looked up at once; longer codes take the canonical search */
/* MCUs per cell at most (ours: 2): keeps a cell's DC sums far from int overflow */
#define CELLS_MAX_INTERVAL 1024

struct cell_table {
    uint16_t lookup[1 << CELLS_LOOKAHEAD]; /* symbol << 8 | code length; 0: code longer than the lookahead */
    /* AC tables: a code and its value bits together within the lookahead (most of them at q90):
     * value << 16 | run << 8 | bits in all; 0: not such a pair (EOB, ZRL, longer) */
    int32_t fast_ac[1 << CELLS_LOOKAHEAD];
    int32_t maxcode[18];                    /* largest code of each length (-1: none); [17] a sentinel */
    int32_t valoffset[18];
    uint8_t huffval[256];
};

/* What decoding a scan's cells needs: from libjpeg's own parse of the headers (after
 * jpeg_start_decompress, so that the MCU geometry is set), plus the tables built from them. */
struct cell_scan {
    int blocks_in_mcu;
    int comp_of_block[D_MAX_BLOCKS_IN_MCU];
    int mcus_per_row, mcu_rows;
    int mcus_per_cell;             /* the restart interval */
    struct cell_table tables[8];   /* dc 0..3, ac 4..7 */
    const struct cell_table *dc[D_MAX_BLOCKS_IN_MCU], *ac[D_MAX_BLOCKS_IN_MCU];
};

/* Scratch memory kept between images: the unstuffed cells and their offsets. */
struct cell_work {
    uint8_t *bytes;
    size_t bytes_size;
    uint32_t *starts;  /* byte offset of each cell in `bytes`; starts[cells] = the end */
    size_t starts_size;
    size_t end;        /* where the data ends in `bytes` (zeros follow) */
};

/* 0 when the scan is not one this decoder handles: not one interleaved sequential Huffman scan of
 * 8-bit data with a restart interval of 1..CELLS_MAX_INTERVAL MCUs (sampling factors are the
 * caller's rule: jpegcrop_entropy.c). */
int cells_setup(struct cell_scan *sc, j_decompress_ptr cinfo);

/* Decodes the cells of MCU rows [0, mcu_rows) from the entropy-coded data at `data` (`size` bytes,
 * up to the end of the file) into `coef` (blocks of 64 JCOEFs in natural order, MCU after MCU,
 * zeroed here), `streams` (1, 2 or 4) cells at a time. Returns 0, or -1 when the data is corrupt in
 * a way libjpeg warns about (a bad code, a cell that ends early or has bytes left over, a marker
 * out of place). */
int cells_decode(const struct cell_scan *sc, struct cell_work *w, const uint8_t *data, size_t size, int mcu_rows,
                 int streams, JCOEF *coef);

void cells_free(struct cell_work *w);

#endif
