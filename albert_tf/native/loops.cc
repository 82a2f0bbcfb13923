// The loops of albert_tf's bfloat16 CPU kernels, free of TensorFlow headers so that
// this file alone is compiled for the build machine's vector units (-march=native):
// TensorFlow's Eigen headers do not compile with every -march (AVX512-FP16 on GCC 12).
// Each function handles a block of rows; ops.cc splits the rows over TensorFlow's threads.
//
// bfloat16 values are the upper 16 bits of a float32; rounding to bfloat16 is to
// nearest, ties to even, NaN kept NaN: what tf.cast does.

#include <cmath>
#include <cstdint>
#include <cstring>

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

}  // namespace

// out[i] = values[i] rounded to bfloat16, i < count (the ops' float32 column sums).
extern "C" void albert_round_to_bfloat16(const float* values, uint16_t* out, int64_t count) {
  for (int64_t i = 0; i < count; ++i) out[i] = to_bfloat16(values[i]);
}

// z = gelu(y + bias) row by row, y and z [rows, cols] bfloat16, bias [cols] bfloat16;
// computed in float32 and rounded once. GELU in ALBERT's tanh form,
// 0.5 x (1 + tanh(u)) with u = sqrt(2/pi) (x + 0.044715 x^3), evaluated as the equal
// x / (1 + exp(-2u)), which avoids the cancellation of 1 + tanh(u) for negative x.
extern "C" void albert_bias_gelu_rows(const uint16_t* y, const uint16_t* bias, uint16_t* z,
                                      int64_t rows, int64_t cols) {
  const float minus_two_c = -2.0f * 0.797884560802865355f;  // -2 sqrt(2/pi)
  const float a = 0.044715f;
  for (int64_t row = 0; row < rows; ++row) {
    const uint16_t* in = y + row * cols;
    uint16_t* out = z + row * cols;
    for (int64_t j = 0; j < cols; ++j) {
      const float x = from_bfloat16(in[j]) + from_bfloat16(bias[j]);
      out[j] = to_bfloat16(x / (1.0f + exp_approx(minus_two_c * x * (1.0f + a * x * x))));
    }
  }
}

// dy = dz * gelu'(y + bias), the gradient of albert_bias_gelu_rows w.r.t. y: dz, y, dy
// [rows, cols] bfloat16, bias [cols]. With s = sigmoid(2u) = (1 + tanh(u)) / 2,
// gelu' = s + x s (1 - s) 2 sqrt(2/pi) (1 + 3 * 0.044715 x^2), the tanh form's derivative.
// dbias [cols] (overwritten): these rows' column sums of dy (the rounded values), float32.
extern "C" void albert_bias_gelu_backward_rows(const uint16_t* dz, const uint16_t* y,
                                               const uint16_t* bias, uint16_t* dy, float* dbias,
                                               int64_t rows, int64_t cols) {
  const float two_c = 2.0f * 0.797884560802865355f;
  const float a = 0.044715f;
  for (int64_t j = 0; j < cols; ++j) dbias[j] = 0.0f;
  for (int64_t row = 0; row < rows; ++row) {
    const uint16_t* dz_row = dz + row * cols;
    const uint16_t* y_row = y + row * cols;
    uint16_t* dy_row = dy + row * cols;
    for (int64_t j = 0; j < cols; ++j) {
      const float x = from_bfloat16(y_row[j]) + from_bfloat16(bias[j]);
      const float x2 = x * x;
      const float s = 1.0f / (1.0f + exp_approx(-two_c * x * (1.0f + a * x2)));
      const float slope = s + x * s * (1.0f - s) * two_c * (1.0f + 3.0f * a * x2);
      dy_row[j] = to_bfloat16(from_bfloat16(dz_row[j]) * slope);
      dbias[j] += from_bfloat16(dy_row[j]);
    }
  }
}

