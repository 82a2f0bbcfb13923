// The arithmetic units' own peak: independent multiply-adds in registers, nothing read
// from memory, on `threads` threads for about `seconds` each. Prints one JSON line,
// GFLOP/s of each unit this CPU has (float32 FMA on 16 lanes, 8 without AVX-512;
// bfloat16 pair dot products with AVX512_BF16, 32 multiply-adds an instruction).
// bench/bench_unit_peaks.py builds and runs it; it is the ceiling against which a matrix
// product's rate is read.
#include <immintrin.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <vector>

namespace {

// More independent accumulators than latency x throughput, and fewer than the registers:
// AVX2 has 16, and 16 chains beside x spilled two of them to the stack (half the rate).
#ifdef __AVX512F__
constexpr int kChains = 16;
#else
constexpr int kChains = 12;
#endif
constexpr long kBatch = 1 << 16;

template <typename Step>
double per_second(double seconds, Step step) {
  long steps = 0;
  const auto start = std::chrono::steady_clock::now();
  double elapsed = 0;
  while (elapsed < seconds) {
    step(kBatch);
    steps += kBatch;
    elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  }
  return steps / elapsed;
}

// float32 FMAs on the widest vectors: 16 lanes with AVX-512, else 8 (AVX2 and FMA).
#ifdef __AVX512F__
using Floats = __m512;
constexpr double kFmaFlops = 32;
inline Floats fma(Floats a, Floats b, Floats c) { return _mm512_fmadd_ps(a, b, c); }
inline Floats floats(float v) { return _mm512_set1_ps(v); }
inline float total(Floats v) { return _mm512_reduce_add_ps(v); }
#else
using Floats = __m256;
constexpr double kFmaFlops = 16;
inline Floats fma(Floats a, Floats b, Floats c) { return _mm256_fmadd_ps(a, b, c); }
inline Floats floats(float v) { return _mm256_set1_ps(v); }
inline float total(Floats v) {
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, v);
  float sum = 0;
  for (float lane : lanes) sum += lane;
  return sum;
}
#endif

// Steps of kChains float32 FMA instructions (kFmaFlops each) per second.
double fma_rate(double seconds) {
  Floats acc[kChains];
  for (auto& a : acc) a = floats(0.0f);
  Floats x = floats(1e-9f);
  const double rate = per_second(seconds, [&](long n) {
    for (long i = 0; i < n; ++i) {
#pragma GCC unroll 16
      for (int c = 0; c < kChains; ++c) acc[c] = fma(x, x, acc[c]);
      __asm__ volatile("" : "+x"(x));  // keeps the loop from being folded
    }
  });
  float sink = 0;
  for (auto& a : acc) sink += total(a);
  return sink == 12345.0f ? 0 : rate;
}

#ifdef __AVX512BF16__
// Steps of kChains bfloat16 pair dot products (64 FLOPs each) per second.
double dot_rate(double seconds) {
  __m512 acc[kChains];
  for (auto& a : acc) a = _mm512_setzero_ps();
  __m512bh x = (__m512bh)_mm512_set1_epi32(0x30803080);
  const double rate = per_second(seconds, [&](long n) {
    for (long i = 0; i < n; ++i) {
#pragma GCC unroll 16
      for (int c = 0; c < kChains; ++c) acc[c] = _mm512_dpbf16_ps(acc[c], x, x);
      __asm__ volatile("" : "+x"(x));
    }
  });
  float sink = 0;
  for (auto& a : acc) sink += _mm512_reduce_add_ps(a);
  return sink == 12345.0f ? 0 : rate;
}
#endif

// GFLOP/s of `rate(seconds)` steps of `flops` each, summed over `threads` threads.
template <typename Rate>
double gflops(Rate rate, double flops, int threads, double seconds) {
  std::vector<double> rates(threads);
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) pool.emplace_back([&, t] { rates[t] = rate(seconds); });
  for (auto& t : pool) t.join();
  double total = 0;
  for (double r : rates) total += r;
  return total * kChains * flops / 1e9;
}

}  // namespace

int main(int argc, char** argv) {
  const int threads = argc > 1 ? std::atoi(argv[1]) : 1;
  const double seconds = argc > 2 ? std::atof(argv[2]) : 1.0;
  std::printf("{\"float32_fma\": %.1f", gflops(fma_rate, kFmaFlops, threads, seconds));
#ifdef __AVX512BF16__
  std::printf(", \"bfloat16_dot\": %.1f", gflops(dot_rate, 64, threads, seconds));
#endif
  std::printf("}\n");
  return 0;
}
