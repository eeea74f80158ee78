// Kernels with deliberate bugs, compiled only for the emulator: its own tests check that
// it reports them (or, for the race, that the stale value shows) rather than running on.
#ifndef WICK_RUNTIME_SOURCE
#include "common.cuh"
#endif

// Threads past `active` return before the barrier the others wait at.
extern "C" __global__ void selftest_return_before_barrier(float* out, int active) {
    __shared__ float s[1024];
    if ((int)threadIdx.x >= active) return;
    s[threadIdx.x] = (float)threadIdx.x;
    __syncthreads();
    out[threadIdx.x] = s[(threadIdx.x + 1) % active];
}

// Reads a neighbour's shared slot with (`barrier` != 0) or without a barrier between
// the write and the read. The values differ per block, so a stale slot (from an earlier
// block, as on a GPU) shows.
extern "C" __global__ void selftest_neighbour(float* out, int barrier) {
    __shared__ float s[1024];
    s[threadIdx.x] = (float)(blockIdx.x * 1000 + threadIdx.x + 1);
    if (barrier) __syncthreads();
    out[blockIdx.x * blockDim.x + threadIdx.x] = s[(threadIdx.x + 1) % blockDim.x];
}

// Every thread of the grid adds 1 to `count`; every block sums its threads with a warp
// shuffle reduction into `sums[block]`.
extern "C" __global__ void selftest_count(unsigned int* count, float* sums) {
    atomicAdd(count, 1u);
    float total = block_sum((float)threadIdx.x);
    if (threadIdx.x == 0) sums[blockIdx.x] = total;
}
