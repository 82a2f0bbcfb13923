// TensorFlow ops over the loops in loops.cc (CPU only). Built by albert_tf.native_kernels.

#include <algorithm>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/shape_inference.h"
#include "tensorflow/core/util/work_sharder.h"

extern "C" void albert_bias_gelu_rows(const uint16_t* y, const uint16_t* bias, uint16_t* z,
                                      int64_t rows, int64_t cols);
extern "C" void albert_bias_gelu_backward_rows(const uint16_t* dz, const uint16_t* y,
                                               const uint16_t* bias, uint16_t* dy, float* dbias,
                                               int64_t rows, int64_t cols);
extern "C" void albert_bias_gelu_float_rows(const float* y, const float* bias, float* z,
                                            int64_t rows, int64_t cols);
extern "C" void albert_bias_gelu_backward_float_rows(const float* dz, const float* y,
                                                     const float* bias, float* dy,
                                                     float* dbias, int64_t rows, int64_t cols);
extern "C" void albert_residual_layer_norm_moments_rows(
    const uint16_t* x, const uint16_t* bias, const float* residual, const float* gamma,
    const float* beta, float epsilon, float* out, uint16_t* out16, float* xhat, float* rstd,
    int64_t rows, int64_t cols);
extern "C" void albert_residual_layer_norm_moments_float_rows(
    const float* x, const float* bias, const float* residual, const float* gamma,
    const float* beta, float epsilon, float* out, float* xhat, float* rstd, int64_t rows,
    int64_t cols);
extern "C" void albert_residual_layer_norm_float_rows(const float* x, const float* bias,
                                                      const float* residual,
                                                      const float* gamma, const float* beta,
                                                      float epsilon, float* out, int64_t rows,
                                                      int64_t cols);
extern "C" void albert_layer_norm_backward_rows(const float* dy, const uint16_t* const* dy16,
                                                int64_t copies, const float* xhat,
                                                const float* rstd, const float* gamma,
                                                float* dx, uint16_t* dx16, float* dgamma,
                                                float* dbeta, float* dx_sum, int64_t rows,
                                                int64_t cols);
extern "C" void albert_bias_add_heads_rows(const uint16_t* y, const uint16_t* bias,
                                           uint16_t* out, int64_t first, int64_t last,
                                           int64_t seq, int64_t heads, int64_t head_size);
extern "C" void albert_heads_backward_rows(const uint16_t* dout, uint16_t* dy, float* dbias,
                                           int64_t first, int64_t last, int64_t seq,
                                           int64_t heads, int64_t head_size);
extern "C" void albert_softmax_backward_rows(const uint16_t* dprobs, const uint16_t* probs,
                                             float scale, uint16_t* dx, int64_t rows,
                                             int64_t cols);
extern "C" void albert_sum_terms(const uint16_t* const* terms, int64_t count, uint16_t* out,
                                 int64_t first, int64_t last);
extern "C" void albert_bias_add_heads_float_rows(const float* y, const float* bias, float* out,
                                                 int64_t first, int64_t last, int64_t seq,
                                                 int64_t heads, int64_t head_size);
extern "C" void albert_heads_backward_float_rows(const float* dout, float* dy, float* dbias,
                                                 int64_t first, int64_t last, int64_t seq,
                                                 int64_t heads, int64_t head_size);
extern "C" void albert_softmax_backward_float_rows(const float* dprobs, const float* probs,
                                                   float scale, float* dx, int64_t rows,
                                                   int64_t cols);
extern "C" void albert_sum_float_terms(const float* const* terms, int64_t count, float* out,
                                       int64_t first, int64_t last);
extern "C" void albert_round_to_bfloat16(const float* values, uint16_t* out, int64_t count);
extern "C" int albert_products_ready();
extern "C" int albert_float_products_ready();
extern "C" void albert_pack_columns(const uint16_t* kernel, uint16_t* packed, int64_t k_size,
                                    int64_t n_size, int64_t first, int64_t last);
extern "C" void albert_pack_float_columns(const float* kernel, float* packed, int64_t k_size,
                                          int64_t n_size, int64_t first, int64_t last);
extern "C" void albert_attention_rows(const uint16_t* q, const uint16_t* k, const uint16_t* v,
                                      const float* adder, float scale, uint16_t* context,
                                      int64_t first, int64_t last, int64_t heads,
                                      int64_t queries, int64_t keys, int64_t head_size);
extern "C" void albert_attention_float_rows(const float* q, const float* k, const float* v,
                                            const float* adder, float scale, float* context,
                                            int64_t first, int64_t last, int64_t heads,
                                            int64_t queries, int64_t keys,
                                            int64_t head_size);
extern "C" void albert_dense_bias_gelu_float_rows(const float* x, const float* packed,
                                                  const float* bias, float* out,
                                                  int64_t first, int64_t last,
                                                  int64_t k_size, int64_t n_size);
extern "C" void albert_dense_heads_float_rows(const float* x, const float* packed,
                                              const float* bias, float* heads,
                                              int64_t first, int64_t last, int64_t k_size,
                                              int64_t batch, int64_t seq, int64_t groups,
                                              int64_t num_heads, int64_t head_size);
extern "C" void albert_dense_residual_layer_norm_float_rows(
    const float* x, const float* packed, const float* bias, const float* residual,
    const float* gamma, const float* beta, float epsilon, float* out, int64_t first,
    int64_t last, int64_t k_size, int64_t n_size);
extern "C" void albert_dense_bias_gelu_rows(const uint16_t* x, const uint16_t* packed,
                                            const uint16_t* bias, uint16_t* out,
                                            int64_t first, int64_t last, int64_t k_size,
                                            int64_t n_size);
extern "C" void albert_dense_heads_rows(const uint16_t* x, const uint16_t* packed,
                                        const uint16_t* bias, uint16_t* heads,
                                        int64_t first, int64_t last, int64_t k_size,
                                        int64_t batch, int64_t seq, int64_t groups,
                                        int64_t num_heads, int64_t head_size);
extern "C" void albert_dense_residual_layer_norm_rows(
    const uint16_t* x, const uint16_t* packed, const uint16_t* bias, const float* residual,
    const float* gamma, const float* beta, float epsilon, float* out, uint16_t* out16,
    int64_t first, int64_t last, int64_t k_size, int64_t n_size);
extern "C" void albert_residual_layer_norm_rows(const uint16_t* x, const uint16_t* bias,
                                                const float* residual, const float* gamma,
                                                const float* beta, float epsilon, float* out,
                                                uint16_t* out16, int64_t rows, int64_t cols);

