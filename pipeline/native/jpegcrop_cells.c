/* A hand-written, table-driven Huffman decoder for the restart cells of our stored JPEGs: the
 * loader's entropy decoding (jpegcrop_entropy.c puts it in libjpeg's place; libjpeg still does
 * everything else, and everything for the files this does not take).
 *
 * Why hand-written: libjpeg-turbo (2.1.5 here, and upstream declined to change it:
 * libjpeg-turbo#910) decodes every MCU of a file with restart markers with decode_mcu_slow
 * (jdhuff.c sets usefast = 0 when restart_interval != 0), and our stored JPEGs always have markers
 * (a ~32 px grid, docs/format.md). A cell is an independent bitstream: it starts byte aligned with
 * the DC predictions at zero and ends at its RSTn marker. So here the cells are first split at
 * their markers and unstuffed (FF 00 -> FF) into one buffer, one pass with memchr; each is then
 * decoded with a 64-bit bit buffer refilled branch-free by one unaligned big-endian load per
 * symbol (F. Giesen, "Reading bits in far too many ways", variant 4), a 10-bit lookup per Huffman
 * code and, for AC, one lookup for a code and its value bits together (longer codes: libjpeg's
 * canonical search) -- no marker test in the inner loop at all. With `streams` 2 or 4, that many
 * cells (side by side in a row: every cell holds the same number of MCUs) are decoded in lock
 * step, symbol by symbol: one dependency chain through the bit buffer per cell, so the core
 * overlaps their load -> lookup -> shift latencies.
 *
 * Measured (issue 34's prototype, bench/jpeg_entropy/bench_entropy.py, docs/loader.md): on 300
 * stored ImageNet-like JPEGs with the loader's 224 px crops, the region decode 492 -> 317 us per
 * image (-36 %) with 2 cells interleaved (1 cell: -23 %; 4 cells: -34 %; libjpeg's own fast path
 * allowed inside a cell, a patched jdhuff.c: -7 %); coefficients and pixels equal to libjpeg's on
 * every image. The loader uses 2.
 *
 * Output: what libjpeg's decode_mcu writes (coefficients in natural order, not dequantized,
 * (JCOEF) casts as there), MCU after MCU. Corrupt data is flagged where libjpeg warns (a code no
 * table has, a cell that needs bits past its end, whole bytes left over before its marker, a marker
 * out of sequence); the coefficients of a corrupt cell are then not libjpeg's (it pads with zeros),
 * so the caller decodes such a file with libjpeg instead, which then says what it says.
 */
#include "jpegcrop_cells.h"

#include <stdlib.h>
#include <string.h>

/* jpeg_natural_order with the 16 extra entries libjpeg has for a corrupt k past 63 */
static const int natural_order[64 + 16] = {
    0,  1,  8,  16, 9,  2,  3,  10, 17, 24, 32, 25, 18, 11, 4,  5,  12, 19, 26, 33, 40, 48,
    41, 34, 27, 20, 13, 6,  7,  14, 21, 28, 35, 42, 49, 56, 57, 50, 43, 36, 29, 22, 15, 23,
    30, 37, 44, 51, 58, 59, 52, 45, 38, 31, 39, 46, 53, 60, 61, 54, 47, 55, 62, 63, 63, 63,
    63, 63, 63, 63, 63, 63, 63, 63, 63, 63, 63, 63, 63, 63};

