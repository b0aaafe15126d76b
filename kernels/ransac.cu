// Copyright 2026 xfeat_ros contributors
// SPDX-License-Identifier: Apache-2.0
//
// ransac.cu: RANSAC fundamental-matrix check of matches, every hypothesis at once.
// The host reference, in the same operation order, is xfeat_ros/features/ransac.py.
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
//       scores must be zero before the launch (the launch enqueues a memset):
//       every block adds its counts with atomicAdd (integers: any order gives
//       the same sums).
//       Thread mapping: 2-D grid (ceil(num_models / SCORE_MODELS), SCORE_SPLITS)
//       of SCORE_THREADS threads; SCORE_MODELS = SCORE_THREADS x SCORE_PER_THREAD.
//       Thread t of block x holds models x SCORE_MODELS + k SCORE_THREADS + t
//       (k < SCORE_PER_THREAD) in registers; block y counts the matches
//       [y c, (y + 1) c) with c = ceil(count / SCORE_SPLITS), staged through
//       shared memory SCORE_THREADS at a time (one float4 a match, read by
//       every thread at once). Block y = 0 writes the -1 of a NaN model.
//
// Fewer than MIN_MATCHES matches keep every model NaN. The refinement of the best
// model is ransac_refine.cu; both files start with epipolar.cuh (the layout of the
// matches and the helpers they share).
//
// Macros injected by the loader (from xfeat_ros/features/ransac.py): MIN_MATCHES,
// SAMPLE_SIZE (7), MODELS_PER_SAMPLE (3), MAX_DRAWS, PIVOT_EPS, CUBIC_EPS,
// NEWTON_STEPS; the launch shapes SCORE_THREADS, SCORE_PER_THREAD, SCORE_SPLITS
// (xfeat_ros.features.gpu.kernels.LAUNCH_DEFINES, read by the Python launch too).
// Compiled with --fmad=false so every float and double rounds like NumPy.

#if !defined(MIN_MATCHES) || !defined(SAMPLE_SIZE) || !defined(MODELS_PER_SAMPLE)
#error "MIN_MATCHES, SAMPLE_SIZE and MODELS_PER_SAMPLE must be defined by the loader"
#endif
#if !defined(MAX_DRAWS) || !defined(PIVOT_EPS) || !defined(CUBIC_EPS) || !defined(NEWTON_STEPS)
#error "MAX_DRAWS, PIVOT_EPS, CUBIC_EPS and NEWTON_STEPS must be defined by the loader"
#endif
#if !defined(SCORE_THREADS) || !defined(SCORE_PER_THREAD) || !defined(SCORE_SPLITS)
#error "SCORE_THREADS, SCORE_PER_THREAD and SCORE_SPLITS must be defined by the loader"
#endif
#if SAMPLE_SIZE != 7 || MODELS_PER_SAMPLE != 3
#error "the solver is the 7-point algorithm (3 models per sample)"
#endif
#if SCORE_THREADS % 32 != 0
#error "SCORE_THREADS must be whole warps"
#endif

#define PI_D 3.141592653589793
#define SCORE_MODELS (SCORE_THREADS * SCORE_PER_THREAD)

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

// Real roots of c3 a^3 + c2 a^2 + c1 a + c0 (NaN where fewer), as xfeat_ros.features.ransac.solve_cubic.
__device__ __forceinline__ void solve_cubic(double c3, double c2, double c1, double c0,
                                            double* roots)
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
__device__ __forceinline__ void normalisation7(const double* x, const double* y, double* cx,
                                               double* cy, double* s)
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

