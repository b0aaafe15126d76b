// Copyright 2026 xfeat_ros contributors
// SPDX-License-Identifier: Apache-2.0
//
// detect.cu: heatmap, NMS, keypoint scores and exact GPU top-K (no host round trip),
// for a batch of B frames of one model size in one launch per step.
//
// Every entry point takes the frame from one grid dimension (named below) and
// offsets its arrays by it: logits [B, 65, h, w], heatmap [B, mh, mw],
// reliability [B, h, w], keys [B, capacity], count [B], hist [B, 65536],
// sel64 [B, 2], sel32 [B, 4], selected / positions [B, sel_stride]. A grid of
// one frame is the single-frame case.
//
// Entry points (launch order; all on one stream)
//   heatmap_softmax(logits [65, h, w], h, w, heatmap [8h, 8w])
//       softmax over the 65 logits of a cell, dustbin dropped, 8x8 pixel shuffle
//       (value c of cell (i, j) -> row 8i + c / 8, column 8j + c % 8).
//       Thread mapping: one thread per cell, 2-D grid of 32 x 8 blocks over (w, h),
//       frame = blockIdx.z.
//   nms_score(heatmap, reliability [h, w], mh, mw, threshold, keys, count, capacity, hist)
//       5x5 NMS (window clipped at the border, ties survive, value > threshold),
//       score = nearest(heatmap) x bilinear(reliability) with upstream's
//       coordinate convention, (0, 0) -> -1. Every keypoint with score > 0 is
//       appended (atomic slot) as a 64-bit key and counted in the pass-0 radix
//       histogram. Thread mapping: one thread per model pixel, blocks of
//       NMS_BX x NMS_BY threads with a shared (NMS_BY + 4) x (NMS_BX + 4) tile,
//       frame = blockIdx.z.
//   radix_select(hist, count, capacity, pass, top_k, sel64, sel32)      passes 0..3
//   radix_hist(keys, count, capacity, pass, sel64, sel32, hist)         passes 1..3
//       MSB radix select, 16 bits per pass, of the top_k-th largest key.
//       radix_select: one block of SELECT_THREADS threads; warp w owns 2048
//       contiguous bins read as coalesced chunks of 32, thread 0 finds the
//       cutoff warp, that warp the cutoff bin (warp suffix sums);
//       radix_hist: grid-stride loop over the candidates. Both return at once
//       when an earlier pass has settled the cutoff (sel32[1] != 0).
//       Frame: radix_select blockIdx.x (one block per frame), radix_hist blockIdx.y.
//   gather_selected(keys, count, capacity, sel64, sel32, top_k, selected, sel_stride)
//       keys >= cutoff -> selected (warp-aggregated atomic slots; at most top_k
//       by construction). Thread mapping: warp-aligned grid-stride loop over
//       blockIdx.x, frame = blockIdx.y.
//   rank_sorted(selected, sel_stride, sel32, top_k, mw, frames, counts, positions)
//       sorts the (at most top_k) selected keys by rank counting (keys are
//       unique), writes the frame's keypoints in original pixels (x * rw, y * rh),
//       scores and count (number kept) through its frame-table row, the
//       model-space positions y * mw + x, and counts[f] (if counts is not null).
//       Thread mapping: RANK_SPLIT consecutive lanes per selected key (each counts
//       every RANK_SPLIT-th larger key, the group sums by shuffles), RANK_THREADS
//       per block (RANK_THREADS / RANK_SPLIT keys), the keys streamed through
//       shared memory in tiles of RANK_TILE; frame = blockIdx.y.
//
// Frame table (frames): FT_FIELDS unsigned 64-bit words per frame; word FT_COUNT
// is the int* count, FT_KEYPOINTS the float* [top_k, 2], FT_SCORES the float*
// [top_k], FT_SCALES the float bits of rw (low half) and rh (high half). The
// outputs of one frame are its slot's own buffers, so one launch serves frames
// whose results live anywhere.
//
// Key layout: (float bits of score) << 32 | (0xFFFFFFFF - (y * mw + x)). Scores
// are > 0, so their bits order like the values; larger key = higher score,
// then smaller row-major position. Keys are unique, so the top-K set and its
// order equal the CPU oracle's stable descending sort exactly whenever the
// scores are bitwise equal.
//
// State of the selection (device memory, written by radix_select):
//   sel64[0] prefix of the cutoff bin, sel64[1] cutoff key (keep keys >= it)
//   sel32[0] keys still to take inside the prefix, sel32[1] done flag,
//   sel32[2] number gathered. Pass 0 initialises it, so nothing is reset by
//   the host; radix_select zeroes the histogram bins it has read.
//
// Macros injected by the loader: CELL (8, heatmap cell side), NMS_RADIUS (2),
// FT_FIELDS, FT_COUNT, FT_KEYPOINTS, FT_SCORES, FT_SCALES (frame-table layout,
// xfeat_ros.features.gpu.kernels.FRAME_TABLE); the launch shapes NMS_BX, NMS_BY (32 x 8),
// RADIX_BITS (16), SELECT_THREADS (1024), RANK_THREADS (128), RANK_SPLIT (8), RANK_TILE
// (2048), which the Python launches read from the same place
// (xfeat_ros.features.gpu.kernels.LAUNCH_DEFINES).
// Compiled with --fmad=false; float operations that must round like the NumPy
// oracle (coordinates, weights, sums) use explicit round-to-nearest intrinsics.

