// The loops of albert_tf's bfloat16 CPU kernels, free of TensorFlow headers so that
// this file alone is compiled for the build machine's vector units (-march=native):
// TensorFlow's Eigen headers do not compile with every -march (AVX512-FP16 on GCC 12).
// Each function handles a block of rows; ops.cc splits the rows over TensorFlow's threads.
//
// bfloat16 values are the upper 16 bits of a float32; rounding to bfloat16 is to
// nearest, ties to even, NaN kept NaN: what tf.cast does.

#include <cmath>
#include <cstdint>
#include <algorithm>
#include <cstring>
#include <type_traits>
#include <vector>

// With AVX-512 (F, BW, VL, DQ) the GELU loops, the softmax gradient and the sums of terms
// run on 16 floats at a time through the helpers below, the last columns of a row under a
// mask; otherwise (or compiled with -DALBERT_PLAIN_LOOPS, as a test does to compare the
// two) as plain loops the compiler vectorises as it can: the same formulas, results within
// float32 rounding. The layer norms and the heads are plain loops everywhere: they run at
// memory speed as the compiler vectorises them (written with the helpers they were no
// faster; bench/bench_loops.py times both builds against a copy of the same bytes).
#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__) && \
    defined(__AVX512DQ__) && !defined(ALBERT_PLAIN_LOOPS)
#define ALBERT_VECTOR_LOOPS 1
#include <immintrin.h>
#endif

// With AVX512_BF16 as well (Intel Cooper Lake and later, AMD Zen 4 and later), the dense
// products of albert_dense_* are ours: on AMX tiles where the CPU has them and Linux lets
// this process use them (Intel Sapphire Rapids and later), else on the vector units' bfloat16
// dot products. Without AVX512_BF16 those functions are there but never called
// (albert_products_ready says 0).
// The float32 products (albert_dense_*_float_rows, albert_attention_float_rows) need
// AVX-512, or AVX2 with FMA: their blocks and finishing code come in both widths below.
#if defined(ALBERT_VECTOR_LOOPS) || (defined(__AVX2__) && defined(__FMA__))
#define ALBERT_FLOAT_PRODUCTS 1
#include <immintrin.h>
#endif

#if defined(ALBERT_VECTOR_LOOPS) && defined(__AVX512BF16__)
#define ALBERT_PRODUCTS 1
#if defined(__AMX_TILE__) && defined(__AMX_BF16__)
#define ALBERT_AMX 1
#include <sys/syscall.h>
#include <unistd.h>
#endif
#endif

namespace {

inline float from_bfloat16(uint16_t v) {
  const uint32_t bits = uint32_t(v) << 16;
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

inline uint16_t to_bfloat16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, sizeof bits);
  const uint32_t rounded = (bits + 0x7FFFu + ((bits >> 16) & 1u)) >> 16;
  const bool nan = (bits & 0x7FFFFFFFu) > 0x7F800000u;
  return nan ? uint16_t((bits >> 16) | 0x40u) : uint16_t(rounded);
}

// A value of either element type (bfloat16 as uint16_t, or float) as float32.
inline float widen(uint16_t v) { return from_bfloat16(v); }
inline float widen(float v) { return v; }

// Stores a float32 result as the element type (bfloat16 rounded as to_bfloat16) and returns
// the value stored, as float32.
inline float store_value(uint16_t* p, float v) {
  *p = to_bfloat16(v);
  return from_bfloat16(*p);
}
inline float store_value(float* p, float v) {
  *p = v;
  return v;
}

// exp(x) to about 1e-8 relative, +inf above 88.7 (beyond float32) and exp(-87) below
// -87: x = k ln2 + r with |r| <= ln2 / 2 (ln2 in two parts so that k ln2 is exact),
// exp(r) by its Taylor polynomial to r^7 (remainder below 6e-9), and 2^k built in the
// exponent bits. A loop the compiler vectorises, unlike a call to expf.
inline float exp_approx(float input) {
  const float x = input < -87.0f ? -87.0f : (input > 88.0f ? 88.0f : input);
  const float k = std::nearbyint(x * 1.44269504088896341f);
  const float r = (x - k * 0.693145751953125f) - k * 1.42860682028622680e-6f;
  const float p =
      1.0f +
      r * (1.0f +
           r * (1.0f / 2 +
                r * (1.0f / 6 +
                     r * (1.0f / 24 + r * (1.0f / 120 + r * (1.0f / 720 + r * (1.0f / 5040)))))));
  const int32_t exponent_bits = (int32_t(k) + 127) << 23;
  float two_to_k;
  std::memcpy(&two_to_k, &exponent_bits, sizeof two_to_k);
  return input > 88.7f ? HUGE_VALF : p * two_to_k;
}

#ifdef ALBERT_VECTOR_LOOPS
constexpr __mmask16 kAllLanes = 0xFFFF;

// The lanes of the columns [j, cols) among the next 16. Loads and stores of all 16 take
// the unmasked instructions: masked stores of full vectors ran the float32 loops at 0.6x
// the speed on the Zen 5 (docs/benchmarks.md).
inline __mmask16 lanes(int64_t j, int64_t cols) {
  const int64_t left = cols - j;
  return left >= 16 ? kAllLanes : __mmask16((1u << left) - 1u);
}

inline __m512 widen_bfloat16(__m256i packed) {
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(packed), 16));
}

// to_bfloat16 on 16 lanes. vcvtneps2bf16 (AVX512_BF16) rounds the same way, but flushes
// float32 subnormals to zero: as TensorFlow's kernels do (its threads run with
// flush-to-zero and denormals-are-zero, so tf.cast flushes them too).
inline __m256i pack_bfloat16(__m512 v) {
#ifdef __AVX512BF16__
  return (__m256i)_mm512_cvtneps_pbh(v);
#else
  const __m512i bits = _mm512_castps_si512(v);
  const __m512i high = _mm512_srli_epi32(bits, 16);
  const __m512i odd = _mm512_and_si512(high, _mm512_set1_epi32(1));
  const __m512i rounded = _mm512_srli_epi32(
      _mm512_add_epi32(bits, _mm512_add_epi32(odd, _mm512_set1_epi32(0x7FFF))), 16);
  const __m512i quiet = _mm512_or_si512(high, _mm512_set1_epi32(0x40));
  const __mmask16 nan = _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
  return _mm512_cvtepi32_epi16(_mm512_mask_blend_epi32(nan, rounded, quiet));
#endif
}

// 16 bfloat16 values to p, the lanes m of them.
inline void store_packed(uint16_t* p, __m256i packed, __mmask16 m) {
  if (m == kAllLanes) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), packed);
  } else {
    _mm256_mask_storeu_epi16(p, m, packed);
  }
}

// The lanes m of 16 values of either element type as float32, and back: store_lanes
// returns the values stored (bfloat16: rounded), as float32.
inline __m512 load_lanes(const uint16_t* p, __mmask16 m) {
  return widen_bfloat16(m == kAllLanes
                            ? _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))
                            : _mm256_maskz_loadu_epi16(m, p));
}
inline __m512 load_lanes(const float* p, __mmask16 m) {
  return m == kAllLanes ? _mm512_loadu_ps(p) : _mm512_maskz_loadu_ps(m, p);
}
inline __m512 store_lanes(uint16_t* p, __m512 v, __mmask16 m) {
  const __m256i packed = pack_bfloat16(v);
  store_packed(p, packed, m);
  return widen_bfloat16(packed);
}
inline __m512 store_lanes(float* p, __m512 v, __mmask16 m) {
  if (m == kAllLanes) {
    _mm512_storeu_ps(p, v);
  } else {
    _mm512_mask_storeu_ps(p, m, v);
  }
  return v;
}

// exp_approx on 16 lanes: the same reduction and polynomial, with 2^k applied by vscalefps,
// which overflows to +inf (and underflows) as exp does; inputs below -87 give exp(-87).
inline __m512 exp_vector(__m512 input) {
  const __m512 x =
      _mm512_min_ps(_mm512_set1_ps(100.0f), _mm512_max_ps(_mm512_set1_ps(-87.0f), input));
  const __m512 k = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(k, _mm512_set1_ps(0.693145751953125f), x);
  r = _mm512_fnmadd_ps(k, _mm512_set1_ps(1.42860682028622680e-6f), r);
  __m512 p = _mm512_set1_ps(1.0f / 5040);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 720));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 120));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 24));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 6));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 2));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  return _mm512_scalef_ps(p, k);
}

