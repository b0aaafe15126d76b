// Copyright 2026 xfeat_ros contributors
// SPDX-License-Identifier: Apache-2.0
//
// match.cu: mutual nearest neighbours on cosine similarity, both directions.
//
// Entry points
//   mnn_best(d0, count0, bound0, d1, count1, bound1, best_row, best_col)
//       S = D0 . D1^T in 64 x 64 tiles (FP32 FMA, DESC_DIM streamed through
//       shared memory in chunks of KCHUNK); per tile, the best column of each
//       row and the best row of each column are folded into best_row[i] /
//       best_col[j] with 64-bit atomicMax on packed keys
//       (orderable float bits << 32 | 0xFFFFFFFF - index): highest similarity
//       wins, ties go to the smaller index (NumPy argmax's first maximum).
//       best_row / best_col must be zero before the launch.
//       Thread mapping: 2-D grid (ceil(bound1 / 64), ceil(bound0 / 64)) of
//       256-thread blocks; thread (ty, tx) = (tid / 16, tid % 16) computes rows
//       ty + 16 p and columns tx + 16 q, p, q < 4; tiles past the counts return.
//   mnn_collect(best_row, best_col, count0, bound0, count1, bound1, min_cossim,
//               use_min, idx0, idx1, sim, match_count, capacity)
//       i matches j = best_row[i] when best_col[j] == i and, if use_min, the
//       similarity is strictly above min_cossim; written in increasing i
//       (ordered compaction by block scan), count to match_count.
//       Thread mapping: one block of COLLECT_THREADS threads; thread t owns COLLECT_ROWS
//       consecutive rows of each chunk of COLLECT_THREADS * COLLECT_ROWS rows.
//   mnn_collect_pairs(table, min_cossim, use_min)
//       mnn_collect of every pair of a pair table (its rows name each pair's
//       keys, counts and outputs); one block per pair (grid = pairs).
//
// Counts and keys: see mnn.cuh, which the loader puts before this file.
// Descriptors are row-major [count, DESC_DIM] float32 and unit length. The
// tensor-core path (match_tc.cu, the GPU engine's default) computes the same
// best_row / best_col; mnn_collect then runs unchanged.
//
// Macros injected by the loader: DESC_DIM (descriptor width: 64 for XFeat,
// 128 for e.g. ALIKED); a matcher handles exactly that width. The launch shapes
// TILE (64), MATCH_THREADS (256) and COLLECT_THREADS (1024), read by the Python
// launches from the same place (xfeat_ros.features.gpu.kernels.LAUNCH_DEFINES).
// The pair table's words (xfeat_ros.features.gpu.kernels.PAIR_TABLE, used through mnn.cuh's
// pair_row): PT_FIELDS, PT_D0, PT_COUNT0, PT_BOUND0, PT_D1, PT_COUNT1, PT_BOUND1,
// PT_BEST_ROW, PT_BEST_COL, PT_ROW_MAX, PT_COL_MAX, PT_TILE_FIRST, PT_TILE_SECOND, PT_H0,
// PT_H1, PT_IDX0, PT_IDX1, PT_SIM, PT_MATCH_COUNT, PT_CAPACITY, PT_SPARE.

#if !defined(MATCH_THREADS) || !defined(COLLECT_THREADS)
#error "MATCH_THREADS and COLLECT_THREADS must be defined by the loader"
#endif
#if MATCH_THREADS != 256
#error "the thread mapping is written for 64 x 64 tiles of 256 threads"
#endif
#if COLLECT_THREADS % 32 != 0 || COLLECT_THREADS > 1024
#error "COLLECT_THREADS must be whole warps, at most 1024"
#endif

#define KCHUNK 32
#define COLLECT_ROWS 4