// Writes s = x + bias + residual of one row (cols values) to `sums` and returns its mean
// and reciprocal standard deviation in two passes (as oneDNN's and TensorFlow's layer
// norms: the variance of the centred values).
static inline void row_sum_and_moments(const uint16_t* x_row, const uint16_t* bias,
                                const float* residual_row, float epsilon, int64_t cols,
                                float* sums, float* mean, float* rstd) {
  float sum = 0.0f;
  for (int64_t j = 0; j < cols; ++j) {
    const float s = from_bfloat16(x_row[j]) + from_bfloat16(bias[j]) + residual_row[j];
    sums[j] = s;
    sum += s;
  }
  *mean = sum / float(cols);
  float squares = 0.0f;
  for (int64_t j = 0; j < cols; ++j) {
    const float d = sums[j] - *mean;
    squares += d * d;
  }
  *rstd = 1.0f / std::sqrt(squares / float(cols) + epsilon);
}

// out = LN(x + bias + residual) over each row, in float32, and out16 = out rounded to
// bfloat16: x [rows, cols] bfloat16, bias [cols] bfloat16, residual, out [rows, cols]
// float32, gamma and beta [cols] float32.
extern "C" void albert_residual_layer_norm_rows(const uint16_t* x, const uint16_t* bias,
                                                const float* residual, const float* gamma,
                                                const float* beta, float epsilon, float* out,
                                                uint16_t* out16, int64_t rows, int64_t cols) {
  for (int64_t row = 0; row < rows; ++row) {
    float* out_row = out + row * cols;
    uint16_t* out16_row = out16 + row * cols;
    float mean, rstd;
    row_sum_and_moments(x + row * cols, bias, residual + row * cols, epsilon, cols, out_row,
                        &mean, &rstd);
    for (int64_t j = 0; j < cols; ++j) {
      const float v = (out_row[j] - mean) * rstd * gamma[j] + beta[j];
      out_row[j] = v;
      out16_row[j] = to_bfloat16(v);
    }
  }
}

// The training form of albert_residual_layer_norm_rows: out and out16 as there, and
// what the gradient needs, xhat = (s - mean) * rstd [rows, cols] and rstd [rows].
extern "C" void albert_residual_layer_norm_moments_rows(
    const uint16_t* x, const uint16_t* bias, const float* residual, const float* gamma,
    const float* beta, float epsilon, float* out, uint16_t* out16, float* xhat, float* rstd,
    int64_t rows, int64_t cols) {
  for (int64_t row = 0; row < rows; ++row) {
    float* out_row = out + row * cols;
    uint16_t* out16_row = out16 + row * cols;
    float* xhat_row = xhat + row * cols;
    float mean;
    row_sum_and_moments(x + row * cols, bias, residual + row * cols, epsilon, cols, xhat_row,
                        &mean, rstd + row);
    for (int64_t j = 0; j < cols; ++j) {
      const float normalised = (xhat_row[j] - mean) * rstd[row];
      const float v = normalised * gamma[j] + beta[j];
      xhat_row[j] = normalised;
      out_row[j] = v;
      out16_row[j] = to_bfloat16(v);
    }
  }
}

