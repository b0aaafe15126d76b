// Copyright 2026 xfeat_ros contributors
// SPDX-License-Identifier: Apache-2.0
//
// ransac.cu: RANSAC fundamental-matrix check of matches, every hypothesis at once.
// The host reference, in the same operation order, is xfeat_ros/ransac.py.
//
// Entry points
//   ransac_hypotheses(kp0, idx0, kp1, idx1, count, bound, seed, samples, models)
//       Sample h draws 7 distinct matches (splitmix64 of seed ^ (h << 32 | draw),
//       high 32 bits scaled to [0, M)), normalises them, solves the 7 x 9
//       epipolar system by Gauss-Jordan with full pivoting (double) and the
//       cubic det(F2 + a (F1 - F2)) = 0 (or, when the 7 matches follow one
//       homography and the null space is 3-D, takes its 3 basis vectors);
//       writes MODELS_PER_SAMPLE float32
//       row-major 3 x 3 models in pixels with unit Frobenius norm to
//       models[h * MODELS_PER_SAMPLE * 9 ...], NaN for each missing one.
//       Thread mapping: one thread per sample, 1-D blocks, samples past the
//       count return.
//   ransac_score(kp0, idx0, kp1, idx1, count, bound, models, num_models, t2, scores)
//       scores[m] = number of matches within the threshold of model m
//       (d^2 <= t2 min(|l0|^2, |l1|^2), float32), -1 for a NaN model.
//       Thread mapping: one block of SCORE_THREADS threads per SCORE_MODELS
//       models (held in shared memory); threads stride over the matches,
//       counts reduced per warp by shuffles, then in warp order.
//   ransac_refine(kp0, idx0, kp1, idx1, count, bound, models, scores, num_models,
//                 threshold, cache_points, mask, inliers, fit)
//       Picks the best model (most inliers, first on ties), refines it in
//       double (normalised 8-point least squares on its inliers, inverse
//       iteration, rank 2) for up to REFINE_ROUNDS rounds kept while the
//       inliers do not shrink; writes mask[i] (uint8, 0 for count <= i < bound),
//       inliers[0] and fit[9] (float64, NaN when nothing is verified).
//       Thread mapping: one block of REFINE_THREADS threads; strided passes
//       over the matches with deterministic reductions; the matched points are
//       first gathered into dynamic shared memory (float4 p, q per match) when
//       the launch gives it and sets cache_points (up to
//       xfeat_ros.gpu.kernels.RANSAC_REFINE_SHARED_POINTS matches); the 9 x 9
//       Cholesky factorisation and the forward substitutions on warp 0, lane i
//       owning row i (each entry computed by the same operations in the same
//       order as the serial reference, xfeat_ros/ransac.py), the rest of the
//       solve on thread 0.
//
// Matches: point i is kp0[idx0[i]] -> kp1[idx1[i]] (float2 pixels), or
// kp0[i] -> kp1[i] where idx0 / idx1 are null. count points to a device int
// (read on the device, clamped to [0, bound]) or is null, in which case bound
// is the count itself. Fewer than MIN_MATCHES matches (or fewer inliers) keep
// nothing and write no model.
//
// Macros injected by the loader (from xfeat_ros/ransac.py): MIN_MATCHES,
// SAMPLE_SIZE (7), MODELS_PER_SAMPLE (3), MAX_DRAWS, PIVOT_EPS, CUBIC_EPS,
// NEWTON_STEPS, REFINE_ROUNDS, INVERSE_ITERATIONS, CHOLESKY_SHIFT,
// JACOBI_SWEEPS; the launch shapes SCORE_MODELS, SCORE_THREADS, REFINE_THREADS
// (xfeat_ros.gpu.kernels.LAUNCH_DEFINES, read by the Python launch too).
// Compiled with --fmad=false so every float and double rounds like NumPy.