// GELU in its tanh form on 16 lanes: x / (1 + exp(-2u)), u = sqrt(2/pi) (x + 0.044715 x^3).
inline __m512 gelu_vector(__m512 x) {
  const __m512 inner =
      _mm512_fmadd_ps(_mm512_mul_ps(_mm512_set1_ps(0.044715f), x), x, _mm512_set1_ps(1.0f));
  const __m512 minus_two_c = _mm512_set1_ps(-2.0f * 0.797884560802865355f);
  const __m512 e = exp_vector(_mm512_mul_ps(_mm512_mul_ps(minus_two_c, x), inner));
  return _mm512_div_ps(x, _mm512_add_ps(_mm512_set1_ps(1.0f), e));
}
#endif

}  // namespace

// out[i] = values[i] rounded to bfloat16, i < count (the ops' float32 column sums).
extern "C" void albert_round_to_bfloat16(const float* values, uint16_t* out, int64_t count) {
  for (int64_t i = 0; i < count; ++i) out[i] = to_bfloat16(values[i]);
}

namespace {

// z = gelu(y + bias) row by row, y and z [rows, cols] and bias [cols] of one element type
// (bfloat16 or float32); computed in float32 and, for bfloat16, rounded once. GELU in
// ALBERT's tanh form, 0.5 x (1 + tanh(u)) with u = sqrt(2/pi) (x + 0.044715 x^3), evaluated
// as the equal x / (1 + exp(-2u)), which avoids the cancellation of 1 + tanh(u) for
// negative x.
template <typename E>
void bias_gelu_rows(const E* y, const E* bias, E* z, int64_t rows, int64_t cols) {
  const float minus_two_c = -2.0f * 0.797884560802865355f;  // -2 sqrt(2/pi)
  const float a = 0.044715f;
  for (int64_t row = 0; row < rows; ++row) {
    const E* in = y + row * cols;
    E* out = z + row * cols;
#ifdef ALBERT_VECTOR_LOOPS
    for (int64_t j = 0; j < cols; j += 16) {
      const __mmask16 m = lanes(j, cols);
      const __m512 x = _mm512_add_ps(load_lanes(in + j, m), load_lanes(bias + j, m));
      store_lanes(out + j, gelu_vector(x), m);
    }
    continue;
#endif
    for (int64_t j = 0; j < cols; ++j) {
      const float x = widen(in[j]) + widen(bias[j]);
      store_value(out + j, x / (1.0f + exp_approx(minus_two_c * x * (1.0f + a * x * x))));
    }
  }
}

// dy = dz * gelu'(y + bias), the gradient of bias_gelu_rows w.r.t. y: dz, y, dy [rows,
// cols] and bias [cols] of one element type. With s = sigmoid(2u) = (1 + tanh(u)) / 2,
// gelu' = s + x s (1 - s) 2 sqrt(2/pi) (1 + 3 * 0.044715 x^2), the tanh form's derivative.
// dbias [cols] (overwritten): these rows' column sums of dy (the values stored), float32.
template <typename E>
void bias_gelu_backward_rows(const E* dz, const E* y, const E* bias, E* dy, float* dbias,
                             int64_t rows, int64_t cols) {
  const float two_c = 2.0f * 0.797884560802865355f;
  const float a = 0.044715f;
  for (int64_t j = 0; j < cols; ++j) dbias[j] = 0.0f;
  for (int64_t row = 0; row < rows; ++row) {
    const E* dz_row = dz + row * cols;
    const E* y_row = y + row * cols;
    E* dy_row = dy + row * cols;
#ifdef ALBERT_VECTOR_LOOPS
    for (int64_t j = 0; j < cols; j += 16) {
      const __mmask16 m = lanes(j, cols);
      const __m512 x = _mm512_add_ps(load_lanes(y_row + j, m), load_lanes(bias + j, m));
      const __m512 x2 = _mm512_mul_ps(x, x);
      const __m512 inner = _mm512_fmadd_ps(_mm512_set1_ps(a), x2, _mm512_set1_ps(1.0f));
      const __m512 e = exp_vector(_mm512_mul_ps(_mm512_mul_ps(_mm512_set1_ps(-two_c), x), inner));
      const __m512 s = _mm512_div_ps(_mm512_set1_ps(1.0f), _mm512_add_ps(_mm512_set1_ps(1.0f), e));
      // s + x s (1 - s) 2c (1 + 3a x^2)
      const __m512 tail = _mm512_mul_ps(
          _mm512_mul_ps(_mm512_mul_ps(x, s), _mm512_sub_ps(_mm512_set1_ps(1.0f), s)),
          _mm512_mul_ps(_mm512_set1_ps(two_c), _mm512_fmadd_ps(_mm512_set1_ps(3.0f * a), x2,
                                                                _mm512_set1_ps(1.0f))));
      const __m512 slope = _mm512_add_ps(s, tail);
      const __m512 product = _mm512_mul_ps(load_lanes(dz_row + j, m), slope);
      const __m512 stored = store_lanes(dy_row + j, product, m);
      store_lanes(dbias + j, _mm512_add_ps(load_lanes(dbias + j, m), stored), m);
    }
    continue;
#endif
    for (int64_t j = 0; j < cols; ++j) {
      const float x = widen(y_row[j]) + widen(bias[j]);
      const float x2 = x * x;
      const float s = 1.0f / (1.0f + exp_approx(-two_c * x * (1.0f + a * x2)));
      const float slope = s + x * s * (1.0f - s) * two_c * (1.0f + 3.0f * a * x2);
      dbias[j] += store_value(dy_row + j, widen(dz_row[j]) * slope);
    }
  }
}

}  // namespace

// bias_gelu_rows and bias_gelu_backward_rows for bfloat16 and for float32.
extern "C" void albert_bias_gelu_rows(const uint16_t* y, const uint16_t* bias, uint16_t* z,
                                      int64_t rows, int64_t cols) {
  bias_gelu_rows(y, bias, z, rows, cols);
}
extern "C" void albert_bias_gelu_float_rows(const float* y, const float* bias, float* z,
                                            int64_t rows, int64_t cols) {
  bias_gelu_rows(y, bias, z, rows, cols);
}
extern "C" void albert_bias_gelu_backward_rows(const uint16_t* dz, const uint16_t* y,
                                               const uint16_t* bias, uint16_t* dy, float* dbias,
                                               int64_t rows, int64_t cols) {
  bias_gelu_backward_rows(dz, y, bias, dy, dbias, rows, cols);
}
extern "C" void albert_bias_gelu_backward_float_rows(const float* dz, const float* y,
                                                     const float* bias, float* dy,
                                                     float* dbias, int64_t rows, int64_t cols) {
  bias_gelu_backward_rows(dz, y, bias, dy, dbias, rows, cols);
}

// The mean and reciprocal standard deviation of one row of sums (cols values, `total`
// their sum), the variance taken over the centred values (as oneDNN's and TensorFlow's
// layer norms do).
static inline void row_moments(const float* sums, float total, float epsilon, int64_t cols,
                               float* mean, float* rstd) {
  *mean = total / float(cols);
  float squares = 0.0f;
  for (int64_t j = 0; j < cols; ++j) {
    const float d = sums[j] - *mean;
    squares += d * d;
  }
  *rstd = 1.0f / std::sqrt(squares / float(cols) + epsilon);
}

// Writes s = x + bias + residual of one row (cols values; x and bias bfloat16 or float32)
// to `sums` and returns its moments (row_moments): two passes.
template <typename T>
inline void row_sum_and_moments(const T* x_row, const T* bias, const float* residual_row,
                                float epsilon, int64_t cols, float* sums, float* mean,
                                float* rstd) {
  float sum = 0.0f;
  for (int64_t j = 0; j < cols; ++j) {
    const float s = widen(x_row[j]) + widen(bias[j]) + residual_row[j];
    sums[j] = s;
    sum += s;
  }
  row_moments(sums, sum, epsilon, cols, mean, rstd);
}