namespace albert_tf {
namespace {

using ::tensorflow::OpKernel;
using ::tensorflow::OpKernelConstruction;
using ::tensorflow::OpKernelContext;
using ::tensorflow::Tensor;
using ::tensorflow::TensorShapeUtils;
using ::tensorflow::errors::InvalidArgument;
namespace shape_inference = ::tensorflow::shape_inference;

template <typename T>
const T* data(const Tensor& t) {
  return reinterpret_cast<const T*>(t.tensor_data().data());
}

template <typename T>
T* mutable_data(Tensor* t) {
  return reinterpret_cast<T*>(const_cast<char*>(t->tensor_data().data()));
}

// Splits `rows` rows, each costing about `cost_per_row`, over the intra-op threads.
template <typename Fn>
void for_row_blocks(OpKernelContext* ctx, int64_t rows, int64_t cost_per_row, Fn fn) {
  auto* workers = ctx->device()->tensorflow_cpu_worker_threads()->workers;
  ::tensorflow::Shard(workers->NumThreads(), workers, rows, cost_per_row, fn);
}

// Column sums over `rows` rows that do not depend on how the threads split the work: the
// rows fall into fixed blocks (at most 64), `fn(first, last, sums)` handles the rows
// [first, last) of one block and writes that block's `width` column sums to `sums`, and
// the blocks' sums are added in block order into `totals` [width]. False (with the error
// set) if the scratch memory could not be had.
template <typename Fn>
bool column_sums_over_row_blocks(OpKernelContext* ctx, int64_t rows, int64_t width,
                                 int64_t cost_per_row, float* totals, Fn fn) {
  std::fill(totals, totals + width, 0.0f);
  if (rows == 0) return true;
  const int64_t blocks = std::min<int64_t>(rows, 64);
  Tensor partial;
  const ::tensorflow::Status status = ctx->allocate_temp(
      ::tensorflow::DT_FLOAT, ::tensorflow::TensorShape({blocks, width}), &partial);
  if (!status.ok()) {
    ctx->CtxFailure(status);
    return false;
  }
  float* sums = mutable_data<float>(&partial);
  for_row_blocks(ctx, blocks, (rows / blocks + 1) * cost_per_row, [&](int64_t begin,
                                                                       int64_t end) {
    for (int64_t b = begin; b < end; ++b) {
      fn(rows * b / blocks, rows * (b + 1) / blocks, sums + b * width);
    }
  });
  for (int64_t b = 0; b < blocks; ++b) {
    for (int64_t j = 0; j < width; ++j) totals[j] += sums[b * width + j];
  }
  return true;
}

// True (else sets the error): t is a vector of `size` values, named `what`.
bool is_vector_of(OpKernelContext* ctx, const Tensor& t, int64_t size, const char* what) {
  if (TensorShapeUtils::IsVector(t.shape()) && t.NumElements() == size) return true;
  ctx->CtxFailure(InvalidArgument(what, " must be a vector of the input's last dimension (",
                                  size, "), got shape ", t.shape().DebugString()));
  return false;
}

bool has_rows(OpKernelContext* ctx, const Tensor& t) {
  if (t.dims() >= 1) return true;
  ctx->CtxFailure(InvalidArgument("input must have at least one dimension, got a scalar"));
  return false;
}

::tensorflow::Status same_shape_as_input(shape_inference::InferenceContext* c) {
  c->set_output(0, c->input(0));
  return ::tensorflow::OkStatus();
}

// Ops with two element types take the attribute T: bfloat16 (uint16_t in loops.cc) or
// float. The products need a CPU with AVX512_BF16 for bfloat16, AVX-512 or AVX2 with FMA
// for float; their packed kernels differ in layout: [N / 16, K / 2, 32] and [N / 16, K, 16].
// The elementwise ops (GELU, layer norms, heads, softmax gradient, sums) run on any CPU; the
// layer norms write their output's bfloat16 copy for bfloat16 only (for float an empty [0]
// in its place).
#define ALBERT_ELEMENT_TYPES "T: {bfloat16, float} = DT_BFLOAT16"

template <typename T>
using Element = std::conditional_t<std::is_same_v<T, float>, float, uint16_t>;

// Registers the CPU kernel `op` templated on T for both element types.
#define ALBERT_REGISTER_TYPED_KERNELS(name, op)                                           \
  REGISTER_KERNEL_BUILDER(Name(name)                                                      \
                              .Device(::tensorflow::DEVICE_CPU)                           \
                              .TypeConstraint<::tensorflow::bfloat16>("T"),               \
                          op<::tensorflow::bfloat16>);                                    \
  REGISTER_KERNEL_BUILDER(                                                                \
      Name(name).Device(::tensorflow::DEVICE_CPU).TypeConstraint<float>("T"), op<float>)

// Outputs 0 and 1 of an op with a bfloat16 copy: a float32 output shaped `like`, and its
// copy, the same for bfloat16 or [0] for float.
::tensorflow::Status set_output_and_copy(shape_inference::InferenceContext* c,
                                         shape_inference::ShapeHandle like) {
  ::tensorflow::DataType type;
  TF_RETURN_IF_ERROR(c->GetAttr("T", &type));
  c->set_output(0, like);
  c->set_output(1, type == ::tensorflow::DT_FLOAT ? c->Vector(0) : like);
  return ::tensorflow::OkStatus();
}

template <typename T>
::tensorflow::TensorShape copy_shape(const ::tensorflow::TensorShape& like) {
  return std::is_same_v<T, float> ? ::tensorflow::TensorShape({0}) : like;
}

// The copy's data for bfloat16, null for float (nothing to write).
template <typename T>
uint16_t* copy_data(Tensor* copy) {
  return std::is_same_v<T, float> ? nullptr : mutable_data<uint16_t>(copy);
}

// The elementwise loops of loops.cc by element type (uint16_t for bfloat16, or float), and
// how float32 column sums become an output of that type (bfloat16: rounded once).
template <typename E>
struct Loops;

template <>
struct Loops<uint16_t> {
  static constexpr auto bias_gelu = albert_bias_gelu_rows;
  static constexpr auto bias_gelu_backward = albert_bias_gelu_backward_rows;
  static constexpr auto bias_add_heads = albert_bias_add_heads_rows;
  static constexpr auto heads_backward = albert_heads_backward_rows;
  static constexpr auto softmax_backward = albert_softmax_backward_rows;
  static constexpr auto sum_terms = albert_sum_terms;
  static void store_sums(const float* sums, uint16_t* out, int64_t count) {
    albert_round_to_bfloat16(sums, out, count);
  }
};

template <>
struct Loops<float> {
  static constexpr auto bias_gelu = albert_bias_gelu_float_rows;
  static constexpr auto bias_gelu_backward = albert_bias_gelu_backward_float_rows;
  static constexpr auto bias_add_heads = albert_bias_add_heads_float_rows;
  static constexpr auto heads_backward = albert_heads_backward_float_rows;
  static constexpr auto softmax_backward = albert_softmax_backward_float_rows;
  static constexpr auto sum_terms = albert_sum_float_terms;
  static void store_sums(const float* sums, float* out, int64_t count) {
    std::copy(sums, sums + count, out);
  }
};

REGISTER_OP("AlbertBiasGelu")
    .Attr(ALBERT_ELEMENT_TYPES)
    .Input("y: T")
    .Input("bias: T")
    .Output("z: T")
    .SetShapeFn(same_shape_as_input)
    .Doc("z = gelu(y + bias), GELU in its tanh form, computed in float32; y [..., F].");

template <typename T>
class BiasGeluOp : public OpKernel {
 public:
  explicit BiasGeluOp(OpKernelConstruction* ctx) : OpKernel(ctx) {}

  void Compute(OpKernelContext* ctx) override {
    const Tensor& y = ctx->input(0);
    const Tensor& bias = ctx->input(1);
    if (!has_rows(ctx, y)) return;
    const int64_t cols = y.dim_size(y.dims() - 1);
    if (!is_vector_of(ctx, bias, cols, "bias")) return;
    Tensor* z = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, y.shape(), &z));
    if (cols == 0) return;
    const Element<T>* in = data<Element<T>>(y);
    const Element<T>* b = data<Element<T>>(bias);
    Element<T>* out = mutable_data<Element<T>>(z);
    for_row_blocks(ctx, y.NumElements() / cols, 30 * cols, [&](int64_t begin, int64_t end) {
      Loops<Element<T>>::bias_gelu(in + begin * cols, b, out + begin * cols, end - begin, cols);
    });
  }
};

ALBERT_REGISTER_TYPED_KERNELS("AlbertBiasGelu", BiasGeluOp);

REGISTER_OP("AlbertBiasGeluBackward")
    .Attr(ALBERT_ELEMENT_TYPES)
    .Input("dz: T")
    .Input("y: T")
    .Input("bias: T")
    .Output("dy: T")
    .Output("dbias: T")
    .SetShapeFn([](shape_inference::InferenceContext* c) {
      c->set_output(0, c->input(0));
      c->set_output(1, c->input(2));
      return ::tensorflow::OkStatus();
    })
    .Doc("dy = dz * gelu'(y + bias), the gradient of AlbertBiasGelu w.r.t. y, and dbias, "
         "its sum over all rows (the bias's gradient, summed in float32; bfloat16 rounded "
         "once).");

template <typename T>
class BiasGeluBackwardOp : public OpKernel {
 public:
  explicit BiasGeluBackwardOp(OpKernelConstruction* ctx) : OpKernel(ctx) {}

