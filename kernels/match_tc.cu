// Copyright 2026 xfeat_ros contributors
// SPDX-License-Identifier: Apache-2.0
//
// match_tc.cu: the mutual-nearest-neighbour similarities on the tensor cores, as bounds
// for an exact FP32 re-check (match_refine.cu); the two together give best_row / best_col
// equal to match.cu's mnn_best bit for bit, and match.cu's mnn_collect then makes the
// matches.
//
// Entry points (the default of the GPU engine)
//   halve_sides(d0, count0, bound0, h0, d1, count1, bound1, h1)
//       the first count rows of each side's float descriptors as FP16 (round to
//       nearest even) into h0 / h1 (16-byte aligned, DESC_DIM halves a row), once
//       a matching, so that the tiles load half the bytes and convert nothing.
//   mnn_approx_tc(h0, count0, bound0, h1, count1, bound1, row_max, col_max,
//                 tile_first, tile_second)
//       S~ = H0 . H1^T on the tensor cores (mma.sync m16n8k16, FP16 operands,
//       FP32 accumulation) in 64 x 64 tiles. For every tile
//       it stores, per row and per column of the tile, the two largest S~ as
//       tagged bits (mnn.cuh: orderable float bits whose low TAG_BITS = 6 hold the
//       value's place in the tile, 0..63; 0: none) in tile_first / tile_second;
//       and folds each row's and column's largest, rounded up (tag bits set),
//       into row_max / col_max (atomicMax; zero before the launch). The rows'
//       table comes first, entry bx * bound0 + i for row i in the tile of
//       columns bx (ceil(bound1 / 64) * bound0 entries), then the columns',
//       entry by * bound1 + j after it. Not cleared: every entry read is
//       written first. |S~ - S| <= 2^-10 for unit vectors (match_refine.cu says why).
//   halve_sides_pairs(table), mnn_approx_tc_pairs(table)
//       the same for every pair of a pair table at once (each row names the
//       pair's descriptor sets and their FP16 copies, counts and scratch):
//       blockIdx.z is the pair, the grid covers the largest pair; blocks past a
//       pair's counts return. mnn_refine_tc_pairs (match_refine.cu) follows.
//   Thread mapping: halve_sides: grid (ceil(bound * DESC_DIM / 8 / TC_THREADS), 2), one
//   thread per eight values, blockIdx.y the side. mnn_approx_tc: 2-D grid
//   (ceil(bound1 / 64), ceil(bound0 / 64)) of
//   TC_THREADS = 256-thread blocks (8 warps); warp w owns rows 16 (w / 2) .. +16 and
//   columns 32 (w % 2) .. +32 of the tile (four 16 x 8 MMA tiles); DESC_DIM is
//   streamed through shared memory in chunks of TC_K = 64 halves (32 where DESC_DIM is
//   not a multiple of 64; rows padded by 4 words: conflict-free fragment reads),
//   every load of a chunk issued before the first use. After the products each warp
//   passes its 16 x 32 values through shared memory transposed, so that lane l reduces
//   column l of the warp's part without shuffles (the rows reduce by shuffles).
//
// Counts, keys and tags: see mnn.cuh, which the loader puts before this file.
//
// Macros injected by the loader: DESC_DIM (descriptor width: 64 for XFeat,
// 128 for e.g. ALIKED); a matcher handles exactly that width. The launch shapes
// TILE (64) and TC_THREADS (256), read by the Python launches from the same place
// (xfeat_ros.features.gpu.kernels.LAUNCH_DEFINES).
// The pair table's words (xfeat_ros.features.gpu.kernels.PAIR_TABLE, used through mnn.cuh's
// pair_row): PT_FIELDS, PT_D0, PT_COUNT0, PT_BOUND0, PT_D1, PT_COUNT1, PT_BOUND1,
// PT_BEST_ROW, PT_BEST_COL, PT_ROW_MAX, PT_COL_MAX, PT_TILE_FIRST, PT_TILE_SECOND, PT_H0,
// PT_H1, PT_IDX0, PT_IDX1, PT_SIM, PT_MATCH_COUNT, PT_CAPACITY, PT_SPARE.

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
#define TC_WORDS (TC_K / 2)                     // two halves a 32-bit word
#define TC_STRIDE (TC_WORDS + 4)                // words a shared row: conflict-free fragments
#define TC_LOADS (TILE * (TC_K / 8) / TC_THREADS)  // 16-byte loads a thread a side a chunk
#define HALVE_ITEMS (DESC_DIM / 8)              // 16-byte groups of halves a descriptor