// One row of a layer norm from its sums s (cols values) and moments: out = (s - mean) rstd
// gamma + beta, where out16 is not null out16 = out rounded to bfloat16, and where xhat is
// not null, xhat = (s - mean) rstd. s may be out or xhat itself (each value is read before
// it is written).
static inline void normalise_row(const float* sums, float mean, float rstd, const float* gamma,
                                 const float* beta, float* out, uint16_t* out16, float* xhat,
                                 int64_t cols) {
  for (int64_t j = 0; j < cols; ++j) {
    const float normalised = (sums[j] - mean) * rstd;
    const float v = normalised * gamma[j] + beta[j];
    if (xhat != nullptr) xhat[j] = normalised;
    out[j] = v;
    if (out16 != nullptr) out16[j] = to_bfloat16(v);
  }
}

// out = LN(x + bias + residual) over each row, in float32, and where out16 is not null
// out16 = out rounded to bfloat16: x [rows, cols] and bias [cols] of T (bfloat16 or
// float32), residual, out [rows, cols] float32, gamma and beta [cols] float32.
template <typename T>
void residual_layer_norm_rows(const T* x, const T* bias, const float* residual,
                              const float* gamma, const float* beta, float epsilon, float* out,
                              uint16_t* out16, int64_t rows, int64_t cols) {
  for (int64_t row = 0; row < rows; ++row) {
    float* out_row = out + row * cols;
    uint16_t* out16_row = out16 == nullptr ? nullptr : out16 + row * cols;
    float mean, rstd;
    row_sum_and_moments(x + row * cols, bias, residual + row * cols, epsilon, cols, out_row,
                        &mean, &rstd);
    normalise_row(out_row, mean, rstd, gamma, beta, out_row, out16_row, nullptr, cols);
  }
}

// The training form of residual_layer_norm_rows: out and out16 as there, and what the
// gradient needs, xhat = (s - mean) * rstd [rows, cols] and rstd [rows].
template <typename T>
void residual_layer_norm_moments_rows(const T* x, const T* bias, const float* residual,
                                      const float* gamma, const float* beta, float epsilon,
                                      float* out, uint16_t* out16, float* xhat, float* rstd,
                                      int64_t rows, int64_t cols) {
  for (int64_t row = 0; row < rows; ++row) {
    float* out_row = out + row * cols;
    uint16_t* out16_row = out16 == nullptr ? nullptr : out16 + row * cols;
    float* xhat_row = xhat + row * cols;
    float mean;
    row_sum_and_moments(x + row * cols, bias, residual + row * cols, epsilon, cols, xhat_row,
                        &mean, rstd + row);
    normalise_row(xhat_row, mean, rstd[row], gamma, beta, out_row, out16_row, xhat_row, cols);
  }
}

// residual_layer_norm_rows for bfloat16 x and bias (out16 written), and for float32 ones
// (no copy).
extern "C" void albert_residual_layer_norm_rows(const uint16_t* x, const uint16_t* bias,
                                                const float* residual, const float* gamma,
                                                const float* beta, float epsilon, float* out,
                                                uint16_t* out16, int64_t rows, int64_t cols) {
  residual_layer_norm_rows(x, bias, residual, gamma, beta, epsilon, out, out16, rows, cols);
}
extern "C" void albert_residual_layer_norm_float_rows(const float* x, const float* bias,
                                                      const float* residual,
                                                      const float* gamma, const float* beta,
                                                      float epsilon, float* out, int64_t rows,
                                                      int64_t cols) {
  residual_layer_norm_rows(x, bias, residual, gamma, beta, epsilon, out, nullptr, rows, cols);
}

// residual_layer_norm_moments_rows for bfloat16 x and bias, and for float32 ones.
extern "C" void albert_residual_layer_norm_moments_rows(
    const uint16_t* x, const uint16_t* bias, const float* residual, const float* gamma,
    const float* beta, float epsilon, float* out, uint16_t* out16, float* xhat, float* rstd,
    int64_t rows, int64_t cols) {
  residual_layer_norm_moments_rows(x, bias, residual, gamma, beta, epsilon, out, out16, xhat,
                                   rstd, rows, cols);
}
extern "C" void albert_residual_layer_norm_moments_float_rows(
    const float* x, const float* bias, const float* residual, const float* gamma,
    const float* beta, float epsilon, float* out, float* xhat, float* rstd, int64_t rows,
    int64_t cols) {
  residual_layer_norm_moments_rows(x, bias, residual, gamma, beta, epsilon, out, nullptr,
                                   xhat, rstd, rows, cols);
}

// The layer norm's gradient for a block of rows: dy, xhat [rows, cols] float32, rstd
// [rows], gamma [cols] -> dx = rstd (g - mean(g) - xhat mean(g xhat)) with g = dy gamma,
// in float32 and, where dx16 is not null, rounded to bfloat16 (dx16), and this block's
// column sums of dy xhat (dgamma), dy (dbeta) and dx (dx_sum, the gradient of a bias
// added to the input), [cols] each, overwritten. dy16[0..copies) (bfloat16 [rows, cols]
// each, the gradients of the output's bfloat16 copies): dy stands for dy plus all of them,
// added in float32.
extern "C" void albert_layer_norm_backward_rows(const float* dy, const uint16_t* const* dy16,
                                                int64_t copies, const float* xhat,
                                                const float* rstd, const float* gamma,
                                                float* dx, uint16_t* dx16, float* dgamma,
                                                float* dbeta, float* dx_sum, int64_t rows,
                                                int64_t cols) {
  for (int64_t j = 0; j < cols; ++j) dgamma[j] = dbeta[j] = dx_sum[j] = 0.0f;
  for (int64_t row = 0; row < rows; ++row) {
    const float* dy_row = dy + row * cols;
    const float* xhat_row = xhat + row * cols;
    float* dx_row = dx + row * cols;
#ifdef ALBERT_VECTOR_LOOPS
    // Two passes over the row on 16 lanes: dy (with its copies' gradients) kept in dx_row,
    // its sums, then dx over it (and dx's bfloat16 copy) with the column sums.
    __m512 sums_g = _mm512_setzero_ps(), sums_gx = _mm512_setzero_ps();
    for (int64_t j = 0; j < cols; j += 16) {
      const __mmask16 m = lanes(j, cols);
      __m512 d = load_lanes(dy_row + j, m);
      for (int64_t c = 0; c < copies; ++c) {
        d = _mm512_add_ps(d, load_lanes(dy16[c] + row * cols + j, m));
      }
      store_lanes(dx_row + j, d, m);
      const __m512 x = load_lanes(xhat_row + j, m);
      const __m512 g = _mm512_mul_ps(d, load_lanes(gamma + j, m));
      sums_g = _mm512_add_ps(sums_g, g);
      sums_gx = _mm512_fmadd_ps(g, x, sums_gx);
      store_lanes(dgamma + j, _mm512_fmadd_ps(d, x, load_lanes(dgamma + j, m)), m);
      store_lanes(dbeta + j, _mm512_add_ps(load_lanes(dbeta + j, m), d), m);
    }
    {
      const __m512 mean_g = _mm512_set1_ps(_mm512_reduce_add_ps(sums_g) / float(cols));
      const __m512 mean_gx = _mm512_set1_ps(_mm512_reduce_add_ps(sums_gx) / float(cols));
      const __m512 r = _mm512_set1_ps(rstd[row]);
      uint16_t* dx16_row = dx16 == nullptr ? nullptr : dx16 + row * cols;
      for (int64_t j = 0; j < cols; j += 16) {
        const __mmask16 m = lanes(j, cols);
        const __m512 centred = _mm512_sub_ps(
            _mm512_mul_ps(load_lanes(dx_row + j, m), load_lanes(gamma + j, m)), mean_g);
        const __m512 v = _mm512_mul_ps(
            r, _mm512_sub_ps(centred, _mm512_mul_ps(load_lanes(xhat_row + j, m), mean_gx)));
        store_lanes(dx_row + j, v, m);
        store_lanes(dx_sum + j, _mm512_add_ps(load_lanes(dx_sum + j, m), v), m);
        if (dx16_row != nullptr) store_lanes(dx16_row + j, v, m);
      }
    }
    continue;
#endif
    // The row's whole dy, kept in dx_row until dx overwrites it.
    for (int64_t j = 0; j < cols; ++j) dx_row[j] = dy_row[j];
    for (int64_t c = 0; c < copies; ++c) {
      const uint16_t* copy_row = dy16[c] + row * cols;
      for (int64_t j = 0; j < cols; ++j) dx_row[j] += from_bfloat16(copy_row[j]);
    }
    float sum_g = 0.0f, sum_gx = 0.0f;
    for (int64_t j = 0; j < cols; ++j) {
      const float d = dx_row[j];
      const float g = d * gamma[j];
      sum_g += g;
      sum_gx += g * xhat_row[j];
      dgamma[j] += d * xhat_row[j];
      dbeta[j] += d;
    }
    const float mean_g = sum_g / float(cols), mean_gx = sum_gx / float(cols);
    const float r = rstd[row];
    for (int64_t j = 0; j < cols; ++j) {
      const float v = r * (dx_row[j] * gamma[j] - mean_g - xhat_row[j] * mean_gx);
      dx_row[j] = v;
      dx_sum[j] += v;
    }
    if (dx16 == nullptr) continue;
    uint16_t* dx16_row = dx16 + row * cols;
    for (int64_t j = 0; j < cols; ++j) dx16_row[j] = to_bfloat16(dx_row[j]);
  }
}

