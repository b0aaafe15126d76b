// Copyright 2026 xfeat_ros contributors
// SPDX-License-Identifier: Apache-2.0
//
// backbone.cu: fused steps of the XFeat backbone, launched by the PyTorch backbone inside
// its CUDA graph (on the graph's stream, on tensors of its memory pool).
//
// Entry points
//   fuse_scales(x3 [P, H, W], x4 [P, h4, w4], x5 [P, h5, w5], planes P = B * C, H, W,
//               h4, w4, h5, w5, out [P, H, W])
//       out = (x3 + up(x4)) + up(x5), up = PyTorch's bilinear resize to H x W with
//       align_corners=False (F.interpolate(x, (H, W), mode='bilinear')), one pass
//       instead of two resize and two add kernels. Per axis: scale = in / out,
//       src = max(fma(scale, dst + 0.5, -0.5), 0), i0 = (int)src,
//       i1 = i0 + (i0 < in - 1), l1 = src - i0, l0 = 1 - l1;
//       up = l0y * (l0x * v00 + l1x * v01) + l1y * (l0x * v10 + l1x * v11), the
//       order of PyTorch's upsample_bilinear2d kernel.
//       Thread mapping: one thread per output element, grid-stride loop over
//       P * H * W (x fastest), 256 threads per block.
//   conv3x3_relu_1x4, conv3x3_relu_4x8_s2, conv3x3_relu_8x8, conv3x3_relu_8x24_s2
//       (x [B, CIN, H, W], weight [COUT, CIN, 3, 3], bias [COUT], H, W, Ho, Wo,
//        out [B, COUT, Ho, Wo])
//       out = max(bias + sum over (ci, ky, kx) of weight * x, 0): a 3x3 convolution with
//       zero padding 1 and stride 1 or 2 (_s2; Ho = (H - 1) / stride + 1), its bias and
//       its ReLU - the first four layers of block1 (CIN x COUT = 1x4, 4x8 / 2, 8x8,
//       8x24 / 2), where cuDNN's FP32 kernels use the GPU poorly. FP32, one fma chain
//       per output in (ci, ky, kx) order starting from the bias.
//       Thread mapping: one thread per output pixel and CONV_CO (or COUT, if fewer)
//       consecutive channels, blocks of CONV_BX x CONV_BY pixels, grid (ceil(Wo /
//       CONV_BX), ceil(Ho / CONV_BY), B * COUT / CO); the block's weights in shared memory.
//
//   conv3x3_relu_24x24, conv3x3_relu_24x64_s2, conv3x3_relu_64x64, conv3x3_relu_64x64_s2,
//   conv3x3_relu_64x128_s2, conv3x3_relu_128x128   (same arguments as above)
//       The same convolution + bias + ReLU for the 3x3 layers of blocks 2-5 and the
//       fusion block, whose maps are small (15x20 to 120x160 at 640x480) and where
//       cuDNN's FP32 implicit GEMM runs a few tiles per layer at one frame. FP32: warp
//       w sums its CIN / WIDE_SPLIT input channels in (ci, ky, kx) order from 0, then
//       out = relu(bias + part_0 + ... + part_{WIDE_SPLIT-1}) in warp order.
//       Thread mapping: blocks of 32 x WIDE_SPLIT threads over 32 consecutive output
//       pixels (row-major over Ho x Wo; the lane) and WIDE_CO channels; warp w takes
//       input channels [w, w + 1) * CIN / WIDE_SPLIT; the partial sums meet in shared
//       memory. Grid (ceil(Ho * Wo / 32), COUT / WIDE_CO, B); the block's weights in
//       shared memory as WIDE_CO / 4 float4 per (ci, ky, kx).
//
//   instance_stats(x [B, n], n, partial [B, INORM_PARTS, 2] float64)
//       partial[f, b] = (sum, sum of squares) in double of frame f's chunk b, the values
//       x[f, b * c .. min((b + 1) * c, n)) with c = ceil(n / INORM_PARTS): each thread sums
//       its strided values in order, then warp shuffles, then warps in order (the same
//       result on every run and for every batch size).
//       Thread mapping: grid (INORM_PARTS, B), INORM_THREADS threads per block.
//   instance_normalize(x [B, n], n, partial, eps, out [B, n])
//       The instance norm of one-channel frames (InstanceNorm2d(1), biased variance):
//       every block first adds frame f's INORM_PARTS partials in a fixed order (double);
//       mean = (float)(sum / n), var = (float)((sq - 2 mean sum + n mean^2) / n), i.e.
//       the mean of (x - mean)^2 about the float mean; then
//       out = (x - mean) / sqrt(var + eps) with IEEE float subtraction, square root and
//       division. Two launches instead of PyTorch's ten (reductions, elementwise kernels,
//       memsets).
//       Thread mapping: grid (ceil(n / (INORM_THREADS * INORM_ITEMS)), B), INORM_THREADS
//       threads per block, each normalising INORM_ITEMS values strided by the block size.
//
// Macros injected by the loader: the launch shapes CONV_BX, CONV_BY (32 x 8),
// CONV_CO (8), WIDE_CO (8), WIDE_SPLIT (8), INORM_PARTS (128), INORM_THREADS (256) and
// INORM_ITEMS (4), read by the Python launch from the same place
// (xfeat_ros.features.gpu.kernels.LAUNCH_DEFINES).

