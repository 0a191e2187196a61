// Q4_0 x Q8_1 matrix-vector products: kernel variants timed on the shapes a Qwen3.5-9B-shaped decode, its verify and
// its MTP draft use, to find whether an aligned-read layout (as patch 0019 shipped for Q8_0) pays for Q4_0 too.
// Standalone (no ggml), our own code in the structure of bench/cuda/q8_0_matvec.cu; the first variant at each column
// count has the structure of ggml-cuda's mul_mat_vec_q for Q4_0 on NVIDIA's generic table (4 warps a row for 1-4
// columns and 2 for 6-8, 1 row a CUDA block at one column and 2 otherwise, each thread two ints of a block's quants
// read as 16-bit halves, and every column re-reading the weights as stock's vec_dot call does), so the others read as
// changes to it.
//
//   nvcc -O3 -std=c++17 -arch=sm_90 -o /tmp/q4mv bench/cuda/q4_0_matvec.cu && /tmp/q4mv [REPS]
//
// A Q4_0 block is 18 bytes (a half scale, then 16 bytes of nibbles: byte j holds weight j in its low nibble and weight
// j + 16 in its high one, each stored as q + 8), so its quants start 2 bytes in: 4-byte aligned in odd blocks, only
// 2-byte aligned in even ones; two consecutive blocks (an even one and the next) are 36 bytes from a 4-byte boundary.
// The dot with a Q8_1 column subtracts the 8 through the column's block sum, as ggml does:
// d4 * (d8 * sum(nibble * q8) - 8 * s8), s8 the Q8_1 block's stored sum (d8 * the sum of its quants here).
//
// The host side (shapes, the reference check, timing, the output) is bench/cuda/matvec_harness.cuh, which
// bench/cuda/q8_0_matvec.cu shares: each variant is checked against a host reference on sampled rows, then timed as
// the median of 7 launches of a CUDA graph of REPS launches (default 64), each on its own copy of the weights.
#include "matvec_harness.cuh"

struct BlockQ4_0 { __half d; uint8_t qs[16]; };   // ggml's block_q4_0: 18 bytes, so its quants are 2-byte aligned
static_assert(sizeof(BlockQ4_0) == 18, "Q4_0 block");

// LOAD_STOCK: each int as two 16-bit halves (ggml-cuda's get_int_b2), read again for every column as stock's vec_dot
// call does (the compiler may merge those reads, as it may in stock); LOAD_U16: the same halves read once a trip for
// every column; LOAD_ALIGNED: aligned words joined by a funnel shift, as patch 0019 reads; LOAD_PAIR: a thread
// takes two consecutive blocks (even, odd) as the 9 aligned words they fill, scales and quants taken from registers
enum Load { LOAD_STOCK = 0, LOAD_U16 = 1, LOAD_ALIGNED = 2, LOAD_PAIR = 3 };

// VDR ints of a Q4_0 block's quants starting at int kq, as 16-bit halves
template <int VDR>
__device__ __forceinline__ void load_quants_u16(const BlockQ4_0 * b, int kq, int * v) {
    const uint16_t * h = (const uint16_t *) (b->qs + 4*kq);
#pragma unroll
    for (int i = 0; i < VDR; ++i) {
        v[i] = (int) ((uint32_t) h[2*i] | ((uint32_t) h[2*i + 1] << 16));
    }
}

// VDR ints of a Q4_0 block's quants starting at int kq, from aligned 32-bit words around them joined by a funnel
// shift, never past the run's last byte: where misaligned (even blocks) the run's last two bytes come from a 16-bit
// load and its first word starts at the block's scale (VDR loads, or VDR + 1); bench/cuda/q8_0_matvec.cu's
// expressions, on Q4_0's quants
template <int VDR>
__device__ __forceinline__ void load_quants_aligned(const BlockQ4_0 * b, int kq, int * v) {
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
}