namespace {

// Attention heads from a product: for the rows [first, last) of y [batch * seq, heads *
// head_size] (row r is position r % seq of sequence r / seq), out[b, n, s, d] = y[r, n *
// head_size + d] + bias[n * head_size + d], of one element type (bfloat16: added in float32
// and rounded once); out is [batch, heads, seq, head_size].
template <typename E>
void bias_add_heads_rows(const E* y, const E* bias, E* out, int64_t first, int64_t last,
                         int64_t seq, int64_t heads, int64_t head_size) {
  const int64_t width = heads * head_size;
  for (int64_t r = first; r < last; ++r) {
    const E* in = y + r * width;
    const int64_t b = r / seq, s = r % seq;
    for (int64_t n = 0; n < heads; ++n) {
      E* to = out + ((b * heads + n) * seq + s) * head_size;
      const E* from = in + n * head_size;
      const E* bias_n = bias + n * head_size;
      for (int64_t d = 0; d < head_size; ++d) {
        store_value(to + d, widen(from[d]) + widen(bias_n[d]));
      }
    }
  }
}

// The gradient of bias_add_heads_rows for the same rows: dy[r, n * head_size + d] =
// dout[b, n, s, d], and this block's column sums of dy in float32 (dbias [heads *
// head_size], overwritten).
template <typename E>
void heads_backward_rows(const E* dout, E* dy, float* dbias, int64_t first, int64_t last,
                         int64_t seq, int64_t heads, int64_t head_size) {
  const int64_t width = heads * head_size;
  for (int64_t j = 0; j < width; ++j) dbias[j] = 0.0f;
  for (int64_t r = first; r < last; ++r) {
    E* to = dy + r * width;
    const int64_t b = r / seq, s = r % seq;
    for (int64_t n = 0; n < heads; ++n) {
      const E* from = dout + ((b * heads + n) * seq + s) * head_size;
      float* sums = dbias + n * head_size;
      E* to_n = to + n * head_size;
      for (int64_t d = 0; d < head_size; ++d) {
        to_n[d] = from[d];
        sums[d] += widen(from[d]);
      }
    }
  }
}

// The gradient of a softmax over each row w.r.t. the scores it was given times `scale`:
// dx = scale p (dp - sum(dp p)), dp, p (the softmax's output) and dx [rows, cols] of one
// element type, in float32 (bfloat16: rounded once).
template <typename E>
void softmax_backward_rows(const E* dprobs, const E* probs, float scale, E* dx, int64_t rows,
                           int64_t cols) {
  for (int64_t row = 0; row < rows; ++row) {
    const E* dp = dprobs + row * cols;
    const E* p = probs + row * cols;
    E* out = dx + row * cols;
#ifdef ALBERT_VECTOR_LOOPS
    __m512 sums = _mm512_setzero_ps();
    for (int64_t j = 0; j < cols; j += 16) {
      const __mmask16 m = lanes(j, cols);
      sums = _mm512_fmadd_ps(load_lanes(dp + j, m), load_lanes(p + j, m), sums);
    }
    const __m512 inner = _mm512_set1_ps(_mm512_reduce_add_ps(sums));
    const __m512 scales = _mm512_set1_ps(scale);
    for (int64_t j = 0; j < cols; j += 16) {
      const __mmask16 m = lanes(j, cols);
      const __m512 scaled_p = _mm512_mul_ps(scales, load_lanes(p + j, m));
      const __m512 centred = _mm512_sub_ps(load_lanes(dp + j, m), inner);
      store_lanes(out + j, _mm512_mul_ps(scaled_p, centred), m);
    }
    continue;
#endif
    float dot = 0.0f;
    for (int64_t j = 0; j < cols; ++j) dot += widen(dp[j]) * widen(p[j]);
    for (int64_t j = 0; j < cols; ++j) {
      store_value(out + j, scale * widen(p[j]) * (widen(dp[j]) - dot));
    }
  }
}

// out[i] = the sum of terms[0][i], ..., terms[count - 1][i] for i in [first, last), of
// one element type: added in float32 in the order given (bfloat16: rounded once).
template <typename E>
void sum_terms(const E* const* terms, int64_t count, E* out, int64_t first, int64_t last) {
#ifdef ALBERT_VECTOR_LOOPS
  // Whole vectors with a constant mask (no test per load), then the tail.
  const auto add_terms = [&](int64_t i, __mmask16 m) {
    __m512 sum = load_lanes(terms[0] + i, m);
    for (int64_t t = 1; t < count; ++t) sum = _mm512_add_ps(sum, load_lanes(terms[t] + i, m));
    store_lanes(out + i, sum, m);
  };
  int64_t i = first;
  for (; i + 16 <= last; i += 16) add_terms(i, kAllLanes);
  if (i < last) add_terms(i, lanes(i, last));
  return;
#endif
  // A chunk of the elements at a time, each term added to all of them before the next: the
  // same additions per element, in loops the compiler vectorises (term by term per element,
  // it did not: 4-5x slower).
  constexpr int64_t kChunk = 256;
  float sums[kChunk];
  for (int64_t start = first; start < last; start += kChunk) {
    const int64_t n = std::min(kChunk, last - start);
    for (int64_t j = 0; j < n; ++j) sums[j] = widen(terms[0][start + j]);
    for (int64_t t = 1; t < count; ++t) {
      const E* term = terms[t] + start;
      for (int64_t j = 0; j < n; ++j) sums[j] += widen(term[j]);
    }
    for (int64_t j = 0; j < n; ++j) store_value(out + start + j, sums[j]);
  }
}

}  // namespace

// The loops above for bfloat16 and for float32.
extern "C" void albert_bias_add_heads_rows(const uint16_t* y, const uint16_t* bias,
                                           uint16_t* out, int64_t first, int64_t last,
                                           int64_t seq, int64_t heads, int64_t head_size) {
  bias_add_heads_rows(y, bias, out, first, last, seq, heads, head_size);
}
extern "C" void albert_bias_add_heads_float_rows(const float* y, const float* bias, float* out,
                                                 int64_t first, int64_t last, int64_t seq,
                                                 int64_t heads, int64_t head_size) {
  bias_add_heads_rows(y, bias, out, first, last, seq, heads, head_size);
}
extern "C" void albert_heads_backward_rows(const uint16_t* dout, uint16_t* dy, float* dbias,
                                           int64_t first, int64_t last, int64_t seq,
                                           int64_t heads, int64_t head_size) {
  heads_backward_rows(dout, dy, dbias, first, last, seq, heads, head_size);
}
extern "C" void albert_heads_backward_float_rows(const float* dout, float* dy, float* dbias,
                                                 int64_t first, int64_t last, int64_t seq,
                                                 int64_t heads, int64_t head_size) {
  heads_backward_rows(dout, dy, dbias, first, last, seq, heads, head_size);
}
extern "C" void albert_softmax_backward_rows(const uint16_t* dprobs, const uint16_t* probs,
                                             float scale, uint16_t* dx, int64_t rows,
                                             int64_t cols) {
  softmax_backward_rows(dprobs, probs, scale, dx, rows, cols);
}
extern "C" void albert_softmax_backward_float_rows(const float* dprobs, const float* probs,
                                                   float scale, float* dx, int64_t rows,
                                                   int64_t cols) {
  softmax_backward_rows(dprobs, probs, scale, dx, rows, cols);
}
extern "C" void albert_sum_terms(const uint16_t* const* terms, int64_t count, uint16_t* out,
                                 int64_t first, int64_t last) {
  sum_terms(terms, count, out, first, last);
}
extern "C" void albert_sum_float_terms(const float* const* terms, int64_t count, float* out,
                                       int64_t first, int64_t last) {
  sum_terms(terms, count, out, first, last);
}