  void Compute(OpKernelContext* ctx) override {
    const Tensor& dz = ctx->input(0);
    const Tensor& y = ctx->input(1);
    const Tensor& bias = ctx->input(2);
    if (!has_rows(ctx, y)) return;
    OP_REQUIRES(ctx, dz.shape() == y.shape(),
                InvalidArgument("dz must have the shape of y ", y.shape().DebugString(),
                                ", got ", dz.shape().DebugString()));
    const int64_t cols = y.dim_size(y.dims() - 1);
    if (!is_vector_of(ctx, bias, cols, "bias")) return;
    Tensor *dy = nullptr, *dbias = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, y.shape(), &dy));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(1, bias.shape(), &dbias));
    if (cols == 0) return;
    using E = Element<T>;
    const E* dz_data = data<E>(dz);
    const E* y_data = data<E>(y);
    const E* b = data<E>(bias);
    E* out = mutable_data<E>(dy);
    std::vector<float> totals(cols);
    if (!column_sums_over_row_blocks(
            ctx, y.NumElements() / cols, cols, 40 * cols, totals.data(),
            [&](int64_t first, int64_t last, float* sums) {
              Loops<E>::bias_gelu_backward(dz_data + first * cols, y_data + first * cols, b,
                                           out + first * cols, sums, last - first, cols);
            }))
      return;
    Loops<E>::store_sums(totals.data(), mutable_data<E>(dbias), cols);
  }
};

ALBERT_REGISTER_TYPED_KERNELS("AlbertBiasGeluBackward", BiasGeluBackwardOp);

REGISTER_OP("AlbertResidualLayerNorm")
    .Attr(ALBERT_ELEMENT_TYPES)
    .Input("x: T")
    .Input("bias: T")
    .Input("residual: float")
    .Input("gamma: float")
    .Input("beta: float")
    .Attr("epsilon: float")
    .Output("y: float")
    .Output("y_bfloat16: bfloat16")
    .SetShapeFn([](shape_inference::InferenceContext* c) {
      return set_output_and_copy(c, c->input(0));
    })
    .Doc("y = LN(x + bias + residual) over the last axis in float32, and for T = bfloat16 "
         "y in bfloat16 (for float an empty [0]).");

// The loops.cc layer norms by element type (the float ones write no copy).
void residual_layer_norm_rows(const uint16_t* x, const uint16_t* bias, const float* residual,
                              const float* gamma, const float* beta, float epsilon, float* out,
                              uint16_t* out16, int64_t rows, int64_t cols) {
  albert_residual_layer_norm_rows(x, bias, residual, gamma, beta, epsilon, out, out16, rows,
                                  cols);
}
void residual_layer_norm_rows(const float* x, const float* bias, const float* residual,
                              const float* gamma, const float* beta, float epsilon, float* out,
                              uint16_t*, int64_t rows, int64_t cols) {
  albert_residual_layer_norm_float_rows(x, bias, residual, gamma, beta, epsilon, out, rows,
                                        cols);
}
void residual_layer_norm_moments_rows(const uint16_t* x, const uint16_t* bias,
                                      const float* residual, const float* gamma,
                                      const float* beta, float epsilon, float* out,
                                      uint16_t* out16, float* xhat, float* rstd, int64_t rows,
                                      int64_t cols) {
  albert_residual_layer_norm_moments_rows(x, bias, residual, gamma, beta, epsilon, out, out16,
                                          xhat, rstd, rows, cols);
}
void residual_layer_norm_moments_rows(const float* x, const float* bias, const float* residual,
                                      const float* gamma, const float* beta, float epsilon,
                                      float* out, uint16_t*, float* xhat, float* rstd,
                                      int64_t rows, int64_t cols) {
  albert_residual_layer_norm_moments_float_rows(x, bias, residual, gamma, beta, epsilon, out,
                                                xhat, rstd, rows, cols);
}

// The inputs both layer-norm ops share (x, bias, residual, gamma, beta; epsilon).
template <typename T>
struct LayerNormInputs {
  const Element<T>* x;
  const Element<T>* bias;
  const float* residual;
  const float* gamma;
  const float* beta;
  int64_t rows;
  int64_t cols;
};

template <typename T>
class ResidualLayerNormBase : public OpKernel {
 public:
  explicit ResidualLayerNormBase(OpKernelConstruction* ctx) : OpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ctx->GetAttr("epsilon", &epsilon_));
  }

 protected:
  // True (else sets the error): the inputs have matching shapes; fills `in`.
  bool checked_inputs(OpKernelContext* ctx, LayerNormInputs<T>* in) {
    const Tensor& x = ctx->input(0);
    const Tensor& residual = ctx->input(2);
    if (!has_rows(ctx, x)) return false;
    if (residual.shape() != x.shape()) {
      ctx->CtxFailure(InvalidArgument("residual must have the shape of x ",
                                      x.shape().DebugString(), ", got ",
                                      residual.shape().DebugString()));
      return false;
    }
    const int64_t cols = x.dim_size(x.dims() - 1);
    if (!is_vector_of(ctx, ctx->input(1), cols, "bias") ||
        !is_vector_of(ctx, ctx->input(3), cols, "gamma") ||
        !is_vector_of(ctx, ctx->input(4), cols, "beta"))
      return false;
    *in = {data<Element<T>>(x),      data<Element<T>>(ctx->input(1)), data<float>(residual),
           data<float>(ctx->input(3)), data<float>(ctx->input(4)),
           cols ? x.NumElements() / cols : 0, cols};
    return true;
  }

  float epsilon_;
};

template <typename T>
class ResidualLayerNormOp : public ResidualLayerNormBase<T> {
 public:
  using ResidualLayerNormBase<T>::ResidualLayerNormBase;

  void Compute(OpKernelContext* ctx) override {
    LayerNormInputs<T> in;
    if (!this->checked_inputs(ctx, &in)) return;
    const ::tensorflow::TensorShape& shape = ctx->input(0).shape();
    Tensor* y = nullptr;
    Tensor* y16 = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, shape, &y));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(1, copy_shape<T>(shape), &y16));
    if (in.cols == 0) return;
    float* out = mutable_data<float>(y);
    uint16_t* out16 = copy_data<T>(y16);
    const int64_t cols = in.cols;
    const float epsilon = this->epsilon_;
    for_row_blocks(ctx, in.rows, 20 * cols, [&](int64_t begin, int64_t end) {
      residual_layer_norm_rows(in.x + begin * cols, in.bias, in.residual + begin * cols,
                               in.gamma, in.beta, epsilon, out + begin * cols,
                               out16 == nullptr ? nullptr : out16 + begin * cols, end - begin,
                               cols);
    });
  }
};

ALBERT_REGISTER_TYPED_KERNELS("AlbertResidualLayerNorm", ResidualLayerNormOp);

REGISTER_OP("AlbertResidualLayerNormMoments")
    .Attr(ALBERT_ELEMENT_TYPES)
    .Input("x: T")
    .Input("bias: T")
    .Input("residual: float")
    .Input("gamma: float")
    .Input("beta: float")
    .Attr("epsilon: float")
    .Output("y: float")
    .Output("y_bfloat16: bfloat16")
    .Output("xhat: float")
    .Output("rstd: float")
    .SetShapeFn([](shape_inference::InferenceContext* c) {
      TF_RETURN_IF_ERROR(set_output_and_copy(c, c->input(0)));
      c->set_output(2, c->input(0));
      shape_inference::ShapeHandle rows;
      TF_RETURN_IF_ERROR(c->Subshape(c->input(0), 0, -1, &rows));
      c->set_output(3, rows);
      return ::tensorflow::OkStatus();
    })
    .Doc("y = LN(x + bias + residual) as AlbertResidualLayerNorm (and its bfloat16 copy), "
         "with xhat (the normalised sum) and rstd (the reciprocal standard deviation of "
         "each row, x's shape but the last axis) for the gradient.");