#if !defined(CONV_BX) || !defined(CONV_BY) || !defined(CONV_CO)
#error "CONV_BX, CONV_BY and CONV_CO must be defined by the loader"
#endif
#if !defined(WIDE_CO) || !defined(WIDE_SPLIT)
#error "WIDE_CO and WIDE_SPLIT must be defined by the loader"
#endif
#if WIDE_CO % 4 != 0 || WIDE_SPLIT < 1 || WIDE_SPLIT > 32
#error "WIDE_CO must be a multiple of 4 (float4 weights) and WIDE_SPLIT 1..32 warps"
#endif
#if !defined(INORM_PARTS) || !defined(INORM_THREADS) || !defined(INORM_ITEMS)
#error "INORM_PARTS, INORM_THREADS and INORM_ITEMS must be defined by the loader"
#endif
#if INORM_THREADS % 32 != 0 || INORM_THREADS > 1024 || INORM_PARTS > INORM_THREADS
#error "INORM_THREADS must be whole warps (<= 1024) and at least INORM_PARTS"
#endif

__device__ __forceinline__ void source_index(int dst, int in_size, float scale, int* i0,
                                             int* step, float* l1)
{
    float src = __fmaf_rn(scale, (float)dst + 0.5f, -0.5f);
    src = src < 0.0f ? 0.0f : src;
    const int i = (int)src;
    *i0 = i;
    *step = i < in_size - 1 ? 1 : 0;
    *l1 = src - (float)i;
}

__device__ __forceinline__ float bilinear(const float* __restrict__ plane, int h, int w,
                                          float sy, float sx, int y, int x)
{
    int y0, dy, x0, dx;
    float ly, lx;
    source_index(y, h, sy, &y0, &dy, &ly);
    source_index(x, w, sx, &x0, &dx, &lx);
    const float* r0 = plane + (long long)y0 * w;
    const float* r1 = r0 + (long long)dy * w;
    const float ky = 1.0f - ly;
    const float kx = 1.0f - lx;
    return ky * (kx * r0[x0] + lx * r0[x0 + dx]) + ly * (kx * r1[x0] + lx * r1[x0 + dx]);
}

extern "C" __global__ void fuse_scales(const float* __restrict__ x3,
                                       const float* __restrict__ x4,
                                       const float* __restrict__ x5, int planes, int H, int W,
                                       int h4, int w4, int h5, int w5, float* __restrict__ out)
{
    const long long plane = (long long)H * W;
    const long long total = plane * planes;
    const float sy4 = (float)h4 / (float)H;
    const float sx4 = (float)w4 / (float)W;
    const float sy5 = (float)h5 / (float)H;
    const float sx5 = (float)w5 / (float)W;
    for (long long e = (long long)blockIdx.x * blockDim.x + threadIdx.x; e < total;
         e += (long long)gridDim.x * blockDim.x) {
        const long long p = e / plane;
        const int yx = (int)(e - p * plane);
        const int y = yx / W;
        const int x = yx - y * W;
        const float u4 = bilinear(x4 + p * h4 * w4, h4, w4, sy4, sx4, y, x);
        const float u5 = bilinear(x5 + p * h5 * w5, h5, w5, sy5, sx5, y, x);
        out[e] = (x3[e] + u4) + u5;
    }
}