// Dense products of our own: a kernel [K, N] is packed once (albert_pack_columns,
// albert_pack_float_columns) into the layout the engines read, 16 columns per 64 bytes:
// bfloat16 as pairs of rows (the AMX tile's rows, the vector units' bfloat16 pairs),
// float32 one row at a time; each 32 x 32 block of the output is accumulated in float32
// over K and finished in float32 (bias, GELU, layer norm) before its one store (rounded to
// bfloat16 where the output is). K and N must be multiples of 32.

// 1 if this build has the bfloat16 products (AVX512_BF16), else 0.
extern "C" int albert_products_ready() {
#ifdef ALBERT_PRODUCTS
  return 1;
#else
  return 0;
#endif
}

// 1 if this build has the float32 products (AVX-512, or AVX2 with FMA), else 0.
extern "C" int albert_float_products_ready() {
#ifdef ALBERT_FLOAT_PRODUCTS
  return 1;
#else
  return 0;
#endif
}

// packed[c, k2, j, t] = kernel[2 k2 + t, 16 c + j] for the column blocks c in [first,
// last) of 16 columns: kernel [K, N] bfloat16, packed [N / 16, K / 2, 16, 2].
extern "C" void albert_pack_columns(const uint16_t* kernel, uint16_t* packed, int64_t k_size,
                                    int64_t n_size, int64_t first, int64_t last) {
  for (int64_t c = first; c < last; ++c) {
    uint16_t* to = packed + c * k_size * 16;
    for (int64_t k2 = 0; k2 < k_size / 2; ++k2) {
      for (int64_t j = 0; j < 16; ++j) {
        to[(k2 * 16 + j) * 2] = kernel[2 * k2 * n_size + 16 * c + j];
        to[(k2 * 16 + j) * 2 + 1] = kernel[(2 * k2 + 1) * n_size + 16 * c + j];
      }
    }
  }
}

// packed[c, k, j] = kernel[k, 16 c + j] for the column blocks c in [first, last) of 16
// columns: kernel [K, N] float32, packed [N / 16, K, 16].
extern "C" void albert_pack_float_columns(const float* kernel, float* packed, int64_t k_size,
                                          int64_t n_size, int64_t first, int64_t last) {
  for (int64_t c = first; c < last; ++c) {
    for (int64_t k = 0; k < k_size; ++k) {
      std::memcpy(packed + (c * k_size + k) * 16, kernel + k * n_size + 16 * c,
                  16 * sizeof(float));
    }
  }
}

#ifdef ALBERT_FLOAT_PRODUCTS
namespace {

// The float32 lanes the products' finishing code works on: one AVX-512 register of 16, or
// one AVX2 register of 8, with the few operations that code needs under one set of names.
#ifdef ALBERT_VECTOR_LOOPS
using Floats = __m512;
constexpr int kLanes = 16;
inline Floats load(const float* p) { return _mm512_loadu_ps(p); }
inline Floats splat(float value) { return _mm512_set1_ps(value); }
inline Floats add(Floats a, Floats b) { return _mm512_add_ps(a, b); }
inline Floats subtract(Floats a, Floats b) { return _mm512_sub_ps(a, b); }
inline Floats multiply(Floats a, Floats b) { return _mm512_mul_ps(a, b); }
inline Floats multiply_add(Floats a, Floats b, Floats c) { return _mm512_fmadd_ps(a, b, c); }
inline Floats maximum(Floats a, Floats b) { return _mm512_max_ps(a, b); }
inline float largest(Floats v) { return _mm512_reduce_max_ps(v); }
inline float total(Floats v) { return _mm512_reduce_add_ps(v); }
#else
using Floats = __m256;
constexpr int kLanes = 8;
inline Floats load(const float* p) { return _mm256_loadu_ps(p); }
inline Floats splat(float value) { return _mm256_set1_ps(value); }
inline Floats add(Floats a, Floats b) { return _mm256_add_ps(a, b); }
inline Floats subtract(Floats a, Floats b) { return _mm256_sub_ps(a, b); }
inline Floats multiply(Floats a, Floats b) { return _mm256_mul_ps(a, b); }
inline Floats multiply_add(Floats a, Floats b, Floats c) { return _mm256_fmadd_ps(a, b, c); }
inline Floats maximum(Floats a, Floats b) { return _mm256_max_ps(a, b); }
inline float largest(Floats v) {
  __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  m = _mm_max_ps(m, _mm_movehl_ps(m, m));
  return _mm_cvtss_f32(_mm_max_ss(m, _mm_movehdup_ps(m)));
}
inline float total(Floats v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  return _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)));
}

// exp_approx on 8 lanes: the same clamp, reduction and polynomial, 2^k built in the
// exponent bits, +inf above 88.7; NaN stays NaN.
inline Floats exp_vector(Floats input) {
  const Floats x = _mm256_min_ps(splat(88.0f), _mm256_max_ps(splat(-87.0f), input));
  const Floats k = _mm256_round_ps(multiply(x, splat(1.44269504088896341f)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  Floats r = _mm256_fnmadd_ps(k, splat(0.693145751953125f), x);
  r = _mm256_fnmadd_ps(k, splat(1.42860682028622680e-6f), r);
  Floats p = splat(1.0f / 5040);
  p = multiply_add(p, r, splat(1.0f / 720));
  p = multiply_add(p, r, splat(1.0f / 120));
  p = multiply_add(p, r, splat(1.0f / 24));
  p = multiply_add(p, r, splat(1.0f / 6));
  p = multiply_add(p, r, splat(1.0f / 2));
  p = multiply_add(p, r, splat(1.0f));
  p = multiply_add(p, r, splat(1.0f));
  const __m256i exponent_bits =
      _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(k), _mm256_set1_epi32(127)), 23);
  const Floats value = multiply(p, _mm256_castsi256_ps(exponent_bits));
  return _mm256_blendv_ps(value, splat(HUGE_VALF),
                          _mm256_cmp_ps(input, splat(88.7f), _CMP_GT_OQ));
}

// gelu_vector's formula on 8 lanes.
inline Floats gelu_vector(Floats x) {
  const Floats inner = multiply_add(multiply(splat(0.044715f), x), x, splat(1.0f));
  const Floats e = exp_vector(multiply(multiply(splat(-2.0f * 0.797884560802865355f), x), inner));
  return _mm256_div_ps(x, add(splat(1.0f), e));
}
#endif

#ifdef ALBERT_AMX
// Whether Linux lets this process use the AMX tiles (asked once, for the whole process):
// arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA).
bool tiles_permitted() {
  static const bool permitted = syscall(SYS_arch_prctl, 0x1023, 18) == 0;
  return permitted;
}

struct TileConfig {
  uint8_t palette_id, start_row, reserved[14];
  uint16_t bytes_per_row[16];
  uint8_t rows[16];
};

// Eight tiles of 16 rows x 64 bytes: 0-3 the accumulators of a 32 x 32 output block,
// 4-5 two 16-row slices of x, 6-7 two 16-column slices of the packed kernel.
void configure_tiles() {
  TileConfig config;
  std::memset(&config, 0, sizeof config);
  config.palette_id = 1;
  for (int t = 0; t < 8; ++t) {
    config.rows[t] = 16;
    config.bytes_per_row[t] = 64;
  }
  _tile_loadconfig(&config);
}