// Two floats as two FP16 in one word (round to nearest even), lo in the lower half.
__device__ __forceinline__ unsigned int halves2(float lo, float hi)
{
    unsigned int r;
    asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
    return r;
}

// Rows 0 .. count - 1 of src (float [bound, DESC_DIM]) as FP16 into dst (16-byte aligned):
// one thread per eight values, threads of blockIdx.x.
__device__ __forceinline__ void halve_side(const float* __restrict__ src, const int* count,
                                           int bound, uint4* __restrict__ dst)
{
    const long long items = (long long)resolve_count(count, bound) * HALVE_ITEMS;
    const long long e = (long long)blockIdx.x * TC_THREADS + threadIdx.x;
    if (e < items) {
        const float4 a = *reinterpret_cast<const float4*>(src + 8 * e);
        const float4 b = *reinterpret_cast<const float4*>(src + 8 * e + 4);
        dst[e] = make_uint4(halves2(a.x, a.y), halves2(a.z, a.w), halves2(b.x, b.y),
                            halves2(b.z, b.w));
    }
}

extern "C" __global__ void __launch_bounds__(TC_THREADS)
halve_sides(const float* __restrict__ d0, const int* count0, int bound0, uint4* __restrict__ h0,
            const float* __restrict__ d1, const int* count1, int bound1, uint4* __restrict__ h1)
{
    if (blockIdx.y == 0) {
        halve_side(d0, count0, bound0, h0);
    } else {
        halve_side(d1, count1, bound1, h1);
    }
}

extern "C" __global__ void __launch_bounds__(TC_THREADS)
halve_sides_pairs(const u64* __restrict__ table)
{
    const u64* p = pair_row(table, blockIdx.z);
    const int side = blockIdx.y;
    halve_side(reinterpret_cast<const float*>(p[side ? PT_D1 : PT_D0]),
               reinterpret_cast<const int*>(p[side ? PT_COUNT1 : PT_COUNT0]),
               (int)p[side ? PT_BOUND1 : PT_BOUND0],
               reinterpret_cast<uint4*>(p[side ? PT_H1 : PT_H0]));
}