#ifndef CELL
#error "CELL must be defined by the loader"
#endif
#ifndef NMS_RADIUS
#error "NMS_RADIUS must be defined by the loader"
#endif
#ifndef FT_FIELDS
#error "FT_FIELDS (frame-table layout) must be defined by the loader"
#endif
#if !defined(NMS_BX) || !defined(NMS_BY) || !defined(RADIX_BITS) || !defined(SELECT_THREADS) \
    || !defined(RANK_THREADS)
#error "NMS_BX, NMS_BY, RADIX_BITS, SELECT_THREADS and RANK_THREADS must be defined by the loader"
#endif
#if !defined(RANK_SPLIT) || !defined(RANK_TILE)
#error "RANK_SPLIT and RANK_TILE must be defined by the loader"
#endif
#if RANK_SPLIT < 1 || RANK_SPLIT > 32 || (RANK_SPLIT & (RANK_SPLIT - 1)) != 0 \
    || RANK_THREADS % 32 != 0
#error "RANK_SPLIT must be a power of two up to 32 and RANK_THREADS whole warps"
#endif

#define CELL_CH (CELL * CELL)
#define LOGIT_CH (CELL_CH + 1)
#define RADIX_BINS (1 << RADIX_BITS)
#define SELECT_WARPS (SELECT_THREADS / 32)
#define BINS_PER_WARP (RADIX_BINS / SELECT_WARPS)
#define CHUNKS_PER_WARP (BINS_PER_WARP / 32)
#if 64 % RADIX_BITS != 0 || SELECT_THREADS % 32 != 0 || SELECT_THREADS > 1024 \
    || BINS_PER_WARP % 32 != 0
#error "radix digits must divide 64 bits and split into whole warps of 32-bin chunks"
#endif

typedef unsigned long long u64;

__device__ __forceinline__ float neg_inf() { return __int_as_float(0xff800000); }

// Upstream's sample position: normalise by (size - 1) to [-1, 1] (float32,
// rounded per operation), then grid_sample(align_corners=False) unnormalises
// with one fused multiply-add: u = g * size / 2 + (size - 1) / 2, one rounding.
__device__ __forceinline__ float map_coord(int p, int model_size, int map_size)
{
    const float g = __fsub_rn(__fmul_rn(2.0f, __fdiv_rn((float)p, (float)(model_size - 1))),
                              1.0f);
    return __fmaf_rn(g, 0.5f * (float)map_size, 0.5f * (float)(map_size - 1));
}

__device__ __forceinline__ float read_or_zero(const float* __restrict__ map, int rows,
                                              int cols, int r, int c)
{
    return (r >= 0 && r < rows && c >= 0 && c < cols) ? map[(long long)r * cols + c] : 0.0f;
}