// block [32, 32] = a [32, K] . the packed columns b0, b1 (16 each), on the tiles.
void block_on_tiles(const uint16_t* a, const uint16_t* b0, const uint16_t* b1, int64_t k_size,
                    float* block) {
  _tile_zero(0);
  _tile_zero(1);
  _tile_zero(2);
  _tile_zero(3);
  for (int64_t k = 0; k < k_size; k += 32) {
    _tile_loadd(4, a + k, k_size * 2);
    _tile_loadd(5, a + 16 * k_size + k, k_size * 2);
    _tile_loadd(6, b0 + k * 16, 64);
    _tile_loadd(7, b1 + k * 16, 64);
    _tile_dpbf16ps(0, 4, 6);
    _tile_dpbf16ps(1, 4, 7);
    _tile_dpbf16ps(2, 5, 6);
    _tile_dpbf16ps(3, 5, 7);
  }
  _tile_stored(0, block, 128);
  _tile_stored(1, block + 16, 128);
  _tile_stored(2, block + 16 * 32, 128);
  _tile_stored(3, block + 16 * 32 + 16, 128);
}
#endif

#ifdef ALBERT_PRODUCTS
// block [32, 32] = a [32, K] . the packed columns b0, b1 (16 each), on the vector units:
// 8 rows at a time, their 16 accumulators in registers over the whole of K, each step a
// pair of x's values broadcast against a pair of kernel rows (vdpbf16ps). 8 x 32 and 4 x 64
// measured fastest of 4-14 rows by 32-64 columns on AMD Zen 5; as a plain product about
// oneDNN's rate (docs/benchmarks.md), the gain is in what the products carry.
void block_on_vectors(const uint16_t* a, const uint16_t* b0, const uint16_t* b1,
                      int64_t k_size, float* block) {
  constexpr int kRows = 8;
  for (int r0 = 0; r0 < 32; r0 += kRows) {
    __m512 low[kRows], high[kRows];
    for (int r = 0; r < kRows; ++r) low[r] = high[r] = _mm512_setzero_ps();
    const uint16_t* rows = a + r0 * k_size;
    for (int64_t k2 = 0; k2 < k_size / 2; ++k2) {
      const __m512bh left = (__m512bh)_mm512_loadu_si512(b0 + k2 * 32);
      const __m512bh right = (__m512bh)_mm512_loadu_si512(b1 + k2 * 32);
      for (int r = 0; r < kRows; ++r) {
        int32_t pair;
        std::memcpy(&pair, rows + r * k_size + 2 * k2, sizeof pair);
        const __m512bh x_pair = (__m512bh)_mm512_set1_epi32(pair);
        low[r] = _mm512_dpbf16_ps(low[r], x_pair, left);
        high[r] = _mm512_dpbf16_ps(high[r], x_pair, right);
      }
    }
    for (int r = 0; r < kRows; ++r) {
      _mm512_store_ps(block + (r0 + r) * 32, low[r]);
      _mm512_store_ps(block + (r0 + r) * 32 + 16, high[r]);
    }
  }
}
#endif

#ifdef ALBERT_VECTOR_LOOPS
// block [32, 32] = a [32, K] . the packed columns b0, b1 (16 each), float32 on the vector
// units: as block_on_vectors, 8 rows at a time, their 16 accumulators in registers over the
// whole of K, each step one value of x broadcast against a row of 32 kernel columns (FMA).
// 8 rows measured fastest of 4, 8 and 16 on AMD Zen 5 (docs/benchmarks.md, "Float32
// products of our own").
void block_of_floats(const float* a, const float* b0, const float* b1, int64_t k_size,
                     float* block) {
  constexpr int kRows = 8;
  for (int r0 = 0; r0 < 32; r0 += kRows) {
    __m512 low[kRows], high[kRows];
    for (int r = 0; r < kRows; ++r) low[r] = high[r] = _mm512_setzero_ps();
    const float* rows = a + r0 * k_size;
    for (int64_t k = 0; k < k_size; ++k) {
      const __m512 left = _mm512_loadu_ps(b0 + k * 16);
      const __m512 right = _mm512_loadu_ps(b1 + k * 16);
      for (int r = 0; r < kRows; ++r) {
        const __m512 x = _mm512_set1_ps(rows[r * k_size + k]);
        low[r] = _mm512_fmadd_ps(x, left, low[r]);
        high[r] = _mm512_fmadd_ps(x, right, high[r]);
      }
    }
    for (int r = 0; r < kRows; ++r) {
      _mm512_store_ps(block + (r0 + r) * 32, low[r]);
      _mm512_store_ps(block + (r0 + r) * 32 + 16, high[r]);
    }
  }
}
#else
// The rows [0, kRows) of a [*, K] times one packed panel b of 16 columns, with AVX2: kRows
// x 16 accumulators (two registers a row) over the whole of K, into block [*, 32] from
// its column 0 (the caller offsets it). Six rows fill 12 of the 16 registers, with the
// panel's two and a broadcast of x beside them (the shape BLIS gives AVX2's FMA); fewer
// than five rows leave too few independent sums to hide the FMA's latency.
// The row loops are unrolled on request: GCC 12 otherwise zeroes the accumulators
// with memset and then keeps them on the stack, a store per FMA (half the speed).
template <int kRows>
void rows_of_floats(const float* a, const float* b, int64_t k_size, float* block) {
  __m256 low[kRows], high[kRows];
#pragma GCC unroll 16
  for (int r = 0; r < kRows; ++r) low[r] = high[r] = _mm256_setzero_ps();
  for (int64_t k = 0; k < k_size; ++k) {
    const __m256 left = _mm256_loadu_ps(b + k * 16);
    const __m256 right = _mm256_loadu_ps(b + k * 16 + 8);
#pragma GCC unroll 16
    for (int r = 0; r < kRows; ++r) {
      const __m256 x = _mm256_broadcast_ss(a + r * k_size + k);
      low[r] = _mm256_fmadd_ps(x, left, low[r]);
      high[r] = _mm256_fmadd_ps(x, right, high[r]);
    }
  }
#pragma GCC unroll 16
  for (int r = 0; r < kRows; ++r) {
    _mm256_storeu_ps(block + r * 32, low[r]);
    _mm256_storeu_ps(block + r * 32 + 8, high[r]);
  }
}

// block [32, 32] = a [32, K] . the packed columns b0, b1 (16 each), float32 with AVX2:
// each panel of 16 columns as two blocks of 6 rows and four of 5. On AMD Zen 5 held to
// AVX2, one thread: 87-101 GFLOP/s, about 90% of its FMA peak; with 6, 6, 6, 6, 4, 4 rows
// 72-81 (the 4-row blocks wait on their sums), K in chunks of 256 no faster
// (docs/benchmarks.md, "Float32 products of our own on AVX2").
void block_of_floats(const float* a, const float* b0, const float* b1, int64_t k_size,
                     float* block) {
  for (int half = 0; half < 2; ++half) {
    const float* b = half == 0 ? b0 : b1;
    float* columns = block + 16 * half;
    rows_of_floats<6>(a, b, k_size, columns);
    rows_of_floats<6>(a + 6 * k_size, b, k_size, columns + 6 * 32);
    for (int r0 = 12; r0 < 32; r0 += 5) {
      rows_of_floats<5>(a + r0 * k_size, b, k_size, columns + r0 * 32);
    }
  }
}
#endif

// The columns of a chunk in product_rows for a kernel [K, *] of T: as many as keep about
// 1 MB of the packed kernel in L2 while the row blocks pass over it (the blocks are finished
// one by one), in multiples of 32; for long rows, where that is under 128 columns, every
// column (chunk = N): each row block of x then stays in L2 while the kernel streams past
// it, which measured faster for float32 at K = 3072 (docs/benchmarks.md, "Float32
// products of our own").
template <typename T>
int64_t l2_columns(int64_t k_size, int64_t n_size) {
  const int64_t columns = ((1 << 20) / (k_size * int64_t(sizeof(T)))) / 32 * 32;
  return columns < 128 ? n_size : columns;
}

