// Copyright 2026 xfeat_ros contributors
// SPDX-License-Identifier: Apache-2.0
//
// match_refine.cu: the exact FP32 re-check after match_tc.cu's tensor-core bounds; the
// two together give best_row / best_col equal to match.cu's mnn_best bit for bit, and
// match.cu's mnn_collect then makes the matches.
//
// Entry points (the default of the GPU engine)
//   mnn_refine_tc(d0, count0, bound0, d1, count1, bound1, row_max, col_max,
//                 tile_first, tile_second, margin, best_row, best_col)
//       every (i, j) with S~ >= row_max[i] - margin or S~ >= col_max[j] - margin
//       is a candidate (S~, row_max, col_max and the tables: mnn_approx_tc). Without
//       recomputing S~, from the tables (each value rounded up): where a tile's
//       largest S~ of a row reaches row_max[i] - margin and its second does not,
//       the row's only candidate in the tile is at the first's tag; where the
//       second reaches it too (ties and near-ties), every pair of the row in the
//       tile is re-checked (a superset); likewise columns. Each pair's similarity
//       is recomputed exactly as mnn_best does (one FP32 fma chain over k = 0 ..
//       DESC_DIM - 1 from 0) and folded into best_row[i] / best_col[j] (packed
//       keys as mnn_best; zero before the launch). mnn_collect then runs unchanged.
//   mnn_refine_tc_pairs(table, margin)
//       the same for every pair of a pair table at once (blockIdx.z the pair, rows
//       as for mnn_approx_tc_pairs, with each pair's best keys); mnn_collect_pairs
//       (match.cu) then collects them.
//   Exactness: for unit vectors |S~ - S| <= 2^-10 (FP16 rounding of both
//   operands, 2^-11 each, over sum |a_k b_k| <= 1; FP16 keeps TF32's 10
//   mantissa bits) plus under 1e-6 from FP16's subnormals (values below 2^-14
//   are off by up to 2^-25, over sum |a_k| + |b_k| <= 2 sqrt(DESC_DIM)) plus
//   ~1e-5 of FP32 accumulation,
//   so any j whose exact value ties or beats the row's best lies within
//   2 x 1e-3 of the row's S~ maximum, which row_max exceeds by under 64 ulp
//   (< 8e-6); margin = 2^-8 keeps a 2x reserve. Every maximiser is a candidate,
//   and the tables only ever widen the candidates, so best_row / best_col (ties
//   included) are bitwise those of mnn_best: folding in extra exact pairs cannot
//   change a maximum the candidates reach, nor its first index among ties.
//   Descriptors longer than ~1.001 need the FP32 path.
//   Thread mapping: grid (ceil(max(rows' entries, columns' entries) / TC_THREADS), 2)
//   of TC_THREADS threads, one thread per table entry (blockIdx.y 0: rows, 1:
//   columns); a whole row or column of a tile is shared by the warp, one pair per
//   lane.
//
// Counts, keys and tags: see mnn.cuh, which the loader puts before this file.
//
// Macros injected by the loader: DESC_DIM (descriptor width: 64 or 128, as for
// match_tc.cu), TILE (64) and TC_THREADS (256), read by the Python launches from the
// same place (xfeat_ros.features.gpu.kernels.LAUNCH_DEFINES). The pair table's words, as for
// match_tc.cu (xfeat_ros.features.gpu.kernels.PAIR_TABLE, through mnn.cuh's pair_row): PT_FIELDS,
// PT_D0, PT_COUNT0, PT_BOUND0, PT_D1, PT_COUNT1, PT_BOUND1, PT_BEST_ROW, PT_BEST_COL,
// PT_ROW_MAX, PT_COL_MAX, PT_TILE_FIRST, PT_TILE_SECOND, PT_H0, PT_H1, PT_IDX0, PT_IDX1,
// PT_SIM, PT_MATCH_COUNT, PT_CAPACITY, PT_SPARE.

#ifndef TC_THREADS
#error "TC_THREADS must be defined by the loader"
#endif

// The similarity exactly as mnn_best computes it: one fma chain in k order from 0.
__device__ __forceinline__ float exact_similarity(const float* __restrict__ a,
                                                  const float* __restrict__ b)
{
    float s = 0.0f;
#pragma unroll 4
    for (int k = 0; k < DESC_DIM; k += 4) {
        const float4 x = *reinterpret_cast<const float4*>(a + k);
        const float4 y = *reinterpret_cast<const float4*>(b + k);
        s = fmaf(x.x, y.x, s);
        s = fmaf(x.y, y.y, s);
        s = fmaf(x.z, y.z, s);
        s = fmaf(x.w, y.w, s);
    }
    return s;
}

// Pair (i, j)'s exact similarity into row i's best key (into column j's when `col`).
__device__ __forceinline__ void fold_exact(const float* __restrict__ d0,
                                           const float* __restrict__ d1, int i, int j, bool col,
                                           u64* __restrict__ best_row, u64* __restrict__ best_col)
{
    const float s = exact_similarity(d0 + (long long)i * DESC_DIM, d1 + (long long)j * DESC_DIM);
    if (col) {
        atomicMax(&best_col[j], pack(s, i));
    } else {
        atomicMax(&best_row[i], pack(s, j));
    }
}