template <typename T>
class ResidualLayerNormMomentsOp : public ResidualLayerNormBase<T> {
 public:
  using ResidualLayerNormBase<T>::ResidualLayerNormBase;

  void Compute(OpKernelContext* ctx) override {
    LayerNormInputs<T> in;
    if (!this->checked_inputs(ctx, &in)) return;
    const ::tensorflow::TensorShape& shape = ctx->input(0).shape();
    ::tensorflow::TensorShape row_shape = shape;
    row_shape.RemoveLastDims(1);
    Tensor *y = nullptr, *y16 = nullptr, *xhat = nullptr, *rstd = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, shape, &y));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(1, copy_shape<T>(shape), &y16));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(2, shape, &xhat));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(3, row_shape, &rstd));
    if (in.cols == 0) return;
    float* out = mutable_data<float>(y);
    uint16_t* out16 = copy_data<T>(y16);
    float* normalised = mutable_data<float>(xhat);
    float* r = mutable_data<float>(rstd);
    const int64_t cols = in.cols;
    const float epsilon = this->epsilon_;
    for_row_blocks(ctx, in.rows, 22 * cols, [&](int64_t begin, int64_t end) {
      residual_layer_norm_moments_rows(
          in.x + begin * cols, in.bias, in.residual + begin * cols, in.gamma, in.beta, epsilon,
          out + begin * cols, out16 == nullptr ? nullptr : out16 + begin * cols,
          normalised + begin * cols, r + begin, end - begin, cols);
    });
  }
};

ALBERT_REGISTER_TYPED_KERNELS("AlbertResidualLayerNormMoments", ResidualLayerNormMomentsOp);

REGISTER_OP("AlbertLayerNormBackward")
    .Attr(ALBERT_ELEMENT_TYPES)
    .Input("dy: float")
    .Input("dy_bfloat16: copies * bfloat16")
    .Input("xhat: float")
    .Input("rstd: float")
    .Input("gamma: float")
    .Output("dx: float")
    .Output("dx_bfloat16: bfloat16")
    .Output("dgamma: float")
    .Output("dbeta: float")
    .Output("dx_sum: float")
    .Attr("copies: int >= 0 = 0")
    .SetShapeFn([](shape_inference::InferenceContext* c) {
      const int gamma = c->num_inputs() - 1;
      TF_RETURN_IF_ERROR(set_output_and_copy(c, c->input(0)));
      c->set_output(2, c->input(gamma));
      c->set_output(3, c->input(gamma));
      c->set_output(4, c->input(gamma));
      return ::tensorflow::OkStatus();
    })
    .Doc("The gradient of a layer norm from dy, xhat and rstd (x's shape but the last axis): "
         "dx (for T = bfloat16, the layer norm's input type, also in bfloat16; for float an "
         "empty [0]), and the sums of dy xhat, of dy and of dx over all rows. dy_bfloat16 "
         "(any number, dy's shape): the gradients of the output's bfloat16 copies, added to "
         "dy.");

template <typename T>
class LayerNormBackwardOp : public OpKernel {
 public:
  explicit LayerNormBackwardOp(OpKernelConstruction* ctx) : OpKernel(ctx) {}

  void Compute(OpKernelContext* ctx) override {
    // Inputs: dy, then dy_bfloat16 (any number), xhat, rstd, gamma.
    const int copies = ctx->num_inputs() - 4;
    const Tensor& dy = ctx->input(0);
    const Tensor& xhat = ctx->input(1 + copies);
    const Tensor& rstd = ctx->input(2 + copies);
    const Tensor& gamma_in = ctx->input(3 + copies);
    if (!has_rows(ctx, dy)) return;
    OP_REQUIRES(ctx, xhat.shape() == dy.shape(),
                InvalidArgument("xhat must have the shape of dy ", dy.shape().DebugString(),
                                ", got ", xhat.shape().DebugString()));
    OP_REQUIRES(ctx, (copies == 0 || !std::is_same_v<T, float>),
                InvalidArgument("a float32 layer norm writes no bfloat16 copy: dy_bfloat16 "
                                "must be empty, got ", copies));
    for (int c = 1; c <= copies; ++c) {
      OP_REQUIRES(ctx, ctx->input(c).shape() == dy.shape(),
                  InvalidArgument("dy_bfloat16 must have the shape of dy ",
                                  dy.shape().DebugString(), ", got ",
                                  ctx->input(c).shape().DebugString()));
    }
    const int64_t cols = dy.dim_size(dy.dims() - 1);
    if (!is_vector_of(ctx, gamma_in, cols, "gamma")) return;
    const int64_t rows = cols ? dy.NumElements() / cols : 0;
    OP_REQUIRES(ctx, rstd.NumElements() == rows,
                InvalidArgument("rstd must hold one value per row (", rows, "), got shape ",
                                rstd.shape().DebugString()));
    Tensor *dx = nullptr, *dx16 = nullptr, *dgamma = nullptr, *dbeta = nullptr;
    Tensor* dx_sum = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, dy.shape(), &dx));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(1, copy_shape<T>(dy.shape()), &dx16));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(2, gamma_in.shape(), &dgamma));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(3, gamma_in.shape(), &dbeta));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(4, gamma_in.shape(), &dx_sum));
    const float* dy_data = data<float>(dy);
    std::vector<const uint16_t*> dy16_data(copies);
    for (int c = 0; c < copies; ++c) dy16_data[c] = data<uint16_t>(ctx->input(1 + c));
    const float* xhat_data = data<float>(xhat);
    const float* rstd_data = data<float>(rstd);
    const float* gamma = data<float>(gamma_in);
    float* dx_data = mutable_data<float>(dx);
    uint16_t* dx16_data = copy_data<T>(dx16);
    // Each block's sums: dgamma's cols values, then dbeta's, then dx_sum's.
    std::vector<float> totals(3 * cols);
    if (!column_sums_over_row_blocks(
            ctx, rows, 3 * cols, 13 * cols, totals.data(),
            [&](int64_t first, int64_t last, float* sums) {
              std::vector<const uint16_t*> dy16_rows(copies);
              for (int c = 0; c < copies; ++c) dy16_rows[c] = dy16_data[c] + first * cols;
              albert_layer_norm_backward_rows(
                  dy_data + first * cols, dy16_rows.data(), copies, xhat_data + first * cols,
                  rstd_data + first, gamma, dx_data + first * cols,
                  dx16_data == nullptr ? nullptr : dx16_data + first * cols, sums,
                  sums + cols, sums + 2 * cols, last - first, cols);
            }))
      return;
    std::copy(totals.begin(), totals.begin() + cols, mutable_data<float>(dgamma));
    std::copy(totals.begin() + cols, totals.begin() + 2 * cols, mutable_data<float>(dbeta));
    std::copy(totals.begin() + 2 * cols, totals.end(), mutable_data<float>(dx_sum));
  }
};

ALBERT_REGISTER_TYPED_KERNELS("AlbertLayerNormBackward", LayerNormBackwardOp);

REGISTER_OP("AlbertBiasAddHeads")
    .Attr(ALBERT_ELEMENT_TYPES)
    .Input("y: T")
    .Input("bias: T")
    .Attr("num_heads: int >= 1")
    .Output("heads: T")
    .SetShapeFn([](shape_inference::InferenceContext* c) {
      shape_inference::ShapeHandle y;
      TF_RETURN_IF_ERROR(c->WithRank(c->input(0), 3, &y));
      int num_heads;
      TF_RETURN_IF_ERROR(c->GetAttr("num_heads", &num_heads));
      shape_inference::DimensionHandle head_size;
      TF_RETURN_IF_ERROR(c->Divide(c->Dim(y, 2), num_heads, true, &head_size));
      c->set_output(0, c->MakeShape({c->Dim(y, 0), c->MakeDim(num_heads), c->Dim(y, 1),
                                     head_size}));
      return ::tensorflow::OkStatus();
    })
    .Doc("heads[b, n, s, d] = y[b, s, n * D + d] + bias[n * D + d]: y [B, S, H] plus its "
         "bias [H], split into num_heads heads of D = H / num_heads, [B, num_heads, S, D].");

