// Copyright 2026 xfeat_ros contributors
// SPDX-License-Identifier: Apache-2.0
//
// spread.cu: a frame's spread selection on the device (xfeat_ros.features.gpu.spread; host
// reference xfeat_ros.features.spread.select_spread, which these results equal exactly).
//
// A frame's N spread candidates (keypoints float32 [N, 2] in pixels, scores float32 [N])
// are kept greedily in placement order: candidates that continue a track first, oldest
// first, then by descending score, ties by index; a candidate is kept when no kept one
// lies closer than the radius and its grid cell holds fewer than max_per_cell kept ones,
// up to the cap. Launched in this order for each frame, all on one stream:
//
// Entry points
//   spread_ages(prev_kept_age, idx0, idx1, verified, match_count, keypoint_count, capacity,
//               has_match, use_mask, ages)
//       ages uint32 [N]: a candidate reached by a match (verified, where use_mask) from a
//       kept keypoint of the previous frame (prev_kept_age > 0) takes that age + 1 (uint32
//       wrap, as NumPy's); every other candidate 0 (a new track). has_match 0: all 0.
//       Thread mapping: one block of SPREAD_THREADS threads, grid-stride loops.
//   spread_rank(scores, ages, keypoint_count, capacity, order)
//       order int32 [N]: candidate indices in placement order, by rank counting of the
//       key (age, score) (-0.0 counts as 0.0), larger first, ties by smaller index.
//       Thread mapping: SPREAD_RANK_SPLIT consecutive lanes per candidate (each counts
//       every SPREAD_RANK_SPLIT-th key of a tile, the group sums by shuffles),
//       SPREAD_RANK_THREADS per block, keys streamed through shared memory in tiles of
//       SPREAD_RANK_TILE.
//   spread_neighbours(keypoints, order, keypoint_count, capacity, radius, neighbours,
//                     neighbour_counts)                  (radius > 0 only)
//       By placement rank r: neighbour_counts[r] = how many candidates placed before r lie
//       closer than the radius, neighbours[r * SPREAD_NEIGHBOURS + j] the ranks of the
//       first SPREAD_NEIGHBOURS of them (a longer list is left to spread_select's buckets).
//       Thread mapping: one thread per rank, SPREAD_NEIGHBOUR_THREADS per block, the
//       earlier ranks' positions streamed through shared memory in tiles of
//       SPREAD_RANK_TILE.
//   spread_select(keypoints, order, ages, keypoint_count, capacity, radius, grid_cell,
//                 max_per_cell, cap, neighbours, neighbour_counts, scratch, kept,
//                 kept_count, kept_age)
//       kept int32 [cap]: the kept candidates in placement order, kept_count int32 [1];
//       kept_age uint32 [N]: a kept candidate's track age (its age, 1 when new), 0 where
//       dropped (the next frame's prev_kept_age). radius <= 0: no radius; grid_cell <= 0:
//       no grid. scratch: int32 [SPREAD_SCRATCH_PER * capacity].
//       The greedy rule is computed as the lexicographically first independent set, in
//       rounds: a candidate is dropped once a kept one placed before it lies within the
//       radius or its cell holds max_per_cell kept ones placed before it; it is kept once
//       every candidate placed before it within the radius or in its cell is decided and
//       neither holds. Each round decides at least the first undecided candidate, and the
//       kept set equals the sequential pass's; the cap keeps its first `cap` members.
//       Radius conflicts come from spread_neighbours' lists; a candidate whose list
//       overflowed, and the grid check, use two hashed bucket lists (radius cells of side
//       radius: conflicts lie in the 3 x 3 around; grid cells), SPREAD_BUCKETS buckets each,
//       each bucket's entries sorted by rank (a scan stops at the candidate itself; the
//       grid's once the cell holds max_per_cell kept ones). Distances in double without
//       contraction (the host compares (x - px)^2 + (y - py)^2 < radius^2 in float64); grid
//       cells are floor(double(x) / grid_cell), as the host's.
//       Thread mapping: one block of SPREAD_THREADS threads; the candidates' states
//       (undecided, kept, dropped) in dynamic shared memory, one byte each (launched with
//       capacity bytes; capacity <= SPREAD_MAX_CANDIDATES).
//
// Macros injected by the loader: SPREAD_THREADS (multiple of 32, at most 1024),
// SPREAD_RANK_THREADS, SPREAD_RANK_SPLIT (power of two up to 32), SPREAD_RANK_TILE,
// SPREAD_NEIGHBOUR_THREADS, SPREAD_NEIGHBOURS (list length per candidate), SPREAD_BUCKETS
// (power of two), SPREAD_SCRATCH_PER (int32 words of scratch per candidate),
// SPREAD_MAX_CANDIDATES (xfeat_ros.features.gpu.kernels.LAUNCH_DEFINES).
// Compiled with --fmad=false.