extern "C" __global__ void __launch_bounds__(MATCH_THREADS)
mnn_best(const float* __restrict__ d0, const int* count0, int bound0,
         const float* __restrict__ d1, const int* count1, int bound1,
         u64* __restrict__ best_row, u64* __restrict__ best_col)
{
    TileOrigin tile;
    if (!tile_origin(count0, bound0, count1, bound1, tile)) {
        return;
    }
    const int n0 = tile.n0, n1 = tile.n1, i_base = tile.i_base, j_base = tile.j_base;
    __shared__ float As[KCHUNK][TILE + 1];
    __shared__ float Bs[KCHUNK][TILE + 1];
    __shared__ u64 row_best[TILE];
    __shared__ u64 col_best[TILE];
    const int tid = threadIdx.x;
    const int tx = tid & 15;
    const int ty = tid >> 4;
    float acc[4][4];
    zero_tile(acc);
    for (int k0 = 0; k0 < DESC_DIM; k0 += KCHUNK) {
        for (int e = tid; e < TILE * KCHUNK; e += MATCH_THREADS) {
            const int r = e / KCHUNK;
            const int kk = e - r * KCHUNK;
            const int gi = i_base + r;
            const int gj = j_base + r;
            As[kk][r] = gi < n0 ? d0[(long long)gi * DESC_DIM + k0 + kk] : 0.0f;
            Bs[kk][r] = gj < n1 ? d1[(long long)gj * DESC_DIM + k0 + kk] : 0.0f;
        }
        __syncthreads();
#pragma unroll 8
        for (int kk = 0; kk < KCHUNK; ++kk) {
            float a[4];
            float b[4];
#pragma unroll
            for (int p = 0; p < 4; ++p) {
                a[p] = As[kk][ty + 16 * p];
                b[p] = Bs[kk][tx + 16 * p];
            }
#pragma unroll
            for (int p = 0; p < 4; ++p) {
#pragma unroll
                for (int q = 0; q < 4; ++q) {
                    acc[p][q] = fmaf(a[p], b[q], acc[p][q]);
                }
            }
        }
        __syncthreads();
    }
    if (tid < TILE) {
        row_best[tid] = 0ull;
        col_best[tid] = 0ull;
    }
    __syncthreads();
#pragma unroll
    for (int p = 0; p < 4; ++p) {
        const int gi = i_base + ty + 16 * p;
        if (gi < n0) {
            u64 best = 0ull;
#pragma unroll
            for (int q = 0; q < 4; ++q) {
                const int gj = j_base + tx + 16 * q;
                if (gj < n1) {
                    const u64 key = pack(acc[p][q], gj);
                    best = key > best ? key : best;
                }
            }
            atomicMax(&row_best[ty + 16 * p], best);
        }
    }
#pragma unroll
    for (int q = 0; q < 4; ++q) {
        const int gj = j_base + tx + 16 * q;
        if (gj < n1) {
            u64 best = 0ull;
#pragma unroll
            for (int p = 0; p < 4; ++p) {
                const int gi = i_base + ty + 16 * p;
                if (gi < n0) {
                    const u64 key = pack(acc[p][q], gi);
                    best = key > best ? key : best;
                }
            }
            atomicMax(&col_best[tx + 16 * q], best);
        }
    }
    __syncthreads();
    if (tid < TILE) {
        if (i_base + tid < n0) {
            atomicMax(&best_row[i_base + tid], row_best[tid]);
        }
    } else if (tid < 2 * TILE) {
        const int l = tid - TILE;
        if (j_base + l < n1) {
            atomicMax(&best_col[j_base + l], col_best[l]);
        }
    }
}

__device__ unsigned int block_inclusive_scan(unsigned int v, unsigned int* warp_sums)
{
    const int lane = threadIdx.x & 31;
    const int warp = threadIdx.x >> 5;
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
        const unsigned int n = __shfl_up_sync(0xffffffffu, v, o);
        if (lane >= o) {
            v += n;
        }
    }
    if (lane == 31) {
        warp_sums[warp] = v;
    }
    __syncthreads();
    if (warp == 0) {
        unsigned int s = (lane < (int)(blockDim.x >> 5)) ? warp_sums[lane] : 0u;
#pragma unroll
        for (int o = 1; o < 32; o <<= 1) {
            const unsigned int n = __shfl_up_sync(0xffffffffu, s, o);
            if (lane >= o) {
                s += n;
            }
        }
        warp_sums[lane] = s;
    }
    __syncthreads();
    if (warp > 0) {
        v += warp_sums[warp - 1];
    }
    __syncthreads();
    return v;
}