static int build_table(struct cell_table *t, const JHUFF_TBL *h, int ac) {
    int size[257], code[257], p = 0;
    if (h == NULL)
        return 0;
    for (int l = 1; l <= 16; l++)
        for (int i = 0; i < h->bits[l]; i++) {
            if (p >= 256)
                return 0;
            size[p++] = l;
        }
    size[p] = 0;
    int n = p, c = 0, si = size[0];
    p = 0;
    while (size[p]) {
        while (size[p] == si)
            code[p++] = c++;
        if (c >= (1 << si))
            return 0;  /* not a prefix code */
        c <<= 1;
        si++;
    }
    p = 0;
    for (int l = 1; l <= 16; l++) {
        if (h->bits[l]) {
            t->valoffset[l] = p - code[p];
            p += h->bits[l];
            t->maxcode[l] = code[p - 1];
        } else {
            t->maxcode[l] = -1;
        }
    }
    t->maxcode[17] = 0x7FFFFFFF;
    memcpy(t->huffval, h->huffval, 256);
    memset(t->lookup, 0, sizeof(t->lookup));
    p = 0;
    for (int l = 1; l <= CELLS_LOOKAHEAD; l++)
        for (int i = 0; i < h->bits[l]; i++, p++) {
            int first = code[p] << (CELLS_LOOKAHEAD - l);
            uint16_t e = (uint16_t)(h->huffval[p] << 8 | l);
            for (int k = 0; k < 1 << (CELLS_LOOKAHEAD - l); k++)
                t->lookup[first + k] = e;
        }
    (void)n;
    for (int i = 0; ac && i < 1 << CELLS_LOOKAHEAD; i++) {
        int l = t->lookup[i] & 0xFF, rs = t->lookup[i] >> 8, s = rs & 15;
        t->fast_ac[i] = 0;
        if (l == 0 || s == 0 || l + s > CELLS_LOOKAHEAD)
            continue;
        int v = (i >> (CELLS_LOOKAHEAD - l - s)) & ((1 << s) - 1);
        if (v < 1 << (s - 1))
            v += 1 - (1 << s);
        t->fast_ac[i] = (int32_t)((uint32_t)v << 16) | (rs >> 4) << 8 | (l + s);
    }
    return 1;
}

int cells_setup(struct cell_scan *sc, j_decompress_ptr cinfo) {
    if (cinfo->progressive_mode || cinfo->arith_code || cinfo->data_precision != 8 ||
        cinfo->comps_in_scan != cinfo->num_components || cinfo->comps_in_scan > 4 ||
        cinfo->restart_interval == 0 || cinfo->restart_interval > CELLS_MAX_INTERVAL ||
        cinfo->blocks_in_MCU > D_MAX_BLOCKS_IN_MCU || cinfo->Ss != 0 || cinfo->Se != DCTSIZE2 - 1 ||
        cinfo->Ah != 0 || cinfo->Al != 0)
        return 0;
    sc->blocks_in_mcu = cinfo->blocks_in_MCU;
    sc->mcus_per_row = (int)cinfo->MCUs_per_row;
    sc->mcu_rows = (int)cinfo->MCU_rows_in_scan;
    sc->mcus_per_cell = (int)cinfo->restart_interval;
    int built = 0;
    for (int b = 0; b < sc->blocks_in_mcu; b++) {
        int ci = cinfo->MCU_membership[b];
        jpeg_component_info *comp = cinfo->cur_comp_info[ci];
        int d = comp->dc_tbl_no, a = comp->ac_tbl_no;
        sc->comp_of_block[b] = ci;
        if (!(built & 1 << d) && !build_table(&sc->tables[d], cinfo->dc_huff_tbl_ptrs[d], 0))
            return 0;
        if (!(built & 1 << (4 + a)) && !build_table(&sc->tables[4 + a], cinfo->ac_huff_tbl_ptrs[a], 1))
            return 0;
        built |= 1 << d | 1 << (4 + a);
        sc->dc[b] = &sc->tables[d];
        sc->ac[b] = &sc->tables[4 + a];
    }
    return 1;
}

/* Zero bytes after the last cell: the most one MCU can read past the data. Up to 10 blocks of
 * at most 64 symbols of at most 31 bits (a code and its value bits), plus the refill's 8-byte
 * load: decode_group clamps each cell's pointer to the end of the data before every MCU, so
 * damaged data can run past its cell but never past this. */
#define CELLS_PAD (D_MAX_BLOCKS_IN_MCU * 64 * 4 + 64)

/* The first `cells` cells, split at their markers and unstuffed into w->bytes (CELLS_PAD zero
 * bytes after the last); w->starts[i] their offsets, w->end the end of the data. -1: a marker out
 * of place. */
