// Copyright 2026 xfeat_ros contributors
// SPDX-License-Identifier: Apache-2.0
//
// ransac_refine.cu: the refinement of the RANSAC fundamental-matrix check (ransac.cu
// makes and scores the hypotheses). The host reference, in the same operation order,
// is xfeat_ros/features/ransac.py. The loader puts epipolar.cuh (the layout of the matches and
// the helpers both files share) before this file.
//
// Entry point
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
//       xfeat_ros.features.gpu.kernels.RANSAC_REFINE_SHARED_POINTS matches); the 9 x 9
//       Cholesky factorisation and the inverse iterations' substitutions on
//       warp 0, lane i owning row i of the factor and entry i of the vectors
//       (each entry computed by the same operations in the same order as the
//       serial reference, xfeat_ros/features/ransac.py), the rank-2 step on thread 0.
//
// Fewer than MIN_MATCHES matches (or fewer inliers) keep nothing and write no model.
//
// Macros injected by the loader (from xfeat_ros/features/ransac.py): MIN_MATCHES,
// REFINE_ROUNDS, INVERSE_ITERATIONS, CHOLESKY_SHIFT, JACOBI_SWEEPS, JACOBI_TOLERANCE; the
// launch shape REFINE_THREADS (xfeat_ros.features.gpu.kernels.LAUNCH_DEFINES, read by the Python
// launch too).
// Compiled with --fmad=false so every float and double rounds like NumPy.

#if !defined(MIN_MATCHES) || !defined(REFINE_ROUNDS) || !defined(INVERSE_ITERATIONS)
#error "MIN_MATCHES, REFINE_ROUNDS and INVERSE_ITERATIONS must be defined by the loader"
#endif
#if !defined(CHOLESKY_SHIFT) || !defined(JACOBI_SWEEPS) || !defined(REFINE_THREADS)
#error "CHOLESKY_SHIFT, JACOBI_SWEEPS and REFINE_THREADS must be defined by the loader"
#endif
#if !defined(JACOBI_TOLERANCE)
#error "JACOBI_TOLERANCE must be defined by the loader"
#endif
#if REFINE_THREADS % 32 != 0 || REFINE_THREADS < 64
#error "REFINE_THREADS must be whole warps, at least two"
#endif

#define REFINE_WARPS (REFINE_THREADS / 32)
#define ATA_TERMS 45

__device__ __forceinline__ double warp_sum(double v)
{
    for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(FULL_MASK, v, o);
    return v;
}

