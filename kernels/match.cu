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
//   mnn_rows_tc(d0, count0, bound0, d1, count1, bound1, margin, best_row, best_col)
//       the same best_row / best_col (bitwise), with the similarities on the
//       tensor cores: blockIdx.z = 0 finds each row's best column (A = D0,
//       B = D1, into best_row), blockIdx.z = 1 each column's best row (A = D1,
//       B = D0, into best_col). A block owns a strip of TC_WARPS * 16 * TC_MT
//       rows of A and streams the column tiles of its share of B (blockIdx.x of
//       gridDim.x shares, whole tiles of TC_COLS columns) through shared memory,
//       double-buffered, rounded to TF32 once at the store. A warp owns 16 *
//       TC_MT rows, keeps their TF32 fragments in registers for the whole
//       kernel, computes S~ (mma.sync m16n8k8, FP32 accumulation) 32 columns
//       at a time and keeps each row's running maximum m~ (no atomics: the
//       row is the warp's alone). Every (i, j) with S~ >= m~ - margin at that
//       moment is queued (per warp, in shared memory); a queue holding
//       TC_FLUSH_AT is pruned against the then running maxima (compaction in
//       shared memory), and re-checked only if TC_RECHECK_AT survive; the end
//       prunes and re-checks the rest: exact FP32, 32 lanes at a time, rows
//       from global memory / L2, one fma chain over k = 0 .. DESC_DIM - 1 from
//       0 as mnn_best computes it, folded as packed keys into the row's shared
//       best, then into best_row / best_col with one atomicMax per row and
//       share (zero before the launch). mnn_collect then runs unchanged.
//       Thread mapping: grid (shares, ceil(max(bound0, bound1) / block rows),
//       2) of TC_WARPS * 32 threads; lane (g, t) = (lane / 4, lane % 4) holds
//       rows 16 mt + g and 16 mt + g + 8 of its warp (mt < TC_MT) and, per
//       8-column MMA tile, columns 2 t and 2 t + 1; strips and shares past the
//       counts return.
//   mnn_collect(best_row, best_col, count0, bound0, count1, bound1, min_cossim,
//               use_min, idx0, idx1, sim, match_count, capacity)
//       i matches j = best_row[i] when best_col[j] == i and, if use_min, the
//       similarity is strictly above min_cossim; written in increasing i
//       (ordered compaction by block scan), count to match_count.
//       Thread mapping: one block of 1024 threads; thread t owns COLLECT_ROWS
//       consecutive rows of each chunk of 1024 * COLLECT_ROWS rows.
//
// Counts: count0 / count1 point to a device int (read on the device, clamped
// to bound) or are null, in which case bound is the count itself. Descriptors
// are row-major [count, DESC_DIM] float32 and unit length.
//
// Exactness of mnn_rows_tc: for unit vectors |S~ - S| <= e = 2^-10 (TF32
// rounding of both operands, 2^-11 each, over sum |a_k b_k| <= 1) plus ~1e-5
// of accumulation. The exact maximiser j* of a row has S~_j* >= S_j* - e >=
// S_k - e >= S~_k - 2e for every k, so S~_j* >= M~ - 2e >= m~ - margin at any
// moment (m~ <= M~, the final maximum; margin = 2^-8 keeps a 2x reserve):
// every maximiser, ties included, is queued and survives the pruning, and the
// packed maximum over the re-checked candidates is mnn_best's bit for bit. A
// block's share of the columns has its own maximiser, so the atomicMax over
// shares is exact too. The fma chain of the re-check is the same for both
// directions (fmaf(a, b, s) == fmaf(b, a, s)). Descriptors longer than ~1.001
// need mnn_best. A queue that overflows (thousands of exact ties) is
// re-checked at once, then the group's candidates one by one: slower, same
// result.
//
// Macros injected by the loader: DESC_DIM (descriptor width: 64 for XFeat,
// 128 for e.g. ALIKED; a matcher handles exactly that width); TC_WARPS (warps
// per block of mnn_rows_tc), TC_MT (16-row MMA tiles per warp), TC_COLS
// (columns per streamed tile, a multiple of 32) - the host sizes the grid from
// the same values (xfeat_ros.gpu.kernels.match_tiling).