static int split_cells(struct cell_work *w, const uint8_t *data, size_t size, int cells, int last_in_scan) {
    if (w->bytes_size < size + CELLS_PAD) {
        free(w->bytes);
        w->bytes = malloc(size + CELLS_PAD);
        w->bytes_size = w->bytes ? size + CELLS_PAD : 0;
    }
    if (w->starts_size < (size_t)cells + 1) {
        free(w->starts);
        w->starts = malloc(((size_t)cells + 1) * sizeof(uint32_t));
        w->starts_size = w->starts ? (size_t)cells + 1 : 0;
    }
    if (w->bytes == NULL || w->starts == NULL)
        return -1;
    uint8_t *out = w->bytes;
    size_t o = 0, i = 0;
    int cell = 0;
    w->starts[0] = 0;
    while (cell < cells) {
        const uint8_t *q = i + 1 < size ? memchr(data + i, 0xFF, size - i - 1) : NULL;
        if (q == NULL)
            return -1;
        size_t at = (size_t)(q - data);
        memcpy(out + o, data + i, at - i);
        o += at - i;
        uint8_t b = q[1];
        if (b == 0x00) {
            out[o++] = 0xFF;
            i = at + 2;
        } else if (b == 0xFF) {
            i = at + 1;  /* fill byte before a marker */
        } else if (b >= 0xD0 && b <= 0xD7) {
            if (b != 0xD0 + (cell & 7))
                return -1;
            w->starts[++cell] = (uint32_t)o;
            i = at + 2;
        } else {
            if (cell != last_in_scan)
                return -1;  /* only the scan's last cell ends at another marker (EOI) */
            w->starts[++cell] = (uint32_t)o;
            i = at;
        }
    }
    memset(out + o, 0, CELLS_PAD);
    w->end = o;
    return 0;
}

struct bits {
    const uint8_t *p;
    uint64_t buf;  /* the next bits, first at the top */
    unsigned cnt;  /* how many of them are valid */
};

static inline uint64_t load_be64(const uint8_t *p) {
    uint64_t v;
    memcpy(&v, p, 8);
    return __builtin_bswap64(v);
}

/* at least 56 valid bits after it: room for a code (16) and its value (15) */
#define REFILL(b)                                  \
    do {                                           \
        (b).buf |= load_be64((b).p) >> (b).cnt;    \
        (b).p += (63 - (b).cnt) >> 3;              \
        (b).cnt |= 56;                             \
    } while (0)

static inline __attribute__((always_inline)) int huff_symbol(struct bits *b, const struct cell_table *t, int *bad) {
    unsigned e = t->lookup[b->buf >> (64 - CELLS_LOOKAHEAD)];
    unsigned len = e & 0xFF;
    if (__builtin_expect(len != 0, 1)) {
        b->buf <<= len;
        b->cnt -= len;
        return (int)(e >> 8);
    }
    for (int l = CELLS_LOOKAHEAD + 1; l <= 16; l++) {
        int32_t code = (int32_t)(b->buf >> (64 - l));
        if (code <= t->maxcode[l]) {
            b->buf <<= l;
            b->cnt -= l;
            return t->huffval[(code + t->valoffset[l]) & 0xFF];
        }
    }
    *bad = 1;  /* libjpeg: JWRN_HUFF_BAD_CODE */
    b->buf <<= 16;
    b->cnt -= 16;
    return 0;
}

/* the next s bits (1..15) as a signed value: libjpeg's HUFF_EXTEND */
static inline __attribute__((always_inline)) int extend_bits(struct bits *b, int s) {
    /* the value's first bit is 0 for a negative one: then add 1 - 2^s */
    int64_t negative = (int64_t)~b->buf >> 63;
    int v = (int)(b->buf >> (64 - s)) + (int)(negative & (int64_t)(((uint64_t)-1 << s) + 1));
    b->buf <<= s;
    b->cnt -= (unsigned)s;
    return v;
}