#if !defined(SPREAD_THREADS) || !defined(SPREAD_RANK_THREADS) || !defined(SPREAD_RANK_SPLIT) \
    || !defined(SPREAD_RANK_TILE) || !defined(SPREAD_BUCKETS) || !defined(SPREAD_SCRATCH_PER) \
    || !defined(SPREAD_MAX_CANDIDATES) || !defined(SPREAD_NEIGHBOUR_THREADS) \
    || !defined(SPREAD_NEIGHBOURS)
#error "spread.cu needs the loader's SPREAD_* launch macros"
#endif
#if SPREAD_THREADS % 32 != 0 || SPREAD_THREADS > 1024 || SPREAD_RANK_THREADS % 32 != 0
#error "SPREAD_THREADS and SPREAD_RANK_THREADS must be whole warps (at most 1024)"
#endif
#if SPREAD_RANK_SPLIT < 1 || SPREAD_RANK_SPLIT > 32 || (SPREAD_RANK_SPLIT & (SPREAD_RANK_SPLIT - 1)) != 0
#error "SPREAD_RANK_SPLIT must be a power of two up to 32"
#endif
#if (SPREAD_BUCKETS & (SPREAD_BUCKETS - 1)) != 0 || SPREAD_SCRATCH_PER != 6
#error "SPREAD_BUCKETS must be a power of two and SPREAD_SCRATCH_PER 6"
#endif

#define SPREAD_WARPS (SPREAD_THREADS / 32)
#define UNDECIDED 0
#define KEPT 1
#define DROPPED 2

typedef unsigned long long u64;

extern "C" __global__ void spread_ages(
    const unsigned int* __restrict__ prev_kept_age,
    const int* __restrict__ idx0,
    const int* __restrict__ idx1,
    const unsigned char* __restrict__ verified,
    const int* __restrict__ match_count,
    const int* __restrict__ keypoint_count,
    int capacity,
    int has_match,
    int use_mask,
    unsigned int* __restrict__ ages)
{
    const int n = min(max(*keypoint_count, 0), capacity);
    for (int i = threadIdx.x; i < n; i += SPREAD_THREADS) {
        ages[i] = 0u;
    }
    __syncthreads();
    if (!has_match) {
        return;
    }
    const int m = max(*match_count, 0);
    for (int k = threadIdx.x; k < m; k += SPREAD_THREADS) {
        const int from = idx0[k];
        const int to = idx1[k];
        if ((!use_mask || verified[k]) && from >= 0 && to >= 0 && to < n) {
            const unsigned int before = prev_kept_age[from];
            if (before > 0u) {
                ages[to] = before + 1u;  // idx1 is unique (mutual NN): one writer per candidate
            }
        }
    }
}

// (age, score) as one orderable 64-bit key: larger key = placed first.
__device__ __forceinline__ u64 placement_key(float score, unsigned int age)
{
    unsigned int bits = __float_as_uint(score == 0.0f ? 0.0f : score);
    bits = (bits & 0x80000000u) ? ~bits : (bits | 0x80000000u);
    return ((u64)age << 32) | (u64)bits;
}