#ifndef DESC_DIM
#error "DESC_DIM must be defined by the loader"
#endif
#if DESC_DIM % 32 != 0
#error "DESC_DIM must be a multiple of 32"
#endif
#if !defined(TC_WARPS) || !defined(TC_MT) || !defined(TC_COLS)
#error "TC_WARPS, TC_MT and TC_COLS must be defined by the loader"
#endif
#if TC_COLS % 32 != 0 || 16 * TC_MT > 32
#error "TC_COLS must be a multiple of 32 and a warp may own at most 32 rows"
#endif

#define TILE 64
#define KCHUNK 32
#define MATCH_THREADS 256
#define COLLECT_THREADS 1024
#define COLLECT_ROWS 4
#define TC_THREADS (32 * TC_WARPS)
#define TC_ROWS (16 * TC_MT)                      // rows of a warp
#define TC_KSTEPS (DESC_DIM / 8)                  // k-steps of one m16n8k8 product
#define TC_PLANE (DESC_DIM / 4 + 4)               // words of one k mod 4 plane of a column
#define TC_COLUMN (4 * TC_PLANE)                  // words of one column in shared memory
#define TC_STAGE (TC_COLS * DESC_DIM / 4 / TC_THREADS)  // float4 per thread per tile
#define TC_QUEUE 128                              // queued candidates per warp
#define TC_FLUSH_AT 64                            // prune the queue when this many wait
#define TC_RECHECK_AT 48                          // re-check when this many survive pruning
#define NEG_INF __int_as_float(0xff800000)
#if (TC_COLS * DESC_DIM / 4) % TC_THREADS != 0
#error "a tile must split evenly into float4 loads over the block"
#endif

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

// ---- tensor-core similarity with an exact FP32 re-check, one row strip per block -------

// TF32 operand of x, rounded to nearest, ties away from zero (cvt.rna.tf32.f32 for finite x)
__device__ __forceinline__ unsigned int to_tf32(float x)
{
    return (__float_as_uint(x) + 0x1000u) & 0xFFFFE000u;
}