/* S cells from `c` on, `mcus` MCUs each, in lock step. */
static inline __attribute__((always_inline)) void decode_group(const struct cell_scan *sc, const struct cell_work *w,
                                                               int c, const int S, int mcus, JCOEF *coef, int *bad) {
    struct bits b[4];
    int pred[4][4];
    JCOEF *out[4];
    const int bim = sc->blocks_in_mcu;
#pragma GCC unroll 4
    for (int s = 0; s < S; s++) {
        b[s].p = w->bytes + w->starts[c + s];
        b[s].buf = 0;
        b[s].cnt = 0;
        pred[s][0] = pred[s][1] = pred[s][2] = pred[s][3] = 0;
        out[s] = coef + (size_t)(c + s) * sc->mcus_per_cell * bim * 64;
    }
    const uint8_t *end = w->bytes + w->end;
    for (int m = 0; m < mcus; m++) {
#pragma GCC unroll 4
        for (int s = 0; s < S; s++)
            if (__builtin_expect(b[s].p > end, 0)) {  /* damaged: ran past the data (CELLS_PAD) */
                *bad = 1;
                b[s].p = end;
            }
        for (int blk = 0; blk < bim; blk++) {
            const struct cell_table *dc = sc->dc[blk], *ac = sc->ac[blk];
            const int ci = sc->comp_of_block[blk];
            int k[4];
            JCOEF *q[4];
#pragma GCC unroll 4
            for (int s = 0; s < S; s++) {
                q[s] = out[s] + (size_t)(m * bim + blk) * 64;
                REFILL(b[s]);
                int t = huff_symbol(&b[s], dc, bad);
                int d = t ? extend_bits(&b[s], t) : 0;
                pred[s][ci] += d;
                q[s][0] = (JCOEF)pred[s][ci];
                k[s] = 1;
            }
            for (;;) {
                int live = 0;
#pragma GCC unroll 4
                for (int s = 0; s < S; s++) {
                    if (k[s] < 64) {
                        live = 1;
                        REFILL(b[s]);
                        int32_t f = ac->fast_ac[b[s].buf >> (64 - CELLS_LOOKAHEAD)];
                        if (f != 0) {
                            b[s].buf <<= f & 0xFF;
                            b[s].cnt -= f & 0xFF;
                            k[s] += (f >> 8) & 15;
                            q[s][natural_order[k[s]]] = (JCOEF)(f >> 16);
                            k[s]++;
                            continue;
                        }
                        int rs = huff_symbol(&b[s], ac, bad);
                        int r = rs >> 4, t = rs & 15;
                        if (t) {
                            k[s] += r;
                            q[s][natural_order[k[s]]] = (JCOEF)extend_bits(&b[s], t);
                            k[s]++;
                        } else {
                            k[s] = r == 15 ? k[s] + 16 : 64;
                        }
                    }
                }
                if (!live)
                    break;
            }
        }
    }
#pragma GCC unroll 4
    for (int s = 0; s < S; s++) {  /* each cell used exactly its bytes, to the last partial one */
        size_t used = (size_t)(b[s].p - (w->bytes + w->starts[c + s])) * 8 - b[s].cnt;
        size_t have = (size_t)(w->starts[c + s + 1] - w->starts[c + s]) * 8;
        if (used > have || have - used >= 8)
            *bad = 1;
    }
}

static void decode_1(const struct cell_scan *sc, const struct cell_work *w, int c, int mcus, JCOEF *coef, int *bad) {
    decode_group(sc, w, c, 1, mcus, coef, bad);
}

static void decode_2(const struct cell_scan *sc, const struct cell_work *w, int c, int mcus, JCOEF *coef, int *bad) {
    decode_group(sc, w, c, 2, mcus, coef, bad);
}

static void decode_4(const struct cell_scan *sc, const struct cell_work *w, int c, int mcus, JCOEF *coef, int *bad) {
    decode_group(sc, w, c, 4, mcus, coef, bad);
}

int cells_decode(const struct cell_scan *sc, struct cell_work *w, const uint8_t *data, size_t size, int mcu_rows,
                 int streams, JCOEF *coef) {
    long total = (long)sc->mcus_per_row * sc->mcu_rows;
    long want = (long)sc->mcus_per_row * (mcu_rows < sc->mcu_rows ? mcu_rows : sc->mcu_rows);
    int per = sc->mcus_per_cell;
    int cells = (int)((want + per - 1) / per), last_in_scan = (int)((total + per - 1) / per) - 1;
    if (split_cells(w, data, size, cells, last_in_scan) != 0)
        return -1;
    int full = cells, bad = 0;  /* full cells: every one but possibly the scan's last */
    long tail = total - (long)last_in_scan * per;
    if (cells - 1 == last_in_scan && tail < per)
        full = cells - 1;
    memset(coef, 0, (size_t)cells * per * sc->blocks_in_mcu * 64 * sizeof(JCOEF));
    int c = 0;
    if (streams >= 4)
        for (; c + 4 <= full; c += 4)
            decode_4(sc, w, c, per, coef, &bad);
    if (streams >= 2)
        for (; c + 2 <= full; c += 2)
            decode_2(sc, w, c, per, coef, &bad);
    for (; c < full; c++)
        decode_1(sc, w, c, per, coef, &bad);
    if (full < cells)
        decode_1(sc, w, c, (int)tail, coef, &bad);
    return bad ? -1 : 0;
}

void cells_free(struct cell_work *w) {
    free(w->bytes);
    free(w->starts);
    memset(w, 0, sizeof(*w));
}