// f[index] = value for a run-time index in [0, 9), without indexing f at run time.
__device__ __forceinline__ void scatter9(double* f, int index, double value)
{
#pragma unroll
    for (int c = 0; c < 9; ++c)
        if (c == index) f[c] = value;
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

    // Every loop over the sample, the system or a model is unrolled and every index is
    // a constant (row and column swaps are predicated, scatters through perm are loops
    // over the columns), so that nothing sits on the stack: a[7][9] stays in registers.
    int pick[SAMPLE_SIZE];
    unsigned int attempt = 0;
#pragma unroll
    for (int k = 0; k < SAMPLE_SIZE; ++k) {
        for (;;) {
            const int j = draw_index(seed, h, attempt, n);
            ++attempt;
            bool fresh = true;
#pragma unroll
            for (int e = 0; e < k; ++e) fresh = fresh && pick[e] != j;
            if (fresh) { pick[k] = j; break; }
            if (attempt >= MAX_DRAWS) return;
        }
    }
    double x0[SAMPLE_SIZE], y0[SAMPLE_SIZE], x1[SAMPLE_SIZE], y1[SAMPLE_SIZE];
#pragma unroll
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
#pragma unroll
    for (int k = 0; k < SAMPLE_SIZE; ++k) {
        const double u0 = (x0[k] - cx0) * s0, v0 = (y0[k] - cy0) * s0;
        const double u1 = (x1[k] - cx1) * s1, v1 = (y1[k] - cy1) * s1;
        a[k][0] = u1 * u0; a[k][1] = u1 * v0; a[k][2] = u1;
        a[k][3] = v1 * u0; a[k][4] = v1 * v0; a[k][5] = v1;
        a[k][6] = u0; a[k][7] = v0; a[k][8] = 1.0;
    }
    int perm[9];
#pragma unroll
    for (int c = 0; c < 9; ++c) perm[c] = c;
    bool homography = false;
#pragma unroll
    for (int k = 0; k < SAMPLE_SIZE; ++k) {
        double best = -1.0;
        int br = k, bc = k;
#pragma unroll
        for (int r = k; r < SAMPLE_SIZE; ++r)
#pragma unroll
            for (int c = k; c < 9; ++c) {
                const double v = fabs(a[r][c]);
                if (v > best) { best = v; br = r; bc = c; }
            }
        if (!(best > PIVOT_EPS)) {
            if (k < SAMPLE_SIZE - 1) return;  // degenerate sample
            homography = true;  // all 7 matches follow one homography: a 3-D null space
            break;
        }
#pragma unroll
        for (int r = k + 1; r < SAMPLE_SIZE; ++r) {  // swap rows k and br
            if (r != br) continue;
#pragma unroll
            for (int c = 0; c < 9; ++c) {
                const double t = a[k][c]; a[k][c] = a[r][c]; a[r][c] = t;
            }
        }
#pragma unroll
        for (int c = k + 1; c < 9; ++c) {  // swap columns k and bc
            if (c != bc) continue;
#pragma unroll
            for (int r = 0; r < SAMPLE_SIZE; ++r) {
                const double t = a[r][k]; a[r][k] = a[r][c]; a[r][c] = t;
            }
            const int tp = perm[k]; perm[k] = perm[c]; perm[c] = tp;
        }
        const double pivot = a[k][k];
#pragma unroll
        for (int c = 0; c < 9; ++c) a[k][c] = a[k][c] / pivot;
#pragma unroll
        for (int i = 0; i < SAMPLE_SIZE; ++i) {
            if (i == k) continue;
            const double f = a[i][k];
#pragma unroll
            for (int c = 0; c < 9; ++c) a[i][c] = a[i][c] - f * a[k][c];
        }
    }
    if (homography) {
        // every null vector [e]x H is a model: no cubic to solve (rank 6: the break above
        // comes only at the last column of pivots)
        constexpr int RANK = SAMPLE_SIZE - 1;
#pragma unroll
        for (int t = 0; t < 3; ++t) {
            double fh[9], fp[9];
#pragma unroll
            for (int c = 0; c < 9; ++c) fh[c] = 0.0;
#pragma unroll
            for (int i = 0; i < RANK; ++i) scatter9(fh, perm[i], -a[i][RANK + t]);
            scatter9(fh, perm[RANK + t], 1.0);
            denormalise(fh, s0, -s0 * cx0, -s0 * cy0, s1, -s1 * cx1, -s1 * cy1, fp);
            if (!unit9(fp)) continue;
#pragma unroll
            for (int c = 0; c < 9; ++c) out[9 * t + c] = (float)fp[c];
        }
        return;
    }
    double f1[9], f2[9], diff[9], m[9];
#pragma unroll
    for (int c = 0; c < 9; ++c) { f1[c] = 0.0; f2[c] = 0.0; }
#pragma unroll
    for (int i = 0; i < SAMPLE_SIZE; ++i) {
        scatter9(f1, perm[i], -a[i][7]);
        scatter9(f2, perm[i], -a[i][8]);
    }
    scatter9(f1, perm[7], 1.0);
    scatter9(f2, perm[8], 1.0);
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
#pragma unroll
    for (int k = 0; k < MODELS_PER_SAMPLE; ++k) {
        if (!isfinite(roots[k])) continue;
        double fh[9], fp[9];
#pragma unroll
        for (int c = 0; c < 9; ++c) fh[c] = f2[c] + roots[k] * diff[c];
        denormalise(fh, s0, -s0 * cx0, -s0 * cy0, s1, -s1 * cx1, -s1 * cy1, fp);
        if (!unit9(fp)) continue;
#pragma unroll
        for (int c = 0; c < 9; ++c) out[9 * k + c] = (float)fp[c];
    }
}