template <typename T>
class BiasAddHeadsOp : public OpKernel {
 public:
  explicit BiasAddHeadsOp(OpKernelConstruction* ctx) : OpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ctx->GetAttr("num_heads", &num_heads_));
  }

  void Compute(OpKernelContext* ctx) override {
    const Tensor& y = ctx->input(0);
    OP_REQUIRES(ctx, y.dims() == 3,
                InvalidArgument("y must be [batch, seq, width], got shape ",
                                y.shape().DebugString()));
    const int64_t batch = y.dim_size(0), seq = y.dim_size(1), width = y.dim_size(2);
    OP_REQUIRES(ctx, width % num_heads_ == 0,
                InvalidArgument("y's width ", width, " is not divisible by num_heads ",
                                num_heads_));
    if (!is_vector_of(ctx, ctx->input(1), width, "bias")) return;
    const int64_t head_size = width / num_heads_;
    Tensor* heads = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(
                            0, ::tensorflow::TensorShape({batch, num_heads_, seq, head_size}),
                            &heads));
    if (heads->NumElements() == 0) return;
    using E = Element<T>;
    const E* in = data<E>(y);
    const E* bias = data<E>(ctx->input(1));
    E* out = mutable_data<E>(heads);
    for_row_blocks(ctx, batch * seq, 3 * width, [&](int64_t begin, int64_t end) {
      Loops<E>::bias_add_heads(in, bias, out, begin, end, seq, num_heads_, head_size);
    });
  }

 private:
  int64_t num_heads_;
};

ALBERT_REGISTER_TYPED_KERNELS("AlbertBiasAddHeads", BiasAddHeadsOp);

REGISTER_OP("AlbertHeadsBackward")
    .Attr(ALBERT_ELEMENT_TYPES)
    .Input("dheads: T")
    .Output("dy: T")
    .Output("dbias: T")
    .SetShapeFn([](shape_inference::InferenceContext* c) {
      shape_inference::ShapeHandle dheads;
      TF_RETURN_IF_ERROR(c->WithRank(c->input(0), 4, &dheads));
      shape_inference::DimensionHandle width;
      TF_RETURN_IF_ERROR(c->Multiply(c->Dim(dheads, 1), c->Dim(dheads, 3), &width));
      c->set_output(0, c->MakeShape({c->Dim(dheads, 0), c->Dim(dheads, 2), width}));
      c->set_output(1, c->Vector(width));
      return ::tensorflow::OkStatus();
    })
    .Doc("The gradient of AlbertBiasAddHeads: dheads [B, N, S, D] back in y's layout "
         "[B, S, N * D], and its sum over B and S (the bias's gradient, summed in float32; "
         "bfloat16 rounded once).");

template <typename T>
class HeadsBackwardOp : public OpKernel {
 public:
  explicit HeadsBackwardOp(OpKernelConstruction* ctx) : OpKernel(ctx) {}

  void Compute(OpKernelContext* ctx) override {
    const Tensor& dheads = ctx->input(0);
    OP_REQUIRES(ctx, dheads.dims() == 4,
                InvalidArgument("dheads must be [batch, heads, seq, head_size], got shape ",
                                dheads.shape().DebugString()));
    const int64_t batch = dheads.dim_size(0), heads = dheads.dim_size(1);
    const int64_t seq = dheads.dim_size(2), head_size = dheads.dim_size(3);
    const int64_t width = heads * head_size, rows = batch * seq;
    Tensor *dy = nullptr, *dbias = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, ::tensorflow::TensorShape({batch, seq, width}),
                                             &dy));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(1, ::tensorflow::TensorShape({width}), &dbias));
    using E = Element<T>;
    const E* in = data<E>(dheads);
    E* out = mutable_data<E>(dy);
    std::vector<float> totals(width);
    if (!column_sums_over_row_blocks(ctx, rows, width, 3 * width, totals.data(),
                                     [&](int64_t first, int64_t last, float* sums) {
                                       Loops<E>::heads_backward(in, out, sums, first, last, seq,
                                                                heads, head_size);
                                     }))
      return;
    Loops<E>::store_sums(totals.data(), mutable_data<E>(dbias), width);
  }
};

ALBERT_REGISTER_TYPED_KERNELS("AlbertHeadsBackward", HeadsBackwardOp);

REGISTER_OP("AlbertSoftmaxBackward")
    .Attr(ALBERT_ELEMENT_TYPES)
    .Input("dprobs: T")
    .Input("probs: T")
    .Output("dx: T")
    .Attr("scale: float = 1.0")
    .SetShapeFn(same_shape_as_input)
    .Doc("dx = scale probs (dprobs - sum(dprobs probs)) over the last axis: the gradient of "
         "a softmax (probs its output) w.r.t. the scores that were scaled by scale before "
         "it. In float32 (bfloat16 rounded once).");

template <typename T>
class SoftmaxBackwardOp : public OpKernel {
 public:
  explicit SoftmaxBackwardOp(OpKernelConstruction* ctx) : OpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ctx->GetAttr("scale", &scale_));
  }

  void Compute(OpKernelContext* ctx) override {
    const Tensor& dprobs = ctx->input(0);
    const Tensor& probs = ctx->input(1);
    if (!has_rows(ctx, probs)) return;
    OP_REQUIRES(ctx, dprobs.shape() == probs.shape(),
                InvalidArgument("dprobs must have the shape of probs ",
                                probs.shape().DebugString(), ", got ",
                                dprobs.shape().DebugString()));
    Tensor* dx = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, probs.shape(), &dx));
    const int64_t cols = probs.dim_size(probs.dims() - 1);
    if (cols == 0) return;
    using E = Element<T>;
    const E* dp = data<E>(dprobs);
    const E* p = data<E>(probs);
    E* out = mutable_data<E>(dx);
    for_row_blocks(ctx, probs.NumElements() / cols, 8 * cols, [&](int64_t begin, int64_t end) {
      Loops<E>::softmax_backward(dp + begin * cols, p + begin * cols, scale_,
                                 out + begin * cols, end - begin, cols);
    });
  }

 private:
  float scale_;
};

ALBERT_REGISTER_TYPED_KERNELS("AlbertSoftmaxBackward", SoftmaxBackwardOp);

REGISTER_OP("AlbertSumTerms")
    .Attr(ALBERT_ELEMENT_TYPES)
    .Input("terms: count * T")
    .Output("sum: T")
    .Attr("count: int >= 1")
    .SetShapeFn([](shape_inference::InferenceContext* c) {
      shape_inference::ShapeHandle shape = c->input(0);
      for (int t = 1; t < c->num_inputs(); ++t) {
        TF_RETURN_IF_ERROR(c->Merge(shape, c->input(t), &shape));
      }
      c->set_output(0, shape);
      return ::tensorflow::OkStatus();
    })
    .Doc("The sum of the terms (all of one shape), added in float32 in the order given "
         "(bfloat16 rounded once).");

template <typename T>
class SumTermsOp : public OpKernel {
 public:
  explicit SumTermsOp(OpKernelConstruction* ctx) : OpKernel(ctx) {}

  void Compute(OpKernelContext* ctx) override {
    using E = Element<T>;
    const int count = ctx->num_inputs();
    const Tensor& first = ctx->input(0);
    std::vector<const E*> terms(count);
    for (int t = 0; t < count; ++t) {
      OP_REQUIRES(ctx, ctx->input(t).shape() == first.shape(),
                  InvalidArgument("every term must have the shape of the first ",
                                  first.shape().DebugString(), ", term ", t, " has ",
                                  ctx->input(t).shape().DebugString()));
      terms[t] = data<E>(ctx->input(t));
    }
    Tensor* sum = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, first.shape(), &sum));
    E* out = mutable_data<E>(sum);
    // Blocks of 1024 values, split over the threads.
    const int64_t size = first.NumElements(), block = 1024;
    for_row_blocks(ctx, (size + block - 1) / block, 2 * count * block, [&](int64_t begin,
                                                                          int64_t end) {
      Loops<E>::sum_terms(terms.data(), count, out, begin * block, std::min(end * block, size));
    });
  }
};

