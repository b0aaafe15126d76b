// Copyright 2026 xfeat_ros contributors
// SPDX-License-Identifier: Apache-2.0
//
// match_tc.cu: the mutual-nearest-neighbour similarities on the tensor cores, with an
// exact FP32 re-check; best_row / best_col equal match.cu's mnn_best bit for bit, and
// match.cu's mnn_collect then makes the matches.
//
// Entry points (the default of the GPU engine)
//   mnn_approx_tc(d0, count0, bound0, d1, count1, bound1, row_max, col_max,
//                 tile_row, tile_col)
//       S~ = D0 . D1^T on the tensor cores (mma.sync m16n8k8, TF32 operands
//       rounded to nearest, FP32 accumulation) in 64 x 64 tiles; folds each
//       row's and each column's largest S~ into row_max / col_max (orderable
//       float bits, atomicMax; zero before the launch), and stores each tile's
//       own row and column maxima: tile_row[bx * bound0 + i] for the tile of
//       columns bx, tile_col[by * bound1 + j] for the tile of rows by
//       (ceil(bound1 / 64) x bound0 and ceil(bound0 / 64) x bound1 words, not
//       cleared: every entry read is written first).
//   mnn_refine_tc(d0, count0, bound0, d1, count1, bound1, row_max, col_max,
//                 tile_row, tile_col, margin, best_row, best_col)
//       every (i, j) with S~ >= row_max[i] - margin or S~ >= col_max[j] - margin
//       is a candidate. Without recomputing S~: a tile whose maximum in row i
//       reaches row_max[i] - margin re-checks all of row i's pairs in the tile
//       (likewise a column), a superset of the candidates. Each pair's
//       similarity is recomputed exactly as mnn_best does (one FP32 fma chain
//       over k = 0 .. DESC_DIM - 1 from 0) and folded into best_row[i] /
//       best_col[j] (packed keys as mnn_best; zero before the launch).
//       mnn_collect then runs unchanged.
//   Exactness: for unit vectors |S~ - S| <= 2^-10 (TF32 rounding of both
//   operands, 2^-11 each, over sum |a_k b_k| <= 1) plus ~1e-5 of FP32 accumulation,
//   so any j whose exact value ties or beats the row's best lies within
//   2 x 1e-3 of the row's S~ maximum; margin = 2^-8 keeps a 2x reserve. Every
//   maximiser is a candidate, so best_row / best_col (ties included) are
//   bitwise those of mnn_best. Descriptors longer than ~1.001 need the FP32 path.
//   Exactness of the superset: folding more exact values in cannot change a maximum
//   that the candidates already reach, nor its first index among ties.
//   Thread mapping: 2-D grid (ceil(bound1 / 64), ceil(bound0 / 64)) of
//   TC_THREADS = 256-thread blocks (8 warps) for both. mnn_approx_tc: warp w owns
//   rows 16 (w / 2) .. +16 and columns 32 (w % 2) .. +32 of the tile (four 16 x 8 MMA
//   tiles); DESC_DIM is
//   streamed through shared memory in chunks of TC_K = 64 (32 where DESC_DIM is
//   not a multiple of 64; rows padded by 4 words: conflict-free fragment reads),
//   every load of a chunk issued before the first use. mnn_refine_tc: the tile's
//   candidate rows and columns are listed in shared memory; thread k of the block
//   takes pair k % 64 of list entry k / 64, strided by TC_THREADS; a tile without
//   candidates returns at once.
//
// Counts and keys: see mnn.cuh, which the loader puts before this file.
//
// Macros injected by the loader: DESC_DIM (descriptor width: 64 for XFeat,
// 128 for e.g. ALIKED); a matcher handles exactly that width. The launch shapes
// TILE (64) and TC_THREADS (256), read by the Python launches from the same place
// (xfeat_ros.gpu.kernels.LAUNCH_DEFINES).

#ifndef TC_THREADS
#error "TC_THREADS must be defined by the loader"
#endif
#if TC_THREADS != 256
#error "the thread mapping is written for 64 x 64 tiles of 256 threads"
#endif

#if DESC_DIM % 64 == 0
#define TC_K 64
#else
#define TC_K 32
#endif
#define TC_STRIDE (TC_K + 4)
#define TC_LOADS (TILE * (TC_K / 4) / TC_THREADS)

__device__ __forceinline__ unsigned int to_tf32(float x)
{
    unsigned int r;
    asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(r) : "f"(x));
    return r;
}