__device__ __forceinline__ void
collect_matches(const u64* __restrict__ best_row, const u64* __restrict__ best_col,
                const int* count0, int bound0, const int* count1, int bound1, float min_cossim,
                int use_min, int* __restrict__ idx0, int* __restrict__ idx1,
                float* __restrict__ sim, int* __restrict__ match_count, int capacity)
{
    __shared__ unsigned int warp_sums[32];
    __shared__ int s_base;
    const int n0 = resolve_count(count0, bound0);
    const int n1 = resolve_count(count1, bound1);
    if (threadIdx.x == 0) {
        s_base = 0;
    }
    __syncthreads();
    for (int start = 0; start < n0; start += COLLECT_THREADS * COLLECT_ROWS) {
        const int first = start + threadIdx.x * COLLECT_ROWS;
        u64 keys[COLLECT_ROWS];
#pragma unroll
        for (int q = 0; q < COLLECT_ROWS; ++q) {  // independent loads, all in flight
            keys[q] = first + q < n0 ? best_row[first + q] : 0ull;
        }
        int cols[COLLECT_ROWS];
        unsigned int own = 0u;
#pragma unroll
        for (int q = 0; q < COLLECT_ROWS; ++q) {
            cols[q] = -1;
            if (keys[q] != 0ull) {
                const int j = unpack_index(keys[q]);
                const float s = from_orderable((unsigned int)(keys[q] >> 32));
                if (j < n1 && unpack_index(best_col[j]) == first + q
                    && (!use_min || s > min_cossim)) {
                    cols[q] = j;
                    ++own;
                }
            }
        }
        const unsigned int incl = block_inclusive_scan(own, warp_sums);
        int out = s_base + (int)(incl - own);
#pragma unroll
        for (int q = 0; q < COLLECT_ROWS; ++q) {
            if (cols[q] >= 0) {
                if (out < capacity) {
                    idx0[out] = first + q;
                    idx1[out] = cols[q];
                    sim[out] = from_orderable((unsigned int)(keys[q] >> 32));
                }
                ++out;
            }
        }
        __syncthreads();
        if (threadIdx.x == COLLECT_THREADS - 1) {
            s_base += (int)incl;
        }
        __syncthreads();
    }
    if (threadIdx.x == 0) {
        *match_count = min(s_base, capacity);
    }
}

extern "C" __global__ void __launch_bounds__(COLLECT_THREADS)
mnn_collect(const u64* __restrict__ best_row, const u64* __restrict__ best_col,
            const int* count0, int bound0, const int* count1, int bound1, float min_cossim,
            int use_min, int* __restrict__ idx0, int* __restrict__ idx1,
            float* __restrict__ sim, int* __restrict__ match_count, int capacity)
{
    collect_matches(best_row, best_col, count0, bound0, count1, bound1, min_cossim, use_min,
                    idx0, idx1, sim, match_count, capacity);
}

// Pair blockIdx.x of a pair table, one block each.
extern "C" __global__ void __launch_bounds__(COLLECT_THREADS)
mnn_collect_pairs(const u64* __restrict__ table, float min_cossim, int use_min)
{
    const u64* p = pair_row(table, blockIdx.x);
    collect_matches(reinterpret_cast<const u64*>(p[PT_BEST_ROW]),
                    reinterpret_cast<const u64*>(p[PT_BEST_COL]),
                    reinterpret_cast<const int*>(p[PT_COUNT0]), (int)p[PT_BOUND0],
                    reinterpret_cast<const int*>(p[PT_COUNT1]), (int)p[PT_BOUND1], min_cossim,
                    use_min, reinterpret_cast<int*>(p[PT_IDX0]),
                    reinterpret_cast<int*>(p[PT_IDX1]), reinterpret_cast<float*>(p[PT_SIM]),
                    reinterpret_cast<int*>(p[PT_MATCH_COUNT]), (int)p[PT_CAPACITY]);
}