// The product x . kernel for the rows [first, last) of x [M, K] of T (bfloat16 as
// uint16_t, or float; `first` a multiple of 32; `last` may end a block early: rows past it
// are read as zeros and not handed on), packed the kernel [K, N] as albert_pack_columns
// or albert_pack_float_columns leaves it, `chunk` columns (a multiple of 32) at a time for
// each block of 32 rows. Each 32 x 32 block of float32 results goes to finish(block, i,
// rows, j): block [32, 32] row-major, its first row i of x, `rows` of them valid, its first
// column j; then, once a row block's chunk is done, rows_done(i, rows) (with chunk = N:
// once its whole rows are).
template <typename T, typename Finish, typename RowsDone>
void product_rows(const T* x, const T* packed, int64_t first, int64_t last, int64_t k_size,
                  int64_t n_size, int64_t chunk, Finish finish, RowsDone rows_done) {
  void (*block_product)(const T*, const T*, const T*, int64_t, float*);
  bool on_tiles = false;
  if constexpr (std::is_same_v<T, float>) {
    block_product = block_of_floats;
  } else {
#ifdef ALBERT_PRODUCTS
    block_product = block_on_vectors;
#ifdef ALBERT_AMX
    if (tiles_permitted()) {
      configure_tiles();
      block_product = block_on_tiles;
      on_tiles = true;
    }
#endif
#else
    return;  // never called: albert_products_ready says 0
#endif
  }
  std::vector<T> padded;  // a last block of fewer than 32 rows, zero-filled
  alignas(64) float block[32 * 32];
  const int64_t column_stride = k_size * 16;  // elements between two 16-column blocks
  for (int64_t j0 = 0; j0 < n_size; j0 += chunk) {
    const int64_t j1 = std::min(n_size, j0 + chunk);
    for (int64_t i = first; i < last; i += 32) {
      const int64_t rows = std::min<int64_t>(32, last - i);
      const T* a = x + i * k_size;
      if (rows < 32) {
        padded.assign(32 * k_size, T(0));
        std::memcpy(padded.data(), a, rows * k_size * sizeof(T));
        a = padded.data();
      }
      for (int64_t j = j0; j < j1; j += 32) {
        const T* b0 = packed + (j / 16) * column_stride;
        block_product(a, b0, b0 + column_stride, k_size, block);
        finish(block, i, rows, j);
      }
      rows_done(i, rows);
    }
  }
#ifdef ALBERT_AMX
  if (on_tiles) _tile_release();
#endif
  (void)on_tiles;
}

// albert_pack_columns or albert_pack_float_columns by element type.
inline void pack_columns(const uint16_t* kernel, uint16_t* packed, int64_t k_size,
                         int64_t n_size, int64_t first, int64_t last) {
  albert_pack_columns(kernel, packed, k_size, n_size, first, last);
}
inline void pack_columns(const float* kernel, float* packed, int64_t k_size, int64_t n_size,
                         int64_t first, int64_t last) {
  albert_pack_float_columns(kernel, packed, k_size, n_size, first, last);
}

// kLanes float32 results stored as T: rounded once to bfloat16 (AVX-512 builds only, as
// are the bfloat16 products), or as they are.
#ifdef ALBERT_VECTOR_LOOPS
inline void store_lanes(uint16_t* to, Floats v) {
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(to), pack_bfloat16(v));
}
inline void store_lanes(float* to, Floats v) { _mm512_storeu_ps(to, v); }
#else
inline void store_lanes(float* to, Floats v) { _mm256_storeu_ps(to, v); }
#endif

inline void no_rows_step(int64_t, int64_t) {}

template <typename T>
std::vector<float> widened(const T* values, int64_t count) {
  std::vector<float> out(count);
  for (int64_t j = 0; j < count; ++j) out[j] = widen(values[j]);
  return out;
}

// out = gelu(x . kernel + bias) for the rows [first, last) of x [M, K] (as product_rows
// takes them), bias [N], out [M, N], all of T: bias and GELU in float32 on the
// accumulators, stored once.
template <typename T>
void dense_bias_gelu(const T* x, const T* packed, const T* bias, T* out, int64_t first,
                     int64_t last, int64_t k_size, int64_t n_size) {
  const std::vector<float> bias32 = widened(bias, n_size);
  product_rows(
      x, packed, first, last, k_size, n_size, l2_columns<T>(k_size, n_size),
      [&](const float* block, int64_t i, int64_t rows, int64_t j) {
        for (int64_t r = 0; r < rows; ++r) {
          for (int64_t c = 0; c < 32; c += kLanes) {
            const Floats v = add(load(block + r * 32 + c), load(bias32.data() + j + c));
            store_lanes(out + (i + r) * n_size + j + c, gelu_vector(v));
          }
        }
      },
      no_rows_step);
}

// heads = x . kernel + bias for the rows [first, last) of x [batch * seq, K] (as
// product_rows takes them; row r is position r % seq of sequence r / seq), split into
// attention heads: the kernel's N columns are `groups` blocks side by side (query, key,
// value) of num_heads heads of head_size (a multiple of 16) each; bias [N]; heads [groups,
// batch, num_heads, seq, head_size]; all of T. The bias is added in float32 on the
// accumulators, stored once.
template <typename T>
void dense_heads(const T* x, const T* packed, const T* bias, T* heads, int64_t first,
                 int64_t last, int64_t k_size, int64_t batch, int64_t seq, int64_t groups,
                 int64_t num_heads, int64_t head_size) {
  const int64_t group_width = num_heads * head_size, n_size = groups * group_width;
  const std::vector<float> bias32 = widened(bias, n_size);
  product_rows(
      x, packed, first, last, k_size, n_size, l2_columns<T>(k_size, n_size),
      [&](const float* block, int64_t i, int64_t rows, int64_t j) {
        for (int64_t r = 0; r < rows; ++r) {
          const int64_t b = (i + r) / seq, s = (i + r) % seq;
          for (int64_t c = 0; c < 32; c += kLanes) {
            const int64_t column = j + c, g = column / group_width;
            const int64_t n = column % group_width / head_size;
            const int64_t d = column % head_size;
            T* to = heads + (((g * batch + b) * num_heads + n) * seq + s) * head_size + d;
            store_lanes(to, add(load(block + r * 32 + c), load(bias32.data() + column)));
          }
        }
      },
      no_rows_step);
}

// out = LN(x . kernel + bias + residual) over each row, in float32, and where out16 is not
// null out16 = out rounded to bfloat16, for the rows [first, last) of x [M, K] (as
// product_rows takes them): x and bias [N] of T, residual and out [M, N] float32, gamma
// and beta [N] float32. The sum is taken from the float32 accumulators (as
// albert_residual_layer_norm_rows takes it from the product rounded to bfloat16), then the
// same two-pass moments.
template <typename T>
void dense_residual_layer_norm(const T* x, const T* packed, const T* bias,
                               const float* residual, const float* gamma, const float* beta,
                               float epsilon, float* out, uint16_t* out16, int64_t first,
                               int64_t last, int64_t k_size, int64_t n_size) {
  const std::vector<float> bias32 = widened(bias, n_size);
  std::vector<float> sums(32 * n_size);  // a row block's x . kernel, then + bias + residual
  product_rows(
      x, packed, first, last, k_size, n_size, n_size,
      [&](const float* block, int64_t, int64_t rows, int64_t j) {
        for (int64_t r = 0; r < rows; ++r) {
          std::memcpy(sums.data() + r * n_size + j, block + r * 32, 32 * sizeof(float));
        }
      },
      [&](int64_t i, int64_t rows) {
        for (int64_t r = 0; r < rows; ++r) {
          float* row = sums.data() + r * n_size;
          const float* residual_row = residual + (i + r) * n_size;
          float total = 0.0f;
          for (int64_t j = 0; j < n_size; ++j) {
            row[j] = row[j] + bias32[j] + residual_row[j];
            total += row[j];
          }
          float mean, rstd;
          row_moments(row, total, epsilon, n_size, &mean, &rstd);
          normalise_row(row, mean, rstd, gamma, beta, out + (i + r) * n_size,
                        out16 == nullptr ? nullptr : out16 + (i + r) * n_size, nullptr,
                        n_size);
        }
      });
}