// Sum acc[0..TERMS) over the block into out[0..TERMS) (fixed order: deterministic). A
// template, so that the accumulators stay in registers (a pointer would put them on the
// stack, every += a local load and store).
template <int TERMS>
__device__ __forceinline__ void block_sums(const double (&acc)[TERMS], double (*red)[ATA_TERMS],
                                           double* out)
{
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
#pragma unroll
    for (int k = 0; k < TERMS; ++k) {
        const double v = warp_sum(acc[k]);
        if (lane == 0) red[warp][k] = v;
    }
    __syncthreads();
    if (threadIdx.x < TERMS) {
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

// A thread's inlier decisions for one model: bit k for its k-th match (tid + k *
// REFINE_THREADS, the passes' stride), for its first FLAG_BITS matches; a later pass over
// the same model reads them instead of testing again (the same decisions); flagged()
// loads and tests a match past those only.
#define FLAG_BITS 32

__device__ __forceinline__ bool flagged(unsigned int flags, int k, const double* f,
                                        const Matches& m, int i, double t2)
{
    return k < FLAG_BITS ? ((flags >> k) & 1u) != 0u : inlier64(f, pair_of(m, i), t2);
}

// The sum of the squares of lanes 0..8's x, in that order, on every lane.
__device__ __forceinline__ double lane_sum_squares(double x)
{
    double sum = 0.0;
#pragma unroll
    for (int k = 0; k < 9; ++k) {
        const double v = __shfl_sync(FULL_MASK, x, k);
        sum = sum + v * v;
    }
    return sum;
}

// The inliers of f: their count (returned), this thread's decisions (flags), and the
// sums of their coordinates (p.x, p.y, q.x, q.y) into centre, the next round's centroids
// when f is kept. One pass for all: the sums are the ones a pass of their own would make
// (same strides, same reduction).
__device__ int count_and_centre(const double* f, const Matches& m, int n, double t2,
                                int* ired, double (*red)[ATA_TERMS], double* centre,
                                unsigned int& flags)
{
    int hits = 0;
    double acc[4] = {0.0, 0.0, 0.0, 0.0};
    flags = 0u;
    int k = 0;
    for (int i = threadIdx.x; i < n; i += REFINE_THREADS, ++k) {
        const float4 pq = pair_of(m, i);
        if (!inlier64(f, pq, t2)) continue;
        if (k < FLAG_BITS) flags |= 1u << k;
        ++hits;
        acc[0] += pq.x; acc[1] += pq.y; acc[2] += pq.z; acc[3] += pq.w;
    }
    block_sums(acc, red, centre);
    return block_count(hits, ired);
}

__device__ __forceinline__ bool same_bits(const double (&x)[3][3], const double (&y)[3][3])
{
    bool same = true;
#pragma unroll
    for (int i = 0; i < 3; ++i)
#pragma unroll
        for (int j = 0; j < 3; ++j)
            same = same && __double_as_longlong(x[i][j]) == __double_as_longlong(y[i][j]);
    return same;
}

// Unit eigenvector of the smallest eigenvalue of a symmetric 3 x 3 (cyclic Jacobi). An
// off-diagonal entry within JACOBI_TOLERANCE times the trace is not rotated. A sweep
// that leaves every bit of a and v as it was (one that rotates nothing) is a fixed point
// (the next sweep starts from the same state, so it does the same nothing): the loop
// stops there, with the result of all JACOBI_SWEEPS sweeps (the host reference runs
// them all).
__device__ void jacobi_smallest(double (&a)[3][3], double* out)
{
    double v[3][3] = {{1.0, 0.0, 0.0}, {0.0, 1.0, 0.0}, {0.0, 0.0, 1.0}};
    const int ps[3] = {0, 0, 1}, qs[3] = {1, 2, 2};
    const double tolerance = JACOBI_TOLERANCE * (a[0][0] + a[1][1] + a[2][2]);
    for (int sweep = 0; sweep < JACOBI_SWEEPS; ++sweep) {
        double a_before[3][3], v_before[3][3];
#pragma unroll
        for (int i = 0; i < 3; ++i)
#pragma unroll
            for (int j = 0; j < 3; ++j) {
                a_before[i][j] = a[i][j];
                v_before[i][j] = v[i][j];
            }
#pragma unroll
        for (int e = 0; e < 3; ++e) {  // unrolled: constant indices, a and v in registers
            const int p = ps[e], q = qs[e];
            if (fabs(a[p][q]) <= tolerance) continue;
            const double theta = (a[q][q] - a[p][p]) / (2.0 * a[p][q]);
            const double t = copysign(1.0, theta) / (fabs(theta) + sqrt(theta * theta + 1.0));
            const double c = 1.0 / sqrt(t * t + 1.0);
            const double s = t * c;
#pragma unroll
            for (int k = 0; k < 3; ++k) {
                const double akp = a[k][p], akq = a[k][q];
                a[k][p] = c * akp - s * akq;
                a[k][q] = s * akp + c * akq;
            }
#pragma unroll
            for (int k = 0; k < 3; ++k) {
                const double apk = a[p][k], aqk = a[q][k];
                a[p][k] = c * apk - s * aqk;
                a[q][k] = s * apk + c * aqk;
            }
#pragma unroll
            for (int k = 0; k < 3; ++k) {
                const double vkp = v[k][p], vkq = v[k][q];
                v[k][p] = c * vkp - s * vkq;
                v[k][q] = s * vkp + c * vkq;
            }
        }
        if (same_bits(a, a_before) && same_bits(v, v_before)) break;
    }
    int best = 0;  // the first smallest diagonal entry, without a run-time index
    double smallest = a[0][0];
    if (a[1][1] < smallest) { best = 1; smallest = a[1][1]; }
    if (a[2][2] < smallest) best = 2;
#pragma unroll
    for (int k = 0; k < 3; ++k) out[k] = best == 0 ? v[k][0] : (best == 1 ? v[k][1] : v[k][2]);
}

// Entry (i, j) of the symmetric 9 x 9 A^T A from its upper triangle (row-major).
__device__ __forceinline__ double ata_at(const double* upper, int i, int j)
{
    const int r = i < j ? i : j, c = i < j ? j : i;
    return upper[r * 9 - r * (r - 1) / 2 + (c - r)];
}

// Entry idx (row r, column c) of g = f T0^-1, the current model f with its first image's
// normalisation undone: f[3r] / s0, f[3r + 1] / s0 (as products with r0 = 1 / s0) and
// f[3r] c0x + f[3r + 1] c0y + f[3r + 2].
__device__ __forceinline__ double g_at(const double* f, int idx, double r0, double c0x,
                                       double c0y)
{
    const int r = idx / 3, c = idx % 3;
    if (c == 0) return f[3 * r] * r0;
    if (c == 1) return f[3 * r + 1] * r0;
    return f[3 * r] * c0x + f[3 * r + 1] * c0y + f[3 * r + 2];
}

// Warp 0 (all 32 lanes): the rank-2 least-squares model of the current inliers, from
// their sums (A^T A upper triangle, row-major) and normalisation (s = sqrt 2 / mean,
// r = mean / sqrt 2), into out (written by lane 0); false on every lane if it is
// undefined. Lane i < 9 owns entry i of the start vector, row i of the Cholesky factor
// (low, shared; its diagonal's reciprocal in a register) and entry i of the iterated
// vectors; the substitutions pass each solved entry to the other lanes by a shuffle, and
// sums over the 9 entries are made by every lane in the serial order. Every entry is
// computed by the same operations in the same order as the serial reference.
__device__ bool solve_refit(const double* cur, const double* ata_upper, double c0x, double c0y,
                            double s0, double r0, double c1x, double c1y, double s1, double r1,
                            double* out, double (*low)[9], double* vec)
{
    const int lane = threadIdx.x & 31;
    // the start: the current model in normalised coordinates, unit length
    double xi = 0.0;
    if (lane < 6) {
        xi = g_at(cur, lane, r0, c0x, c0y) * r1;
    } else if (lane < 9) {
        xi = c1x * g_at(cur, lane - 6, r0, c0x, c0y) + c1y * g_at(cur, lane - 3, r0, c0x, c0y)
            + g_at(cur, lane, r0, c0x, c0y);
    }
    const double start_norm = sqrt(lane_sum_squares(xi));
    double trace = 0.0;
#pragma unroll
    for (int k = 0; k < 9; ++k) trace = trace + ata_at(ata_upper, k, k);
    if (!(start_norm > 0.0) || !isfinite(start_norm) || !(trace > 0.0)) return false;
    xi = lane < 9 ? xi / start_norm : 0.0;
    const double shift = CHOLESKY_SHIFT * trace;
    // Cholesky, column j: lane j its diagonal, lanes below it their entries.
    double diag = 1.0;
    for (int j = 0; j < 9; ++j) {
        double value = 0.0;
        if (lane == j) {
            value = ata_at(ata_upper, j, j) + shift;
            for (int k = 0; k < j; ++k) value = value - low[j][k] * low[j][k];
            diag = value > 0.0 ? sqrt(value) : 0.0;
            low[j][j] = diag;
        } else if (lane > j && lane < 9) {
            value = ata_at(ata_upper, lane, j);
            for (int k = 0; k < j; ++k) value = value - low[lane][k] * low[j][k];
        }
        const double d = __shfl_sync(FULL_MASK, diag, j);
        if (!(d > 0.0)) return false;
        if (lane > j && lane < 9) low[lane][j] = value / d;
        __syncwarp();
    }
    // Lane i's row (below the diagonal) and column (below the diagonal) of the factor.
    double row[9], col[9];
#pragma unroll
    for (int k = 0; k < 9; ++k) {
        row[k] = lane < 9 && k < lane ? low[lane][k] : 0.0;
        col[k] = lane < 9 && k > lane ? low[k][lane] : 0.0;
    }
    const double inverse = 1.0 / diag;
    for (int it = 0; it < INVERSE_ITERATIONS; ++it) {
        // forward substitution: lane i subtracts y[0], y[1], ... as they are solved
        double value = xi, yi = 0.0;
#pragma unroll
        for (int k = 0; k < 9; ++k) {
            double yk = 0.0;
            if (lane == k) yk = yi = value * inverse;
            yk = __shfl_sync(FULL_MASK, yk, k);
            if (lane > k && lane < 9) value = value - row[k] * yk;
        }
        // back substitution: lane i subtracts z[8], z[7], ... as they are solved
        double zi = 0.0;
        value = yi;
#pragma unroll
        for (int k = 8; k >= 0; --k) {
            double zk = 0.0;
            if (lane == k) zk = zi = value * inverse;
            zk = __shfl_sync(FULL_MASK, zk, k);
            if (lane < k) value = value - col[k] * zk;
        }
        xi = zi;
    }
    // every lane sums x[0]^2 .. x[8]^2 in the serial order: unit length once
    const double norm = sqrt(lane_sum_squares(xi));
    if (!(norm > 0.0 && isfinite(norm))) return false;
    xi = xi / norm;
    int ok = 0;
    if (lane < 9) vec[lane] = xi;
    __syncwarp();
    if (lane == 0) {
        double x[9];
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
    __shared__ double cur[9], cand[9], centre_cur[4], centre_cand[4];
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
    unsigned int cur_flags = 0u;  // this thread's decisions for cur (FLAG_BITS matches)
    if (n >= MIN_MATCHES && best_score >= 0) {
        if (tid < 9) cur[tid] = (double)models[(size_t)best * 9 + tid];
        __syncthreads();
        kept = count_and_centre(cur, pts, n, t2, ired, red, centre_cur, cur_flags);
        for (int round = 0; round < REFINE_ROUNDS && kept >= MIN_MATCHES; ++round) {
            const double c0x = centre_cur[0] / kept, c0y = centre_cur[1] / kept;
            const double c1x = centre_cur[2] / kept, c1y = centre_cur[3] / kept;
            double spread[2] = {0.0, 0.0};
            int k = 0;
            for (int i = tid; i < n; i += REFINE_THREADS, ++k) {
                if (!flagged(cur_flags, k, cur, pts, i, t2)) continue;
                const float4 pq = pair_of(pts, i);
                const double dx0 = pq.x - c0x, dy0 = pq.y - c0y;
                const double dx1 = pq.z - c1x, dy1 = pq.w - c1y;
                spread[0] += sqrt(dx0 * dx0 + dy0 * dy0);
                spread[1] += sqrt(dx1 * dx1 + dy1 * dy1);
            }
            block_sums(spread, red, sums);
            const double mean0 = sums[0] / kept, mean1 = sums[1] / kept;
            if (!(mean0 > 0.0 && mean1 > 0.0)) break;
            const double s0 = SQRT2_D / mean0, s1 = SQRT2_D / mean1;
            const double r0 = mean0 / SQRT2_D, r1 = mean1 / SQRT2_D;
            double acc[ATA_TERMS];
#pragma unroll
            for (int k = 0; k < ATA_TERMS; ++k) acc[k] = 0.0;
            k = 0;
            for (int i = tid; i < n; i += REFINE_THREADS, ++k) {
                if (!flagged(cur_flags, k, cur, pts, i, t2)) continue;
                const float4 pq = pair_of(pts, i);
                const double u0 = (pq.x - c0x) * s0, v0 = (pq.y - c0y) * s0;
                const double u1 = (pq.z - c1x) * s1, v1 = (pq.w - c1y) * s1;
                const double row[9] = {u1 * u0, u1 * v0, u1, v1 * u0, v1 * v0, v1, u0, v0, 1.0};
#pragma unroll
                for (int r = 0; r < 9; ++r)
#pragma unroll
                    for (int c = r; c < 9; ++c)
                        acc[r * 9 - r * (r - 1) / 2 + (c - r)] += row[r] * row[c];
            }
            block_sums(acc, red, sums);
            if (tid < 32) {
                const bool ok = solve_refit(cur, sums, c0x, c0y, s0, r0, c1x, c1y, s1, r1, cand,
                                            low, vec);
                if (tid == 0) solved = ok;
            }
            __syncthreads();
            if (!solved) break;
            unsigned int cand_flags;
            const int fresh = count_and_centre(cand, pts, n, t2, ired, red, centre_cand,
                                               cand_flags);
            if (fresh < kept) break;
            if (tid < 9) cur[tid] = cand[tid];
            if (tid < 4) centre_cur[tid] = centre_cand[tid];
            cur_flags = cand_flags;
            kept = fresh;
            __syncthreads();
        }
    }
    if (kept < MIN_MATCHES) kept = 0;
    int k = 0;
    for (int i = tid; i < bound; i += REFINE_THREADS, ++k) {
        mask[i] = kept > 0 && i < n && flagged(cur_flags, k, cur, pts, i, t2) ? 1 : 0;
    }
    if (tid == 0) inliers[0] = kept;
    if (tid < 9) fit[tid] = kept > 0 ? cur[tid] : NAN_D;
}
