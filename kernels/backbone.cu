// Copyright 2026 xfeat_ros contributors
// SPDX-License-Identifier: Apache-2.0
//
// backbone.cu: fused elementwise steps of the XFeat backbone, launched by the PyTorch
// backbone inside its CUDA graph (on the graph's stream, on tensors of its memory pool).
//
// Entry point
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
//
// Macros injected by the loader: none.

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