__device__ float keypoint_score(const float* __restrict__ heatmap,
                                const float* __restrict__ rel, int mh, int mw, int x, int y)
{
    if (x == 0 && y == 0) {
        return -1.0f;  // upstream quirk: a keypoint at (0, 0) is treated as padding
    }
    // nearest (round half to even) in the heatmap itself
    const float u = map_coord(x, mw, mw);
    const float v = map_coord(y, mh, mh);
    const float near = read_or_zero(heatmap, mh, mw, (int)rintf(v), (int)rintf(u));
    // bilinear in the 1/8 reliability map, zero outside
    const int h = mh / CELL;
    const int w = mw / CELL;
    const float ur = map_coord(x, mw, w);
    const float vr = map_coord(y, mh, h);
    const float fc = floorf(ur);
    const float fr = floorf(vr);
    const float tu = __fsub_rn(ur, fc);
    const float tv = __fsub_rn(vr, fr);
    const float otu = __fsub_rn(1.0f, tu);
    const float otv = __fsub_rn(1.0f, tv);
    const int c0 = (int)fc;
    const int r0 = (int)fr;
    const float a = __fmul_rn(__fmul_rn(read_or_zero(rel, h, w, r0, c0), otu), otv);
    const float b = __fmul_rn(__fmul_rn(read_or_zero(rel, h, w, r0, c0 + 1), tu), otv);
    const float c = __fmul_rn(__fmul_rn(read_or_zero(rel, h, w, r0 + 1, c0), otu), tv);
    const float d = __fmul_rn(__fmul_rn(read_or_zero(rel, h, w, r0 + 1, c0 + 1), tu), tv);
    const float bil = __fadd_rn(__fadd_rn(__fadd_rn(a, b), c), d);
    return __fmul_rn(near, bil);
}

extern "C" __global__ void heatmap_softmax(const float* __restrict__ logits, int h, int w,
                                           float* __restrict__ heatmap)
{
    const int j = blockIdx.x * blockDim.x + threadIdx.x;
    const int i = blockIdx.y * blockDim.y + threadIdx.y;
    if (i >= h || j >= w) {
        return;
    }
    const long long plane = (long long)h * w;
    const long long frame = blockIdx.z;
    logits += frame * LOGIT_CH * plane;
    heatmap += frame * CELL_CH * plane;
    const float* p = logits + (long long)i * w + j;
    float v[LOGIT_CH];
    float m = neg_inf();
#pragma unroll
    for (int c = 0; c < LOGIT_CH; ++c) {
        v[c] = p[c * plane];
        m = fmaxf(m, v[c]);
    }
    float s = 0.0f;
#pragma unroll
    for (int c = 0; c < LOGIT_CH; ++c) {
        v[c] = expf(__fsub_rn(v[c], m));
        s = __fadd_rn(s, v[c]);  // sequential, in channel order, like NumPy's axis-0 sum
    }
    const int mw = w * CELL;
    float* out = heatmap + (long long)(i * CELL) * mw + (long long)j * CELL;
#pragma unroll
    for (int c = 0; c < CELL_CH; ++c) {
        out[(long long)(c / CELL) * mw + (c % CELL)] = __fdiv_rn(v[c], s);
    }
}

