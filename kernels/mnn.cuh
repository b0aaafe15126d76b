// Copyright 2026 xfeat_ros contributors
// SPDX-License-Identifier: Apache-2.0
//
// mnn.cuh: device helpers of the mutual-nearest-neighbour matchers shared by match.cu,
// match_tc.cu and match_refine.cu: the packed 64-bit keys (orderable float bits << 32 |
// 0xFFFFFFFF - index, so that atomicMax keeps the highest similarity and, on ties, the
// smaller index) and the device counts, the tensor-core tables' tagged bits, and where a
// tile lies (tile_origin). No entry point; the loader puts this text before each of the
// three files (after its #define preamble), so NVRTC needs no include path.
//
// Counts: count0 / count1 point to a device int (read on the device, clamped
// to bound) or are null, in which case bound is the count itself.
//
// The macros the files are given (DESC_DIM, TILE; see their headers) are checked here
// once, before any file is read.

#ifndef DESC_DIM
#error "DESC_DIM must be defined by the loader"
#endif
#if DESC_DIM % 32 != 0
#error "DESC_DIM must be a multiple of 32"
#endif
#ifndef TILE
#error "TILE must be defined by the loader"
#endif
#ifndef PT_FIELDS
#error "PT_FIELDS and the PT_<FIELD> words must be defined by the loader"
#endif
#if TILE != 64
#error "the matchers are written for 64 x 64 tiles"
#endif

typedef unsigned long long u64;

// The tensor-core matcher's tables (match_tc.cu writes them, match_refine.cu reads them):
// a tile's two largest values of a row or column as orderable bits with the low TAG_BITS
// replaced by the value's place in the tile (0..63): tagged(v, p) <= orderable(v) <=
// tagged(v, p) | TAG_MASK, so the tables bound every value from above (the refinement ORs
// TAG_MASK back in) and the largest knows where it is. 0: none. Two values that tie (or
// differ only in the tag bits) leave a second that equals the first once both are rounded
// up, so the refinement re-checks the whole tile row or column and never trusts a place
// there.
#define TAG_BITS 6
#define TAG_MASK ((1u << TAG_BITS) - 1u)
#if TILE > (1 << TAG_BITS)
#error "a tile's places must fit in TAG_BITS"
#endif

__device__ __forceinline__ unsigned int orderable(float f)
{
    const unsigned int u = __float_as_uint(f);
    return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

__device__ __forceinline__ float from_orderable(unsigned int o)
{
    return __uint_as_float((o & 0x80000000u) ? (o & 0x7FFFFFFFu) : ~o);
}

__device__ __forceinline__ u64 pack(float s, int idx)
{
    return ((u64)orderable(s) << 32) | (u64)(0xFFFFFFFFu - (unsigned int)idx);
}

__device__ __forceinline__ int unpack_index(u64 key)
{
    return (int)(0xFFFFFFFFu - (unsigned int)(key & 0xFFFFFFFFull));
}

// A thread's 4 x 4 similarity accumulators, cleared (both matchers' tiles).
__device__ __forceinline__ void zero_tile(float (&acc)[4][4])
{
#pragma unroll
    for (int p = 0; p < 4; ++p) {
#pragma unroll
        for (int q = 0; q < 4; ++q) {
            acc[p][q] = 0.0f;
        }
    }
}

__device__ __forceinline__ int resolve_count(const int* count, int bound)
{
    return count ? min(max(*count, 0), bound) : bound;
}

// Where a matcher's 64 x 64 tile lies: the two sides' counts and the tile's first row
// (blockIdx.y) and column (blockIdx.x). False when it lies past either count (the block
// then has nothing to do).
struct TileOrigin {
    int n0;
    int n1;
    int i_base;
    int j_base;
};

__device__ __forceinline__ bool tile_origin(const int* count0, int bound0, const int* count1,
                                            int bound1, TileOrigin& o)
{
    o.n0 = resolve_count(count0, bound0);
    o.n1 = resolve_count(count1, bound1);
    o.i_base = blockIdx.y * TILE;
    o.j_base = blockIdx.x * TILE;
    return o.i_base < o.n0 && o.j_base < o.n1;
}

// Row `pair` of a pair table (the *_pairs entry points): PT_FIELDS 64-bit words, PT_<FIELD>
// the word of each field (xfeat_ros.features.gpu.kernels.PAIR_TABLE); pointers as integers, counts as
// a pointer or 0 (then the bound is the count).
__device__ __forceinline__ const u64* pair_row(const u64* table, unsigned int pair)
{
    return table + (long long)pair * PT_FIELDS;
}
