// Copyright 2026 xfeat_ros contributors
// SPDX-License-Identifier: Apache-2.0
//
// tracks.cu: continue a camera's track ids through a frame's verified matches on the
// device (xfeat_ros.features.gpu.armed; host reference xfeat_ros.features.tracks.propagate_tracks, which
// these results equal bit for bit).
//
// Entry point
//   continue_tracks(prev_ids, prev_ages, prev_count, idx0, idx1, verified, match_count,
//                   keypoint_count, capacity, next_id, seen, ids, ages, next_after)
//     prev_ids      uint64 [prev_count]  track ids of the previous frame's keypoints
//     prev_ages     uint32 [prev_count]  their ages
//     idx0, idx1    int32 [*match_count] matches previous -> current (idx1 unique: mutual NN)
//     verified      uint8 [*match_count] the epipolar check's mask (non-zero: verified)
//     match_count   int32 [1], keypoint_count int32 [1] (device counts; the current frame's
//                   keypoints are clamped to capacity)
//     next_id       the camera's next new track id before this frame
//     seen          uint8 [capacity] scratch: which keypoints continue a track
//     ids, ages     uint64 / uint32 [capacity] out: a verified match's keypoint takes its
//                   previous keypoint's id and age + 1 (uint32 wrap, as NumPy's); every
//                   other keypoint a new id, next_id + its rank among the new ones in
//                   keypoint order, and age 1
//     next_after    uint64 [1] out: next_id + the number of new tracks
//   A match whose idx0 or idx1 is out of range is passed over (none is, from the matcher).
//
// Thread mapping: one block of TRACK_THREADS threads. Grid-stride loops clear `seen`,
//   then carry the verified matches over, then rank the keypoints that start a track:
//   TRACK_THREADS keypoints at a time, a ballot per warp and a scan of the warps' counts
//   in shared memory.
//
// Macros injected by the loader: TRACK_THREADS (a multiple of 32, at most 1024).

#if !defined(TRACK_THREADS)
#error "tracks.cu needs the loader's TRACK_THREADS"
#endif
#if TRACK_THREADS % 32 != 0 || TRACK_THREADS > 1024
#error "TRACK_THREADS must be a multiple of 32, at most 1024"
#endif

#define TRACK_WARPS (TRACK_THREADS / 32)

extern "C" __global__ void continue_tracks(
    const unsigned long long* __restrict__ prev_ids,
    const unsigned int* __restrict__ prev_ages,
    int prev_count,
    const int* __restrict__ idx0,
    const int* __restrict__ idx1,
    const unsigned char* __restrict__ verified,
    const int* __restrict__ match_count,
    const int* __restrict__ keypoint_count,
    int capacity,
    unsigned long long next_id,
    unsigned char* __restrict__ seen,
    unsigned long long* __restrict__ ids,
    unsigned int* __restrict__ ages,
    unsigned long long* __restrict__ next_after)
{
    __shared__ unsigned int warp_counts[TRACK_WARPS];
    __shared__ unsigned long long base;
    const int tid = threadIdx.x;
    const int lane = tid & 31;
    const int warp = tid >> 5;
    const int n = min(max(*keypoint_count, 0), capacity);
    const int m = max(*match_count, 0);

    for (int i = tid; i < n; i += TRACK_THREADS) {
        seen[i] = 0;
    }
    __syncthreads();
    for (int k = tid; k < m; k += TRACK_THREADS) {
        const int from = idx0[k];
        const int to = idx1[k];
        if (verified[k] && from >= 0 && from < prev_count && to >= 0 && to < n) {
            ids[to] = prev_ids[from];
            ages[to] = prev_ages[from] + 1u;
            seen[to] = 1;
        }
    }
    if (tid == 0) {
        base = next_id;
    }
    __syncthreads();
    for (int start = 0; start < n; start += TRACK_THREADS) {
        const int i = start + tid;
        const bool fresh = i < n && !seen[i];
        const unsigned int ballot = __ballot_sync(0xffffffffu, fresh);
        if (lane == 0) {
            warp_counts[warp] = __popc(ballot);
        }
        __syncthreads();
        unsigned int before = 0, total = 0;
        for (int w = 0; w < TRACK_WARPS; ++w) {
            const unsigned int c = warp_counts[w];
            before += w < warp ? c : 0u;
            total += c;
        }
        if (fresh) {
            const unsigned int rank = before + __popc(ballot & ((1u << lane) - 1u));
            ids[i] = base + rank;
            ages[i] = 1u;
        }
        __syncthreads();  // every thread has read base and the counts
        if (tid == 0) {
            base += total;
        }
        __syncthreads();
    }
    if (tid == 0) {
        *next_after = base;
    }
}