ALBERT_REGISTER_TYPED_KERNELS("AlbertSumTerms", SumTermsOp);

template <typename T>
constexpr int64_t kPackedWidth = std::is_same_v<T, float> ? 16 : 32;

template <typename T>
bool products_ready() {
  return (std::is_same_v<T, float> ? albert_float_products_ready()
                                   : albert_products_ready()) != 0;
}

// The loops.cc entry points by element type.
void pack_columns(const uint16_t* kernel, uint16_t* packed, int64_t k_size, int64_t n_size,
                  int64_t first, int64_t last) {
  albert_pack_columns(kernel, packed, k_size, n_size, first, last);
}
void pack_columns(const float* kernel, float* packed, int64_t k_size, int64_t n_size,
                  int64_t first, int64_t last) {
  albert_pack_float_columns(kernel, packed, k_size, n_size, first, last);
}
void attention_rows(const uint16_t* q, const uint16_t* k, const uint16_t* v, const float* adder,
                    float scale, uint16_t* context, int64_t first, int64_t last, int64_t heads,
                    int64_t queries, int64_t keys, int64_t head_size) {
  albert_attention_rows(q, k, v, adder, scale, context, first, last, heads, queries, keys,
                        head_size);
}
void attention_rows(const float* q, const float* k, const float* v, const float* adder,
                    float scale, float* context, int64_t first, int64_t last, int64_t heads,
                    int64_t queries, int64_t keys, int64_t head_size) {
  albert_attention_float_rows(q, k, v, adder, scale, context, first, last, heads, queries,
                              keys, head_size);
}
void dense_bias_gelu_rows(const uint16_t* x, const uint16_t* packed, const uint16_t* bias,
                          uint16_t* out, int64_t first, int64_t last, int64_t k_size,
                          int64_t n_size) {
  albert_dense_bias_gelu_rows(x, packed, bias, out, first, last, k_size, n_size);
}
void dense_bias_gelu_rows(const float* x, const float* packed, const float* bias, float* out,
                          int64_t first, int64_t last, int64_t k_size, int64_t n_size) {
  albert_dense_bias_gelu_float_rows(x, packed, bias, out, first, last, k_size, n_size);
}
void dense_heads_rows(const uint16_t* x, const uint16_t* packed, const uint16_t* bias,
                      uint16_t* heads, int64_t first, int64_t last, int64_t k_size,
                      int64_t batch, int64_t seq, int64_t groups, int64_t num_heads,
                      int64_t head_size) {
  albert_dense_heads_rows(x, packed, bias, heads, first, last, k_size, batch, seq, groups,
                          num_heads, head_size);
}
void dense_heads_rows(const float* x, const float* packed, const float* bias, float* heads,
                      int64_t first, int64_t last, int64_t k_size, int64_t batch, int64_t seq,
                      int64_t groups, int64_t num_heads, int64_t head_size) {
  albert_dense_heads_float_rows(x, packed, bias, heads, first, last, k_size, batch, seq,
                                groups, num_heads, head_size);
}
void dense_residual_layer_norm_rows(const uint16_t* x, const uint16_t* packed,
                                    const uint16_t* bias, const float* residual,
                                    const float* gamma, const float* beta, float epsilon,
                                    float* out, uint16_t* out16, int64_t first, int64_t last,
                                    int64_t k_size, int64_t n_size) {
  albert_dense_residual_layer_norm_rows(x, packed, bias, residual, gamma, beta, epsilon, out,
                                        out16, first, last, k_size, n_size);
}
void dense_residual_layer_norm_rows(const float* x, const float* packed, const float* bias,
                                    const float* residual, const float* gamma,
                                    const float* beta, float epsilon, float* out, uint16_t*,
                                    int64_t first, int64_t last, int64_t k_size,
                                    int64_t n_size) {
  albert_dense_residual_layer_norm_float_rows(x, packed, bias, residual, gamma, beta,
                                              epsilon, out, first, last, k_size, n_size);
}

REGISTER_OP("AlbertProductsReady")
    .Attr(ALBERT_ELEMENT_TYPES)
    .Output("ready: bool")
    .SetShapeFn([](shape_inference::InferenceContext* c) {
      c->set_output(0, c->Scalar());
      return ::tensorflow::OkStatus();
    })
    .SetIsStateful()  // a question to this machine's library: not to be folded into a constant
    .Doc("Whether this build has our products of T: bfloat16 on a CPU with AVX512_BF16, "
         "float on one with AVX-512.");

template <typename T>
class ProductsReadyOp : public OpKernel {
 public:
  explicit ProductsReadyOp(OpKernelConstruction* ctx) : OpKernel(ctx) {}

  void Compute(OpKernelContext* ctx) override {
    Tensor* ready = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, ::tensorflow::TensorShape({}), &ready));
    ready->scalar<bool>()() = products_ready<T>();
  }
};

ALBERT_REGISTER_TYPED_KERNELS("AlbertProductsReady", ProductsReadyOp);

// True (else sets the error): our products of T can run here and `size` (what) is a
// positive multiple of 32.
template <typename T>
bool products_usable(OpKernelContext* ctx, int64_t size, const char* what) {
  if (!products_ready<T>()) {
    ctx->CtxFailure(::tensorflow::errors::Unavailable(
        std::is_same_v<T, float>
            ? "our float32 products are not available here (this build's CPU has no AVX-512)"
            : "our bfloat16 products are not available here (this build's CPU has no "
              "AVX512_BF16)"));
    return false;
  }
  if (size > 0 && size % 32 == 0) return true;
  ctx->CtxFailure(InvalidArgument(what, " must be a positive multiple of 32, got ", size));
  return false;
}

// The shape of a kernel [K, N] of T packed: [N / 16, K / 2, 32] (bfloat16) or [N / 16, K,
// 16] (float).
template <typename T>
::tensorflow::TensorShape packed_shape(int64_t k_size, int64_t n_size) {
  return ::tensorflow::TensorShape({n_size / 16, k_size * 16 / kPackedWidth<T>,
                                    kPackedWidth<T>});
}

// True (else sets the error): inputs 1-3 are a kernel [K, N] for x's K columns, the
// same packed by AlbertPackKernel, and a bias [N], with N (set) and K multiples of 32.
template <typename T>
bool product_operands(OpKernelContext* ctx, int64_t k_size, int64_t* n_size) {
  const Tensor& kernel = ctx->input(1);
  const Tensor& packed = ctx->input(2);
  if (packed.dims() != 3 || packed.dim_size(2) != kPackedWidth<T>) {
    ctx->CtxFailure(InvalidArgument("packed must be ",
                                    packed_shape<T>(k_size, 16).DebugString(),
                                    " with [N / 16] first, got shape ",
                                    packed.shape().DebugString()));
    return false;
  }
  *n_size = packed.dim_size(0) * 16;
  const int64_t packed_rows = packed.dim_size(1) * kPackedWidth<T> / 16;
  if (packed_rows != k_size) {
    ctx->CtxFailure(InvalidArgument("packed is for a kernel of ", packed_rows,
                                    " rows, x has ", k_size, " columns"));
    return false;
  }
  if (kernel.dims() != 2 || kernel.dim_size(0) != k_size || kernel.dim_size(1) != *n_size) {
    ctx->CtxFailure(InvalidArgument("kernel must be [", k_size, ", ", *n_size,
                                    "] as packed, got shape ", kernel.shape().DebugString()));
    return false;
  }
  return products_usable<T>(ctx, k_size, "x's columns") &&
         products_usable<T>(ctx, *n_size, "the kernel's columns") &&
         is_vector_of(ctx, ctx->input(3), *n_size, "bias");
}