__device__ __forceinline__ void mma_tf32(float* c, const unsigned int* a, unsigned int b0,
                                         unsigned int b1)
{
    asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 "
                 "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// This thread's place in the MMA fragments of a 64 x 64 tile (TC_THREADS = 8 warps): its
// warp owns rows wr = 16 (warp / 2) .. +16 and columns wc = 32 (warp % 2) .. +32; within the
// m16n8k8 fragments it is group g = lane / 4 (a row of A, a column of B) and t = lane % 4.
struct Fragment {
    int g;
    int t;
    int wr;
    int wc;
};

__device__ __forceinline__ Fragment thread_fragment(int tid)
{
    const int lane = tid & 31;
    const int warp = tid >> 5;
    Fragment f;
    f.g = lane >> 2;
    f.t = lane & 3;
    f.wr = (warp >> 1) * 16;
    f.wc = (warp & 1) * 32;
    return f;
}

// S~ of this thread's 32 tile entries: acc[nt][q] is row 16 (warp / 2) + g + 8 (q / 2),
// column 32 (warp % 2) + 8 nt + 2 t + q % 2 of the 64 x 64 tile (g = lane / 4, t = lane % 4).
__device__ __forceinline__ void tile_products(const float* __restrict__ d0, int n0,
                                              const float* __restrict__ d1, int n1,
                                              int i_base, int j_base,
                                              unsigned int (*As)[TC_STRIDE],
                                              unsigned int (*Bs)[TC_STRIDE], float acc[4][4])
{
    const int tid = threadIdx.x;
    const Fragment f = thread_fragment(tid);
    const int g = f.g, t = f.t, wr = f.wr, wc = f.wc;
#pragma unroll
    for (int nt = 0; nt < 4; ++nt) {
#pragma unroll
        for (int q = 0; q < 4; ++q) {
            acc[nt][q] = 0.0f;
        }
    }
    for (int k0 = 0; k0 < DESC_DIM; k0 += TC_K) {
        // 64 rows x TC_K floats per side; TC_LOADS float4 per thread per side, all
        // issued before the first is stored (one memory latency per chunk)
        float4 va[TC_LOADS];
        float4 vb[TC_LOADS];
#pragma unroll
        for (int l = 0; l < TC_LOADS; ++l) {
            const int e = tid + l * TC_THREADS;
            const int r = e / (TC_K / 4);
            const int c4 = (e - r * (TC_K / 4)) * 4;
            va[l] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
            vb[l] = va[l];
            if (i_base + r < n0) {
                va[l] = *reinterpret_cast<const float4*>(
                    d0 + (long long)(i_base + r) * DESC_DIM + k0 + c4);
            }
            if (j_base + r < n1) {
                vb[l] = *reinterpret_cast<const float4*>(
                    d1 + (long long)(j_base + r) * DESC_DIM + k0 + c4);
            }
        }
#pragma unroll
        for (int l = 0; l < TC_LOADS; ++l) {
            const int e = tid + l * TC_THREADS;
            const int r = e / (TC_K / 4);
            const int c4 = (e - r * (TC_K / 4)) * 4;
            As[r][c4] = to_tf32(va[l].x);
            As[r][c4 + 1] = to_tf32(va[l].y);
            As[r][c4 + 2] = to_tf32(va[l].z);
            As[r][c4 + 3] = to_tf32(va[l].w);
            Bs[r][c4] = to_tf32(vb[l].x);
            Bs[r][c4 + 1] = to_tf32(vb[l].y);
            Bs[r][c4 + 2] = to_tf32(vb[l].z);
            Bs[r][c4 + 3] = to_tf32(vb[l].w);
        }
        __syncthreads();
#pragma unroll
        for (int kk = 0; kk < TC_K; kk += 8) {
            unsigned int a[4];
            a[0] = As[wr + g][kk + t];
            a[1] = As[wr + g + 8][kk + t];
            a[2] = As[wr + g][kk + t + 4];
            a[3] = As[wr + g + 8][kk + t + 4];
#pragma unroll
            for (int nt = 0; nt < 4; ++nt) {
                const int n = wc + nt * 8 + g;
                mma_tf32(acc[nt], a, Bs[n][kk + t], Bs[n][kk + t + 4]);
            }
        }
        __syncthreads();
    }
}

extern "C" __global__ void __launch_bounds__(TC_THREADS)
mnn_approx_tc(const float* __restrict__ d0, const int* count0, int bound0,
              const float* __restrict__ d1, const int* count1, int bound1,
              unsigned int* __restrict__ row_max, unsigned int* __restrict__ col_max,
              unsigned int* __restrict__ tile_row, unsigned int* __restrict__ tile_col)
{
    const int n0 = resolve_count(count0, bound0);
    const int n1 = resolve_count(count1, bound1);
    const int i_base = blockIdx.y * TILE;
    const int j_base = blockIdx.x * TILE;
    if (i_base >= n0 || j_base >= n1) {
        return;
    }
    __shared__ unsigned int As[TILE][TC_STRIDE];
    __shared__ unsigned int Bs[TILE][TC_STRIDE];
    __shared__ unsigned int s_row[TILE];
    __shared__ unsigned int s_col[TILE];
    const int tid = threadIdx.x;
    if (tid < TILE) {
        s_row[tid] = 0u;
        s_col[tid] = 0u;
    }
    float acc[4][4];
    tile_products(d0, n0, d1, n1, i_base, j_base, As, Bs, acc);  // syncs after the last use
    const Fragment f = thread_fragment(tid);
    const int g = f.g, t = f.t, wr = f.wr, wc = f.wc;
    // rows g and g + 8 of the warp tile: max over this thread's 8 columns, then over t
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        const int r = wr + g + 8 * h;
        unsigned int best = 0u;
#pragma unroll
        for (int nt = 0; nt < 4; ++nt) {
#pragma unroll
            for (int e = 0; e < 2; ++e) {
                const int c = wc + nt * 8 + 2 * t + e;
                if (i_base + r < n0 && j_base + c < n1) {
                    best = max(best, orderable(acc[nt][2 * h + e]));
                }
            }
        }
        best = max(best, __shfl_xor_sync(0xffffffffu, best, 1));
        best = max(best, __shfl_xor_sync(0xffffffffu, best, 2));
        if (t == 0 && best) {
            atomicMax(&s_row[r], best);
        }
    }
    // columns 2 t + e of each n-tile: max over rows g, g + 8, then over g
#pragma unroll
    for (int nt = 0; nt < 4; ++nt) {
#pragma unroll
        for (int e = 0; e < 2; ++e) {
            const int c = wc + nt * 8 + 2 * t + e;
            unsigned int best = 0u;
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                if (i_base + wr + g + 8 * h < n0 && j_base + c < n1) {
                    best = max(best, orderable(acc[nt][2 * h + e]));
                }
            }
            best = max(best, __shfl_xor_sync(0xffffffffu, best, 4));
            best = max(best, __shfl_xor_sync(0xffffffffu, best, 8));
            best = max(best, __shfl_xor_sync(0xffffffffu, best, 16));
            if (g == 0 && best) {
                atomicMax(&s_col[c], best);
            }
        }
    }
    __syncthreads();
    if (tid < TILE) {
        const int i = i_base + tid;
        if (i < n0) {
            tile_row[(long long)blockIdx.x * bound0 + i] = s_row[tid];
        }
        if (s_row[tid]) {
            atomicMax(&row_max[i], s_row[tid]);
        }
    } else if (tid < 2 * TILE) {
        const int l = tid - TILE;
        const int j = j_base + l;
        if (j < n1) {
            tile_col[(long long)blockIdx.y * bound1 + j] = s_col[l];
        }
        if (s_col[l]) {
            atomicMax(&col_max[j], s_col[l]);
        }
    }
}

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