template <int CIN, int COUT, int STRIDE>
__device__ __forceinline__ void conv3x3_relu(const float* __restrict__ x,
                                             const float* __restrict__ weight,
                                             const float* __restrict__ bias, int H, int W,
                                             int Ho, int Wo, float* __restrict__ out)
{
    constexpr int CO = COUT < CONV_CO ? COUT : CONV_CO;
    constexpr int GROUPS = COUT / CO;
    static_assert(COUT % CO == 0, "output channels must split into groups of CO");
    __shared__ float s_w[CO * CIN * 9];
    __shared__ float s_bias[CO];
    const int frame = blockIdx.z / GROUPS;
    const int co0 = (blockIdx.z - frame * GROUPS) * CO;
    const int tid = threadIdx.y * CONV_BX + threadIdx.x;
    for (int i = tid; i < CO * CIN * 9; i += CONV_BX * CONV_BY) {
        s_w[i] = weight[co0 * CIN * 9 + i];
    }
    if (tid < CO) {
        s_bias[tid] = bias[co0 + tid];
    }
    __syncthreads();
    const int ox = blockIdx.x * CONV_BX + threadIdx.x;
    const int oy = blockIdx.y * CONV_BY + threadIdx.y;
    if (ox >= Wo || oy >= Ho) {
        return;
    }
    float acc[CO];
#pragma unroll
    for (int c = 0; c < CO; ++c) {
        acc[c] = s_bias[c];
    }
    const long long plane = (long long)H * W;
    const float* xf = x + (long long)frame * CIN * plane;
#pragma unroll
    for (int ci = 0; ci < CIN; ++ci) {
#pragma unroll
        for (int ky = 0; ky < 3; ++ky) {
            const int iy = oy * STRIDE - 1 + ky;
            const bool row_in = iy >= 0 && iy < H;
#pragma unroll
            for (int kx = 0; kx < 3; ++kx) {
                const int ix = ox * STRIDE - 1 + kx;
                const float v = row_in && ix >= 0 && ix < W
                                    ? __ldg(xf + ci * plane + (long long)iy * W + ix) : 0.0f;
#pragma unroll
                for (int c = 0; c < CO; ++c) {
                    acc[c] = fmaf(s_w[(c * CIN + ci) * 9 + ky * 3 + kx], v, acc[c]);
                }
            }
        }
    }
    float* o = out + ((long long)frame * COUT + co0) * Ho * Wo + (long long)oy * Wo + ox;
#pragma unroll
    for (int c = 0; c < CO; ++c) {
        o[(long long)c * Ho * Wo] = fmaxf(acc[c], 0.0f);
    }
}

// One entry point NAME of a convolution template BODY<CIN, COUT, STRIDE> with THREADS per block.
#define CONV3X3_ENTRY(NAME, BODY, THREADS, CIN, COUT, STRIDE)                                   \
    extern "C" __global__ void __launch_bounds__(THREADS)                                     \
    NAME(const float* __restrict__ x, const float* __restrict__ weight,                      \
         const float* __restrict__ bias, int H, int W, int Ho, int Wo, float* __restrict__ out) \
    {                                                                                          \
        BODY<CIN, COUT, STRIDE>(x, weight, bias, H, W, Ho, Wo, out);                           \
    }
#define CONV3X3_RELU(NAME, CIN, COUT, STRIDE) \
    CONV3X3_ENTRY(NAME, conv3x3_relu, CONV_BX * CONV_BY, CIN, COUT, STRIDE)

CONV3X3_RELU(conv3x3_relu_1x4, 1, 4, 1)
CONV3X3_RELU(conv3x3_relu_4x8_s2, 4, 8, 2)
CONV3X3_RELU(conv3x3_relu_8x8, 8, 8, 1)
CONV3X3_RELU(conv3x3_relu_8x24_s2, 8, 24, 2)