// blocks b[0] (even index in its row) and b[1]: their 36 bytes are 9 aligned words. Word 0 holds b[0]'s scale and
// its first two quant bytes, word 4 its last two and b[1]'s scale, words 5-8 b[1]'s quants.
__device__ __forceinline__ void load_pair(const BlockQ4_0 * b, int (&v)[8], float (&d)[2]) {
    const uint32_t * w = (const uint32_t *) b;
    uint32_t words[9];
#pragma unroll
    for (int i = 0; i < 9; ++i) {
        words[i] = __ldg(w + i);
    }
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        v[i] = (int) __funnelshift_r(words[i], words[i + 1], 16);
        v[4 + i] = (int) words[5 + i];
    }
    d[0] = __half2float(__ushort_as_half((unsigned short) (words[0] & 0xffffu)));
    d[1] = __half2float(__ushort_as_half((unsigned short) (words[4] >> 16)));
}

// d4 * (d8 * dot(nibbles, y quants) - share * s8) over N ints of one block's quants from int kq: int i's low nibbles
// are weights 4(kq+i)..+3, against y's int kq+i; its high nibbles weights 16+4(kq+i)..+3, against y's int kq+i+4.
// The N ints are N/4 of the block's weights, so their share of the block's -8 * s8 is 2N * s8 (the shares of the
// 4/N threads a block sum to the whole).
template <int N>
__device__ __forceinline__ float dot_block(const int * v, const BlockQ8_1 * yb, int kq, float d4) {
    const int * yq = (const int *) yb->qs + kq;
    int s = 0;
#pragma unroll
    for (int i = 0; i < N; ++i) {
        s = __dp4a(v[i] & 0x0F0F0F0F, yq[i], s);
        s = __dp4a((v[i] >> 4) & 0x0F0F0F0F, yq[i + 4], s);
    }
    const float2 ds = __half22float2(yb->ds);
    return d4 * ((float) s * ds.x - (float) (2*N) * ds.y);
}

// dst[j*nrows + row] = sum over the row's blocks of that block's dot with column j's block.
// NWARPS warps a CUDA block, ROWS rows a CUDA block, VDR ints of a Q4_0 block's quants a thread (LOAD_PAIR: VDR 8,
// all of two blocks); except for LOAD_STOCK, each row's quants are read once a trip for every column.
template <int NCOLS, int NWARPS, int ROWS, int VDR, int LOAD>
__global__ void __launch_bounds__(NWARPS * 32) matvec(
        const BlockQ4_0 * __restrict__ x, const BlockQ8_1 * __restrict__ y, float * __restrict__ dst, const int nb,
        const int nrows) {
    static_assert(LOAD == LOAD_PAIR ? VDR == 8 : (VDR == 1 || VDR == 2 || VDR == 4), "ints a thread");
    constexpr int BPT = LOAD == LOAD_PAIR ? 2 : 1;        // Q4_0 blocks a thread a trip
    constexpr int IPB = VDR / BPT;                        // ints of each of them
    constexpr int TPB = 4 / IPB;                          // threads a Q4_0 block
    constexpr int BPI = NWARPS * 32 * BPT / TPB;          // blocks a trip
    const int tid = threadIdx.y * 32 + threadIdx.x;
    const int row0 = blockIdx.x * ROWS;
    const int kq = IPB * (tid % TPB);

    float acc[NCOLS][ROWS];
#pragma unroll
    for (int j = 0; j < NCOLS; ++j) {
#pragma unroll
        for (int r = 0; r < ROWS; ++r) {
            acc[j][r] = 0.0f;
        }
    }

    for (int kb = BPT * (tid / TPB); kb < nb; kb += BPI) {
        if constexpr (LOAD == LOAD_STOCK) {
            // stock's loop body: one vec_dot a (column, row), each reading the block's scale and quants itself
#pragma unroll
            for (int j = 0; j < NCOLS; ++j) {
#pragma unroll
                for (int r = 0; r < ROWS; ++r) {
                    const BlockQ4_0 * b = x + (size_t) (row0 + r) * nb + kb;
                    int v[VDR];
                    load_quants_u16<VDR>(b, kq, v);
                    acc[j][r] += dot_block<VDR>(v, y + (size_t) j * nb + kb, kq, __half2float(b->d));
                }
            }
        } else {
            int v[ROWS][VDR];
            float dx[ROWS][BPT];
#pragma unroll
            for (int r = 0; r < ROWS; ++r) {
                const BlockQ4_0 * b = x + (size_t) (row0 + r) * nb + kb;
                if constexpr (LOAD == LOAD_PAIR) {
                    load_pair(b, v[r], dx[r]);
                } else {
                    dx[r][0] = __half2float(b->d);
                    if constexpr (LOAD == LOAD_ALIGNED) {
                        load_quants_aligned<VDR>(b, kq, v[r]);
                    } else {
                        load_quants_u16<VDR>(b, kq, v[r]);
                    }
                }
            }
#pragma unroll
            for (int j = 0; j < NCOLS; ++j) {
#pragma unroll
                for (int p = 0; p < BPT; ++p) {
                    const BlockQ8_1 * yb = y + (size_t) j * nb + kb + p;
#pragma unroll
                    for (int r = 0; r < ROWS; ++r) {
                        acc[j][r] += dot_block<IPB>(v[r] + p * IPB, yb, kq, dx[r][p]);
                    }
                }
            }
        }
    }

    reduce_and_store<NCOLS, NWARPS, ROWS>(acc, dst, row0, nrows);
}