extern "C" __global__ void __launch_bounds__(NMS_BX * NMS_BY)
nms_score(const float* __restrict__ heatmap, const float* __restrict__ rel, int mh, int mw,
          float threshold, u64* __restrict__ keys, int* __restrict__ count, int capacity,
          unsigned int* __restrict__ hist)
{
    const int TW = NMS_BX + 2 * NMS_RADIUS;
    const int TH = NMS_BY + 2 * NMS_RADIUS;
    __shared__ float tile[NMS_BY + 2 * NMS_RADIUS][NMS_BX + 2 * NMS_RADIUS];
    const long long frame = blockIdx.z;
    heatmap += frame * mh * mw;
    rel += frame * (mh / CELL) * (mw / CELL);
    keys += frame * capacity;
    count += frame;
    hist += frame * RADIX_BINS;
    const int x0 = blockIdx.x * NMS_BX - NMS_RADIUS;
    const int y0 = blockIdx.y * NMS_BY - NMS_RADIUS;
    for (int k = threadIdx.y * NMS_BX + threadIdx.x; k < TW * TH; k += NMS_BX * NMS_BY) {
        const int ty = k / TW;
        const int tx = k - ty * TW;
        const int gy = y0 + ty;
        const int gx = x0 + tx;
        tile[ty][tx] = (gy >= 0 && gy < mh && gx >= 0 && gx < mw)
                           ? heatmap[(long long)gy * mw + gx] : neg_inf();
    }
    __syncthreads();
    const int x = blockIdx.x * NMS_BX + threadIdx.x;
    const int y = blockIdx.y * NMS_BY + threadIdx.y;
    if (x >= mw || y >= mh) {
        return;
    }
    const float v = tile[threadIdx.y + NMS_RADIUS][threadIdx.x + NMS_RADIUS];
    float wmax = neg_inf();
#pragma unroll
    for (int dy = 0; dy <= 2 * NMS_RADIUS; ++dy) {
#pragma unroll
        for (int dx = 0; dx <= 2 * NMS_RADIUS; ++dx) {
            wmax = fmaxf(wmax, tile[threadIdx.y + dy][threadIdx.x + dx]);
        }
    }
    if (!(v == wmax && v > threshold)) {
        return;
    }
    const float score = keypoint_score(heatmap, rel, mh, mw, x, y);
    if (!(score > 0.0f)) {
        return;  // top-K keeps only positive scores; dropping them first is equivalent
    }
    const unsigned int pos = (unsigned int)y * (unsigned int)mw + (unsigned int)x;
    const u64 key = ((u64)__float_as_uint(score) << 32) | (u64)(0xFFFFFFFFu - pos);
    const int slot = atomicAdd(count, 1);
    if (slot < capacity) {
        keys[slot] = key;
        atomicAdd(&hist[(unsigned int)(key >> (64 - RADIX_BITS))], 1u);
    }
}

extern "C" __global__ void radix_hist(const u64* __restrict__ keys, const int* __restrict__ count,
                                      int capacity, int pass, const u64* __restrict__ sel64,
                                      const int* __restrict__ sel32,
                                      unsigned int* __restrict__ hist)
{
    const long long frame = blockIdx.y;
    sel32 += 4 * frame;
    if (pass < 1 || sel32[1]) {
        return;
    }
    keys += frame * capacity;
    count += frame;
    sel64 += 2 * frame;
    hist += frame * RADIX_BINS;
    const int n = min(*count, capacity);
    const int shift = 64 - RADIX_BITS * (pass + 1);
    const u64 mask = ~0ull << (64 - RADIX_BITS * pass);
    const u64 prefix = sel64[0];
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
        const u64 k = keys[i];
        if ((k & mask) == prefix) {
            atomicAdd(&hist[(unsigned int)((k >> shift) & (RADIX_BINS - 1))], 1u);
        }
    }
}

__device__ __forceinline__ unsigned int warp_sum(unsigned int v)
{
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        v += __shfl_xor_sync(0xffffffffu, v, o);
    }
    return v;
}

// Sum of v over lanes >= this lane.
__device__ __forceinline__ unsigned int warp_suffix_sum(unsigned int v)
{
    const int lane = threadIdx.x & 31;
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
        const unsigned int n = __shfl_down_sync(0xffffffffu, v, o);
        if (lane + o < 32) {
            v += n;
        }
    }
    return v;
}