// Splits `rows` rows of a product with a kernel [K, N] over the intra-op threads in blocks
// of 32 (the product's unit): fn(first, last) for the rows [first, last).
template <typename Fn>
void for_product_row_blocks(OpKernelContext* ctx, int64_t rows, int64_t k_size, int64_t n_size,
                            Fn fn) {
  for_row_blocks(ctx, (rows + 31) / 32, 64 * k_size * n_size / 512,
                 [&](int64_t begin, int64_t end) { fn(begin * 32, std::min(rows, end * 32)); });
}

REGISTER_OP("AlbertPackKernel")
    .Attr(ALBERT_ELEMENT_TYPES)
    .Input("kernel: T")
    .Output("packed: T")
    .SetShapeFn([](shape_inference::InferenceContext* c) {
      shape_inference::ShapeHandle kernel;
      TF_RETURN_IF_ERROR(c->WithRank(c->input(0), 2, &kernel));
      ::tensorflow::DataType type;
      TF_RETURN_IF_ERROR(c->GetAttr("T", &type));
      const int64_t width = type == ::tensorflow::DT_FLOAT ? 16 : 32;
      shape_inference::DimensionHandle blocks, rows;
      TF_RETURN_IF_ERROR(c->Divide(c->Dim(kernel, 1), 16, true, &blocks));
      TF_RETURN_IF_ERROR(c->Divide(c->Dim(kernel, 0), width / 16, true, &rows));
      c->set_output(0, c->MakeShape({blocks, rows, c->MakeDim(width)}));
      return ::tensorflow::OkStatus();
    })
    .Doc("A kernel [K, N] in the layout our products read: bfloat16 [N / 16, K / 2, 32], "
         "packed[c, k, 2 j + t] = kernel[2 k + t, 16 c + j]; float [N / 16, K, 16], "
         "packed[c, k, j] = kernel[k, 16 c + j]. K and N multiples of 32.");

template <typename T>
class PackKernelOp : public OpKernel {
 public:
  explicit PackKernelOp(OpKernelConstruction* ctx) : OpKernel(ctx) {}

  void Compute(OpKernelContext* ctx) override {
    const Tensor& kernel = ctx->input(0);
    OP_REQUIRES(ctx, kernel.dims() == 2,
                InvalidArgument("kernel must be [K, N], got shape ",
                                kernel.shape().DebugString()));
    const int64_t k_size = kernel.dim_size(0), n_size = kernel.dim_size(1);
    if (!products_usable<T>(ctx, k_size, "the kernel's rows") ||
        !products_usable<T>(ctx, n_size, "the kernel's columns"))
      return;
    Tensor* packed = nullptr;
    OP_REQUIRES_OK(ctx,
                   ctx->allocate_output(0, packed_shape<T>(k_size, n_size), &packed));
    const Element<T>* in = data<Element<T>>(kernel);
    Element<T>* out = mutable_data<Element<T>>(packed);
    for_row_blocks(ctx, n_size / 16, 32 * k_size, [&](int64_t begin, int64_t end) {
      pack_columns(in, out, k_size, n_size, begin, end);
    });
  }
};

ALBERT_REGISTER_TYPED_KERNELS("AlbertPackKernel", PackKernelOp);

REGISTER_OP("AlbertDenseBiasGelu")
    .Attr(ALBERT_ELEMENT_TYPES)
    .Input("x: T")
    .Input("kernel: T")
    .Input("packed: T")
    .Input("bias: T")
    .Output("z: T")
    .SetShapeFn([](shape_inference::InferenceContext* c) {
      shape_inference::ShapeHandle x, packed;
      TF_RETURN_IF_ERROR(c->WithRank(c->input(0), 2, &x));
      TF_RETURN_IF_ERROR(c->WithRank(c->input(2), 3, &packed));
      shape_inference::DimensionHandle n_size;
      TF_RETURN_IF_ERROR(c->Multiply(c->Dim(packed, 0), 16, &n_size));
      c->set_output(0, c->MakeShape({c->Dim(x, 0), n_size}));
      return ::tensorflow::OkStatus();
    })
    .Doc("z = gelu(x . kernel + bias) as our product: x [M, K], kernel [K, N] (read only by "
         "the gradient) and packed, the same from AlbertPackKernel, bias [N]; "
         "accumulated in float32, bias and GELU (tanh form) in float32, stored once.");

template <typename T>
class DenseBiasGeluOp : public OpKernel {
 public:
  explicit DenseBiasGeluOp(OpKernelConstruction* ctx) : OpKernel(ctx) {}

  void Compute(OpKernelContext* ctx) override {
    const Tensor& x = ctx->input(0);
    OP_REQUIRES(ctx, x.dims() == 2,
                InvalidArgument("x must be [rows, K], got shape ", x.shape().DebugString()));
    const int64_t rows = x.dim_size(0), k_size = x.dim_size(1);
    int64_t n_size;
    if (!product_operands<T>(ctx, k_size, &n_size)) return;
    Tensor* z = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, ::tensorflow::TensorShape({rows, n_size}), &z));
    if (rows == 0) return;
    const Element<T>* in = data<Element<T>>(x);
    const Element<T>* packed = data<Element<T>>(ctx->input(2));
    const Element<T>* bias = data<Element<T>>(ctx->input(3));
    Element<T>* out = mutable_data<Element<T>>(z);
    for_product_row_blocks(ctx, rows, k_size, n_size, [&](int64_t first, int64_t last) {
      dense_bias_gelu_rows(in, packed, bias, out, first, last, k_size, n_size);
    });
  }
};

ALBERT_REGISTER_TYPED_KERNELS("AlbertDenseBiasGelu", DenseBiasGeluOp);

REGISTER_OP("AlbertDenseHeads")
    .Attr(ALBERT_ELEMENT_TYPES)
    .Input("x: T")
    .Input("kernel: T")
    .Input("packed: T")
    .Input("bias: T")
    .Attr("groups: int >= 1")
    .Attr("num_heads: int >= 1")
    .Output("heads: T")
    .SetShapeFn([](shape_inference::InferenceContext* c) {
      shape_inference::ShapeHandle x, packed;
      TF_RETURN_IF_ERROR(c->WithRank(c->input(0), 3, &x));
      TF_RETURN_IF_ERROR(c->WithRank(c->input(2), 3, &packed));
      int groups, num_heads;
      TF_RETURN_IF_ERROR(c->GetAttr("groups", &groups));
      TF_RETURN_IF_ERROR(c->GetAttr("num_heads", &num_heads));
      shape_inference::DimensionHandle n_size, head_size;
      TF_RETURN_IF_ERROR(c->Multiply(c->Dim(packed, 0), 16, &n_size));
      TF_RETURN_IF_ERROR(c->Divide(n_size, int64_t{groups} * num_heads, true, &head_size));
      c->set_output(0, c->MakeShape({c->MakeDim(groups), c->Dim(x, 0), c->MakeDim(num_heads),
                                     c->Dim(x, 1), head_size}));
      return ::tensorflow::OkStatus();
    })
    .Doc("x . kernel + bias as our product, split into heads: x [B, S, K], kernel [K, N] (read "
         "only by the gradient) and packed, the same from AlbertPackKernel, bias [N], the "
         "N columns `groups` blocks side by side of num_heads heads of D = N / (groups * "
         "num_heads) (a multiple of 16) -> [groups, B, num_heads, S, D]; the bias added in "
         "float32 on the accumulators, stored once.");