extern "C" __global__ void spread_rank(
    const float* __restrict__ scores,
    const unsigned int* __restrict__ ages,
    const int* __restrict__ keypoint_count,
    int capacity,
    int* __restrict__ order)
{
    __shared__ u64 tile[SPREAD_RANK_TILE];
    constexpr int KEYS = SPREAD_RANK_THREADS / SPREAD_RANK_SPLIT;
    const int n = min(max(*keypoint_count, 0), capacity);
    const int base = blockIdx.x * KEYS;
    if (base >= n) {
        return;
    }
    const int i = base + threadIdx.x / SPREAD_RANK_SPLIT;
    const int part = threadIdx.x % SPREAD_RANK_SPLIT;
    const bool mine = i < n;
    const u64 key = mine ? placement_key(scores[i], ages[i]) : 0ull;
    int before = 0;
    for (int start = 0; start < n; start += SPREAD_RANK_TILE) {
        const int size = min(SPREAD_RANK_TILE, n - start);
        __syncthreads();
        for (int t = threadIdx.x; t < size; t += SPREAD_RANK_THREADS) {
            tile[t] = placement_key(scores[start + t], ages[start + t]);
        }
        __syncthreads();
        if (mine) {
            for (int t = part; t < size; t += SPREAD_RANK_SPLIT) {
                const u64 other = tile[t];
                before += other > key || (other == key && start + t < i);
            }
        }
    }
    for (int offset = SPREAD_RANK_SPLIT / 2; offset > 0; offset /= 2) {
        before += __shfl_down_sync(0xffffffffu, before, offset, SPREAD_RANK_SPLIT);
    }
    if (mine && part == 0) {
        order[before] = i;
    }
}

extern "C" __global__ void spread_neighbours(
    const float* __restrict__ keypoints,
    const int* __restrict__ order,
    const int* __restrict__ keypoint_count,
    int capacity,
    double radius,
    int* __restrict__ neighbours,
    int* __restrict__ neighbour_counts)
{
    __shared__ float2 tile[SPREAD_RANK_TILE];
    const int n = min(max(*keypoint_count, 0), capacity);
    const int first = blockIdx.x * SPREAD_NEIGHBOUR_THREADS;
    if (first >= n) {
        return;
    }
    const int r = first + threadIdx.x;
    const bool mine = r < n;
    const double radius2 = radius * radius;
    double x = 0.0, y = 0.0;
    if (mine) {
        const int c = order[r];
        x = keypoints[2 * c];
        y = keypoints[2 * c + 1];
    }
    int found = 0;
    const int last = min(first + SPREAD_NEIGHBOUR_THREADS, n);  // ranks before it matter
    for (int start = 0; start < last; start += SPREAD_RANK_TILE) {
        const int size = min(SPREAD_RANK_TILE, last - start);
        __syncthreads();
        for (int t = threadIdx.x; t < size; t += SPREAD_NEIGHBOUR_THREADS) {
            const int c = order[start + t];
            tile[t] = make_float2(keypoints[2 * c], keypoints[2 * c + 1]);
        }
        __syncthreads();
        if (mine) {
            const int end = min(size, r - start);
            for (int t = 0; t < end; ++t) {
                const double ex = x - (double)tile[t].x;
                const double ey = y - (double)tile[t].y;
                if (ex * ex + ey * ey < radius2) {
                    if (found < SPREAD_NEIGHBOURS) {
                        neighbours[(long long)r * SPREAD_NEIGHBOURS + found] = start + t;
                    }
                    ++found;
                }
            }
        }
    }
    if (mine) {
        neighbour_counts[r] = found;
    }
}

__device__ __forceinline__ unsigned int bucket_of(long long cx, long long cy)
{
    const u64 h = (u64)cx * 0x9E3779B97F4A7C15ull ^ (u64)cy * 0xC2B2AE3D27D4EB4Full;
    return (unsigned int)(h >> 40) & (SPREAD_BUCKETS - 1);
}

// Exclusive scan of counts[SPREAD_BUCKETS] into start[0..SPREAD_BUCKETS] (one block).
__device__ void scan_buckets(const int* counts, int* start, int* warp_sums)
{
    constexpr int PER = (SPREAD_BUCKETS + SPREAD_THREADS - 1) / SPREAD_THREADS;
    const int lane = threadIdx.x & 31;
    const int warp = threadIdx.x >> 5;
    int local = 0;
    for (int j = 0; j < PER; ++j) {
        const int b = threadIdx.x * PER + j;
        local += b < SPREAD_BUCKETS ? counts[b] : 0;
    }
    int inclusive = local;
    for (int offset = 1; offset < 32; offset *= 2) {
        const int up = __shfl_up_sync(0xffffffffu, inclusive, offset);
        inclusive += lane >= offset ? up : 0;
    }
    if (lane == 31) {
        warp_sums[warp] = inclusive;
    }
    __syncthreads();
    int offset_warps = 0;
    for (int w = 0; w < warp; ++w) {
        offset_warps += warp_sums[w];
    }
    int running = offset_warps + inclusive - local;
    for (int j = 0; j < PER; ++j) {
        const int b = threadIdx.x * PER + j;
        if (b < SPREAD_BUCKETS) {
            start[b] = running;
            running += counts[b];
        }
    }
    if (threadIdx.x == SPREAD_THREADS - 1) {
        start[SPREAD_BUCKETS] = running;
    }
    __syncthreads();
}

