// Copyright 2026 xfeat_ros contributors
// SPDX-License-Identifier: Apache-2.0
//
// preprocess.cu: sensor_msgs/Image bytes -> grey, model-size network input.
//
// Entry point
//   decode_resize(raw, raw_stride, height, width, step, pixel_bytes, two_byte, colour,
//                 off_r, off_g, off_b, big_endian, mh, mw, scale_y, scale_x, out)
//     raw    uint8 image bytes exactly as received; row y of frame f starts at
//            f * raw_stride + y * step (frames of one batch share the layout)
//     out    float32 [B, mh, mw], grey in [0, 1], bilinear-resized to model size
//   colour = 0: one channel (mono8 / mono16); colour = 1: R, G, B at channel
//   indices off_r, off_g, off_b inside a pixel of pixel_bytes bytes (alpha is
//   never read). two_byte selects 16-bit channels, big_endian their byte order.
//
// Thread mapping: one thread per output (model-space) pixel, 2-D grid of
//   32 x 8 blocks over (mw, mh), x fastest, frame = blockIdx.z; each thread
//   reads the 2 x 2 source pixels of its bilinear taps straight from the raw bytes.
//
// Macros injected by the loader: none. Compiled with --fmad=false, and every
// float operation below is an explicit round-to-nearest intrinsic, so each
// value rounds exactly like the NumPy oracle (xfeat_ros.features.image_codec and
// xfeat_ros.features.preprocess):
//   channel / 255 (8-bit) or / 65535 (16-bit), exactly once;
//   colour grey = ((r + g) + b) / 3 (the mean, not luma weights);
//   PyTorch bilinear, align_corners=False, no antialias:
//     src = max(fma(scale, dst + 0.5, -0.5), 0) (one rounding, as PyTorch),
//     i0 = min(floor(src), in - 1), i1 = min(i0 + 1, in - 1), w1 = src - i0;
//     rows are blended first, then columns: out = left * (1 - wc) + right * wc.

__device__ __forceinline__ float load_channel(const unsigned char* p, int two_byte,
                                              int big_endian)
{
    if (two_byte) {
        const unsigned int b0 = p[0];
        const unsigned int b1 = p[1];
        const unsigned int v = big_endian ? ((b0 << 8) | b1) : ((b1 << 8) | b0);
        return (float)v;
    }
    return (float)p[0];
}

__device__ __forceinline__ float grey_at(const unsigned char* __restrict__ raw,
                                         long long row_offset, int x, int pixel_bytes,
                                         int two_byte, int colour, int off_r, int off_g,
                                         int off_b, int big_endian, float denom)
{
    const unsigned char* px = raw + row_offset + (long long)x * pixel_bytes;
    if (!colour) {
        return __fdiv_rn(load_channel(px, two_byte, big_endian), denom);
    }
    const int bpc = two_byte ? 2 : 1;
    const float r = __fdiv_rn(load_channel(px + off_r * bpc, two_byte, big_endian), denom);
    const float g = __fdiv_rn(load_channel(px + off_g * bpc, two_byte, big_endian), denom);
    const float b = __fdiv_rn(load_channel(px + off_b * bpc, two_byte, big_endian), denom);
    return __fdiv_rn(__fadd_rn(__fadd_rn(r, g), b), 3.0f);
}

__device__ __forceinline__ void linear_tap(int dst, int in_size, float scale, int* i0,
                                           int* i1, float* w1)
{
    // one rounding, like PyTorch's fused multiply-add
    float src = __fmaf_rn(scale, __fadd_rn((float)dst, 0.5f), -0.5f);
    src = fmaxf(src, 0.0f);
    int f = (int)floorf(src);
    f = min(f, in_size - 1);
    *i0 = f;
    *i1 = min(f + 1, in_size - 1);
    *w1 = __fsub_rn(src, (float)f);
}

extern "C" __global__ void decode_resize(const unsigned char* __restrict__ raw,
                                         long long raw_stride, int height, int width, int step,
                                         int pixel_bytes, int two_byte, int colour, int off_r,
                                         int off_g, int off_b, int big_endian, int mh, int mw,
                                         float scale_y, float scale_x, float* __restrict__ out)
{
    raw += blockIdx.z * raw_stride;
    out += (long long)blockIdx.z * mh * mw;
    const int ox = blockIdx.x * blockDim.x + threadIdx.x;
    const int oy = blockIdx.y * blockDim.y + threadIdx.y;
    if (ox >= mw || oy >= mh) {
        return;
    }
    int r0, r1, c0, c1;
    float wr, wc;
    linear_tap(oy, height, scale_y, &r0, &r1, &wr);
    linear_tap(ox, width, scale_x, &c0, &c1, &wc);
    const float denom = two_byte ? 65535.0f : 255.0f;
    const long long o0 = (long long)r0 * step;
    const long long o1 = (long long)r1 * step;
    const float g00 = grey_at(raw, o0, c0, pixel_bytes, two_byte, colour, off_r, off_g, off_b,
                              big_endian, denom);
    const float g10 = grey_at(raw, o1, c0, pixel_bytes, two_byte, colour, off_r, off_g, off_b,
                              big_endian, denom);
    const float g01 = grey_at(raw, o0, c1, pixel_bytes, two_byte, colour, off_r, off_g, off_b,
                              big_endian, denom);
    const float g11 = grey_at(raw, o1, c1, pixel_bytes, two_byte, colour, off_r, off_g, off_b,
                              big_endian, denom);
    const float owr = __fsub_rn(1.0f, wr);
    const float owc = __fsub_rn(1.0f, wc);
    const float left = __fadd_rn(__fmul_rn(g00, owr), __fmul_rn(g10, wr));
    const float right = __fadd_rn(__fmul_rn(g01, owr), __fmul_rn(g11, wr));
    out[(long long)oy * mw + ox] = __fadd_rn(__fmul_rn(left, owc), __fmul_rn(right, wc));
}
