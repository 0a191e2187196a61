// The host harness of bench/cuda/q8_0_matvec.cu and bench/cuda/q4_0_matvec.cu, which both include this header (our
// own code): the Q8_1 activation block, the kernels' closing reduction (reduce_and_store), the shapes, the xorshift
// RNG and run_matvec_bench, both benchmarks' main.
// A benchmark keeps what is its weight type's: the block, the loads, the kernels and the variant list, and a traits
// type T that says how to fill a weight block (T::fill_weights) and an activation block (T::fill_activations), how
// one (weight block, Q8_1 block) pair adds to the host reference and its magnitude (T::add_term), and what a shape
// and a variant must satisfy (T::check_shape, T::check_variant: print an error and return false to stop with 2).
//
// Each variant is checked against a host reference on sampled rows before it is timed. Timing: REPS launches
// (default 64) captured in one CUDA graph, as ggml-cuda launches a decode, each on its own copy of the weights so
// that no launch finds the previous one's in L2; the median of 7 graph launches. Prints one line a
// (shape, columns, variant): microseconds a product and the weights' bytes over that time.
#pragma once

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

#define CHECK(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { \
    fprintf(stderr, "error: %s: %s (line %d)\n", #x, cudaGetErrorString(e_), __LINE__); exit(1); } } while (0)

struct BlockQ8_1 { __half2 ds; int8_t qs[32]; };  // ggml's block_q8_1: 36 bytes (scale, sum), 4-byte aligned
static_assert(sizeof(BlockQ8_1) == 36, "Q8_1 block");

// the end of every kernel variant: each warp's partial sums (acc, a row's per thread) across the CUDA block's warps
// through shared memory, then across the warp's lanes; lane r of warp 0 writes row row0 + r of each column
template <int NCOLS, int NWARPS, int ROWS>
__device__ __forceinline__ void reduce_and_store(const float (&acc)[NCOLS][ROWS], float * dst, int row0, int nrows) {
    __shared__ float part[NWARPS > 1 ? NWARPS - 1 : 1][NCOLS][ROWS][32];
    if (threadIdx.y > 0) {
#pragma unroll
        for (int j = 0; j < NCOLS; ++j) {
#pragma unroll
            for (int r = 0; r < ROWS; ++r) {
                part[threadIdx.y - 1][j][r][threadIdx.x] = acc[j][r];
            }
        }
    }
    __syncthreads();
    if (threadIdx.y > 0) {
        return;
    }
#pragma unroll
    for (int j = 0; j < NCOLS; ++j) {
#pragma unroll
        for (int r = 0; r < ROWS; ++r) {
            float s = acc[j][r];
#pragma unroll
            for (int w = 0; w < NWARPS - 1; ++w) {
                s += part[w][j][r][threadIdx.x];
            }
#pragma unroll
            for (int o = 16; o > 0; o >>= 1) {
                s += __shfl_xor_sync(0xffffffff, s, o);
            }
            if (threadIdx.x == r && row0 + r < nrows) {
                dst[(size_t) j * nrows + row0 + r] = s;
            }
        }
    }
}

static constexpr int MAX_COLS = 8;  // activation columns the variants may read

struct Shape { const char * name; int rows; int k; };
// the 9B shape's weights: attention q with its gate, k/v, o, the head's input projection, FFN gate/up and down,
// the draft's 32k-row LM head and the full 248k-row one
static const Shape SHAPES[] = {
    {"q+gate", 8192, 4096}, {"k|v", 1024, 4096}, {"o", 4096, 4096}, {"eh", 4096, 8192},
    {"gate|up", 12288, 4096}, {"down", 4096, 12288}, {"lm32k", 32768, 4096}, {"lm248k", 248320, 4096},
};

static uint32_t rng_state = 12345u;
static uint32_t rnd() {  // xorshift32: the same weights on every run
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 17;
    rng_state ^= rng_state << 5;
    return rng_state;
}

// main: argv[1] is REPS. Variant: {name, ncols, launch, ...}, launch(x, y, dst, nb, nrows, stream) on T::Block weights.
template <class T, class Variant, size_t NVARIANTS>
static int run_matvec_bench(int argc, char ** argv, const Variant (&variants)[NVARIANTS]) {
    typedef typename T::Block Block;
    const int reps = argc > 1 ? atoi(argv[1]) : 64;
    if (reps < 1 || reps > 4096) {
        fprintf(stderr, "error: REPS must be 1..4096\n");
        return 2;
    }
    cudaDeviceProp prop;
    CHECK(cudaGetDeviceProperties(&prop, 0));
    printf("device: %s, %d SMs, L2 %d MB\n", prop.name, prop.multiProcessorCount, prop.l2CacheSize >> 20);
    cudaStream_t stream;
    CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    const size_t rotation_bytes = (size_t) 1 << 30;  // the weights' copies a graph cycles through: beyond L2

    int failures = 0;
    for (const Shape & sh : SHAPES) {
        const int nb = sh.k / 32;
        if (!T::check_shape(sh, nb)) {
            return 2;
        }
        const size_t wbytes = (size_t) sh.rows * nb * sizeof(Block);
        const int copies = (int) std::max<size_t>(1, std::min<size_t>(reps, rotation_bytes / wbytes));
        // host weights (one copy; the device copies are equal) and MAX_COLS columns of activations
        std::vector<Block> hx((size_t) sh.rows * nb);
        for (Block & b : hx) {
            T::fill_weights(b);
        }
        std::vector<BlockQ8_1> hy((size_t) MAX_COLS * nb);
        for (BlockQ8_1 & b : hy) {
            T::fill_activations(b);
        }
        Block * dx;
        BlockQ8_1 * dy;
        float * dd;
        // 64 bytes of slack past the last copy (no variant reads past its blocks: session 41's first funnel loads did)
        CHECK(cudaMalloc(&dx, wbytes * copies + 64));
        CHECK(cudaMalloc(&dy, hy.size() * sizeof(BlockQ8_1)));
        CHECK(cudaMalloc(&dd, (size_t) MAX_COLS * sh.rows * sizeof(float)));
        for (int c = 0; c < copies; ++c) {
            CHECK(cudaMemcpy((char *) dx + c * wbytes, hx.data(), wbytes, cudaMemcpyHostToDevice));
        }
        CHECK(cudaMemcpy(dy, hy.data(), hy.size() * sizeof(BlockQ8_1), cudaMemcpyHostToDevice));

        // host reference on sampled rows (first, last, a stride through), with a magnitude for a tolerance
        std::vector<int> rows;
        for (int r = 0; r < sh.rows; r += std::max(1, sh.rows / 97)) rows.push_back(r);
        rows.push_back(sh.rows - 1);
        std::vector<double> ref((size_t) MAX_COLS * rows.size()), mag((size_t) MAX_COLS * rows.size());
        for (size_t ri = 0; ri < rows.size(); ++ri) {
            for (int j = 0; j < MAX_COLS; ++j) {
                double s = 0, m = 0;
                for (int kb = 0; kb < nb; ++kb) {
                    const Block & bx = hx[(size_t) rows[ri] * nb + kb];
                    const BlockQ8_1 & by = hy[(size_t) j * nb + kb];
                    T::add_term(bx, by, s, m);
                }
                ref[j * rows.size() + ri] = s;
                mag[j * rows.size() + ri] = m;
            }
        }

        std::vector<float> out((size_t) MAX_COLS * sh.rows);
        for (const Variant & var : variants) {
            if (!T::check_variant(sh, var)) {
                return 2;
            }
            CHECK(cudaMemset(dd, 0, (size_t) MAX_COLS * sh.rows * sizeof(float)));
            var.launch(dx, dy, dd, nb, sh.rows, stream);
            CHECK(cudaStreamSynchronize(stream));
            CHECK(cudaGetLastError());
            CHECK(cudaMemcpy(out.data(), dd, (size_t) var.ncols * sh.rows * sizeof(float), cudaMemcpyDeviceToHost));
            double worst = 0;  // error over the magnitude (float accumulation in another order: 1e-5 allowed)
            for (int j = 0; j < var.ncols; ++j) {
                for (size_t ri = 0; ri < rows.size(); ++ri) {
                    const double e = std::fabs(out[(size_t) j * sh.rows + rows[ri]] - ref[j * rows.size() + ri]);
                    worst = std::max(worst, e / std::max(mag[j * rows.size() + ri], 1e-30));
                }
            }
            const bool ok = worst <= 1e-5;
            failures += !ok;

            cudaGraph_t graph;
            cudaGraphExec_t exec;
            CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
            for (int i = 0; i < reps; ++i) {
                const Block * xc = (const Block *) ((const char *) dx + (size_t) (i % copies) * wbytes);
                var.launch(xc, dy, dd, nb, sh.rows, stream);
            }
            CHECK(cudaStreamEndCapture(stream, &graph));
            CHECK(cudaGraphInstantiate(&exec, graph, 0));
            cudaEvent_t e0, e1;
            CHECK(cudaEventCreate(&e0));
            CHECK(cudaEventCreate(&e1));
            CHECK(cudaGraphLaunch(exec, stream));  // warm-up
            std::vector<float> ms;
            for (int t = 0; t < 7; ++t) {
                CHECK(cudaEventRecord(e0, stream));
                CHECK(cudaGraphLaunch(exec, stream));
                CHECK(cudaEventRecord(e1, stream));
                CHECK(cudaEventSynchronize(e1));
                float m;
                CHECK(cudaEventElapsedTime(&m, e0, e1));
                ms.push_back(m);
            }
            std::sort(ms.begin(), ms.end());
            const double us = ms[3] * 1000.0 / reps;
            printf("%-7s %6d x %5d  n=%d  %-28s %8.2f us %7.2f TB/s  %s (err %.1e)\n", sh.name, sh.rows, sh.k,
                   var.ncols, var.name, us, wbytes / us * 1e-6, ok ? "ok" : "WRONG", worst);
            fflush(stdout);
            CHECK(cudaEventDestroy(e0));
            CHECK(cudaEventDestroy(e1));
            CHECK(cudaGraphExecDestroy(exec));
            CHECK(cudaGraphDestroy(graph));
        }
        CHECK(cudaFree(dx));
        CHECK(cudaFree(dy));
        CHECK(cudaFree(dd));
    }
    printf("%s\n", failures ? "some variants WRONG" : "all variants agree with the reference");
    return failures ? 1 : 0;
}