// Warp w owns bins [w * BINS_PER_WARP, (w + 1) * BINS_PER_WARP), read as
// CHUNKS_PER_WARP coalesced chunks of 32; "above" a bin means at a higher index.
extern "C" __global__ void __launch_bounds__(SELECT_THREADS)
radix_select(unsigned int* __restrict__ hist, const int* __restrict__ count, int capacity,
             int pass, int top_k, u64* __restrict__ sel64, int* __restrict__ sel32)
{
    __shared__ unsigned int warp_total[SELECT_WARPS];
    __shared__ u64 s_prefix;
    __shared__ int s_remaining;
    __shared__ int s_done;
    __shared__ int s_warp;
    __shared__ unsigned int s_above;
    const long long frame = blockIdx.x;
    hist += frame * RADIX_BINS;
    count += frame;
    sel64 += 2 * frame;
    sel32 += 4 * frame;
    const int t = threadIdx.x;
    const int lane = t & 31;
    const int warp = t >> 5;
    if (t == 0) {
        if (pass == 0) {
            sel64[0] = 0ull;
            sel64[1] = 0ull;
            sel32[0] = top_k;
            sel32[1] = 0;
            sel32[2] = 0;
        }
        s_prefix = sel64[0];
        s_remaining = sel32[0];
        s_done = sel32[1];
        s_warp = -1;
    }
    __syncthreads();
    if (s_done) {
        return;  // settled earlier: radix_hist added nothing, the bins are still zero
    }
    const int shift = 64 - RADIX_BITS * (pass + 1);
    unsigned int* bins = hist + warp * BINS_PER_WARP;
    unsigned int own = 0;
#pragma unroll 8
    for (int c = 0; c < CHUNKS_PER_WARP; ++c) {
        own += bins[c * 32 + lane];
    }
    own = warp_sum(own);
    if (lane == 0) {
        warp_total[warp] = own;
    }
    __syncthreads();
    if (t == 0) {
        const int remaining = s_remaining;
        unsigned int total = 0;
        for (int w = 0; w < SELECT_WARPS; ++w) {
            total += warp_total[w];
        }
        if (remaining <= 0) {
            sel64[1] = ~0ull;  // top_k == 0: keep nothing
            sel32[1] = 1;
        } else if (total <= (unsigned int)remaining) {
            sel64[1] = s_prefix;  // every key of the prefix range is kept
            sel32[1] = 1;
        } else {
            unsigned int above = 0;
            for (int w = SELECT_WARPS - 1; w >= 0; --w) {
                if (above + warp_total[w] >= (unsigned int)remaining) {
                    s_warp = w;
                    s_above = above;
                    break;
                }
                above += warp_total[w];
            }
        }
    }
    __syncthreads();
    if (warp == s_warp) {
        const unsigned int remaining = (unsigned int)s_remaining;
        unsigned int above = s_above;
        for (int c = CHUNKS_PER_WARP - 1; c >= 0; --c) {
            const unsigned int v = bins[c * 32 + lane];
            const unsigned int chunk = warp_sum(v);
            if (above + chunk >= remaining) {  // warp-uniform
                const unsigned int suffix = above + warp_suffix_sum(v);  // keys in bins >= mine
                if (suffix - v < remaining && remaining <= suffix) {
                    const u64 digit = (u64)(warp * BINS_PER_WARP + c * 32 + lane);
                    const u64 key_floor = s_prefix | (digit << shift);
                    if (suffix == remaining) {
                        sel64[1] = key_floor;  // the whole bin is kept
                        sel32[1] = 1;
                    } else {
                        sel64[0] = key_floor;  // refine inside this bin on the next pass
                        sel32[0] = (int)(remaining - (suffix - v));
                    }
                }
                break;
            }
            above += chunk;
        }
    }
    __syncthreads();
#pragma unroll 8
    for (int c = 0; c < CHUNKS_PER_WARP; ++c) {
        if (bins[c * 32 + lane]) {
            bins[c * 32 + lane] = 0u;  // leave the histogram zero for the next pass / frame
        }
    }
}

