// Copyright 2026 xfeat_ros contributors
// SPDX-License-Identifier: Apache-2.0
//
// describe.cu: unit-length dense features -> bicubic keypoint descriptors, for a
// batch of B frames of one model size (frame = blockIdx.y; a grid of one frame
// is the single-frame case).
//
// Entry points
//   normalize_feats(feats [B, DESC_DIM, h, w], h, w, feats_hwc [B, h, w, DESC_DIM])
//       L2-normalises every pixel's DESC_DIM-vector (norm clamped below by 1e-12)
//       and transposes to channel-last, so that a descriptor tap reads one
//       contiguous vector. Sum of squares in channel order, like NumPy's axis-0
//       sum. Thread mapping: one block of NORM_THREADS threads per NORM_PIXELS
//       consecutive pixels of a frame (blockIdx.x), transposed through shared
//       memory (both sides coalesced).
//   describe(feats_hwc, h, w, mh, mw, positions, pos_stride, frames, capacity)
//       For keypoint k < min(count, capacity) of a frame (count: the int* of its
//       frame-table row, word FT_COUNT; null: capacity) at model pixel
//       positions[f * pos_stride + k] = y * mw + x: bicubic sample (cubic convolution,
//       A = -0.75, taps outside the map are zero) at upstream's position
//       u = g w / 2 + (w - 1) / 2, g = 2 x / (mw - 1) - 1 (likewise v), accumulated row by
//       row as the oracle does, then
//       L2-normalised; writes row k of the float* [capacity, DESC_DIM] of its
//       frame-table row (word FT_DESCRIPTORS). Thread mapping: one warp
//       per keypoint, lane l owns channels l, l + 32, ...; the launcher (ops.py) uses 8 warps
//       per block; warps past the count return at once.
//
// Macros injected by the loader: DESC_DIM (channels; a multiple of 32, 64 for XFeat),
// FT_FIELDS, FT_COUNT, FT_DESCRIPTORS (frame-table layout, see detect.cu and
// xfeat_ros.features.gpu.kernels.FRAME_TABLE); the launch shapes NORM_PIXELS (32) and
// NORM_THREADS (256), read by the Python launch from the same place
// (xfeat_ros.features.gpu.kernels.LAUNCH_DEFINES).
// Compiled with --fmad=false; per-element float operations use explicit
// round-to-nearest intrinsics in the oracle's order, so the sampled vector
// before the final normalisation equals xfeat_ros.features.postprocess.sample_bicubic
// bit for bit; only the final norm's summation order differs (a few ulp).

#ifndef DESC_DIM
#error "DESC_DIM must be defined by the loader"
#endif
#if DESC_DIM % 32 != 0
#error "DESC_DIM must be a multiple of 32"
#endif
#ifndef FT_FIELDS
#error "FT_FIELDS (frame-table layout) must be defined by the loader"
#endif
#if !defined(NORM_PIXELS) || !defined(NORM_THREADS)
#error "NORM_PIXELS and NORM_THREADS must be defined by the loader"
#endif
#if NORM_PIXELS > NORM_THREADS
#error "normalize_feats needs a thread per pixel of its block (NORM_PIXELS <= NORM_THREADS)"
#endif

typedef unsigned long long u64;

#define CH_PER_LANE (DESC_DIM / 32)
#define CUBIC_A (-0.75f)

// g = 2 * (p / (model - 1)) - 1 rounded per operation, then grid_sample's
// unnormalisation as one fused multiply-add (single rounding).
__device__ __forceinline__ float map_coord(int p, int model_size, int map_size)
{
    const float g = __fsub_rn(__fmul_rn(2.0f, __fdiv_rn((float)p, (float)(model_size - 1))),
                              1.0f);
    return __fmaf_rn(g, 0.5f * (float)map_size, 0.5f * (float)(map_size - 1));
}

// ((a + 2) x - (a + 3)) x x + 1, for |x| <= 1
__device__ __forceinline__ float cubic_near(float x)
{
    const float a2 = 1.25f;  // a + 2
    const float a3 = 2.25f;  // a + 3
    return __fadd_rn(__fmul_rn(__fmul_rn(__fsub_rn(__fmul_rn(a2, x), a3), x), x), 1.0f);
}

// ((a x - 5 a) x + 8 a) x - 4 a, for 1 < |x| < 2
__device__ __forceinline__ float cubic_far(float x)
{
    const float a5 = -3.75f;  // 5 a
    const float a8 = -6.0f;   // 8 a
    const float a4 = -3.0f;   // 4 a
    return __fsub_rn(
        __fmul_rn(__fadd_rn(__fmul_rn(__fsub_rn(__fmul_rn(CUBIC_A, x), a5), x), a8), x), a4);
}

__device__ __forceinline__ void cubic_weights(float t, float* w)
{
    w[0] = cubic_far(__fadd_rn(t, 1.0f));
    w[1] = cubic_near(t);
    w[2] = cubic_near(__fsub_rn(1.0f, t));
    w[3] = cubic_far(__fsub_rn(2.0f, t));
}