extern "C" __global__ void ransac_score(const float2* kp0, const int* idx0, const float2* kp1,
                                        const int* idx1, const int* count, int bound,
                                        const float* models, int num_models, float t2,
                                        int* scores)
{
    __shared__ float4 staged[SCORE_THREADS];
    const int tid = threadIdx.x;
    const int first = blockIdx.x * SCORE_MODELS + tid;
    float f[SCORE_PER_THREAD][9];
    int hits[SCORE_PER_THREAD];
#pragma unroll
    for (int k = 0; k < SCORE_PER_THREAD; ++k) {
        const int m = first + k * SCORE_THREADS;
#pragma unroll
        for (int c = 0; c < 9; ++c) f[k][c] = m < num_models ? models[(size_t)m * 9 + c] : NAN_F;
        hits[k] = 0;
    }
    const int n = match_count(count, bound);
    if (n >= MIN_MATCHES) {
        const int chunk = (n + SCORE_SPLITS - 1) / SCORE_SPLITS;
        const int begin = blockIdx.y * chunk;
        const int end = min(n, begin + chunk);
        for (int base = begin; base < end; base += SCORE_THREADS) {
            if (base + tid < end) {
                const float2 p = point_of(kp0, idx0, base + tid);
                const float2 q = point_of(kp1, idx1, base + tid);
                staged[tid] = make_float4(p.x, p.y, q.x, q.y);
            }
            __syncthreads();
            const int staged_count = min(SCORE_THREADS, end - base);
            for (int j = 0; j < staged_count; ++j) {
                const float4 s = staged[j];
#pragma unroll
                for (int k = 0; k < SCORE_PER_THREAD; ++k)
                    hits[k] += is_inlier<float>(f[k], s.x, s.y, s.z, s.w, t2) ? 1 : 0;
            }
            __syncthreads();
        }
    }
#pragma unroll
    for (int k = 0; k < SCORE_PER_THREAD; ++k) {
        const int m = first + k * SCORE_THREADS;
        if (m >= num_models) continue;
        bool valid = true;
#pragma unroll
        for (int c = 0; c < 9; ++c) valid = valid && !isnan(f[k][c]);
        const int add = valid ? hits[k] : (blockIdx.y == 0 ? -1 : 0);
        if (add != 0) atomicAdd(scores + m, add);
    }
}
