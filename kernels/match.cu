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
//
// Counts: count0 / count1 point to a device int (read on the device, clamped
// to bound) or are null, in which case bound is the count itself. Descriptors
// are row-major [count, DESC_DIM] float32 and unit length.
//
// Tensor-core path (the default of the GPU engine; same results as mnn_best):
//   mnn_approx_tc(d0, count0, bound0, d1, count1, bound1, row_max, col_max)
//       S~ = D0 . D1^T on the tensor cores (mma.sync m16n8k8, TF32 operands
//       rounded to nearest, FP32 accumulation) in 64 x 64 tiles; folds each
//       row's and each column's largest S~ into row_max / col_max (orderable
//       float bits, atomicMax; zero before the launch).
//   mnn_refine_tc(d0, count0, bound0, d1, count1, bound1, row_max, col_max,
//                 margin, best_row, best_col)
//       recomputes the same S~ tiles; every (i, j) with S~ >= row_max[i] - margin
//       or S~ >= col_max[j] - margin is a candidate: its similarity is recomputed
//       exactly as mnn_best does (one FP32 fma chain over k = 0 .. DESC_DIM - 1
//       from 0) and folded into best_row[i] / best_col[j] (packed keys as
//       mnn_best; zero before the launch). mnn_collect then runs unchanged.
//   Exactness: for unit vectors |S~ - S| <= 2^-10 (TF32 rounding of both
//   operands, 2^-11 each, over sum |a_k b_k| <= 1) plus ~1e-5 of FP32 accumulation,
//   so any j whose exact value ties or beats the row's best lies within
//   2 x 1e-3 of the row's S~ maximum; margin = 2^-8 keeps a 2x reserve. Every
//   maximiser is a candidate, so best_row / best_col (ties included) are
//   bitwise those of mnn_best. Descriptors longer than ~1.001 need the FP32 path.
//   Thread mapping: 2-D grid (ceil(bound1 / 64), ceil(bound0 / 64)) of
//   TC_THREADS = 256-thread blocks (8 warps); warp w owns rows 16 (w / 2) .. +16 and
//   columns 32 (w % 2) .. +32 of the tile (four 16 x 8 MMA tiles); DESC_DIM is
//   streamed through shared memory in chunks of TC_K = 64 (32 where DESC_DIM is
//   not a multiple of 64; rows padded by 4 words: conflict-free fragment reads),
//   every load of a chunk issued before the first use.
//
// Macros injected by the loader: DESC_DIM (descriptor width: 64 for XFeat,
// 128 for e.g. ALIKED); a matcher handles exactly that width. The launch shapes
// TILE (64), MATCH_THREADS (256), COLLECT_THREADS (1024) and TC_THREADS (256),
// read by the Python launches from the same place
// (xfeat_ros.gpu.kernels.LAUNCH_DEFINES).

#ifndef DESC_DIM
#error "DESC_DIM must be defined by the loader"
#endif
#if DESC_DIM % 32 != 0
#error "DESC_DIM must be a multiple of 32"
#endif

#if !defined(TILE) || !defined(MATCH_THREADS) || !defined(COLLECT_THREADS) || !defined(TC_THREADS)
#error "TILE, MATCH_THREADS, COLLECT_THREADS and TC_THREADS must be defined by the loader"
#endif
#if TILE != 64 || MATCH_THREADS != 256 || TC_THREADS != 256
#error "the thread mappings are written for 64 x 64 tiles of 256 threads"
#endif
#if COLLECT_THREADS % 32 != 0 || COLLECT_THREADS > 1024
#error "COLLECT_THREADS must be whole warps, at most 1024"
#endif

#define KCHUNK 32
#define COLLECT_ROWS 4
#if DESC_DIM % 64 == 0
#define TC_K 64
#else
#define TC_K 32
#endif
#define TC_STRIDE (TC_K + 4)
#define TC_LOADS (TILE * (TC_K / 4) / TC_THREADS)

typedef unsigned long long u64;

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