// A block normalises NORM_PIXELS consecutive pixels: the [DESC_DIM, NORM_PIXELS]
// tile is read coalesced (pixels fastest), one thread per pixel sums its squares
// in channel order, and the tile is written back coalesced (channels fastest).
extern "C" __global__ void __launch_bounds__(NORM_THREADS)
normalize_feats(const float* __restrict__ feats, int h, int w, float* __restrict__ feats_hwc)
{
    __shared__ float tile[DESC_DIM][NORM_PIXELS + 1];
    __shared__ float denom[NORM_PIXELS];
    const long long plane = (long long)h * w;
    feats += blockIdx.y * DESC_DIM * plane;
    feats_hwc += blockIdx.y * plane * DESC_DIM;
    const long long p0 = (long long)blockIdx.x * NORM_PIXELS;
    const int t = threadIdx.x;
    for (int e = t; e < DESC_DIM * NORM_PIXELS; e += NORM_THREADS) {
        const int c = e / NORM_PIXELS;
        const int p = e - c * NORM_PIXELS;
        tile[c][p] = p0 + p < plane ? feats[c * plane + p0 + p] : 0.0f;
    }
    __syncthreads();
    if (t < NORM_PIXELS) {
        float s = 0.0f;
        for (int c = 0; c < DESC_DIM; ++c) {
            s = __fadd_rn(s, __fmul_rn(tile[c][t], tile[c][t]));
        }
        denom[t] = fmaxf(sqrtf(s), 1e-12f);
    }
    __syncthreads();
    for (int e = t; e < DESC_DIM * NORM_PIXELS; e += NORM_THREADS) {
        const int p = e / DESC_DIM;
        const int c = e - p * DESC_DIM;
        if (p0 + p < plane) {
            feats_hwc[(p0 + p) * DESC_DIM + c] = __fdiv_rn(tile[c][p], denom[p]);
        }
    }
}

extern "C" __global__ void describe(const float* __restrict__ feats_hwc, int h, int w, int mh,
                                    int mw, const int* __restrict__ positions, int pos_stride,
                                    const u64* __restrict__ frames, int capacity)
{
    const long long frame = blockIdx.y;
    const u64* row = frames + frame * FT_FIELDS;
    const int* count = reinterpret_cast<const int*>(row[FT_COUNT]);
    float* __restrict__ descriptors = reinterpret_cast<float*>(row[FT_DESCRIPTORS]);
    feats_hwc += frame * h * w * DESC_DIM;
    positions += frame * pos_stride;
    const int k = (int)(((long long)blockIdx.x * blockDim.x + threadIdx.x) >> 5);
    const int lane = threadIdx.x & 31;
    const int n = count ? min(*count, capacity) : capacity;
    if (k >= n) {
        return;
    }
    const int pos = positions[k];
    const int x = pos % mw;
    const int y = pos / mw;
    const float u = map_coord(x, mw, w);
    const float v = map_coord(y, mh, h);
    const float fc = floorf(u);
    const float fr = floorf(v);
    float wu[4];
    float wv[4];
    cubic_weights(__fsub_rn(u, fc), wu);
    cubic_weights(__fsub_rn(v, fr), wv);
    const int c0 = (int)fc;
    const int r0 = (int)fr;
    float acc[CH_PER_LANE];
#pragma unroll
    for (int q = 0; q < CH_PER_LANE; ++q) {
        acc[q] = 0.0f;
    }
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        const int r = r0 + i - 1;
        const bool row_in = r >= 0 && r < h;
        float row[CH_PER_LANE];
#pragma unroll
        for (int q = 0; q < CH_PER_LANE; ++q) {
            row[q] = 0.0f;
        }
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            const int c = c0 + j - 1;
            const bool inside = row_in && c >= 0 && c < w;
            const float* f = feats_hwc + ((long long)r * w + c) * DESC_DIM;
#pragma unroll
            for (int q = 0; q < CH_PER_LANE; ++q) {
                const float val = inside ? f[lane + 32 * q] : 0.0f;
                row[q] = __fadd_rn(row[q], __fmul_rn(val, wu[j]));
            }
        }
#pragma unroll
        for (int q = 0; q < CH_PER_LANE; ++q) {
            acc[q] = __fadd_rn(acc[q], __fmul_rn(row[q], wv[i]));
        }
    }
    float s = 0.0f;
#pragma unroll
    for (int q = 0; q < CH_PER_LANE; ++q) {
        s = __fadd_rn(s, __fmul_rn(acc[q], acc[q]));
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        s = __fadd_rn(s, __shfl_xor_sync(0xffffffffu, s, o));
    }
    const float d = fmaxf(sqrtf(s), 1e-12f);
    float* out = descriptors + (long long)k * DESC_DIM;
#pragma unroll
    for (int q = 0; q < CH_PER_LANE; ++q) {
        out[lane + 32 * q] = __fdiv_rn(acc[q], d);
    }
}
