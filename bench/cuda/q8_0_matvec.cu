// Q8_0 x Q8_1 matrix-vector products: kernel variants timed on the shapes a Qwen3.5-9B-shaped decode, its verify and
// its MTP draft use, to find how close each comes to the memory's bandwidth. Standalone (no ggml), our own code; the
// first variant has the structure of ggml-cuda's mul_mat_vec_q for Q8_0 (4 warps a row, each thread two ints of a
// block read as 16-bit halves, one block of 32 a thread per trip), so the others read as changes to it.
//
//   nvcc -O3 -std=c++17 -arch=sm_90 -o /tmp/q8mv bench/cuda/q8_0_matvec.cu && /tmp/q8mv [REPS]
//
// The host side (shapes, the reference check, timing, the output) is bench/cuda/matvec_harness.cuh, which
// bench/cuda/q4_0_matvec.cu shares: each variant is checked against a host reference on sampled rows, then timed as
// the median of 7 launches of a CUDA graph of REPS launches (default 64), each on its own copy of the weights.
#include "matvec_harness.cuh"

struct BlockQ8_0 { __half d; int8_t qs[32]; };    // ggml's block_q8_0: 34 bytes, so its quants are 2-byte aligned
static_assert(sizeof(BlockQ8_0) == 34, "Q8_0 block");

// LOAD_U16: each int as two 16-bit halves (ggml-cuda's get_int_b2); LOAD_ALIGNED: aligned words, as patch 0019
enum Load { LOAD_U16 = 0, LOAD_ALIGNED = 1 };

// VDR ints of a Q8_0 block's quants starting at int kq.
template <int LOAD, int VDR>
__device__ __forceinline__ void load_quants(const BlockQ8_0 * b, int kq, int (&v)[VDR]) {
    if constexpr (LOAD == LOAD_ALIGNED) {
        // aligned 32-bit words around the 2-byte-aligned quants, neighbours joined by a funnel shift, never past the
        // run's last byte: its last two bytes, where misaligned, come from a 16-bit load (VDR loads, or VDR + 1);
        // the same expressions as patch 0019's get_ints_aligned
        const uintptr_t a = (uintptr_t) (b->qs + 4*kq);
        const uint32_t * w = (const uint32_t *) (a & ~(uintptr_t) 3);
        const int shift = (int) (a & 3) * 8;
        uint32_t words[VDR + 1];
#pragma unroll
        for (int i = 0; i < VDR; ++i) {
            words[i] = __ldg(w + i);
        }
        words[VDR] = shift ? (uint32_t) __ldg((const uint16_t *) (a + 4*VDR - 2)) : 0u;
#pragma unroll
        for (int i = 0; i < VDR; ++i) {
            v[i] = (int) (uint32_t) ((((uint64_t) words[i + 1] << 32) | words[i]) >> shift);
        }
    } else {
        const uint16_t * h = (const uint16_t *) (b->qs + 4*kq);
#pragma unroll
        for (int i = 0; i < VDR; ++i) {
            v[i] = (int) ((uint32_t) h[2*i] | ((uint32_t) h[2*i + 1] << 16));
        }
    }
}

// dst[j*nrows + row] = sum over the row's blocks of d_x * d_y * dot(x quants, y_j quants).
// NWARPS warps a CUDA block, ROWS rows a CUDA block, VDR ints of a Q8_0 block a thread; each row's quants read once
// a trip for every column. (Session 41's round 1 also tried unrolling the trip loop and an L2 prefetch: both lost.)
template <int NCOLS, int NWARPS, int ROWS, int VDR, int LOAD>
__global__ void __launch_bounds__(NWARPS * 32) matvec(
        const BlockQ8_0 * __restrict__ x, const BlockQ8_1 * __restrict__ y, float * __restrict__ dst, const int nb,
        const int nrows) {
    constexpr int TPB = 8 / VDR;              // threads a Q8_0 block
    constexpr int BPI = NWARPS * 32 / TPB;    // blocks a trip
    const int tid = threadIdx.y * 32 + threadIdx.x;
    const int row0 = blockIdx.x * ROWS;
    const int kq = VDR * (tid % TPB);

    float acc[NCOLS][ROWS];
#pragma unroll
    for (int j = 0; j < NCOLS; ++j) {
#pragma unroll
        for (int r = 0; r < ROWS; ++r) {
            acc[j][r] = 0.0f;
        }
    }

    for (int kb = tid / TPB; kb < nb; kb += BPI) {
        int v[ROWS][VDR];
        float dx[ROWS];
#pragma unroll
        for (int r = 0; r < ROWS; ++r) {
            const BlockQ8_0 * b = x + (size_t) (row0 + r) * nb + kb;
            dx[r] = __half2float(b->d);
            load_quants<LOAD, VDR>(b, kq, v[r]);
        }
#pragma unroll
        for (int j = 0; j < NCOLS; ++j) {
            const BlockQ8_1 * yb = y + (size_t) j * nb + kb;
            const float dy = __low2float(yb->ds);
            const int * yq = (const int *) yb->qs + kq;
#pragma unroll
            for (int r = 0; r < ROWS; ++r) {
                int s = 0;
#pragma unroll
                for (int i = 0; i < VDR; ++i) {
                    s = __dp4a(v[r][i], yq[i], s);
                }
                acc[j][r] += dx[r] * dy * (float) s;
            }
        }
    }

    reduce_and_store<NCOLS, NWARPS, ROWS>(acc, dst, row0, nrows);
}