typedef void (*Launch)(const BlockQ4_0 *, const BlockQ8_1 *, float *, int, int, cudaStream_t);

struct Variant { const char * name; int ncols; int rows; Launch launch; };

template <int NCOLS, int NWARPS, int ROWS, int VDR, int LOAD>
static void launch(const BlockQ4_0 * x, const BlockQ8_1 * y, float * dst, int nb, int nrows, cudaStream_t s) {
    const dim3 grid((nrows + ROWS - 1) / ROWS), block(32, NWARPS);
    matvec<NCOLS, NWARPS, ROWS, VDR, LOAD><<<grid, block, 0, s>>>(x, y, dst, nb, nrows);
}

// name: [stock|0019] w<warps> r<rows> v<ints> <load>: "stock" has ggml-cuda's Q4_0 structure at that column count
// (vdr 2, so two threads a block); "0019" has the warps and rows patch 0019 shipped for Q8_0 in session 41, with a
// whole Q4_0 block a thread (16 bytes, as 0019's Q8_0 layout reads at 3-4 columns). What 0019 takes for Q4_0 since
// session 42, chosen from this benchmark's first run: w4 r2 v4 at one column; from 2 columns the "0019" variant for
// 4096 rows or more and w4 r2 v4 below; w2 r4 v4 and w2 r2 v4 from 5 columns. v4: a whole block a thread, v2: half of one; "pair": two blocks a thread (v8), with 2 warps so
// that one trip covers a 4096-wide row as 4 warps of v4 do. "u16" reads stock's halves in an aligned variant's
// structure, to part the load's effect from the structure's.
#define V(C, W, R, D, L, NAME) {NAME, C, R, launch<C, W, R, D, L>}
static const Variant VARIANTS[] = {
    V(1, 4, 1, 2, LOAD_STOCK, "stock w4 r1 v2 u16"),
    V(1, 4, 1, 4, LOAD_ALIGNED, "0019  w4 r1 v4 aligned"),
    V(1, 4, 1, 4, LOAD_U16, "      w4 r1 v4 u16"),
    V(1, 4, 2, 4, LOAD_ALIGNED, "      w4 r2 v4 aligned"),
    V(1, 4, 1, 2, LOAD_ALIGNED, "      w4 r1 v2 aligned"),
    V(1, 8, 1, 2, LOAD_ALIGNED, "      w8 r1 v2 aligned"),
    V(1, 2, 2, 4, LOAD_ALIGNED, "      w2 r2 v4 aligned"),
    V(1, 2, 1, 8, LOAD_PAIR, "      w2 r1 v8 pair"),
    V(1, 2, 2, 8, LOAD_PAIR, "      w2 r2 v8 pair"),
    V(2, 4, 2, 2, LOAD_STOCK, "stock w4 r2 v2 u16"),
    V(2, 4, 2, 4, LOAD_ALIGNED, "      w4 r2 v4 aligned"),
    V(2, 4, 4, 4, LOAD_ALIGNED, "0019  w4 r4 v4 aligned"),
    V(2, 4, 4, 4, LOAD_U16, "      w4 r4 v4 u16"),
    V(2, 4, 4, 2, LOAD_ALIGNED, "      w4 r4 v2 aligned"),
    V(2, 2, 4, 4, LOAD_ALIGNED, "      w2 r4 v4 aligned"),
    V(2, 1, 4, 4, LOAD_ALIGNED, "      w1 r4 v4 aligned"),
    V(2, 4, 8, 4, LOAD_ALIGNED, "      w4 r8 v4 aligned"),
    V(2, 2, 2, 8, LOAD_PAIR, "      w2 r2 v8 pair"),
    V(2, 2, 4, 8, LOAD_PAIR, "      w2 r4 v8 pair"),
    V(3, 4, 2, 2, LOAD_STOCK, "stock w4 r2 v2 u16"),
    V(3, 4, 2, 4, LOAD_ALIGNED, "      w4 r2 v4 aligned"),
    V(3, 4, 4, 4, LOAD_ALIGNED, "0019  w4 r4 v4 aligned"),
    V(3, 4, 4, 4, LOAD_U16, "      w4 r4 v4 u16"),
    V(3, 4, 4, 2, LOAD_ALIGNED, "      w4 r4 v2 aligned"),
    V(3, 2, 4, 4, LOAD_ALIGNED, "      w2 r4 v4 aligned"),
    V(3, 1, 4, 4, LOAD_ALIGNED, "      w1 r4 v4 aligned"),
    V(3, 2, 8, 4, LOAD_ALIGNED, "      w2 r8 v4 aligned"),
    V(3, 2, 4, 8, LOAD_PAIR, "      w2 r4 v8 pair"),
    V(4, 4, 2, 2, LOAD_STOCK, "stock w4 r2 v2 u16"),
    V(4, 4, 2, 4, LOAD_ALIGNED, "      w4 r2 v4 aligned"),
    V(4, 4, 4, 4, LOAD_ALIGNED, "0019  w4 r4 v4 aligned"),
    V(4, 4, 4, 4, LOAD_U16, "      w4 r4 v4 u16"),
    V(4, 4, 4, 2, LOAD_ALIGNED, "      w4 r4 v2 aligned"),
    V(4, 2, 4, 4, LOAD_ALIGNED, "      w2 r4 v4 aligned"),
    V(4, 1, 4, 4, LOAD_ALIGNED, "      w1 r4 v4 aligned"),
    V(4, 2, 8, 4, LOAD_ALIGNED, "      w2 r8 v4 aligned"),
    V(4, 2, 4, 8, LOAD_PAIR, "      w2 r4 v8 pair"),
    V(6, 2, 2, 2, LOAD_STOCK, "stock w2 r2 v2 u16"),
    V(6, 2, 2, 4, LOAD_ALIGNED, "      w2 r2 v4 aligned"),
    V(6, 2, 4, 4, LOAD_ALIGNED, "      w2 r4 v4 aligned"),
    V(6, 2, 4, 4, LOAD_U16, "      w2 r4 v4 u16"),
    V(6, 2, 4, 2, LOAD_ALIGNED, "      w2 r4 v2 aligned"),
    V(6, 4, 4, 4, LOAD_ALIGNED, "      w4 r4 v4 aligned"),
    V(6, 2, 8, 4, LOAD_ALIGNED, "      w2 r8 v4 aligned"),
    V(6, 2, 4, 8, LOAD_PAIR, "      w2 r4 v8 pair"),
    V(8, 2, 2, 2, LOAD_STOCK, "stock w2 r2 v2 u16"),
    V(8, 2, 2, 4, LOAD_ALIGNED, "      w2 r2 v4 aligned"),
    V(8, 2, 4, 4, LOAD_ALIGNED, "      w2 r4 v4 aligned"),
    V(8, 2, 4, 4, LOAD_U16, "      w2 r4 v4 u16"),
    V(8, 2, 4, 2, LOAD_ALIGNED, "      w2 r4 v2 aligned"),
    V(8, 4, 4, 4, LOAD_ALIGNED, "      w4 r4 v4 aligned"),
    V(8, 2, 8, 4, LOAD_ALIGNED, "      w2 r8 v4 aligned"),
    V(8, 2, 4, 8, LOAD_PAIR, "      w2 r4 v8 pair"),
};
#undef V