extern "C" __global__ void spread_select(
    const float* __restrict__ keypoints,
    const int* __restrict__ order,
    const unsigned int* __restrict__ ages,
    const int* __restrict__ keypoint_count,
    int capacity,
    double radius,
    int grid_cell,
    int max_per_cell,
    int cap,
    const int* __restrict__ neighbours,
    const int* __restrict__ neighbour_counts,
    int* __restrict__ scratch,
    int* __restrict__ kept,
    int* __restrict__ kept_count,
    unsigned int* __restrict__ kept_age)
{
    extern __shared__ unsigned char state[];  // [capacity], by placement rank
    __shared__ int radius_start[SPREAD_BUCKETS + 1];
    __shared__ int grid_start[SPREAD_BUCKETS + 1];
    __shared__ int radius_fill[SPREAD_BUCKETS];
    __shared__ int grid_fill[SPREAD_BUCKETS];
    __shared__ int warp_sums[SPREAD_WARPS];
    __shared__ int base;
    const int tid = threadIdx.x;
    const int lane = tid & 31;
    const int warp = tid >> 5;
    const int n = min(max(*keypoint_count, 0), capacity);
    const bool use_radius = radius > 0.0;
    const bool use_grid = grid_cell > 0;
    const double radius2 = radius * radius;
    // scratch, by rank: x, y (float bits), grid cell x, y, the two buckets' entries (ranks)
    float* __restrict__ xs = reinterpret_cast<float*>(scratch);
    float* __restrict__ ys = xs + capacity;
    int* __restrict__ gxs = scratch + 2 * capacity;
    int* __restrict__ gys = scratch + 3 * capacity;
    int* __restrict__ radius_entries = scratch + 4 * capacity;
    int* __restrict__ grid_entries = scratch + 5 * capacity;
    volatile unsigned char* status = state;

    for (int b = tid; b < SPREAD_BUCKETS; b += SPREAD_THREADS) {
        radius_fill[b] = 0;
        grid_fill[b] = 0;
    }
    __syncthreads();
    for (int r = tid; r < n; r += SPREAD_THREADS) {
        const int c = order[r];
        const float x = keypoints[2 * c];
        const float y = keypoints[2 * c + 1];
        xs[r] = x;
        ys[r] = y;
        status[r] = UNDECIDED;
        kept_age[c] = 0u;
        if (use_radius) {
            atomicAdd(&radius_fill[bucket_of((long long)floor((double)x / radius),
                                             (long long)floor((double)y / radius))], 1);
        }
        if (use_grid) {
            const int gx = (int)floor((double)x / (double)grid_cell);
            const int gy = (int)floor((double)y / (double)grid_cell);
            gxs[r] = gx;
            gys[r] = gy;
            atomicAdd(&grid_fill[bucket_of(gx, gy)], 1);
        }
    }
    __syncthreads();
    scan_buckets(radius_fill, radius_start, warp_sums);
    scan_buckets(grid_fill, grid_start, warp_sums);
    for (int b = tid; b < SPREAD_BUCKETS; b += SPREAD_THREADS) {
        radius_fill[b] = radius_start[b];
        grid_fill[b] = grid_start[b];
    }
    __syncthreads();
    for (int r = tid; r < n; r += SPREAD_THREADS) {
        if (use_radius) {
            const unsigned int b = bucket_of((long long)floor((double)xs[r] / radius),
                                             (long long)floor((double)ys[r] / radius));
            radius_entries[atomicAdd(&radius_fill[b], 1)] = r;
        }
        if (use_grid) {
            grid_entries[atomicAdd(&grid_fill[bucket_of(gxs[r], gys[r])], 1)] = r;
        }
    }
    __syncthreads();
    for (int b = tid; b < 2 * SPREAD_BUCKETS; b += SPREAD_THREADS) {  // by rank, per bucket
        const bool grid = b >= SPREAD_BUCKETS;
        const int bucket = grid ? b - SPREAD_BUCKETS : b;
        int* entries = grid ? grid_entries : radius_entries;
        const int begin = grid ? grid_start[bucket] : radius_start[bucket];
        const int end = grid ? grid_start[bucket + 1] : radius_start[bucket + 1];
        for (int e = begin + 1; e < end; ++e) {
            const int value = entries[e];
            int at = e - 1;
            while (at >= begin && entries[at] > value) {
                entries[at + 1] = entries[at];
                --at;
            }
            entries[at + 1] = value;
        }
    }
    __syncthreads();

    // Rounds: decide what can be decided; a decision is final, so a state read while
    // another thread writes it is either still undecided (wait) or final (use it).
    bool undecided = true;
    while (undecided) {
        bool mine = false;
        for (int r = tid; r < n; r += SPREAD_THREADS) {
            if (status[r] != UNDECIDED) {
                continue;
            }
            bool pending = false;
            bool drop = false;
            const double x = xs[r];
            const double y = ys[r];
            if (use_grid) {
                const int gx = gxs[r];
                const int gy = gys[r];
                const unsigned int b = bucket_of(gx, gy);
                int full = 0;
                for (int e = grid_start[b]; e < grid_start[b + 1]; ++e) {
                    const int q = grid_entries[e];
                    if (q >= r) {
                        break;
                    }
                    if (gxs[q] == gx && gys[q] == gy) {
                        const unsigned char s = status[q];
                        pending |= s == UNDECIDED;
                        if (s == KEPT && ++full >= max_per_cell) {
                            break;
                        }
                    }
                }
                drop = full >= max_per_cell;
            }
            const int listed = use_radius && !drop ? neighbour_counts[r] : 0;
            if (listed > 0 && listed <= SPREAD_NEIGHBOURS) {
                const int* list = neighbours + (long long)r * SPREAD_NEIGHBOURS;
                for (int j = 0; j < listed; ++j) {
                    const unsigned char s = status[list[j]];
                    if (s == KEPT) {
                        drop = true;
                        break;
                    }
                    pending |= s == UNDECIDED;
                }
            } else if (listed > SPREAD_NEIGHBOURS) {
                const long long cx = (long long)floor(x / radius);
                const long long cy = (long long)floor(y / radius);
                for (int dy = -1; dy <= 1 && !drop; ++dy) {
                    for (int dx = -1; dx <= 1 && !drop; ++dx) {
                        const unsigned int b = bucket_of(cx + dx, cy + dy);
                        for (int e = radius_start[b]; e < radius_start[b + 1]; ++e) {
                            const int q = radius_entries[e];
                            if (q >= r) {
                                break;
                            }
                            const double ex = x - (double)xs[q];
                            const double ey = y - (double)ys[q];
                            if (ex * ex + ey * ey < radius2) {
                                const unsigned char s = status[q];
                                if (s == KEPT) {
                                    drop = true;
                                    break;
                                }
                                pending |= s == UNDECIDED;
                            }
                        }
                    }
                }
            }
            if (drop) {
                status[r] = DROPPED;
            } else if (!pending) {
                status[r] = KEPT;
            } else {
                mine = true;
            }
        }
        undecided = __syncthreads_or(mine);
    }

    // The kept candidates in placement order, the first `cap` of them.
    if (tid == 0) {
        base = 0;
    }
    __syncthreads();
    for (int start = 0; start < n; start += SPREAD_THREADS) {
        const int r = start + tid;
        const bool keep = r < n && status[r] == KEPT;
        const unsigned int ballot = __ballot_sync(0xffffffffu, keep);
        if (lane == 0) {
            warp_sums[warp] = __popc(ballot);
        }
        __syncthreads();
        int before = 0, total = 0;
        for (int w = 0; w < SPREAD_WARPS; ++w) {
            before += w < warp ? warp_sums[w] : 0;
            total += warp_sums[w];
        }
        if (keep) {
            const int at = base + before + __popc(ballot & ((1u << lane) - 1u));
            if (at < cap) {
                const int c = order[r];
                kept[at] = c;
                kept_age[c] = ages[c] > 0u ? ages[c] : 1u;
            }
        }
        __syncthreads();  // every thread has read base and the counts
        if (tid == 0) {
            base += total;
        }
        __syncthreads();
    }
    if (tid == 0) {
        *kept_count = min(base, cap);
    }
}