#if !defined(MIN_MATCHES) || !defined(SAMPLE_SIZE) || !defined(MODELS_PER_SAMPLE)
#error "MIN_MATCHES, SAMPLE_SIZE and MODELS_PER_SAMPLE must be defined by the loader"
#endif
#if !defined(MAX_DRAWS) || !defined(PIVOT_EPS) || !defined(CUBIC_EPS) || !defined(NEWTON_STEPS)
#error "MAX_DRAWS, PIVOT_EPS, CUBIC_EPS and NEWTON_STEPS must be defined by the loader"
#endif
#if !defined(REFINE_ROUNDS) || !defined(INVERSE_ITERATIONS) || !defined(CHOLESKY_SHIFT)
#error "REFINE_ROUNDS, INVERSE_ITERATIONS and CHOLESKY_SHIFT must be defined by the loader"
#endif
#if !defined(JACOBI_SWEEPS) || !defined(SCORE_MODELS) || !defined(SCORE_THREADS) \
    || !defined(REFINE_THREADS)
#error "JACOBI_SWEEPS, SCORE_MODELS, SCORE_THREADS and REFINE_THREADS must be defined"
#endif
#if SAMPLE_SIZE != 7 || MODELS_PER_SAMPLE != 3
#error "the solver is the 7-point algorithm (3 models per sample)"
#endif
#if SCORE_THREADS % 32 != 0 || REFINE_THREADS % 32 != 0 || REFINE_THREADS < 64
#error "SCORE_THREADS and REFINE_THREADS must be whole warps (REFINE_THREADS >= 64)"
#endif

#define SQRT2_D 1.4142135623730951
#define NAN_F __int_as_float(0x7fc00000)
#define NAN_D __longlong_as_double(0x7ff8000000000000ll)
#define PI_D 3.141592653589793
#define FULL_MASK 0xFFFFFFFFu
#define REFINE_WARPS (REFINE_THREADS / 32)
#define SCORE_WARPS (SCORE_THREADS / 32)
#define ATA_TERMS 45

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

