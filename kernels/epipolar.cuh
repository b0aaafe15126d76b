// Copyright 2026 xfeat_ros contributors
// SPDX-License-Identifier: Apache-2.0
//
// epipolar.cuh: device helpers of the RANSAC check shared by ransac.cu and
// ransac_refine.cu. No entry point; the loader puts this text before each of the two
// files (after its #define preamble), so NVRTC needs no include path.
//
// Matches: point i is kp0[idx0[i]] -> kp1[idx1[i]] (float2 pixels), or
// kp0[i] -> kp1[i] where idx0 / idx1 are null. count points to a device int
// (read on the device, clamped to [0, bound]) or is null, in which case bound
// is the count itself.
//
// Macros it needs from the including file's preamble: none of its own.

#define SQRT2_D 1.4142135623730951
#define NAN_F __int_as_float(0x7fc00000)
#define NAN_D __longlong_as_double(0x7ff8000000000000ll)
#define FULL_MASK 0xFFFFFFFFu

typedef unsigned long long u64;

__device__ __forceinline__ int match_count(const int* count, int bound)
{
    if (count == nullptr) return bound;
    const int n = *count;
    return n < 0 ? 0 : (n > bound ? bound : n);
}

__device__ __forceinline__ float2 point_of(const float2* kp, const int* idx, int i)
{
    return kp[idx != nullptr ? idx[i] : i];
}

// out = T1^T f T0 with T = [[s, 0, tx], [0, s, ty], [0, 0, 1]] (out may not alias f).
__device__ __forceinline__ void denormalise(const double* f, double s0, double tx0, double ty0,
                                            double s1, double tx1, double ty1, double* out)
{
    double g[9];
    for (int r = 0; r < 3; ++r) {
        g[3 * r] = f[3 * r] * s0;
        g[3 * r + 1] = f[3 * r + 1] * s0;
        g[3 * r + 2] = f[3 * r] * tx0 + f[3 * r + 1] * ty0 + f[3 * r + 2];
    }
    for (int c = 0; c < 3; ++c) {
        out[c] = s1 * g[c];
        out[3 + c] = s1 * g[3 + c];
        out[6 + c] = tx1 * g[c] + ty1 * g[3 + c] + g[6 + c];
    }
}

// f /= its Frobenius norm; false when the norm is not a positive finite number.
__device__ __forceinline__ bool unit9(double* f)
{
    double sum = f[0] * f[0];
#pragma unroll
    for (int k = 1; k < 9; ++k) sum = sum + f[k] * f[k];
    const double norm = sqrt(sum);
    if (!(norm > 0.0) || !isfinite(norm)) return false;
#pragma unroll
    for (int k = 0; k < 9; ++k) f[k] = f[k] / norm;
    return true;
}

__device__ __forceinline__ float min_of(float a, float b) { return fminf(a, b); }
__device__ __forceinline__ double min_of(double a, double b) { return fmin(a, b); }

// Both point-to-epipolar-line distances within the threshold (t2 = threshold^2).
template <typename T>
__device__ __forceinline__ bool is_inlier(const T* f, T x0, T y0, T x1, T y1, T t2)
{
    const T a = f[0] * x0 + f[1] * y0 + f[2];
    const T b = f[3] * x0 + f[4] * y0 + f[5];
    const T c = f[6] * x0 + f[7] * y0 + f[8];
    const T d = x1 * a + y1 * b + c;
    const T a0 = f[0] * x1 + f[3] * y1 + f[6];
    const T b0 = f[1] * x1 + f[4] * y1 + f[7];
    return d * d <= t2 * min_of(a * a + b * b, a0 * a0 + b0 * b0);
}