typedef void (*Launch)(const BlockQ8_0 *, const BlockQ8_1 *, float *, int, int, cudaStream_t);

struct Variant { const char * name; int ncols; Launch launch; };

template <int NCOLS, int NWARPS, int ROWS, int VDR, int LOAD>
static void launch(const BlockQ8_0 * x, const BlockQ8_1 * y, float * dst, int nb, int nrows, cudaStream_t s) {
    const dim3 grid((nrows + ROWS - 1) / ROWS), block(32, NWARPS);
    matvec<NCOLS, NWARPS, ROWS, VDR, LOAD><<<grid, block, 0, s>>>(x, y, dst, nb, nrows);
}

// name: [stock|0019] w<warps> r<rows> v<ints> <load>: "stock" has ggml-cuda's structure at that column
// count, "0019" the layout patch 0019 shipped there in session 41 (since session 42 it takes w4 r2 v8 at one column
// for 16384 rows or more, 2 rows a block instead of 4 below 4096 rows, and w2 r4 v4 from 5 columns, all in the list
// below; the variants session 41 dropped are in bench/reference/same-call-h200-s41/README.md)
#define V(C, W, R, D, L, NAME) {NAME, C, launch<C, W, R, D, L>}
static const Variant VARIANTS[] = {
    V(1, 4, 1, 2, LOAD_U16, "stock w4 r1 v2 u16"),
    V(1, 4, 1, 8, LOAD_ALIGNED, "0019  w4 r1 v8 aligned"),
    V(1, 4, 2, 8, LOAD_ALIGNED, "      w4 r2 v8 aligned"),
    V(2, 4, 2, 2, LOAD_U16, "stock w4 r2 v2 u16"),
    V(2, 4, 2, 8, LOAD_ALIGNED, "      w4 r2 v8 aligned"),
    V(2, 4, 2, 4, LOAD_ALIGNED, "      w4 r2 v4 aligned"),
    V(2, 4, 4, 4, LOAD_ALIGNED, "      w4 r4 v4 aligned"),
    V(2, 2, 4, 4, LOAD_ALIGNED, "      w2 r4 v4 aligned"),
    V(2, 2, 4, 8, LOAD_ALIGNED, "      w2 r4 v8 aligned"),
    V(2, 2, 2, 4, LOAD_ALIGNED, "      w2 r2 v4 aligned"),
    V(2, 4, 4, 8, LOAD_ALIGNED, "0019  w4 r4 v8 aligned"),
    V(2, 1, 4, 4, LOAD_ALIGNED, "      w1 r4 v4 aligned"),
    V(2, 4, 8, 4, LOAD_ALIGNED, "      w4 r8 v4 aligned"),
    V(2, 4, 8, 2, LOAD_ALIGNED, "      w4 r8 v2 aligned"),
    V(2, 2, 8, 4, LOAD_ALIGNED, "      w2 r8 v4 aligned"),
    V(2, 8, 8, 4, LOAD_ALIGNED, "      w8 r8 v4 aligned"),
    V(3, 4, 2, 2, LOAD_U16, "stock w4 r2 v2 u16"),
    V(3, 4, 2, 8, LOAD_ALIGNED, "      w4 r2 v8 aligned"),
    V(3, 4, 2, 4, LOAD_ALIGNED, "      w4 r2 v4 aligned"),
    V(3, 4, 4, 4, LOAD_ALIGNED, "0019  w4 r4 v4 aligned"),
    V(3, 2, 4, 4, LOAD_ALIGNED, "      w2 r4 v4 aligned"),
    V(3, 2, 4, 8, LOAD_ALIGNED, "      w2 r4 v8 aligned"),
    V(3, 2, 2, 4, LOAD_ALIGNED, "      w2 r2 v4 aligned"),
    V(3, 4, 4, 8, LOAD_ALIGNED, "      w4 r4 v8 aligned"),
    V(3, 1, 4, 4, LOAD_ALIGNED, "      w1 r4 v4 aligned"),
    V(3, 4, 8, 4, LOAD_ALIGNED, "      w4 r8 v4 aligned"),
    V(3, 4, 8, 2, LOAD_ALIGNED, "      w4 r8 v2 aligned"),
    V(3, 2, 8, 4, LOAD_ALIGNED, "      w2 r8 v4 aligned"),
    V(3, 8, 8, 4, LOAD_ALIGNED, "      w8 r8 v4 aligned"),
    V(4, 4, 2, 2, LOAD_U16, "stock w4 r2 v2 u16"),
    V(4, 4, 2, 8, LOAD_ALIGNED, "      w4 r2 v8 aligned"),
    V(4, 4, 2, 4, LOAD_ALIGNED, "      w4 r2 v4 aligned"),
    V(4, 4, 4, 4, LOAD_ALIGNED, "0019  w4 r4 v4 aligned"),
    V(4, 2, 4, 4, LOAD_ALIGNED, "      w2 r4 v4 aligned"),
    V(4, 2, 4, 8, LOAD_ALIGNED, "      w2 r4 v8 aligned"),
    V(4, 2, 2, 4, LOAD_ALIGNED, "      w2 r2 v4 aligned"),
    V(4, 4, 4, 8, LOAD_ALIGNED, "      w4 r4 v8 aligned"),
    V(4, 1, 4, 4, LOAD_ALIGNED, "      w1 r4 v4 aligned"),
    V(4, 4, 8, 4, LOAD_ALIGNED, "      w4 r8 v4 aligned"),
    V(4, 4, 8, 2, LOAD_ALIGNED, "      w4 r8 v2 aligned"),
    V(4, 2, 8, 4, LOAD_ALIGNED, "      w2 r8 v4 aligned"),
    V(4, 8, 8, 4, LOAD_ALIGNED, "      w8 r8 v4 aligned"),
    V(6, 2, 2, 2, LOAD_U16, "stock w2 r2 v2 u16"),
    V(6, 2, 2, 4, LOAD_ALIGNED, "      w2 r2 v4 aligned"),
    V(6, 2, 4, 4, LOAD_ALIGNED, "      w2 r4 v4 aligned"),
    V(6, 4, 4, 4, LOAD_ALIGNED, "      w4 r4 v4 aligned"),
    V(6, 2, 8, 4, LOAD_ALIGNED, "      w2 r8 v4 aligned"),
    V(6, 2, 4, 2, LOAD_ALIGNED, "      w2 r4 v2 aligned"),
    V(6, 4, 8, 4, LOAD_ALIGNED, "      w4 r8 v4 aligned"),
    V(8, 2, 2, 2, LOAD_U16, "stock w2 r2 v2 u16"),
    V(8, 2, 2, 4, LOAD_ALIGNED, "      w2 r2 v4 aligned"),
    V(8, 2, 4, 4, LOAD_ALIGNED, "      w2 r4 v4 aligned"),
    V(8, 4, 4, 4, LOAD_ALIGNED, "      w4 r4 v4 aligned"),
    V(8, 2, 8, 4, LOAD_ALIGNED, "      w2 r8 v4 aligned"),
    V(8, 2, 4, 2, LOAD_ALIGNED, "      w2 r4 v2 aligned"),
    V(8, 4, 8, 4, LOAD_ALIGNED, "      w4 r8 v4 aligned"),
};
#undef V