__device__ __forceinline__ int resolve_count(const int* count, int bound)
{
    return count ? min(max(*count, 0), bound) : bound;
}

extern "C" __global__ void __launch_bounds__(MATCH_THREADS)
mnn_best(const float* __restrict__ d0, const int* count0, int bound0,
         const float* __restrict__ d1, const int* count1, int bound1,
         u64* __restrict__ best_row, u64* __restrict__ best_col)
{
    const int n0 = resolve_count(count0, bound0);
    const int n1 = resolve_count(count1, bound1);
    const int i_base = blockIdx.y * TILE;
    const int j_base = blockIdx.x * TILE;
    if (i_base >= n0 || j_base >= n1) {
        return;
    }
    __shared__ float As[KCHUNK][TILE + 1];
    __shared__ float Bs[KCHUNK][TILE + 1];
    __shared__ u64 row_best[TILE];
    __shared__ u64 col_best[TILE];
    const int tid = threadIdx.x;
    const int tx = tid & 15;
    const int ty = tid >> 4;
    float acc[4][4];
#pragma unroll
    for (int p = 0; p < 4; ++p) {
#pragma unroll
        for (int q = 0; q < 4; ++q) {
            acc[p][q] = 0.0f;
        }
    }
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

// ---- tensor-core similarity with an exact FP32 re-check --------------------------------

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
              unsigned int* __restrict__ row_max, unsigned int* __restrict__ col_max)
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
        if (s_row[tid]) {
            atomicMax(&row_max[i_base + tid], s_row[tid]);
        }
    } else if (tid < 2 * TILE) {
        const int l = tid - TILE;
        if (s_col[l]) {
            atomicMax(&col_max[j_base + l], s_col[l]);
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

extern "C" __global__ void __launch_bounds__(TC_THREADS)
mnn_refine_tc(const float* __restrict__ d0, const int* count0, int bound0,
              const float* __restrict__ d1, const int* count1, int bound1,
              const unsigned int* __restrict__ row_max, const unsigned int* __restrict__ col_max,
              float margin, u64* __restrict__ best_row, u64* __restrict__ best_col)
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
    __shared__ float s_row[TILE];
    __shared__ float s_col[TILE];
    const int tid = threadIdx.x;
    if (tid < TILE) {
        const int i = i_base + tid;
        s_row[tid] = i < n0 ? __fsub_rn(from_orderable(row_max[i]), margin) : 0.0f;
    } else if (tid < 2 * TILE) {
        const int j = j_base + tid - TILE;
        s_col[tid - TILE] = j < n1 ? __fsub_rn(from_orderable(col_max[j]), margin) : 0.0f;
    }
    float acc[4][4];
    tile_products(d0, n0, d1, n1, i_base, j_base, As, Bs, acc);  // its syncs publish s_row/s_col
    const Fragment f = thread_fragment(tid);
    const int g = f.g, t = f.t, wr = f.wr, wc = f.wc;
#pragma unroll
    for (int nt = 0; nt < 4; ++nt) {
#pragma unroll
        for (int q = 0; q < 4; ++q) {
            const int r = wr + g + 8 * (q >> 1);
            const int c = wc + nt * 8 + 2 * t + (q & 1);
            const int i = i_base + r;
            const int j = j_base + c;
            if (i >= n0 || j >= n1) {
                continue;
            }
            const bool for_row = acc[nt][q] >= s_row[r];
            const bool for_col = acc[nt][q] >= s_col[c];
            if (!(for_row || for_col)) {
                continue;
            }
            const float s = exact_similarity(d0 + (long long)i * DESC_DIM,
                                             d1 + (long long)j * DESC_DIM);
            if (for_row) {
                atomicMax(&best_row[i], pack(s, j));
            }
            if (for_col) {
                atomicMax(&best_col[j], pack(s, i));
            }
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

extern "C" __global__ void __launch_bounds__(COLLECT_THREADS)
mnn_collect(const u64* __restrict__ best_row, const u64* __restrict__ best_col,
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