__device__ __forceinline__ u64 splitmix64(u64 z)
{
    z += 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

__device__ __forceinline__ int draw_index(u64 seed, int sample, unsigned int attempt, int n)
{
    const u64 z = splitmix64((((u64)sample << 32) | (u64)attempt) ^ seed);
    return (int)(((z >> 32) * (u64)n) >> 32);
}

__device__ __forceinline__ double det3(const double* m)
{
    return m[0] * (m[4] * m[8] - m[5] * m[7])
        - m[1] * (m[3] * m[8] - m[5] * m[6])
        + m[2] * (m[3] * m[7] - m[4] * m[6]);
}

// out = T1^T f T0 with T = [[s, 0, tx], [0, s, ty], [0, 0, 1]] (out may not alias f).
__device__ void denormalise(const double* f, double s0, double tx0, double ty0, double s1,
                            double tx1, double ty1, double* out)
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
__device__ bool unit9(double* f)
{
    double sum = f[0] * f[0];
    for (int k = 1; k < 9; ++k) sum = sum + f[k] * f[k];
    const double norm = sqrt(sum);
    if (!(norm > 0.0) || !isfinite(norm)) return false;
    for (int k = 0; k < 9; ++k) f[k] = f[k] / norm;
    return true;
}

// Real roots of c3 a^3 + c2 a^2 + c1 a + c0 (NaN where fewer), as xfeat_ros.ransac.solve_cubic.
__device__ void solve_cubic(double c3, double c2, double c1, double c0, double* roots)
{
    roots[0] = roots[1] = roots[2] = NAN_D;
    const double top = fmax(fmax(fabs(c3), fabs(c2)), fmax(fabs(c1), fabs(c0)));
    if (fabs(c3) > CUBIC_EPS * top) {
        const double b = c2 / c3, c = c1 / c3, d = c0 / c3;
        const double p = c - b * b / 3.0;
        const double q = 2.0 * b * b * b / 27.0 - b * c / 3.0 + d;
        const double h = q * 0.5;
        const double disc = h * h + p * p * p / 27.0;
        if (disc > 0) {
            const double u = cbrt(-h - copysign(sqrt(disc), h));
            roots[0] = u - p / (3.0 * u) - b / 3.0;
        } else {
            const double r = sqrt(-p / 3.0);
            if (r == 0) {
                roots[0] = -b / 3.0;
            } else {
                const double phi = acos(fmin(fmax(-h / (r * r * r), -1.0), 1.0)) / 3.0;
                roots[0] = 2.0 * r * cos(phi + 0.0) - b / 3.0;
                roots[1] = 2.0 * r * cos(phi + -2.0 * PI_D / 3.0) - b / 3.0;
                roots[2] = 2.0 * r * cos(phi + 2.0 * PI_D / 3.0) - b / 3.0;
            }
        }
        for (int k = 0; k < 3; ++k) {
            double a = roots[k];
            if (isnan(a)) continue;
            for (int step = 0; step < NEWTON_STEPS; ++step) {
                const double f = ((c3 * a + c2) * a + c1) * a + c0;
                const double g = (3.0 * c3 * a + 2.0 * c2) * a + c1;
                if (g != 0) a = a - f / g;
            }
            roots[k] = a;
        }
    } else if (fabs(c2) > CUBIC_EPS * top) {
        const double qd = c1 * c1 - 4.0 * c2 * c0;
        if (qd >= 0) {
            const double qq = -0.5 * (c1 + copysign(sqrt(qd), c1));
            roots[0] = qq / c2;
            if (qq != 0) roots[1] = c0 / qq;
        }
    } else if (fabs(c1) > CUBIC_EPS * top) {
        roots[0] = -c0 / c1;
    }
}

// Centroid and sqrt 2 / mean distance of 7 points (sequential sums).
__device__ void normalisation7(const double* x, const double* y, double* cx, double* cy,
                               double* s)
{
    double sx = x[0], sy = y[0];
    for (int k = 1; k < SAMPLE_SIZE; ++k) { sx = sx + x[k]; sy = sy + y[k]; }
    *cx = sx / SAMPLE_SIZE;
    *cy = sy / SAMPLE_SIZE;
    double dx = x[0] - *cx, dy = y[0] - *cy;
    double sd = sqrt(dx * dx + dy * dy);
    for (int k = 1; k < SAMPLE_SIZE; ++k) {
        dx = x[k] - *cx;
        dy = y[k] - *cy;
        sd = sd + sqrt(dx * dx + dy * dy);
    }
    *s = SQRT2_D / (sd / SAMPLE_SIZE);
}

extern "C" __global__ void ransac_hypotheses(const float2* kp0, const int* idx0,
                                             const float2* kp1, const int* idx1,
                                             const int* count, int bound, u64 seed,
                                             int samples, float* models)
{
    const int h = blockIdx.x * blockDim.x + threadIdx.x;
    if (h >= samples) return;
    float* out = models + (size_t)h * MODELS_PER_SAMPLE * 9;
    for (int k = 0; k < MODELS_PER_SAMPLE * 9; ++k) out[k] = NAN_F;
    const int n = match_count(count, bound);
    if (n < MIN_MATCHES) return;

    int pick[SAMPLE_SIZE];
    unsigned int attempt = 0;
    for (int k = 0; k < SAMPLE_SIZE; ++k) {
        for (;;) {
            const int j = draw_index(seed, h, attempt, n);
            ++attempt;
            bool fresh = true;
            for (int e = 0; e < k; ++e) fresh = fresh && pick[e] != j;
            if (fresh) { pick[k] = j; break; }
            if (attempt >= MAX_DRAWS) return;
        }
    }
    double x0[SAMPLE_SIZE], y0[SAMPLE_SIZE], x1[SAMPLE_SIZE], y1[SAMPLE_SIZE];
    for (int k = 0; k < SAMPLE_SIZE; ++k) {
        const float2 a = point_of(kp0, idx0, pick[k]);
        const float2 b = point_of(kp1, idx1, pick[k]);
        x0[k] = a.x; y0[k] = a.y; x1[k] = b.x; y1[k] = b.y;
    }
    double cx0, cy0, s0, cx1, cy1, s1;
    normalisation7(x0, y0, &cx0, &cy0, &s0);
    normalisation7(x1, y1, &cx1, &cy1, &s1);
    if (!isfinite(s0) || !isfinite(s1)) return;

    double a[SAMPLE_SIZE][9];
    for (int k = 0; k < SAMPLE_SIZE; ++k) {
        const double u0 = (x0[k] - cx0) * s0, v0 = (y0[k] - cy0) * s0;
        const double u1 = (x1[k] - cx1) * s1, v1 = (y1[k] - cy1) * s1;
        a[k][0] = u1 * u0; a[k][1] = u1 * v0; a[k][2] = u1;
        a[k][3] = v1 * u0; a[k][4] = v1 * v0; a[k][5] = v1;
        a[k][6] = u0; a[k][7] = v0; a[k][8] = 1.0;
    }
    int perm[9];
    for (int c = 0; c < 9; ++c) perm[c] = c;
    int rank = SAMPLE_SIZE;
    for (int k = 0; k < SAMPLE_SIZE; ++k) {
        double best = -1.0;
        int br = k, bc = k;
        for (int r = k; r < SAMPLE_SIZE; ++r)
            for (int c = k; c < 9; ++c) {
                const double v = fabs(a[r][c]);
                if (v > best) { best = v; br = r; bc = c; }
            }
        if (!(best > PIVOT_EPS)) {
            if (k < SAMPLE_SIZE - 1) return;  // degenerate sample
            rank = k;  // all 7 matches follow one homography: a 3-D null space
            break;
        }
        for (int c = 0; c < 9; ++c) { const double t = a[k][c]; a[k][c] = a[br][c]; a[br][c] = t; }
        for (int r = 0; r < SAMPLE_SIZE; ++r) {
            const double t = a[r][k]; a[r][k] = a[r][bc]; a[r][bc] = t;
        }
        const int tp = perm[k]; perm[k] = perm[bc]; perm[bc] = tp;
        const double pivot = a[k][k];
        for (int c = 0; c < 9; ++c) a[k][c] = a[k][c] / pivot;
        for (int i = 0; i < SAMPLE_SIZE; ++i) {
            if (i == k) continue;
            const double f = a[i][k];
            for (int c = 0; c < 9; ++c) a[i][c] = a[i][c] - f * a[k][c];
        }
    }
    if (rank < SAMPLE_SIZE) {
        // every null vector [e]x H is a model: no cubic to solve
        for (int t = 0; t < 3; ++t) {
            double fh[9], fp[9];
            for (int c = 0; c < 9; ++c) fh[c] = 0.0;
            for (int i = 0; i < rank; ++i) fh[perm[i]] = -a[i][rank + t];
            fh[perm[rank + t]] = 1.0;
            denormalise(fh, s0, -s0 * cx0, -s0 * cy0, s1, -s1 * cx1, -s1 * cy1, fp);
            if (!unit9(fp)) continue;
            for (int c = 0; c < 9; ++c) out[9 * t + c] = (float)fp[c];
        }
        return;
    }
    double f1[9], f2[9], diff[9], m[9];
    for (int c = 0; c < 9; ++c) { f1[c] = 0.0; f2[c] = 0.0; }
    for (int i = 0; i < SAMPLE_SIZE; ++i) { f1[perm[i]] = -a[i][7]; f2[perm[i]] = -a[i][8]; }
    f1[perm[7]] = 1.0;
    f2[perm[8]] = 1.0;
    for (int c = 0; c < 9; ++c) diff[c] = f1[c] - f2[c];
    const double d0 = det3(f2);
    for (int c = 0; c < 9; ++c) m[c] = f2[c] + 1.0 * diff[c];
    const double d1 = det3(m);
    for (int c = 0; c < 9; ++c) m[c] = f2[c] + -1.0 * diff[c];
    const double dm1 = det3(m);
    for (int c = 0; c < 9; ++c) m[c] = f2[c] + 2.0 * diff[c];
    const double d2 = det3(m);
    const double c2 = 0.5 * (d1 + dm1) - d0;
    const double s = 0.5 * (d1 - dm1);
    const double c3 = (d2 - 4.0 * c2 - d0 - 2.0 * s) / 6.0;
    const double c1 = s - c3;
    double roots[3];
    solve_cubic(c3, c2, c1, d0, roots);
    for (int k = 0; k < MODELS_PER_SAMPLE; ++k) {
        if (!isfinite(roots[k])) continue;
        double fh[9], fp[9];
        for (int c = 0; c < 9; ++c) fh[c] = f2[c] + roots[k] * diff[c];
        denormalise(fh, s0, -s0 * cx0, -s0 * cy0, s1, -s1 * cx1, -s1 * cy1, fp);
        if (!unit9(fp)) continue;
        for (int c = 0; c < 9; ++c) out[9 * k + c] = (float)fp[c];
    }
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

extern "C" __global__ void ransac_score(const float2* kp0, const int* idx0, const float2* kp1,
                                        const int* idx1, const int* count, int bound,
                                        const float* models, int num_models, float t2,
                                        int* scores)
{
    __shared__ float f[SCORE_MODELS * 9];
    __shared__ int partial[SCORE_WARPS][SCORE_MODELS];
    const int first = blockIdx.x * SCORE_MODELS;
    const int tid = threadIdx.x;
    for (int k = tid; k < SCORE_MODELS * 9; k += SCORE_THREADS)
        f[k] = first + k / 9 < num_models ? models[(size_t)first * 9 + k] : NAN_F;
    __syncthreads();
    const int n = match_count(count, bound);
    int hits[SCORE_MODELS];
    for (int m = 0; m < SCORE_MODELS; ++m) hits[m] = 0;
    if (n >= MIN_MATCHES) {
        for (int i = tid; i < n; i += SCORE_THREADS) {
            const float2 p = point_of(kp0, idx0, i);
            const float2 q = point_of(kp1, idx1, i);
            for (int m = 0; m < SCORE_MODELS; ++m)
                hits[m] += is_inlier<float>(f + 9 * m, p.x, p.y, q.x, q.y, t2) ? 1 : 0;
        }
    }
    const int lane = tid & 31, warp = tid >> 5;
    for (int m = 0; m < SCORE_MODELS; ++m) {
        int v = hits[m];
        for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(FULL_MASK, v, o);
        if (lane == 0) partial[warp][m] = v;
    }
    __syncthreads();
    if (tid < SCORE_MODELS && first + tid < num_models) {
        int total = 0;
        for (int w = 0; w < SCORE_WARPS; ++w) total += partial[w][tid];
        bool valid = true;
        for (int c = 0; c < 9; ++c) valid = valid && !isnan(f[9 * tid + c]);
        scores[first + tid] = valid ? total : -1;
    }
}

// -- refinement (one block) ---------------------------------------------------------------

__device__ __forceinline__ double warp_sum(double v)
{
    for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(FULL_MASK, v, o);
    return v;
}

// Sum acc[0..terms) over the block into out[0..terms) (fixed order: deterministic).
__device__ void block_sums(const double* acc, int terms, double (*red)[ATA_TERMS], double* out)
{
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    for (int k = 0; k < terms; ++k) {
        const double v = warp_sum(acc[k]);
        if (lane == 0) red[warp][k] = v;
    }
    __syncthreads();
    if (threadIdx.x < terms) {
        double total = red[0][threadIdx.x];
        for (int w = 1; w < REFINE_WARPS; ++w) total = total + red[w][threadIdx.x];
        out[threadIdx.x] = total;
    }
    __syncthreads();
}

__device__ int block_count(int v, int* red)
{
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(FULL_MASK, v, o);
    if (lane == 0) red[warp] = v;
    __syncthreads();
    int total = 0;
    for (int w = 0; w < REFINE_WARPS; ++w) total += red[w];
    __syncthreads();
    return total;
}

// The matches of one refinement: their points through the indices, or gathered into
// shared memory (p.x, p.y, q.x, q.y per match) when `cached` is not null.
struct Matches {
    const float2* kp0;
    const int* idx0;
    const float2* kp1;
    const int* idx1;
    const float4* cached;
};

__device__ __forceinline__ float4 pair_of(const Matches& m, int i)
{
    if (m.cached != nullptr) return m.cached[i];
    const float2 p = point_of(m.kp0, m.idx0, i), q = point_of(m.kp1, m.idx1, i);
    return make_float4(p.x, p.y, q.x, q.y);
}

__device__ __forceinline__ bool inlier64(const double* f, float4 pq, double t2)
{
    return is_inlier<double>(f, pq.x, pq.y, pq.z, pq.w, t2);
}

__device__ int count_inliers(const double* f, const Matches& m, int n, double t2, int* red)
{
    int hits = 0;
    for (int i = threadIdx.x; i < n; i += REFINE_THREADS)
        hits += inlier64(f, pair_of(m, i), t2) ? 1 : 0;
    return block_count(hits, red);
}

// Unit eigenvector of the smallest eigenvalue of a symmetric 3 x 3 (cyclic Jacobi).
__device__ void jacobi_smallest(double a[3][3], double* out)
{
    double v[3][3] = {{1.0, 0.0, 0.0}, {0.0, 1.0, 0.0}, {0.0, 0.0, 1.0}};
    const int ps[3] = {0, 0, 1}, qs[3] = {1, 2, 2};
    for (int sweep = 0; sweep < JACOBI_SWEEPS; ++sweep) {
        for (int e = 0; e < 3; ++e) {
            const int p = ps[e], q = qs[e];
            if (a[p][q] == 0.0) continue;
            const double theta = (a[q][q] - a[p][p]) / (2.0 * a[p][q]);
            const double t = copysign(1.0, theta) / (fabs(theta) + sqrt(theta * theta + 1.0));
            const double c = 1.0 / sqrt(t * t + 1.0);
            const double s = t * c;
            for (int k = 0; k < 3; ++k) {
                const double akp = a[k][p], akq = a[k][q];
                a[k][p] = c * akp - s * akq;
                a[k][q] = s * akp + c * akq;
            }
            for (int k = 0; k < 3; ++k) {
                const double apk = a[p][k], aqk = a[q][k];
                a[p][k] = c * apk - s * aqk;
                a[q][k] = s * apk + c * aqk;
            }
            for (int k = 0; k < 3; ++k) {
                const double vkp = v[k][p], vkq = v[k][q];
                v[k][p] = c * vkp - s * vkq;
                v[k][q] = s * vkp + c * vkq;
            }
        }
    }
    int best = 0;
    for (int k = 1; k < 3; ++k)
        if (a[k][k] < a[best][best]) best = k;
    for (int k = 0; k < 3; ++k) out[k] = v[k][best];
}

// Entry (i, j) of the symmetric 9 x 9 A^T A from its upper triangle (row-major).
__device__ __forceinline__ double ata_at(const double* upper, int i, int j)
{
    const int r = i < j ? i : j, c = i < j ? j : i;
    return upper[r * 9 - r * (r - 1) / 2 + (c - r)];
}

// Warp 0 (all 32 lanes): the rank-2 least-squares model of the current inliers, from
// their sums (A^T A upper triangle, row-major) and normalisation, into out (written by
// lane 0); false on every lane if it is undefined. Lane i < 9 owns row i of the Cholesky
// factor (low, shared) and entry i of the iterated vector; every entry is computed by
// the same operations in the same order as the serial reference.
__device__ bool solve_refit(const double* cur, const double* ata_upper, double c0x, double c0y,
                            double s0, double c1x, double c1y, double s1, double* out,
                            double (*low)[9], double* vec)
{
    const int lane = threadIdx.x & 31;
    double x[9] = {0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0};
    int ok = 0;
    double shift = 0.0;
    if (lane == 0) {
        double g[9];
        for (int r = 0; r < 3; ++r) {
            g[3 * r] = cur[3 * r] / s0;
            g[3 * r + 1] = cur[3 * r + 1] / s0;
            g[3 * r + 2] = cur[3 * r] * c0x + cur[3 * r + 1] * c0y + cur[3 * r + 2];
        }
        for (int c = 0; c < 3; ++c) {
            x[c] = g[c] / s1;
            x[3 + c] = g[3 + c] / s1;
            x[6 + c] = c1x * g[c] + c1y * g[3 + c] + g[6 + c];
        }
        double trace = 0.0;
        for (int k = 0; k < 9; ++k) trace = trace + ata_at(ata_upper, k, k);
        ok = unit9(x) && trace > 0.0;
        shift = CHOLESKY_SHIFT * trace;
    }
    if (!__shfl_sync(FULL_MASK, ok, 0)) return false;
    shift = __shfl_sync(FULL_MASK, shift, 0);
    double xi = 0.0;
    for (int k = 0; k < 9; ++k) {
        const double v = __shfl_sync(FULL_MASK, x[k], 0);
        if (lane == k) xi = v;
    }
    // Cholesky, column j: lane j its diagonal, lanes below it their entries.
    for (int j = 0; j < 9; ++j) {
        double value = 0.0;
        if (lane == j) {
            value = ata_at(ata_upper, j, j) + shift;
            for (int k = 0; k < j; ++k) value = value - low[j][k] * low[j][k];
        } else if (lane > j && lane < 9) {
            value = ata_at(ata_upper, lane, j);
            for (int k = 0; k < j; ++k) value = value - low[lane][k] * low[j][k];
        }
        if (!__shfl_sync(FULL_MASK, lane == j && value > 0.0 ? 1 : 0, j)) return false;
        if (lane == j) low[j][j] = sqrt(value);
        __syncwarp();
        if (lane > j && lane < 9) low[lane][j] = value / low[j][j];
        __syncwarp();
    }
    for (int it = 0; it < INVERSE_ITERATIONS; ++it) {
        // forward substitution: lane i subtracts y[0], y[1], ... as they appear
        double value = xi, yi = 0.0;
        for (int k = 0; k < 9; ++k) {
            double yk = 0.0;
            if (lane == k) yk = yi = value / low[k][k];
            yk = __shfl_sync(FULL_MASK, yk, k);
            if (lane > k && lane < 9) value = value - low[lane][k] * yk;
        }
        if (lane < 9) vec[lane] = yi;
        __syncwarp();
        double norm = 0.0;
        if (lane == 0) {  // back substitution, in the serial order
            double z[9];
            for (int i = 8; i >= 0; --i) {
                double v = vec[i];
                for (int k = i + 1; k < 9; ++k) v = v - low[k][i] * z[k];
                z[i] = v / low[i][i];
            }
            double sum = 0.0;
            for (int k = 0; k < 9; ++k) sum = sum + z[k] * z[k];
            norm = sqrt(sum);
            ok = norm > 0.0 && isfinite(norm);
            for (int k = 0; k < 9; ++k) vec[k] = z[k];
        }
        __syncwarp();
        if (!__shfl_sync(FULL_MASK, ok, 0)) return false;
        norm = __shfl_sync(FULL_MASK, norm, 0);
        if (lane < 9) xi = vec[lane] / norm;
        __syncwarp();
    }
    if (lane < 9) vec[lane] = xi;
    __syncwarp();
    if (lane == 0) {
        for (int k = 0; k < 9; ++k) x[k] = vec[k];
        double m[3][3], v[3], gv[3], r2[9];
        for (int i = 0; i < 3; ++i)
            for (int j = 0; j < 3; ++j)
                m[i][j] = 0.0 + x[i] * x[j] + x[3 + i] * x[3 + j] + x[6 + i] * x[6 + j];
        jacobi_smallest(m, v);
        for (int r = 0; r < 3; ++r)
            gv[r] = x[3 * r] * v[0] + x[3 * r + 1] * v[1] + x[3 * r + 2] * v[2];
        for (int r = 0; r < 3; ++r)
            for (int c = 0; c < 3; ++c) r2[3 * r + c] = x[3 * r + c] - gv[r] * v[c];
        denormalise(r2, s0, -s0 * c0x, -s0 * c0y, s1, -s1 * c1x, -s1 * c1y, out);
        ok = unit9(out);
        for (int k = 0; k < 9; ++k) ok = ok && isfinite(out[k]);
    }
    return __shfl_sync(FULL_MASK, ok, 0) != 0;
}

extern "C" __global__ void __launch_bounds__(REFINE_THREADS)
ransac_refine(const float2* kp0, const int* idx0, const float2* kp1, const int* idx1,
              const int* count, int bound, const float* models, const int* scores,
              int num_models, double threshold, int cache_points, unsigned char* mask,
              int* inliers, double* fit)
{
    extern __shared__ float4 gathered[];
    __shared__ double cur[9], cand[9];
    __shared__ double red[REFINE_WARPS][ATA_TERMS];
    __shared__ double sums[ATA_TERMS];
    __shared__ double low[9][9], vec[9];
    __shared__ int ired[REFINE_WARPS];
    __shared__ u64 best_key;
    __shared__ int solved;
    const int tid = threadIdx.x;
    const int n = match_count(count, bound);
    const double t2 = threshold * threshold;
    const Matches pts = {kp0, idx0, kp1, idx1, cache_points ? gathered : nullptr};
    if (tid == 0) best_key = 0;
    if (cache_points) {
        for (int i = tid; i < n; i += REFINE_THREADS) {
            const float2 p = point_of(kp0, idx0, i), q = point_of(kp1, idx1, i);
            gathered[i] = make_float4(p.x, p.y, q.x, q.y);
        }
    }
    __syncthreads();
    if (n >= MIN_MATCHES) {
        u64 key = 0;
        for (int m = tid; m < num_models; m += REFINE_THREADS) {
            const u64 k = ((u64)(unsigned int)(scores[m] + 1) << 32)
                | (u64)(0xFFFFFFFFu - (unsigned int)m);
            key = k > key ? k : key;
        }
        atomicMax(&best_key, key);
    }
    __syncthreads();
    const int best_score = (int)(best_key >> 32) - 1;
    const int best = (int)(0xFFFFFFFFu - (unsigned int)(best_key & 0xFFFFFFFFull));
    int kept = 0;
    if (n >= MIN_MATCHES && best_score >= 0) {
        if (tid < 9) cur[tid] = (double)models[(size_t)best * 9 + tid];
        __syncthreads();
        kept = count_inliers(cur, pts, n, t2, ired);
        for (int round = 0; round < REFINE_ROUNDS && kept >= MIN_MATCHES; ++round) {
            double acc[ATA_TERMS];
            for (int k = 0; k < 4; ++k) acc[k] = 0.0;
            for (int i = tid; i < n; i += REFINE_THREADS) {
                const float4 pq = pair_of(pts, i);
                if (!inlier64(cur, pq, t2)) continue;
                acc[0] += pq.x; acc[1] += pq.y; acc[2] += pq.z; acc[3] += pq.w;
            }
            block_sums(acc, 4, red, sums);
            const double c0x = sums[0] / kept, c0y = sums[1] / kept;
            const double c1x = sums[2] / kept, c1y = sums[3] / kept;
            acc[0] = acc[1] = 0.0;
            for (int i = tid; i < n; i += REFINE_THREADS) {
                const float4 pq = pair_of(pts, i);
                if (!inlier64(cur, pq, t2)) continue;
                const double dx0 = pq.x - c0x, dy0 = pq.y - c0y;
                const double dx1 = pq.z - c1x, dy1 = pq.w - c1y;
                acc[0] += sqrt(dx0 * dx0 + dy0 * dy0);
                acc[1] += sqrt(dx1 * dx1 + dy1 * dy1);
            }
            block_sums(acc, 2, red, sums);
            const double mean0 = sums[0] / kept, mean1 = sums[1] / kept;
            if (!(mean0 > 0.0 && mean1 > 0.0)) break;
            const double s0 = SQRT2_D / mean0, s1 = SQRT2_D / mean1;
            for (int k = 0; k < ATA_TERMS; ++k) acc[k] = 0.0;
            for (int i = tid; i < n; i += REFINE_THREADS) {
                const float4 pq = pair_of(pts, i);
                if (!inlier64(cur, pq, t2)) continue;
                const double u0 = (pq.x - c0x) * s0, v0 = (pq.y - c0y) * s0;
                const double u1 = (pq.z - c1x) * s1, v1 = (pq.w - c1y) * s1;
                const double row[9] = {u1 * u0, u1 * v0, u1, v1 * u0, v1 * v0, v1, u0, v0, 1.0};
                int t = 0;
                for (int r = 0; r < 9; ++r)
                    for (int c = r; c < 9; ++c) acc[t++] += row[r] * row[c];
            }
            block_sums(acc, ATA_TERMS, red, sums);
            if (tid < 32) {
                const bool ok = solve_refit(cur, sums, c0x, c0y, s0, c1x, c1y, s1, cand, low,
                                            vec);
                if (tid == 0) solved = ok;
            }
            __syncthreads();
            if (!solved) break;
            const int fresh = count_inliers(cand, pts, n, t2, ired);
            if (fresh < kept) break;
            if (tid < 9) cur[tid] = cand[tid];
            kept = fresh;
            __syncthreads();
        }
    }
    if (kept < MIN_MATCHES) kept = 0;
    for (int i = tid; i < bound; i += REFINE_THREADS)
        mask[i] = (kept > 0 && i < n && inlier64(cur, pair_of(pts, i), t2)) ? 1 : 0;
    if (tid == 0) inliers[0] = kept;
    if (tid < 9) fit[tid] = kept > 0 ? cur[tid] : NAN_D;
}