__device__ __forceinline__ void mma_f16(float* c, const unsigned int* a, unsigned int b0,
                                        unsigned int b1)
{
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
                 "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// This thread's place in the MMA fragments of a 64 x 64 tile (TC_THREADS = 8 warps): its
// warp owns rows wr = 16 (warp / 2) .. +16 and columns wc = 32 (warp % 2) .. +32; within the
// m16n8k16 fragments it is group g = lane / 4 (a row of A, a column of B) and t = lane % 4.
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

// S~ of this thread's 32 tile entries from the FP16 rows h0 (n0 of them) and h1 (n1):
// acc[nt][q] is row 16 (warp / 2) + g + 8 (q / 2), column 32 (warp % 2) + 8 nt + 2 t + q % 2
// of the 64 x 64 tile (g = lane / 4, t = lane % 4).
__device__ __forceinline__ void tile_products(const uint4* __restrict__ h0, int n0,
                                              const uint4* __restrict__ h1, int n1,
                                              int i_base, int j_base,
                                              unsigned int (*As)[TC_STRIDE],
                                              unsigned int (*Bs)[TC_STRIDE], float (&acc)[4][4])
{
    const int tid = threadIdx.x;
    const Fragment f = thread_fragment(tid);
    const int g = f.g, t = f.t, wr = f.wr, wc = f.wc;
    zero_tile(acc);
    for (int k0 = 0; k0 < DESC_DIM; k0 += TC_K) {
        // 64 rows x TC_K halves a side; TC_LOADS 16-byte loads a thread a side, all issued
        // before the first is stored (one memory latency a chunk)
        uint4 va[TC_LOADS];
        uint4 vb[TC_LOADS];
#pragma unroll
        for (int l = 0; l < TC_LOADS; ++l) {
            const int e = tid + l * TC_THREADS;
            const int r = e / (TC_K / 8);
            const int c = e - r * (TC_K / 8) + k0 / 8;  // 16-byte group within the row
            va[l] = make_uint4(0u, 0u, 0u, 0u);
            vb[l] = va[l];
            if (i_base + r < n0) {
                va[l] = h0[(long long)(i_base + r) * HALVE_ITEMS + c];
            }
            if (j_base + r < n1) {
                vb[l] = h1[(long long)(j_base + r) * HALVE_ITEMS + c];
            }
        }
#pragma unroll
        for (int l = 0; l < TC_LOADS; ++l) {
            const int e = tid + l * TC_THREADS;
            const int r = e / (TC_K / 8);
            const int w = (e - r * (TC_K / 8)) * 4;
            // one 16-byte store a side (TC_STRIDE words a row: 16-byte aligned rows)
            *reinterpret_cast<uint4*>(&As[r][w]) = va[l];
            *reinterpret_cast<uint4*>(&Bs[r][w]) = vb[l];
        }
        __syncthreads();
#pragma unroll
        for (int kw = 0; kw < TC_WORDS; kw += 8) {  // 16 halves = 8 words a step
            unsigned int a[4];
            a[0] = As[wr + g][kw + t];
            a[1] = As[wr + g + 8][kw + t];
            a[2] = As[wr + g][kw + t + 4];
            a[3] = As[wr + g + 8][kw + t + 4];
#pragma unroll
            for (int nt = 0; nt < 4; ++nt) {
                const int n = wc + nt * 8 + g;
                mma_f16(acc[nt], a, Bs[n][kw + t], Bs[n][kw + t + 4]);
            }
        }
        __syncthreads();
    }
}

// The two largest values of a set, as tagged bits (mnn.cuh: TAG_BITS); 0: none.
struct Top2 {
    unsigned int first;
    unsigned int second;
};

__device__ __forceinline__ unsigned int tagged(float v, int place)
{
    return (orderable(v) & ~TAG_MASK) | (unsigned int)place;
}

__device__ __forceinline__ Top2 top2_merge(Top2 a, Top2 b)
{
    Top2 r;
    r.first = max(a.first, b.first);
    r.second = max(min(a.first, b.first), max(a.second, b.second));
    return r;
}

__device__ __forceinline__ Top2 top2_add(Top2 a, unsigned int v)
{
    Top2 r;
    r.first = max(a.first, v);
    r.second = max(a.second, min(a.first, v));
    return r;
}

__device__ __forceinline__ Top2 top2_xor(Top2 v, int lane_mask)
{
    Top2 o;
    o.first = __shfl_xor_sync(0xffffffffu, v.first, lane_mask);
    o.second = __shfl_xor_sync(0xffffffffu, v.second, lane_mask);
    return top2_merge(v, o);
}

// Where a tile's maxima go; Outputs::get() is called only once the products are done, so
// that the pairs' kernel reads these four pointers from its table late (not held in
// registers through the products).
struct TileOutputs {
    unsigned int* row_max;
    unsigned int* col_max;
    unsigned int* tile_first;
    unsigned int* tile_second;
};

struct GivenOutputs {
    TileOutputs out;
    __device__ __forceinline__ TileOutputs get() const { return out; }
};

struct TableOutputs {
    const u64* row;
    __device__ __forceinline__ TileOutputs get() const
    {
        TileOutputs out;
        out.row_max = reinterpret_cast<unsigned int*>(row[PT_ROW_MAX]);
        out.col_max = reinterpret_cast<unsigned int*>(row[PT_COL_MAX]);
        out.tile_first = reinterpret_cast<unsigned int*>(row[PT_TILE_FIRST]);
        out.tile_second = reinterpret_cast<unsigned int*>(row[PT_TILE_SECOND]);
        return out;
    }
};

// Shared memory of a tile (words): the operand tiles As and Bs during the products; after
// them, each warp's columns transposed (COL_STRIDE words a column of its 16 rows: 16-byte
// aligned, conflict-free 32-bit stores and 16-byte loads), then the warps' partial top
// twos of the rows (s_row) and columns (s_col) past those.
#define COL_STRIDE 20
#define WARP_COLS_WORDS (32 * COL_STRIDE)
#define S_ROW_AT ((TC_THREADS / 32) * WARP_COLS_WORDS)
#define S_COL_AT (S_ROW_AT + 2 * TILE * 2)
#define TOP2_END (S_COL_AT + 4 * TILE * 2)
#define OPERAND_WORDS (2 * TILE * TC_STRIDE)
#define TILE_SMEM_WORDS (OPERAND_WORDS > TOP2_END ? OPERAND_WORDS : TOP2_END)

// The warps' partial top twos of a tile's rows (s_row[column half][row]) and columns
// (s_col[row quarter][column]) from this thread's products ``o`` (orderable bits, tag
// bits clear; o[nt][q] at the place acc[nt][q] has in tile_products), over the first
// ``rows`` rows and ``cols`` columns of the tile; WHOLE: all 64 of each (no bounds test).
// Rows: top two over the thread's 8 columns, then over t by shuffles. Columns: the warp's
// 16 x 32 values (tagged with their row) go through its part of ``smem`` transposed, and
// lane l takes the top two of column wc + l over the warp's 16 rows (an entry outside
// the counts is 0, which no top two keeps).
template <bool WHOLE>
__device__ __forceinline__ void partial_top2s(const unsigned int (&o)[4][4], Fragment f,
                                              int rows, int cols, unsigned int* smem,
                                              Top2 (*s_row)[TILE], Top2 (*s_col)[TILE])
{
    const int g = f.g, t = f.t, wr = f.wr, wc = f.wc;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        const int r = wr + g + 8 * h;
        Top2 v = {0u, 0u};
#pragma unroll
        for (int nt = 0; nt < 4; ++nt) {
#pragma unroll
            for (int e = 0; e < 2; ++e) {
                const int c = wc + nt * 8 + 2 * t + e;
                if (WHOLE || (r < rows && c < cols)) {
                    v = top2_add(v, o[nt][2 * h + e] | (unsigned int)c);
                }
            }
        }
        v = top2_xor(v, 1);
        v = top2_xor(v, 2);
        if (t == 0) {
            s_row[wc >> 5][r] = v;
        }
    }
    unsigned int* columns = smem + (threadIdx.x >> 5) * WARP_COLS_WORDS;
#pragma unroll
    for (int nt = 0; nt < 4; ++nt) {
#pragma unroll
        for (int q = 0; q < 4; ++q) {
            const int col = nt * 8 + 2 * t + (q & 1);  // in the warp's 32
            const int row = g + 8 * (q >> 1);          // in the warp's 16
            const bool inside = WHOLE || (wr + row < rows && wc + col < cols);
            columns[col * COL_STRIDE + row] =
                inside ? (o[nt][q] | (unsigned int)(wr + row)) : 0u;
        }
    }
    __syncwarp();
    const int lane = threadIdx.x & 31;
    Top2 v = {0u, 0u};
#pragma unroll
    for (int k = 0; k < 16; k += 4) {
        const uint4 x = *reinterpret_cast<const uint4*>(columns + lane * COL_STRIDE + k);
        v = top2_add(v, x.x);
        v = top2_add(v, x.y);
        v = top2_add(v, x.z);
        v = top2_add(v, x.w);
    }
    s_col[wr >> 4][wc + lane] = v;
}

