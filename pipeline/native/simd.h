/* Where the x86-64 SIMD paths of the resampler and the pixel kernel may be used (GCC or Clang on
 * Linux x86-64), and VECTOR_CLONES: an AVX2 clone beside the default for loops the compiler
 * vectorises, picked at load time. Elsewhere the portable loops alone. */
#ifndef IMAGENET_SHARDS_SIMD_H
#define IMAGENET_SHARDS_SIMD_H

#if defined(__x86_64__) && defined(__GNUC__) && defined(__linux__)
#include <immintrin.h>
#define X86_SIMD 1
#define VECTOR_CLONES __attribute__((target_clones("avx2", "default")))
#else
#define X86_SIMD 0
#define VECTOR_CLONES
#endif

#endif