// A row i is a candidate row of tile (bx, by) when the tile's largest S~ in row i (tile_row,
// written by mnn_approx_tc) reaches row_max[i] - margin; likewise a column. For a candidate
// row every column of the tile is re-checked exactly, and so is every row for a candidate
// column: a superset of the candidates (i, j) of the header, so the maxima are the same.
extern "C" __global__ void __launch_bounds__(TC_THREADS)
mnn_refine_tc(const float* __restrict__ d0, const int* count0, int bound0,
              const float* __restrict__ d1, const int* count1, int bound1,
              const unsigned int* __restrict__ row_max, const unsigned int* __restrict__ col_max,
              const unsigned int* __restrict__ tile_row,
              const unsigned int* __restrict__ tile_col,
              float margin, u64* __restrict__ best_row, u64* __restrict__ best_col)
{
    const int n0 = resolve_count(count0, bound0);
    const int n1 = resolve_count(count1, bound1);
    const int i_base = blockIdx.y * TILE;
    const int j_base = blockIdx.x * TILE;
    if (i_base >= n0 || j_base >= n1) {
        return;
    }
    __shared__ int s_rows[TILE];
    __shared__ int s_cols[TILE];
    __shared__ int s_count[2];
    const int tid = threadIdx.x;
    if (tid < 2) {
        s_count[tid] = 0;
    }
    __syncthreads();
    bool flagged = false;
    if (tid < TILE) {
        const int i = i_base + tid;
        if (i < n0) {
            const float bar = __fsub_rn(from_orderable(row_max[i]), margin);
            flagged = from_orderable(tile_row[(long long)blockIdx.x * bound0 + i]) >= bar;
            if (flagged) {
                s_rows[atomicAdd(&s_count[0], 1)] = i;
            }
        }
    } else if (tid < 2 * TILE) {
        const int j = j_base + tid - TILE;
        if (j < n1) {
            const float bar = __fsub_rn(from_orderable(col_max[j]), margin);
            flagged = from_orderable(tile_col[(long long)blockIdx.y * bound1 + j]) >= bar;
            if (flagged) {
                s_cols[atomicAdd(&s_count[1], 1)] = j;
            }
        }
    }
    if (!__syncthreads_or(flagged)) {
        return;
    }
    const int rows = s_count[0];
    const int items = (rows + s_count[1]) * TILE;
    for (int k = tid; k < items; k += TC_THREADS) {
        const int which = k / TILE;
        const int other = k - which * TILE;
        if (which < rows) {
            const int i = s_rows[which];
            const int j = j_base + other;
            if (j < n1) {
                const float s = exact_similarity(d0 + (long long)i * DESC_DIM,
                                                 d1 + (long long)j * DESC_DIM);
                atomicMax(&best_row[i], pack(s, j));
            }
        } else {
            const int j = s_cols[which - rows];
            const int i = i_base + other;
            if (i < n0) {
                const float s = exact_similarity(d0 + (long long)i * DESC_DIM,
                                                 d1 + (long long)j * DESC_DIM);
                atomicMax(&best_col[j], pack(s, i));
            }
        }
    }
}