template <typename T>
class DenseHeadsOp : public OpKernel {
 public:
  explicit DenseHeadsOp(OpKernelConstruction* ctx) : OpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ctx->GetAttr("groups", &groups_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("num_heads", &num_heads_));
  }

  void Compute(OpKernelContext* ctx) override {
    const Tensor& x = ctx->input(0);
    OP_REQUIRES(ctx, x.dims() == 3,
                InvalidArgument("x must be [batch, seq, K], got shape ",
                                x.shape().DebugString()));
    const int64_t batch = x.dim_size(0), seq = x.dim_size(1), k_size = x.dim_size(2);
    int64_t n_size;
    if (!product_operands<T>(ctx, k_size, &n_size)) return;
    OP_REQUIRES(ctx, n_size % (groups_ * num_heads_ * 16) == 0,
                InvalidArgument("the kernel's ", n_size, " columns are not ", groups_, " x ",
                                num_heads_, " heads of a multiple of 16"));
    const int64_t head_size = n_size / (groups_ * num_heads_);
    Tensor* heads = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(
                            0,
                            ::tensorflow::TensorShape(
                                {groups_, batch, num_heads_, seq, head_size}),
                            &heads));
    const int64_t rows = batch * seq;
    if (rows == 0) return;
    const Element<T>* in = data<Element<T>>(x);
    const Element<T>* packed = data<Element<T>>(ctx->input(2));
    const Element<T>* bias = data<Element<T>>(ctx->input(3));
    Element<T>* out = mutable_data<Element<T>>(heads);
    for_product_row_blocks(ctx, rows, k_size, n_size, [&](int64_t first, int64_t last) {
      dense_heads_rows(in, packed, bias, out, first, last, k_size, batch, seq, groups_,
                       num_heads_, head_size);
    });
  }

 private:
  int64_t groups_, num_heads_;
};

ALBERT_REGISTER_TYPED_KERNELS("AlbertDenseHeads", DenseHeadsOp);

REGISTER_OP("AlbertDenseResidualLayerNorm")
    .Attr(ALBERT_ELEMENT_TYPES)
    .Input("x: T")
    .Input("kernel: T")
    .Input("packed: T")
    .Input("bias: T")
    .Input("residual: float")
    .Input("gamma: float")
    .Input("beta: float")
    .Attr("epsilon: float")
    .Output("y: float")
    .Output("y_bfloat16: bfloat16")
    .SetShapeFn([](shape_inference::InferenceContext* c) {
      return set_output_and_copy(c, c->input(4));
    })
    .Doc("y = LN(x . kernel + bias + residual) over each row in float32, and for T = "
         "bfloat16 y in bfloat16 (for float an empty [0]), the product ours: x [M, K], "
         "kernel [K, N] (read only by the gradient) and packed, the same from "
         "AlbertPackKernel, bias [N], residual [M, N], gamma and beta [N]; the sum taken "
         "from the float32 accumulators.");

template <typename T>
class DenseResidualLayerNormOp : public OpKernel {
 public:
  explicit DenseResidualLayerNormOp(OpKernelConstruction* ctx) : OpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ctx->GetAttr("epsilon", &epsilon_));
  }

  void Compute(OpKernelContext* ctx) override {
    const Tensor& x = ctx->input(0);
    const Tensor& residual = ctx->input(4);
    OP_REQUIRES(ctx, x.dims() == 2,
                InvalidArgument("x must be [rows, K], got shape ", x.shape().DebugString()));
    const int64_t rows = x.dim_size(0), k_size = x.dim_size(1);
    int64_t n_size;
    if (!product_operands<T>(ctx, k_size, &n_size)) return;
    OP_REQUIRES(ctx, residual.shape() == ::tensorflow::TensorShape({rows, n_size}),
                InvalidArgument("residual must be [", rows, ", ", n_size, "], got shape ",
                                residual.shape().DebugString()));
    if (!is_vector_of(ctx, ctx->input(5), n_size, "gamma") ||
        !is_vector_of(ctx, ctx->input(6), n_size, "beta"))
      return;
    Tensor *y = nullptr, *y16 = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, residual.shape(), &y));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(
                            1, copy_shape<T>(residual.shape()),
                            &y16));
    if (rows == 0) return;
    const Element<T>* in = data<Element<T>>(x);
    const Element<T>* packed = data<Element<T>>(ctx->input(2));
    const Element<T>* bias = data<Element<T>>(ctx->input(3));
    const float* res = data<float>(residual);
    const float* gamma = data<float>(ctx->input(5));
    const float* beta = data<float>(ctx->input(6));
    float* out = mutable_data<float>(y);
    uint16_t* out16 = copy_data<T>(y16);
    for_product_row_blocks(ctx, rows, k_size, n_size, [&](int64_t first, int64_t last) {
      dense_residual_layer_norm_rows(in, packed, bias, res, gamma, beta, epsilon_, out, out16,
                                     first, last, k_size, n_size);
    });
  }

 private:
  float epsilon_;
};

ALBERT_REGISTER_TYPED_KERNELS("AlbertDenseResidualLayerNorm", DenseResidualLayerNormOp);

REGISTER_OP("AlbertAttention")
    .Attr(ALBERT_ELEMENT_TYPES)
    .Input("q: T")
    .Input("k: T")
    .Input("v: T")
    .Input("adder: float")
    .Attr("scale: float")
    .Output("context: T")
    .SetShapeFn([](shape_inference::InferenceContext* c) {
      shape_inference::ShapeHandle q;
      TF_RETURN_IF_ERROR(c->WithRank(c->input(0), 4, &q));
      shape_inference::DimensionHandle width;
      TF_RETURN_IF_ERROR(c->Multiply(c->Dim(q, 1), c->Dim(q, 3), &width));
      c->set_output(0, c->MakeShape({c->Dim(q, 0), c->Dim(q, 2), width}));
      return ::tensorflow::OkStatus();
    })
    .Doc("context = softmax(q . k^T * scale + adder) . v per head, written as rows: q [B, N, "
         "P, D], k and v [B, N, S, D], adder [B, 1, 1, S] float32 (added to every query's "
         "scores), context [B, P, N * D]; D a multiple of 32. Scores and softmax in "
         "float32, the probabilities stored as T before their product with v.");

template <typename T>
class AttentionOp : public OpKernel {
 public:
  explicit AttentionOp(OpKernelConstruction* ctx) : OpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ctx->GetAttr("scale", &scale_));
  }

  void Compute(OpKernelContext* ctx) override {
    const Tensor& q = ctx->input(0);
    const Tensor& k = ctx->input(1);
    const Tensor& v = ctx->input(2);
    const Tensor& adder = ctx->input(3);
    OP_REQUIRES(ctx, q.dims() == 4 && k.dims() == 4,
                InvalidArgument("q and k must be [B, N, length, D], got shapes ",
                                q.shape().DebugString(), " and ", k.shape().DebugString()));
    const int64_t batch = q.dim_size(0), heads = q.dim_size(1), queries = q.dim_size(2);
    const int64_t keys = k.dim_size(2), head_size = q.dim_size(3);
    OP_REQUIRES(ctx, k.dim_size(0) == batch && k.dim_size(1) == heads &&
                         k.dim_size(3) == head_size && v.shape() == k.shape(),
                InvalidArgument("k and v must be [", batch, ", ", heads, ", S, ", head_size,
                                "], got shapes ", k.shape().DebugString(), " and ",
                                v.shape().DebugString()));
    OP_REQUIRES(ctx, adder.NumElements() == batch * keys,
                InvalidArgument("adder must be [", batch, ", 1, 1, ", keys, "], got shape ",
                                adder.shape().DebugString()));
    if (!products_usable<T>(ctx, head_size, "the heads' size")) return;
    OP_REQUIRES(ctx, keys > 0, InvalidArgument("k and v must have keys, got none"));
    Tensor* context = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(
                            0, ::tensorflow::TensorShape({batch, queries, heads * head_size}),
                            &context));
    if (queries == 0 || batch == 0) return;
    const Element<T>* q_data = data<Element<T>>(q);
    const Element<T>* k_data = data<Element<T>>(k);
    const Element<T>* v_data = data<Element<T>>(v);
    const float* adder_data = data<float>(adder);
    Element<T>* out = mutable_data<Element<T>>(context);
    for_row_blocks(ctx, batch * heads, 4 * (queries + keys) * keys * head_size,
                   [&](int64_t begin, int64_t end) {
                     attention_rows(q_data, k_data, v_data, adder_data, scale_, out, begin, end,
                                    heads, queries, keys, head_size);
                   });
  }

 private:
  float scale_;
};

ALBERT_REGISTER_TYPED_KERNELS("AlbertAttention", AttentionOp);

}  // namespace
}  // namespace albert_tf