template <int CIN, int COUT, int STRIDE>
__device__ __forceinline__ void conv3x3_relu_wide(const float* __restrict__ x,
                                                  const float* __restrict__ weight,
                                                  const float* __restrict__ bias, int H, int W,
                                                  int Ho, int Wo, float* __restrict__ out)
{
    constexpr int QUADS = WIDE_CO / 4;
    constexpr int CI_PART = CIN / WIDE_SPLIT;
    static_assert(COUT % WIDE_CO == 0, "output channels must split into groups of WIDE_CO");
    static_assert(CIN % WIDE_SPLIT == 0, "input channels must split over WIDE_SPLIT warps");
    __shared__ float4 s_w[CIN * 9 * QUADS];
    __shared__ float s_part[WIDE_SPLIT][WIDE_CO][32];
    const int frame = blockIdx.z;
    const int co0 = blockIdx.y * WIDE_CO;
    const int tid = threadIdx.x;
    const int lane = tid & 31;
    const int warp = tid >> 5;
    for (int i = tid; i < CIN * 9 * QUADS; i += 32 * WIDE_SPLIT) {
        const int q = i % QUADS;
        const float* w = weight + (long long)(co0 + 4 * q) * CIN * 9 + i / QUADS;
        s_w[i] = make_float4(w[0], w[CIN * 9], w[2 * CIN * 9], w[3 * CIN * 9]);
    }
    __syncthreads();
    const int pixels = Ho * Wo;
    const int p = blockIdx.x * 32 + lane;
    const bool valid = p < pixels;
    const int oy = valid ? p / Wo : 0;
    const int ox = valid ? p - oy * Wo : 0;
    int offset[9];
    bool inside[9];
#pragma unroll
    for (int ky = 0; ky < 3; ++ky) {
#pragma unroll
        for (int kx = 0; kx < 3; ++kx) {
            const int iy = oy * STRIDE - 1 + ky;
            const int ix = ox * STRIDE - 1 + kx;
            inside[ky * 3 + kx] = valid && iy >= 0 && iy < H && ix >= 0 && ix < W;
            offset[ky * 3 + kx] = inside[ky * 3 + kx] ? iy * W + ix : 0;
        }
    }
    float acc[WIDE_CO];
#pragma unroll
    for (int c = 0; c < WIDE_CO; ++c) {
        acc[c] = 0.0f;
    }
    const long long plane = (long long)H * W;
    const float* xc = x + ((long long)frame * CIN + warp * CI_PART) * plane;
    const float4* wq = s_w + warp * CI_PART * 9 * QUADS;
#pragma unroll 2
    for (int ci = 0; ci < CI_PART; ++ci, xc += plane, wq += 9 * QUADS) {
#pragma unroll
        for (int k = 0; k < 9; ++k) {
            const float v = inside[k] ? __ldg(xc + offset[k]) : 0.0f;
#pragma unroll
            for (int q = 0; q < QUADS; ++q) {
                const float4 w = wq[k * QUADS + q];
                acc[4 * q] = fmaf(w.x, v, acc[4 * q]);
                acc[4 * q + 1] = fmaf(w.y, v, acc[4 * q + 1]);
                acc[4 * q + 2] = fmaf(w.z, v, acc[4 * q + 2]);
                acc[4 * q + 3] = fmaf(w.w, v, acc[4 * q + 3]);
            }
        }
    }
#pragma unroll
    for (int c = 0; c < WIDE_CO; ++c) {
        s_part[warp][c][lane] = acc[c];
    }
    __syncthreads();
    for (int o = tid; o < WIDE_CO * 32; o += 32 * WIDE_SPLIT) {
        const int c = o >> 5;
        const int q = blockIdx.x * 32 + (o & 31);
        if (q < pixels) {
            float sum = __ldg(bias + co0 + c);
#pragma unroll
            for (int w = 0; w < WIDE_SPLIT; ++w) {
                sum += s_part[w][c][o & 31];
            }
            out[((long long)frame * COUT + co0 + c) * pixels + q] = fmaxf(sum, 0.0f);
        }
    }
}