// weight i (0..31) of a Q4_0 block as stored (0..15; its value is that minus 8)
static int nibble(const BlockQ4_0 & b, int i) {
    return i < 16 ? b.qs[i] & 0xF : b.qs[i - 16] >> 4;
}

// what matvec_harness.cuh's run_matvec_bench needs of Q4_0
struct Q4_0 {
    typedef BlockQ4_0 Block;
    static void fill_weights(BlockQ4_0 & b) {
        b.d = __float2half(0.001f + (rnd() % 1000) * 1e-5f);
        for (uint8_t & q : b.qs) q = (uint8_t) (rnd() & 0xFF);
    }
    // a Q8_1 block's sum is d8 * the sum of its quants, rounded to half as ggml stores it
    static void fill_activations(BlockQ8_1 & b) {
        const float d = 0.01f + (rnd() % 1000) * 1e-5f;
        int sum = 0;
        for (int8_t & q : b.qs) {
            q = (int8_t) (rnd() % 255 - 127);
            sum += q;
        }
        b.ds = __floats2half2_rn(d, d * (float) sum);
    }
    // a block's term is d4 * (d8 * sum(nibble * q8) - 8 * s8) with the stored half values, as the kernels compute
    // it, added to s. The tolerance scales with the sum over blocks of d4 * (d8 * sum|nibble * q8| + 8 |s8|), added
    // to m: a bound on every partial sum the kernels round
    static void add_term(const BlockQ4_0 & bx, const BlockQ8_1 & by, double & s, double & m) {
        long dot = 0, adot = 0;
        for (int i = 0; i < 32; ++i) {
            dot += (long) nibble(bx, i) * by.qs[i];
            adot += (long) nibble(bx, i) * std::abs((int) by.qs[i]);
        }
        const double d4 = __half2float(bx.d), d8 = __low2float(by.ds), s8 = __high2float(by.ds);
        s += d4 * (d8 * (double) dot - 8.0 * s8);
        m += std::fabs(d4) * (std::fabs(d8) * (double) adot + 8.0 * std::fabs(s8));
    }
    // the pair variants take blocks two at a time from an even index, and their aligned words need every row
    // (so every copy) to start 4-byte aligned: an even number of 18-byte blocks a row gives both
    static bool check_shape(const Shape & sh, int nb) {
        if (nb % 2 != 0) {
            fprintf(stderr, "error: %s: odd blocks a row\n", sh.name);
            return false;
        }
        return true;
    }
    static bool check_variant(const Shape & sh, const Variant & var) {
        if (sh.rows % var.rows != 0) {  // the kernels read all of a CUDA block's rows
            fprintf(stderr, "error: %s: %d rows, not a multiple of %d\n", sh.name, sh.rows, var.rows);
            return false;
        }
        return true;
    }
};

int main(int argc, char ** argv) {
    return run_matvec_bench<Q4_0>(argc, argv, VARIANTS);
}