// The layer norm's gradient for a block of rows: dy, xhat [rows, cols] float32, rstd
// [rows], gamma [cols] -> dx = rstd (g - mean(g) - xhat mean(g xhat)) with g = dy gamma,
// in float32 and rounded to bfloat16 (dx16), and this block's column sums of dy xhat
// (dgamma), dy (dbeta) and dx (dx_sum, the gradient of a bias added to the input),
// [cols] each, overwritten. Where dy16 (bfloat16 [rows, cols], the gradient of the
// output's bfloat16 copy) is not null, dy stands for dy + dy16.
extern "C" void albert_layer_norm_backward_rows(const float* dy, const uint16_t* dy16,
                                                const float* xhat, const float* rstd,
                                                const float* gamma, float* dx, uint16_t* dx16,
                                                float* dgamma, float* dbeta, float* dx_sum,
                                                int64_t rows, int64_t cols) {
  for (int64_t j = 0; j < cols; ++j) dgamma[j] = dbeta[j] = dx_sum[j] = 0.0f;
  for (int64_t row = 0; row < rows; ++row) {
    const float* dy_row = dy + row * cols;
    const uint16_t* dy16_row = dy16 == nullptr ? nullptr : dy16 + row * cols;
    const float* xhat_row = xhat + row * cols;
    float* dx_row = dx + row * cols;
    uint16_t* dx16_row = dx16 + row * cols;
    float sum_g = 0.0f, sum_gx = 0.0f;
    for (int64_t j = 0; j < cols; ++j) {
      const float d = dy16_row == nullptr ? dy_row[j] : dy_row[j] + from_bfloat16(dy16_row[j]);
      const float g = d * gamma[j];
      sum_g += g;
      sum_gx += g * xhat_row[j];
      dgamma[j] += d * xhat_row[j];
      dbeta[j] += d;
    }
    const float mean_g = sum_g / float(cols), mean_gx = sum_gx / float(cols);
    const float r = rstd[row];
    for (int64_t j = 0; j < cols; ++j) {
      const float d = dy16_row == nullptr ? dy_row[j] : dy_row[j] + from_bfloat16(dy16_row[j]);
      const float v = r * (d * gamma[j] - mean_g - xhat_row[j] * mean_gx);
      dx_row[j] = v;
      dx16_row[j] = to_bfloat16(v);
      dx_sum[j] += v;
    }
  }
}

// Attention heads from a product: for the rows [first, last) of y [batch * seq, heads *
// head_size] (row r is position r % seq of sequence r / seq), out[b, n, s, d] = y[r, n *
// head_size + d] + bias[n * head_size + d], bfloat16, added in float32 and rounded once;
// out is [batch, heads, seq, head_size].
extern "C" void albert_bias_add_heads_rows(const uint16_t* y, const uint16_t* bias,
                                           uint16_t* out, int64_t first, int64_t last,
                                           int64_t seq, int64_t heads, int64_t head_size) {
  const int64_t width = heads * head_size;
  for (int64_t r = first; r < last; ++r) {
    const uint16_t* in = y + r * width;
    const int64_t b = r / seq, s = r % seq;
    for (int64_t n = 0; n < heads; ++n) {
      uint16_t* to = out + ((b * heads + n) * seq + s) * head_size;
      const uint16_t* from = in + n * head_size;
      const uint16_t* bias_n = bias + n * head_size;
      for (int64_t d = 0; d < head_size; ++d) {
        to[d] = to_bfloat16(from_bfloat16(from[d]) + from_bfloat16(bias_n[d]));
      }
    }
  }
}

// The gradient of albert_bias_add_heads_rows for the same rows: dy[r, n * head_size + d] =
// dout[b, n, s, d], and this block's column sums of dy in float32 (dbias [heads *
// head_size], overwritten).
extern "C" void albert_heads_backward_rows(const uint16_t* dout, uint16_t* dy, float* dbias,
                                           int64_t first, int64_t last, int64_t seq,
                                           int64_t heads, int64_t head_size) {
  const int64_t width = heads * head_size;
  for (int64_t j = 0; j < width; ++j) dbias[j] = 0.0f;
  for (int64_t r = first; r < last; ++r) {
    uint16_t* to = dy + r * width;
    const int64_t b = r / seq, s = r % seq;
    for (int64_t n = 0; n < heads; ++n) {
      const uint16_t* from = dout + ((b * heads + n) * seq + s) * head_size;
      float* sums = dbias + n * head_size;
      uint16_t* to_n = to + n * head_size;
      for (int64_t d = 0; d < head_size; ++d) {
        to_n[d] = from[d];
        sums[d] += from_bfloat16(from[d]);
      }
    }
  }
}