#define CONV3X3_RELU_WIDE(NAME, CIN, COUT, STRIDE) \
    CONV3X3_ENTRY(NAME, conv3x3_relu_wide, 32 * WIDE_SPLIT, CIN, COUT, STRIDE)

CONV3X3_RELU_WIDE(conv3x3_relu_24x24, 24, 24, 1)
CONV3X3_RELU_WIDE(conv3x3_relu_24x64_s2, 24, 64, 2)
CONV3X3_RELU_WIDE(conv3x3_relu_64x64, 64, 64, 1)
CONV3X3_RELU_WIDE(conv3x3_relu_64x64_s2, 64, 64, 2)
CONV3X3_RELU_WIDE(conv3x3_relu_64x128_s2, 64, 128, 2)
CONV3X3_RELU_WIDE(conv3x3_relu_128x128, 128, 128, 1)

// -- instance norm of the input ------------------------------------------------------------

#define INORM_WARPS (INORM_THREADS / 32)

__device__ __forceinline__ double warp_add(double v)
{
    for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xFFFFFFFFu, v, o);
    return v;
}

// (a, b) summed over the block, in warp order; the totals are valid in thread 0.
__device__ __forceinline__ void block_add2(double* a, double* b, double (*red)[2])
{
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const double wa = warp_add(*a), wb = warp_add(*b);
    if (lane == 0) {
        red[warp][0] = wa;
        red[warp][1] = wb;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        double ta = red[0][0], tb = red[0][1];
        for (int w = 1; w < INORM_WARPS; ++w) {
            ta = ta + red[w][0];
            tb = tb + red[w][1];
        }
        *a = ta;
        *b = tb;
    }
}

extern "C" __global__ void __launch_bounds__(INORM_THREADS)
instance_stats(const float* __restrict__ x, int n, double* __restrict__ partial)
{
    __shared__ double red[INORM_WARPS][2];
    const int frame = blockIdx.y;
    const int chunk = (n + INORM_PARTS - 1) / INORM_PARTS;
    const long long begin = (long long)blockIdx.x * chunk;
    const long long end = min(begin + chunk, (long long)n);
    const float* xf = x + (long long)frame * n;
    double sum = 0.0, sq = 0.0;
    for (long long i = begin + threadIdx.x; i < end; i += INORM_THREADS) {
        const double v = (double)__ldg(xf + i);
        sum += v;
        sq += v * v;
    }
    block_add2(&sum, &sq, red);
    if (threadIdx.x == 0) {
        double* p = partial + ((long long)frame * INORM_PARTS + blockIdx.x) * 2;
        p[0] = sum;
        p[1] = sq;
    }
}

extern "C" __global__ void __launch_bounds__(INORM_THREADS)
instance_normalize(const float* __restrict__ x, int n, const double* __restrict__ partial,
                   float eps, float* __restrict__ out)
{
    __shared__ double red[INORM_WARPS][2];
    __shared__ float stats[2];
    const int frame = blockIdx.y;
    const double* p = partial + (long long)frame * INORM_PARTS * 2;
    double sum = 0.0, sq = 0.0;
    if (threadIdx.x < INORM_PARTS) {
        sum = p[2 * threadIdx.x];
        sq = p[2 * threadIdx.x + 1];
    }
    block_add2(&sum, &sq, red);
    if (threadIdx.x == 0) {
        const double count = (double)n;
        const float mean = (float)(sum / count);
        const double m = (double)mean;
        const double var = (sq - 2.0 * m * sum + count * m * m) / count;
        stats[0] = mean;
        stats[1] = __fsqrt_rn(__fadd_rn(var > 0.0 ? (float)var : 0.0f, eps));
    }
    __syncthreads();
    const float mean = stats[0], scale = stats[1];
    const float* xf = x + (long long)frame * n;
    float* of = out + (long long)frame * n;
    const long long base = (long long)blockIdx.x * INORM_THREADS * INORM_ITEMS + threadIdx.x;
#pragma unroll
    for (int k = 0; k < INORM_ITEMS; ++k) {
        const long long i = base + (long long)k * INORM_THREADS;
        if (i < n) {
            of[i] = __fdiv_rn(__fsub_rn(__ldg(xf + i), mean), scale);
        }
    }
}