__device__ __forceinline__ void mma_tf32(float* c, const unsigned int* a, unsigned int b0,
                                         unsigned int b1)
{
    asm("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 "
                 "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// The similarity exactly as mnn_best computes it: one fma chain in k order from 0.
__device__ __forceinline__ float exact_similarity(const float* __restrict__ a,
                                                  const float* __restrict__ b)
{
    float s = 0.0f;
#pragma unroll
    for (int k0 = 0; k0 < DESC_DIM; k0 += 32) {  // 16 loads in flight, then 32 fma
        float4 x[8];
        float4 y[8];
#pragma unroll
        for (int i = 0; i < 8; ++i) {
            x[i] = __ldg(reinterpret_cast<const float4*>(a + k0) + i);
            y[i] = __ldg(reinterpret_cast<const float4*>(b + k0) + i);
        }
#pragma unroll
        for (int i = 0; i < 8; ++i) {
            s = fmaf(x[i].x, y[i].x, s);
            s = fmaf(x[i].y, y[i].y, s);
            s = fmaf(x[i].z, y[i].z, s);
            s = fmaf(x[i].w, y[i].w, s);
        }
    }
    return s;
}

// Global -> registers: this thread's TC_STAGE float4 of column tile `tile` (zero past nb).
__device__ __forceinline__ void load_tile(const float* __restrict__ b, int nb, int tile,
                                          float4* stage)
{
#pragma unroll
    for (int l = 0; l < TC_STAGE; ++l) {
        const int e = threadIdx.x + l * TC_THREADS;
        const int n = e / (DESC_DIM / 4);
        const int c = e - n * (DESC_DIM / 4);
        const int j = tile * TC_COLS + n;
        stage[l] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        if (j < nb) {
            stage[l] = __ldg(reinterpret_cast<const float4*>(b + (long long)j * DESC_DIM) + c);
        }
    }
}

// Registers -> shared, as TF32: column n's value k goes to word n * TC_COLUMN +
// (k % 4) * TC_PLANE + k / 4, so that lane (g, t) reads its B fragments of two
// k-steps with one 16-byte load (conflict-free: TC_PLANE = 4 or 20 mod 32,
// TC_COLUMN = 16 mod 32).
__device__ __forceinline__ void store_tile(unsigned int* __restrict__ buf, const float4* stage)
{
#pragma unroll
    for (int l = 0; l < TC_STAGE; ++l) {
        const int e = threadIdx.x + l * TC_THREADS;
        const int n = e / (DESC_DIM / 4);
        const int c = e - n * (DESC_DIM / 4);
        unsigned int* p = buf + n * TC_COLUMN + c;
        p[0] = to_tf32(stage[l].x);
        p[TC_PLANE] = to_tf32(stage[l].y);
        p[2 * TC_PLANE] = to_tf32(stage[l].z);
        p[3 * TC_PLANE] = to_tf32(stage[l].w);
    }
}

struct RowQueue {
    int* key;           // candidate (j << 5) | warp row
    float* value;       // its S~
    int* count;         // queued so far (may exceed TC_QUEUE: the excess was re-checked)
    float* threshold;   // per warp row, written at a flush
    u64* best;          // per warp row: packed best exact key so far
};

// Exact re-check of (warp row r = key & 31, column j = key >> 5) folded into the row's best.
__device__ __forceinline__ void recheck(const RowQueue& q, const float* __restrict__ a,
                                        const float* __restrict__ b, int warp_row0, int key)
{
    const int r = key & 31;
    const int j = key >> 5;
    const float s = exact_similarity(a + (long long)(warp_row0 + r) * DESC_DIM,
                                     b + (long long)j * DESC_DIM);
    atomicMax(&q.best[r], pack(s, j));
}

// Re-check, one lane at a time, the candidates of one 32-column group that `mask` marks
// (bit ((mt * 2 + h) * 4 + nt) * 2 + e: warp row 16 mt + 8 h + g, column j0 + 8 nt + 2 t + e).
__device__ __forceinline__ void recheck_group(const RowQueue& q, const float* __restrict__ a,
                                              const float* __restrict__ b, int warp_row0,
                                              unsigned int mask, int j0)
{
    const int lane = threadIdx.x & 31;
    for (; mask; mask &= mask - 1u) {
        const int bit = __ffs(mask) - 1;
        const int r = 16 * (bit >> 4) + 8 * ((bit >> 3) & 1) + (lane >> 2);
        const int j = j0 + 8 * ((bit >> 1) & 3) + 2 * (lane & 3) + (bit & 1);
        recheck(q, a, b, warp_row0, (j << 5) | r);
    }
}

// Warp-collective: drop the queued candidates now below their row's threshold (q.threshold,
// kept current by the caller); if at least `recheck_at` remain, re-check them 32 at a time
// and empty the queue, else keep them queued (compacted).
__device__ __forceinline__ void flush_queue(const RowQueue& q, const float* __restrict__ a,
                                            const float* __restrict__ b, int warp_row0,
                                            int recheck_at)
{
    const int lane = threadIdx.x & 31;
    __syncwarp();
    const int n = min(*q.count, TC_QUEUE);
    int kept = 0;
    for (int base = 0; base < n; base += 32) {  // in-place compaction of the survivors
        const int e = base + lane;
        int key = 0;
        float value = 0.0f;
        bool keep = false;
        if (e < n) {
            key = q.key[e];
            value = q.value[e];
            keep = value >= q.threshold[key & 31];
        }
        const unsigned int mask = __ballot_sync(0xffffffffu, keep);
        __syncwarp();  // every read of this chunk before any write (positions <= e)
        if (keep) {
            const int pos = kept + __popc(mask & ((1u << lane) - 1u));
            q.key[pos] = key;
            q.value[pos] = value;
        }
        kept += __popc(mask);
    }
    __syncwarp();
    if (kept >= recheck_at) {
        for (int e = lane; e < kept; e += 32) {
            recheck(q, a, b, warp_row0, q.key[e]);
        }
        kept = 0;
    }
    __syncwarp();
    if (lane == 0) {
        *q.count = kept;
    }
    __syncwarp();
}

extern "C" __global__ void __launch_bounds__(TC_THREADS, 2)
mnn_rows_tc(const float* __restrict__ d0, const int* count0, int bound0,
            const float* __restrict__ d1, const int* count1, int bound1, float margin,
            u64* __restrict__ best_row, u64* __restrict__ best_col)
{
    const bool flip = blockIdx.z != 0;
    const float* __restrict__ a = flip ? d1 : d0;
    const float* __restrict__ b = flip ? d0 : d1;
    const int na = flip ? resolve_count(count1, bound1) : resolve_count(count0, bound0);
    const int nb = flip ? resolve_count(count0, bound0) : resolve_count(count1, bound1);
    u64* __restrict__ best = flip ? best_col : best_row;
    const int row0 = blockIdx.y * (TC_WARPS * TC_ROWS);
    const int tiles = (nb + TC_COLS - 1) / TC_COLS;
    const int tile_begin = (int)((long long)blockIdx.x * tiles / gridDim.x);
    const int tile_end = (int)((long long)(blockIdx.x + 1) * tiles / gridDim.x);
    if (row0 >= na || tile_begin >= tile_end) {
        return;  // uniform over the block
    }
    __shared__ __align__(16) unsigned int s_b[2][TC_COLS * TC_COLUMN];
    __shared__ int s_key[TC_WARPS][TC_QUEUE];
    __shared__ float s_value[TC_WARPS][TC_QUEUE];
    __shared__ int s_count[TC_WARPS];
    __shared__ float s_threshold[TC_WARPS][TC_ROWS];
    __shared__ u64 s_best[TC_WARPS][TC_ROWS];
    const int tid = threadIdx.x;
    const int lane = tid & 31;
    const int warp = tid >> 5;
    const int g = lane >> 2;
    const int t = lane & 3;
    const int warp_row0 = row0 + warp * TC_ROWS;
    const RowQueue q = {s_key[warp], s_value[warp], &s_count[warp], s_threshold[warp],
                        s_best[warp]};
    if (lane == 0) {
        s_count[warp] = 0;
    }
    if (lane < TC_ROWS) {
        s_best[warp][lane] = 0ull;
    }

    float4 stage[TC_STAGE];
    load_tile(b, nb, tile_begin, stage);
    // A fragments of the warp's rows, all k-steps, as TF32 (zero past na)
    unsigned int af[TC_MT][TC_KSTEPS][4];
    float m[TC_MT][2];
    bool active[TC_MT][2];
#pragma unroll
    for (int mt = 0; mt < TC_MT; ++mt) {
        const int r0 = warp_row0 + 16 * mt + g;
        const int r1 = r0 + 8;
        const float* p0 = a + (long long)min(r0, na - 1) * DESC_DIM + t;
        const float* p1 = a + (long long)min(r1, na - 1) * DESC_DIM + t;
#pragma unroll
        for (int s = 0; s < TC_KSTEPS; ++s) {
            af[mt][s][0] = r0 < na ? to_tf32(__ldg(p0 + 8 * s)) : 0u;
            af[mt][s][1] = r1 < na ? to_tf32(__ldg(p1 + 8 * s)) : 0u;
            af[mt][s][2] = r0 < na ? to_tf32(__ldg(p0 + 8 * s + 4)) : 0u;
            af[mt][s][3] = r1 < na ? to_tf32(__ldg(p1 + 8 * s + 4)) : 0u;
        }
        m[mt][0] = NEG_INF;
        m[mt][1] = NEG_INF;
        active[mt][0] = r0 < na;
        active[mt][1] = r1 < na;
    }
    store_tile(s_b[0], stage);
    __syncthreads();

    for (int tile = tile_begin; tile < tile_end; ++tile) {
        const unsigned int* buf = s_b[(tile - tile_begin) & 1];
        const bool more = tile + 1 < tile_end;
        if (more) {
            load_tile(b, nb, tile + 1, stage);  // in flight during this tile's products
        }
#pragma unroll 1
        for (int group = 0; group < TC_COLS / 32; ++group) {
            float acc[TC_MT][4][4];
#pragma unroll
            for (int mt = 0; mt < TC_MT; ++mt) {
#pragma unroll
                for (int nt = 0; nt < 4; ++nt) {
#pragma unroll
                    for (int e = 0; e < 4; ++e) {
                        acc[mt][nt][e] = 0.0f;
                    }
                }
            }
#pragma unroll
            for (int nt = 0; nt < 4; ++nt) {
                const unsigned int* col = buf + (32 * group + 8 * nt + g) * TC_COLUMN
                                          + t * TC_PLANE;
#pragma unroll
                for (int k4 = 0; k4 < DESC_DIM / 16; ++k4) {
                    const uint4 v = *reinterpret_cast<const uint4*>(col + 4 * k4);
#pragma unroll
                    for (int mt = 0; mt < TC_MT; ++mt) {
                        mma_tf32(acc[mt][nt], af[mt][2 * k4], v.x, v.y);
                        mma_tf32(acc[mt][nt], af[mt][2 * k4 + 1], v.z, v.w);
                    }
                }
            }
            // acc[mt][nt][2 h + e]: warp row 16 mt + 8 h + g, column j0 + 8 nt + 2 t + e
            const int j0 = tile * TC_COLS + 32 * group;
            const int valid = nb - j0;  // columns c < valid exist
            unsigned int mask = 0u;  // this lane's candidates (recheck_group's bits)
            bool lost = false;       // one did not fit into the queue
#pragma unroll
            for (int mt = 0; mt < TC_MT; ++mt) {
#pragma unroll
                for (int h = 0; h < 2; ++h) {
                    float top = NEG_INF;
#pragma unroll
                    for (int nt = 0; nt < 4; ++nt) {
#pragma unroll
                        for (int e = 0; e < 2; ++e) {
                            if (8 * nt + 2 * t + e < valid) {
                                top = fmaxf(top, acc[mt][nt][2 * h + e]);
                            }
                        }
                    }
                    top = fmaxf(top, __shfl_xor_sync(0xffffffffu, top, 1));
                    top = fmaxf(top, __shfl_xor_sync(0xffffffffu, top, 2));
                    m[mt][h] = fmaxf(m[mt][h], top);
                    const float threshold = __fsub_rn(m[mt][h], margin);
                    if (t == 0) {
                        q.threshold[16 * mt + 8 * h + g] = threshold;
                    }
                    if (active[mt][h] && top >= threshold) {
#pragma unroll
                        for (int nt = 0; nt < 4; ++nt) {
#pragma unroll
                            for (int e = 0; e < 2; ++e) {
                                const int c = 8 * nt + 2 * t + e;
                                const float v = acc[mt][nt][2 * h + e];
                                if (c < valid && v >= threshold) {
                                    mask |= 1u << (((mt * 2 + h) * 4 + nt) * 2 + e);
                                    const int slot = atomicAdd(q.count, 1);
                                    if (slot < TC_QUEUE) {
                                        q.key[slot] = ((j0 + c) << 5) | (16 * mt + 8 * h + g);
                                        q.value[slot] = v;
                                    } else {
                                        lost = true;
                                    }
                                }
                            }
                        }
                    }
                }
            }
            const bool overflow = __any_sync(0xffffffffu, lost);
            __syncwarp();
            if (overflow || *q.count >= TC_FLUSH_AT) {  // warp-uniform
                // overflow (thousands of ties): re-check the whole queue, then this group's
                // candidates one by one (those queued twice: max is idempotent)
                flush_queue(q, a, b, warp_row0, overflow ? 0 : TC_RECHECK_AT);
                if (overflow) {
                    recheck_group(q, a, b, warp_row0, mask, j0);
                }
            }
        }
        if (more) {
            store_tile(s_b[(tile + 1 - tile_begin) & 1], stage);
        }
        __syncthreads();
    }
    flush_queue(q, a, b, warp_row0, 0);
    if (lane < TC_ROWS && warp_row0 + lane < na && s_best[warp][lane] != 0ull) {
        atomicMax(&best[warp_row0 + lane], s_best[warp][lane]);
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