template <class Outputs>
__device__ __forceinline__ void
approx_tile(const uint4* __restrict__ h0, const int* count0, int bound0,
            const uint4* __restrict__ h1, const int* count1, int bound1, Outputs outputs)
{
    TileOrigin tile;
    if (!tile_origin(count0, bound0, count1, bound1, tile)) {
        return;
    }
    const int n0 = tile.n0, n1 = tile.n1, i_base = tile.i_base, j_base = tile.j_base;
    __shared__ __align__(16) unsigned int smem[TILE_SMEM_WORDS];
    unsigned int (*As)[TC_STRIDE] = reinterpret_cast<unsigned int (*)[TC_STRIDE]>(smem);
    unsigned int (*Bs)[TC_STRIDE] =
        reinterpret_cast<unsigned int (*)[TC_STRIDE]>(smem + TILE * TC_STRIDE);
    const int tid = threadIdx.x;
    float acc[4][4];
    tile_products(h0, n0, h1, n1, i_base, j_base, As, Bs, acc);  // syncs after the last use
    // the operand tiles are free now: the columns' transposes and the top twos go there
    Top2 (*s_row)[TILE] = reinterpret_cast<Top2 (*)[TILE]>(smem + S_ROW_AT);  // [half][row]
    Top2 (*s_col)[TILE] = reinterpret_cast<Top2 (*)[TILE]>(smem + S_COL_AT);  // [quarter][col]
    // every product once as orderable bits with the tag bits clear: tagged(v, p) = o | p
    unsigned int o[4][4];
#pragma unroll
    for (int nt = 0; nt < 4; ++nt) {
#pragma unroll
        for (int q = 0; q < 4; ++q) {
            o[nt][q] = tagged(acc[nt][q], 0);
        }
    }
    const Fragment f = thread_fragment(tid);
    if (i_base + TILE <= n0 && j_base + TILE <= n1) {
        partial_top2s<true>(o, f, TILE, TILE, smem, s_row, s_col);
    } else {
        partial_top2s<false>(o, f, n0 - i_base, n1 - j_base, smem, s_row, s_col);
    }
    __syncthreads();
    const long long cols_at = (long long)((bound1 + TILE - 1) / TILE) * bound0;
    const TileOutputs out = outputs.get();
    unsigned int* __restrict__ tile_first = out.tile_first;
    unsigned int* __restrict__ tile_second = out.tile_second;
    if (tid < TILE) {
        const int i = i_base + tid;
        if (i < n0) {
            const Top2 v = top2_merge(s_row[0][tid], s_row[1][tid]);
            const long long at = (long long)blockIdx.x * bound0 + i;
            tile_first[at] = v.first;
            tile_second[at] = v.second;
            if (v.first) {
                atomicMax(&out.row_max[i], v.first | TAG_MASK);
            }
        }
    } else if (tid < 2 * TILE) {
        const int l = tid - TILE;
        const int j = j_base + l;
        if (j < n1) {
            const Top2 v = top2_merge(top2_merge(s_col[0][l], s_col[1][l]),
                                      top2_merge(s_col[2][l], s_col[3][l]));
            const long long at = cols_at + (long long)blockIdx.y * bound1 + j;
            tile_first[at] = v.first;
            tile_second[at] = v.second;
            if (v.first) {
                atomicMax(&out.col_max[j], v.first | TAG_MASK);
            }
        }
    }
}