// what matvec_harness.cuh's run_matvec_bench needs of Q8_0
struct Q8_0 {
    typedef BlockQ8_0 Block;
    static void fill_weights(BlockQ8_0 & b) {
        b.d = __float2half(0.001f + (rnd() % 1000) * 1e-5f);
        for (int8_t & q : b.qs) q = (int8_t) (rnd() % 255 - 127);
    }
    // the block sum (ds.y) is left 0: no Q8_0 kernel reads it
    static void fill_activations(BlockQ8_1 & b) {
        b.ds = __floats2half2_rn(0.01f + (rnd() % 1000) * 1e-5f, 0.0f);
        for (int8_t & q : b.qs) q = (int8_t) (rnd() % 255 - 127);
    }
    // the pair's term d_x * d_y * dot(x quants, y quants) to s, its |term| to m (the tolerance's sum of |terms|)
    static void add_term(const BlockQ8_0 & bx, const BlockQ8_1 & by, double & s, double & m) {
        long dot = 0;
        for (int i = 0; i < 32; ++i) dot += (long) bx.qs[i] * by.qs[i];
        const double t = (double) __half2float(bx.d) * (double) __low2float(by.ds) * (double) dot;
        s += t;
        m += std::fabs(t);
    }
    // every shape and every variant on it runs
    static bool check_shape(const Shape &, int) { return true; }
    static bool check_variant(const Shape &, const Variant &) { return true; }
};

int main(int argc, char ** argv) {
    return run_matvec_bench<Q8_0>(argc, argv, VARIANTS);
}