// Warp-aggregated: one atomicAdd per warp for the slots of its selected keys.
extern "C" __global__ void gather_selected(const u64* __restrict__ keys,
                                           const int* __restrict__ count, int capacity,
                                           const u64* __restrict__ sel64, int* __restrict__ sel32,
                                           int top_k, u64* __restrict__ selected, int sel_stride)
{
    const long long frame = blockIdx.y;
    keys += frame * capacity;
    count += frame;
    sel64 += 2 * frame;
    sel32 += 4 * frame;
    selected += frame * sel_stride;
    const int n = min(*count, capacity);
    const u64 cutoff = sel64[1];
    const int lane = threadIdx.x & 31;
    const int stride = gridDim.x * blockDim.x;
    for (int base = blockIdx.x * blockDim.x + (threadIdx.x & ~31); base < n; base += stride) {
        const int i = base + lane;
        const u64 k = i < n ? keys[i] : 0ull;
        const bool take = i < n && k >= cutoff;
        const unsigned int mask = __ballot_sync(0xffffffffu, take);
        if (mask == 0u) {
            continue;
        }
        const int leader = __ffs(mask) - 1;
        int first = 0;
        if (lane == leader) {
            first = atomicAdd(&sel32[2], __popc(mask));
        }
        first = __shfl_sync(0xffffffffu, first, leader);
        if (take) {
            const int slot = first + __popc(mask & ((1u << lane) - 1u));
            if (slot < top_k) {
                selected[slot] = k;
            }
        }
    }
}

extern "C" __global__ void __launch_bounds__(RANK_THREADS)
rank_sorted(const u64* __restrict__ selected, int sel_stride, const int* __restrict__ sel32,
            int top_k, int mw, const u64* __restrict__ frames, int* __restrict__ counts,
            int* __restrict__ positions)
{
    __shared__ u64 tile[RANK_TILE];
    const long long frame = blockIdx.y;
    selected += frame * sel_stride;
    positions += frame * sel_stride;
    sel32 += 4 * frame;
    const u64* row = frames + frame * FT_FIELDS;
    float* __restrict__ keypoints = reinterpret_cast<float*>(row[FT_KEYPOINTS]);
    float* __restrict__ scores = reinterpret_cast<float*>(row[FT_SCORES]);
    const float rw = __uint_as_float((unsigned int)(row[FT_SCALES] & 0xFFFFFFFFull));
    const float rh = __uint_as_float((unsigned int)(row[FT_SCALES] >> 32));
    const int m = min(sel32[2], top_k);
    if (blockIdx.x == 0 && threadIdx.x == 0) {
        *reinterpret_cast<int*>(row[FT_COUNT]) = m;
        if (counts) {
            counts[frame] = m;
        }
    }
    // RANK_SPLIT consecutive lanes share a key: lane s of its group counts the keys
    // q = s, s + RANK_SPLIT, ... of each tile that are larger; the group sums them.
    constexpr int KEYS = RANK_THREADS / RANK_SPLIT;
    const int base = blockIdx.x * KEYS;
    if (base >= m) {
        return;
    }
    const int part = threadIdx.x % RANK_SPLIT;
    const int i = base + threadIdx.x / RANK_SPLIT;
    const u64 key = i < m ? selected[i] : 0ull;
    int rank = 0;
    for (int t0 = 0; t0 < m; t0 += RANK_TILE) {
        const int lim = min(RANK_TILE, m - t0);
        for (int j = threadIdx.x; j < lim; j += RANK_THREADS) {
            tile[j] = selected[t0 + j];
        }
        __syncthreads();
        for (int q = part; q < lim; q += RANK_SPLIT) {
            rank += tile[q] > key;
        }
        __syncthreads();
    }
#pragma unroll
    for (int offset = RANK_SPLIT / 2; offset > 0; offset /= 2) {
        rank += __shfl_xor_sync(0xFFFFFFFFu, rank, offset, RANK_SPLIT);
    }
    if (i >= m || part != 0) {
        return;
    }
    const unsigned int pos = 0xFFFFFFFFu - (unsigned int)(key & 0xFFFFFFFFull);
    const int x = (int)(pos % (unsigned int)mw);
    const int y = (int)(pos / (unsigned int)mw);
    keypoints[2 * rank] = __fmul_rn((float)x, rw);
    keypoints[2 * rank + 1] = __fmul_rn((float)y, rh);
    scores[rank] = __uint_as_float((unsigned int)(key >> 32));
    positions[rank] = (int)pos;
}