// At least 6 blocks an SM (registers capped at 40) for DESC_DIM 64: the kernel waits on
// memory, and its 23 KB of shared memory fits them in an sm_90 SM; ptxas spills nothing
// in either entry point. Wider descriptors (two chunks) would spill at 40 registers, so
// they get 80 and 3 blocks. The pairs' kernel reads its pointers and bounds from the pair
// table (global memory, not the parameter bank) late, after the products.
#if DESC_DIM <= 64
#define APPROX_MIN_BLOCKS 6
#else
#define APPROX_MIN_BLOCKS 3
#endif
extern "C" __global__ void __launch_bounds__(TC_THREADS, APPROX_MIN_BLOCKS)
mnn_approx_tc(const uint4* __restrict__ h0, const int* count0, int bound0,
              const uint4* __restrict__ h1, const int* count1, int bound1,
              unsigned int* __restrict__ row_max, unsigned int* __restrict__ col_max,
              unsigned int* __restrict__ tile_first, unsigned int* __restrict__ tile_second)
{
    const GivenOutputs outputs = {{row_max, col_max, tile_first, tile_second}};
    approx_tile(h0, count0, bound0, h1, count1, bound1, outputs);
}

// Pair blockIdx.z of a pair table (mnn.cuh: pair_row).
extern "C" __global__ void __launch_bounds__(TC_THREADS, APPROX_MIN_BLOCKS)
mnn_approx_tc_pairs(const u64* __restrict__ table)
{
    const u64* p = pair_row(table, blockIdx.z);
    const TableOutputs outputs = {p};
    approx_tile(reinterpret_cast<const uint4*>(p[PT_H0]),
                reinterpret_cast<const int*>(p[PT_COUNT0]), (int)p[PT_BOUND0],
                reinterpret_cast<const uint4*>(p[PT_H1]),
                reinterpret_cast<const int*>(p[PT_COUNT1]), (int)p[PT_BOUND1], outputs);
}