// Attention of the heads (b, n) in [first, last) of B * N: context = softmax(q . k^T * scale
// + adder) . v with q [B, N, P, D], k and v [B, N, S, D], all of T, adder [B, S] float32,
// context [B, P, N * D] of T (the rows the attention output's product takes). D a multiple
// of 32; S any length (the keys are padded to a multiple of 32 with zeros and an adder of
// -inf, whose weights come out below 1e-37). Per head, k^T and v are packed as kernels [D,
// S] and [S, D]; per block of 32 query rows the scores stay in float32 (bfloat16: unrounded,
// where oneDNN's product rounds them), the softmax runs over each row in float32, the
// probabilities are stored as T (as the layers' path casts them before their product with
// v) and multiplied by v.
template <typename T>
void attention(const T* q, const T* k, const T* v, const float* adder, float scale, T* context,
               int64_t first, int64_t last, int64_t heads, int64_t queries, int64_t keys,
               int64_t head_size) {
  const int64_t width = heads * head_size, padded = (keys + 31) / 32 * 32;
  // k and v of one head, zero past the keys (to a multiple of 32), and their packs.
  std::vector<T> key_columns(padded * head_size, T(0)), packed_keys(head_size * padded);
  std::vector<T> value_rows(padded * head_size, T(0)), packed_values(padded * head_size);
  std::vector<float> scores(32 * padded), adder_row(padded, -HUGE_VALF);
  std::vector<T> probs(32 * padded);
  for (int64_t bn = first; bn < last; ++bn) {
    const int64_t b = bn / heads, n = bn % heads;
    // k^T [D, S] packed straight from k [S, D]: each 16 keys' block of the layout is their
    // rows [16, D] transposed in 32-bit units (a bfloat16 pair of D, or one float).
    constexpr int64_t kPerUnit = 4 / sizeof(T);
    const int64_t units = head_size / kPerUnit;
    std::memcpy(key_columns.data(), k + bn * keys * head_size, keys * head_size * sizeof(T));
    for (int64_t c = 0; c < padded / 16; ++c) {
      const uint32_t* rows = reinterpret_cast<const uint32_t*>(key_columns.data()) + c * 16 * units;
      uint32_t* to = reinterpret_cast<uint32_t*>(packed_keys.data()) + c * 16 * units;
      for (int64_t u = 0; u < units; ++u) {
        for (int64_t j = 0; j < 16; ++j) to[u * 16 + j] = rows[j * units + u];
      }
    }
    std::memcpy(value_rows.data(), v + bn * keys * head_size, keys * head_size * sizeof(T));
    pack_columns(value_rows.data(), packed_values.data(), padded, head_size, 0, head_size / 16);
    std::memcpy(adder_row.data(), adder + b * keys, keys * sizeof(float));
    // One block of 32 query rows at a time, the two products one after the other (not
    // nested: each product_rows takes and gives back the AMX tiles).
    for (int64_t i = 0; i < queries; i += 32) {
      const int64_t rows = std::min<int64_t>(32, queries - i);
      product_rows(
          q + bn * queries * head_size, packed_keys.data(), i, i + rows, head_size, padded, padded,
          [&](const float* block, int64_t, int64_t valid, int64_t j) {
            for (int64_t r = 0; r < valid; ++r) {
              std::memcpy(scores.data() + r * padded + j, block + r * 32, 32 * sizeof(float));
            }
          },
          no_rows_step);
      for (int64_t r = 0; r < rows; ++r) {
        float* row = scores.data() + r * padded;
        Floats tops = splat(-HUGE_VALF);
        for (int64_t j = 0; j < padded; j += kLanes) {
          const Floats s = multiply_add(load(row + j), splat(scale), load(adder_row.data() + j));
          store_lanes(row + j, s);
          tops = maximum(tops, s);
        }
        const Floats top = splat(largest(tops));
        Floats sums = splat(0.0f);
        for (int64_t j = 0; j < padded; j += kLanes) {
          const Floats e = exp_vector(subtract(load(row + j), top));
          store_lanes(row + j, e);
          sums = add(sums, e);
        }
        const Floats inverse = splat(1.0f / total(sums));
        for (int64_t j = 0; j < padded; j += kLanes) {
          store_lanes(probs.data() + r * padded + j, multiply(load(row + j), inverse));
        }
      }
      product_rows(
          probs.data(), packed_values.data(), 0, rows, padded, head_size, head_size,
          [&](const float* block, int64_t, int64_t valid, int64_t j) {
            for (int64_t r = 0; r < valid; ++r) {
              T* to = context + (b * queries + i + r) * width + n * head_size + j;
              for (int64_t c = 0; c < 32; c += kLanes) {
                store_lanes(to + c, load(block + r * 32 + c));
              }
            }
          },
          no_rows_step);
    }
  }
}

}  // namespace
#endif

// The entry points of the products: bfloat16 (uint16_t) where albert_products_ready says
// 1, float32 where albert_float_products_ready does; each as its template above. In builds
// without them they are there but never called.
#ifdef ALBERT_PRODUCTS
#define ALBERT_BFLOAT16_PRODUCT(call) call
#else
#define ALBERT_BFLOAT16_PRODUCT(call) (void)0
#endif
#ifdef ALBERT_FLOAT_PRODUCTS
#define ALBERT_FLOAT_PRODUCT(call) call
#else
#define ALBERT_FLOAT_PRODUCT(call) (void)0
#endif

extern "C" void albert_dense_bias_gelu_rows(const uint16_t* x, const uint16_t* packed,
                                            const uint16_t* bias, uint16_t* out,
                                            int64_t first, int64_t last, int64_t k_size,
                                            int64_t n_size) {
  ALBERT_BFLOAT16_PRODUCT(
      dense_bias_gelu(x, packed, bias, out, first, last, k_size, n_size));
}

extern "C" void albert_dense_bias_gelu_float_rows(const float* x, const float* packed,
                                                  const float* bias, float* out,
                                                  int64_t first, int64_t last,
                                                  int64_t k_size, int64_t n_size) {
  ALBERT_FLOAT_PRODUCT(dense_bias_gelu(x, packed, bias, out, first, last, k_size, n_size));
}

extern "C" void albert_dense_heads_rows(const uint16_t* x, const uint16_t* packed,
                                        const uint16_t* bias, uint16_t* heads,
                                        int64_t first, int64_t last, int64_t k_size,
                                        int64_t batch, int64_t seq, int64_t groups,
                                        int64_t num_heads, int64_t head_size) {
  ALBERT_BFLOAT16_PRODUCT(dense_heads(x, packed, bias, heads, first, last, k_size, batch,
                                      seq, groups, num_heads, head_size));
}

extern "C" void albert_dense_heads_float_rows(const float* x, const float* packed,
                                              const float* bias, float* heads,
                                              int64_t first, int64_t last, int64_t k_size,
                                              int64_t batch, int64_t seq, int64_t groups,
                                              int64_t num_heads, int64_t head_size) {
  ALBERT_FLOAT_PRODUCT(dense_heads(x, packed, bias, heads, first, last, k_size, batch, seq,
                                   groups, num_heads, head_size));
}

extern "C" void albert_dense_residual_layer_norm_rows(
    const uint16_t* x, const uint16_t* packed, const uint16_t* bias, const float* residual,
    const float* gamma, const float* beta, float epsilon, float* out, uint16_t* out16,
    int64_t first, int64_t last, int64_t k_size, int64_t n_size) {
  ALBERT_BFLOAT16_PRODUCT(dense_residual_layer_norm(x, packed, bias, residual, gamma, beta,
                                                    epsilon, out, out16, first, last,
                                                    k_size, n_size));
}

// As albert_dense_residual_layer_norm_rows for float32 x, kernel and bias: out only.
extern "C" void albert_dense_residual_layer_norm_float_rows(
    const float* x, const float* packed, const float* bias, const float* residual,
    const float* gamma, const float* beta, float epsilon, float* out, int64_t first,
    int64_t last, int64_t k_size, int64_t n_size) {
  ALBERT_FLOAT_PRODUCT(dense_residual_layer_norm(x, packed, bias, residual, gamma, beta,
                                                 epsilon, out, nullptr, first, last, k_size,
                                                 n_size));
}

extern "C" void albert_attention_rows(const uint16_t* q, const uint16_t* k, const uint16_t* v,
                                      const float* adder, float scale, uint16_t* context,
                                      int64_t first, int64_t last, int64_t heads,
                                      int64_t queries, int64_t keys, int64_t head_size) {
  ALBERT_BFLOAT16_PRODUCT(attention(q, k, v, adder, scale, context, first, last, heads,
                                    queries, keys, head_size));
}

extern "C" void albert_attention_float_rows(const float* q, const float* k, const float* v,
                                            const float* adder, float scale, float* context,
                                            int64_t first, int64_t last, int64_t heads,
                                            int64_t queries, int64_t keys,
                                            int64_t head_size) {
  ALBERT_FLOAT_PRODUCT(attention(q, k, v, adder, scale, context, first, last, heads, queries,
                                 keys, head_size));
}