// One thread per (tile, row) of the rows' table (blockIdx.y 0) or per (tile, column) of the
// columns' (blockIdx.y 1): its candidates in the tile are the entries with S~ >= the row's
// (column's) maximum - margin. Where only the tile's largest entry reaches that, the
// thread re-checks that one pair; where the second does too, the warp re-checks the whole
// row (column) of the tile together. Either way a superset of the candidates.
__device__ __forceinline__ void
refine_entries(const float* __restrict__ d0, const int* count0, int bound0,
               const float* __restrict__ d1, const int* count1, int bound1,
               const unsigned int* __restrict__ row_max, const unsigned int* __restrict__ col_max,
               const unsigned int* __restrict__ tile_first,
               const unsigned int* __restrict__ tile_second,
               float margin, u64* __restrict__ best_row, u64* __restrict__ best_col)
{
    const int n0 = resolve_count(count0, bound0);
    const int n1 = resolve_count(count1, bound1);
    const bool cols = blockIdx.y == 1;
    const int bound = cols ? bound1 : bound0;         // the entries' side
    const int count = cols ? n1 : n0;
    const int other_count = cols ? n0 : n1;           // the tiles' side
    const int tiles = ((cols ? bound0 : bound1) + TILE - 1) / TILE;
    const long long at = (long long)blockIdx.x * TC_THREADS + threadIdx.x;
    const long long offset = cols ? (long long)((bound1 + TILE - 1) / TILE) * bound0 : 0;
    int entry = 0, tile = 0, place = 0;
    bool flagged = false, whole = false;
    if (at < (long long)tiles * bound) {
        tile = (int)(at / bound);
        entry = (int)(at - (long long)tile * bound);
        if (entry < count && tile * TILE < other_count) {
            const float bar = __fsub_rn(from_orderable(cols ? col_max[entry] : row_max[entry]),
                                        margin);
            const unsigned int first = tile_first[offset + at];
            place = (int)(first & TAG_MASK);
            flagged = first && from_orderable(first | TAG_MASK) >= bar;
            whole = flagged && from_orderable(tile_second[offset + at] | TAG_MASK) >= bar;
        }
    }
    if (flagged && !whole) {
        const int partner = tile * TILE + place;
        fold_exact(d0, d1, cols ? partner : entry, cols ? entry : partner, cols, best_row,
                   best_col);
    }
    unsigned int pending = __ballot_sync(0xffffffffu, whole);
    const int lane = threadIdx.x & 31;
    while (pending) {
        const int src = __ffs(pending) - 1;
        pending &= pending - 1;
        const int e = __shfl_sync(0xffffffffu, entry, src);
        const int base = __shfl_sync(0xffffffffu, tile, src) * TILE;
        for (int p = base + lane; p < min(base + TILE, other_count); p += 32) {
            fold_exact(d0, d1, cols ? p : e, cols ? e : p, cols, best_row, best_col);
        }
    }
}

extern "C" __global__ void __launch_bounds__(TC_THREADS)
mnn_refine_tc(const float* __restrict__ d0, const int* count0, int bound0,
              const float* __restrict__ d1, const int* count1, int bound1,
              const unsigned int* __restrict__ row_max, const unsigned int* __restrict__ col_max,
              const unsigned int* __restrict__ tile_first,
              const unsigned int* __restrict__ tile_second,
              float margin, u64* __restrict__ best_row, u64* __restrict__ best_col)
{
    refine_entries(d0, count0, bound0, d1, count1, bound1, row_max, col_max, tile_first,
                   tile_second, margin, best_row, best_col);
}

// Pair blockIdx.z of a pair table.
extern "C" __global__ void __launch_bounds__(TC_THREADS)
mnn_refine_tc_pairs(const u64* __restrict__ table, float margin)
{
    const u64* p = pair_row(table, blockIdx.z);
    refine_entries(reinterpret_cast<const float*>(p[PT_D0]),
                   reinterpret_cast<const int*>(p[PT_COUNT0]), (int)p[PT_BOUND0],
                   reinterpret_cast<const float*>(p[PT_D1]),
                   reinterpret_cast<const int*>(p[PT_COUNT1]), (int)p[PT_BOUND1],
                   reinterpret_cast<const unsigned int*>(p[PT_ROW_MAX]),
                   reinterpret_cast<const unsigned int*>(p[PT_COL_MAX]),
                   reinterpret_cast<const unsigned int*>(p[PT_TILE_FIRST]),
                   reinterpret_cast<const unsigned int*>(p[PT_TILE_SECOND]), margin,
                   reinterpret_cast<u64*>(p[PT_BEST_ROW]), reinterpret_cast<u64*>(p[PT_BEST_COL]));
}
