"""native_kernels: the C++ kernels against float64 references, their build,
cache and fallback, their gradients, and where the model uses them."""

import dataclasses
import logging
import os

import numpy as np
import pytest
import tensorflow as tf

from albert_tf.cpu import fused_elementwise as fe
from albert_tf.cpu import native_kernels, paths, speed_paths

import albert_numpy
from model_fixtures import CONFIGS, built_encoder

NO_NATIVE_KERNELS = speed_paths.CPU_AUTO


@pytest.fixture(autouse=True)
def native_switch(monkeypatch):
    """Every test here opts in to the C++ kernels, as `--speed_paths=native` does; the
    library is built once per test session (into conftest's ALBERT_TF_KERNEL_CACHE);
    the pieces called directly get what the switch hands down under "native"."""
    monkeypatch.setattr(speed_paths, "_mode", "native")
    paths.take(paths.CPU_NATIVE)  # conftest's fixture restores what was taken before


BF16 = tf.bfloat16.as_numpy_dtype


@pytest.fixture
def fresh_cache(monkeypatch, tmp_path):
    """An empty kernel cache for the test (nothing built there is loaded: one process
    loads one library)."""
    monkeypatch.setenv("ALBERT_TF_KERNEL_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


@pytest.fixture
def undecided_library(monkeypatch):
    """library() decided again within the test, as if nothing were loaded yet; the
    process's loaded library is back after it."""
    monkeypatch.setattr(native_kernels, "_loaded", {})
    native_kernels.library.cache_clear()
    yield
    native_kernels.library.cache_clear()


def _bf16(x):
    return tf.constant(np.asarray(x, np.float32).astype(BF16))


def _as64(t):
    return tf.cast(t, tf.float64).numpy()


def test_builds_here():
    # The CI machine has a C++ compiler: the kernels must build and load there.
    assert native_kernels.compiler() is not None
    assert native_kernels.library() is not None
    assert os.path.exists(native_kernels.library_path(native_kernels.compiler()))


def test_bias_gelu_is_the_exact_gelu_rounded_once():
    rng = np.random.default_rng(0)
    y = rng.normal(scale=3.0, size=(33, 200)).astype(np.float32)
    y[0, :6] = [0.0, -0.0, 30.0, -30.0, 1e-30, -1e-30]
    bias = rng.normal(scale=0.5, size=200).astype(np.float32)
    bias[:6] = 0.0
    y16, b16 = _bf16(y), _bf16(bias)
    got = _as64(native_kernels.bias_gelu(y16, b16))
    x = _as64(y16) + _as64(b16)
    # The tanh form as x sigmoid(2u): in float64 too, 1 + tanh(u) cancels for x < -6.
    with np.errstate(over="ignore"):  # exp overflows to inf for x < -10: gelu -0.0
        exact = x / (1.0 + np.exp(-2.0 * np.sqrt(2.0 / np.pi) * (x + 0.044715 * x**3)))
    np.testing.assert_allclose(exact[1:], albert_numpy.gelu_tanh(x)[1:], rtol=1e-12, atol=1e-14)
    rounded = _as64(tf.cast(tf.constant(exact, tf.float32), tf.bfloat16))
    # One rounding of the exact value: equal to it but for float32 noise at rounding
    # ties (the XLA loop's tanh misses 2% of the elements by one ulp).
    assert np.mean(got != rounded) < 0.002
    np.testing.assert_allclose(got, exact, rtol=2**-8 + 1e-6, atol=1e-37)
    assert got[0, 2] == 30.0 and got[0, 0] == 0.0 and -1e-30 < got[0, 3] <= 0.0


def test_bias_gelu_keeps_nan_and_infinity():
    y = _bf16([[np.nan, np.inf, 1.0]])
    got = _as64(native_kernels.bias_gelu(y, _bf16([0.0, 0.0, np.nan])))
    assert np.isnan(got[0, 0]) and got[0, 1] == np.inf and np.isnan(got[0, 2])


def test_residual_layer_norm_against_float64():
    rng = np.random.default_rng(1)
    x16 = _bf16(rng.normal(size=(2, 9, 48)))
    b16 = _bf16(rng.normal(size=48))
    residual = rng.normal(size=(2, 9, 48)).astype(np.float32)
    gamma, beta = rng.normal(size=48).astype(np.float32), rng.normal(size=48).astype(np.float32)
    out, out16 = native_kernels.residual_layer_norm(x16, b16, residual, gamma, beta, 1e-12)
    want = albert_numpy.layer_norm(_as64(x16) + _as64(b16) + residual, beta, gamma, eps=1e-12)
    assert out.dtype == tf.float32 and out16.dtype == tf.bfloat16 and out.shape == (2, 9, 48)
    np.testing.assert_allclose(out.numpy(), want, rtol=1e-5, atol=1e-5)
    # The bfloat16 output is the float32 one rounded as tf.cast rounds.
    np.testing.assert_array_equal(_as64(out16), _as64(tf.cast(out, tf.bfloat16)))
    with speed_paths.forced(NO_NATIVE_KERNELS):
        loop = fe.layer_norm(x16, tf.constant(residual), gamma, beta, 1e-12, bias=b16)
    np.testing.assert_allclose(out.numpy(), loop.numpy(), rtol=1e-5, atol=1e-5)


def test_bias_gelu_backward_is_the_exact_derivative_rounded_once():
    rng = np.random.default_rng(4)
    y16, b16 = _bf16(rng.normal(scale=3.0, size=(17, 96))), _bf16(rng.normal(size=96))
    dz16 = _bf16(rng.normal(size=(17, 96)))
    dy, dbias = native_kernels.bias_gelu_backward(dz16, y16, b16)
    assert dbias.shape == (96,) and dbias.dtype == tf.bfloat16
    # The bias's gradient: the rounded dy summed over the rows, rounded once.
    np.testing.assert_allclose(_as64(dbias), _as64(dy).sum(0), rtol=2**-8, atol=1e-6)
    got = _as64(dy)
    x = _as64(y16) + _as64(b16)
    c, a = np.sqrt(2.0 / np.pi), 0.044715
    t = np.tanh(c * (x + a * x**3))
    slope = 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * c * (1 + 3 * a * x * x)
    exact = _as64(dz16) * slope
    np.testing.assert_allclose(got, exact, rtol=2**-8 + 1e-5, atol=1e-6)


def test_bfloat16_rounding_near_zero_is_tf_casts():
    # GELU(x) is about x / 2 near 0: results at and below float32's smallest normal
    # 2^-126, in vectors of 16 with normal ones, round as tf.cast rounds in TensorFlow's
    # threads (which flush float32 subnormals to zero, as AVX512_BF16's conversion does).
    y = np.array([2**-124, -(2**-125), 3e-38, 2**-130, 1.0, -1.0] * 6, np.float32)
    got = _as64(native_kernels.bias_gelu(_bf16(y[None]), _bf16(np.zeros(y.size))))
    x = _as64(_bf16(y))
    exact = x / (1.0 + np.exp(-2.0 * np.sqrt(2.0 / np.pi) * (x + 0.044715 * x**3)))
    want = _as64(tf.cast(tf.constant(exact, tf.float32), tf.bfloat16))
    np.testing.assert_array_equal(got[0], want)
    assert got[0, 0] == 2**-125 and got[0, 1] == -(2**-126)


def test_softmax_backward_against_float64():
    rng = np.random.default_rng(12)
    probs = tf.nn.softmax(tf.constant(rng.normal(size=(3, 2, 5, 37)) * 3, tf.float32))
    p16, dp16 = _bf16(probs), _bf16(rng.normal(size=(3, 2, 5, 37)))
    got = native_kernels.softmax_backward(dp16, p16, 0.125)
    assert got.dtype == tf.bfloat16 and got.shape == (3, 2, 5, 37)
    p, dp = _as64(p16), _as64(dp16)
    exact = 0.125 * p * (dp - (dp * p).sum(-1, keepdims=True))
    rounded = _as64(tf.cast(tf.constant(exact, tf.float32), tf.bfloat16))
    assert np.mean(_as64(got) != rounded) < 0.01  # float32 sums vs float64 at ties
    np.testing.assert_allclose(_as64(got), exact, rtol=2**-8, atol=1e-6)
    with pytest.raises(tf.errors.InvalidArgumentError, match="dprobs must have the shape"):
        native_kernels.softmax_backward(dp16[:, :1], p16)


def test_sum_terms_adds_in_float32_and_rounds_once():
    rng = np.random.default_rng(14)
    terms = [_bf16(rng.normal(size=(33, 70)) * 10.0 ** rng.integers(-2, 3)) for _ in range(12)]
    got = native_kernels.sum_terms(terms)
    assert got.dtype == tf.bfloat16 and got.shape == (33, 70)
    exact = np.sum([_as64(t) for t in terms], axis=0)
    rounded = _as64(tf.cast(tf.constant(exact, tf.float32), tf.bfloat16))
    assert np.mean(_as64(got) != rounded) < 0.01  # float32 sums vs float64 at ties
    np.testing.assert_allclose(_as64(got), exact, rtol=2**-8, atol=1e-6)
    # TensorFlow's bfloat16 AddN rounds as it goes: further from the exact sum.
    addn_error = np.abs(_as64(tf.add_n(terms)) - exact).sum()
    assert np.abs(_as64(got) - exact).sum() < 0.75 * addn_error
    np.testing.assert_array_equal(_as64(native_kernels.sum_terms(terms[:1])), _as64(terms[0]))
    with pytest.raises((ValueError, tf.errors.InvalidArgumentError), match="shape"):
        native_kernels.sum_terms([terms[0], terms[1][:, :5]])


def _loops_library(tmp_path, name, *flags):
    """loops.cc alone as a shared library built with native_kernels' flags and `flags`."""
    import ctypes

    target = str(tmp_path / f"{name}.so")
    native_kernels.build_loops(target, *flags)
    return ctypes.CDLL(target)


def test_vector_and_plain_loops_agree(tmp_path):
    # The AVX-512 code (where this machine has it) against the plain loops every other
    # CPU runs, on the same inputs: rows of 16-lane vectors and a masked tail (75 columns).
    import ctypes

    vector = _loops_library(tmp_path, "vector")
    plain = _loops_library(tmp_path, "plain", "-DALBERT_PLAIN_LOOPS")
    # AVX-512 without AVX512_BF16 (Skylake to Ice Lake) rounds to bfloat16 with integer ops.
    integer_rounding = _loops_library(tmp_path, "integer", "-mno-avx512bf16")
    rng = np.random.default_rng(13)
    rows, cols = 9, 75

    def bits(a):
        return np.asarray(a, np.float32).astype(BF16).view(np.uint16)

    def ptr(a):
        return a.ctypes.data_as(ctypes.c_void_p)

    y, dz = bits(rng.normal(scale=3, size=(rows, cols))), bits(rng.normal(size=(rows, cols)))
    y[0, :4] = bits([np.nan, np.inf, -np.inf, 30.0])
    bias = bits(rng.normal(size=cols))
    p = bits(tf.nn.softmax(rng.normal(size=(rows, cols)) * 3).numpy())
    residual = rng.normal(size=(rows, cols)).astype(np.float32)
    gamma, beta = rng.normal(size=(2, cols)).astype(np.float32)
    results = {}
    terms = [bits(rng.normal(size=(rows, cols))) for _ in range(5)]
    pointers = (ctypes.c_void_p * 5)(*[t.ctypes.data for t in terms])
    # The same loops for float32: the values of the bfloat16 inputs above.
    y32, dz32, bias32, p32 = (a.view(BF16).astype(np.float32) for a in (y, dz, bias, p))
    terms32 = [t.view(BF16).astype(np.float32) for t in terms]
    pointers32 = (ctypes.c_void_p * 5)(*[t.ctypes.data for t in terms32])
    for name, lib in (("vector", vector), ("plain", plain), ("integer", integer_rounding)):
        z, dy, dx = (np.zeros((rows, cols), np.uint16) for _ in range(3))
        dbias = np.zeros(cols, np.float32)
        n, c = ctypes.c_int64(rows), ctypes.c_int64(cols)
        lib.albert_bias_gelu_rows(ptr(y), ptr(bias), ptr(z), n, c)
        lib.albert_bias_gelu_backward_rows(ptr(dz), ptr(y), ptr(bias), ptr(dy), ptr(dbias), n, c)
        lib.albert_softmax_backward_rows(ptr(dz), ptr(p), ctypes.c_float(0.125), ptr(dx), n, c)
        total = np.zeros((rows, cols), np.uint16)
        size = ctypes.c_int64(rows * cols)
        lib.albert_sum_terms(pointers, ctypes.c_int64(5), ptr(total), ctypes.c_int64(0), size)
        arrays = (z, dy, dx, total)
        results[name] = [a.view(BF16).astype(np.float64) for a in arrays] + [dbias]
        # Layer norms of x + bias + residual, inference form and training form.
        out, xhat = np.zeros((rows, cols), np.float32), np.zeros((rows, cols), np.float32)
        out16, rstd = np.zeros((rows, cols), np.uint16), np.zeros(rows, np.float32)
        eps = ctypes.c_float(1e-12)
        common = [ptr(t) for t in (dz, bias, residual, gamma, beta)] + [eps]
        lib.albert_residual_layer_norm_rows(*common, ptr(out), ptr(out16), n, c)
        results[name] += [out.copy(), out16.view(BF16).astype(np.float64)]
        lib.albert_residual_layer_norm_moments_rows(
            *common, ptr(out), ptr(out16), ptr(xhat), ptr(rstd), n, c
        )
        results[name] += [out, out16.view(BF16).astype(np.float64), xhat, rstd]
        z32, dy32, dx32, total32 = (np.zeros((rows, cols), np.float32) for _ in range(4))
        dbias32 = np.zeros(cols, np.float32)
        lib.albert_bias_gelu_float_rows(ptr(y32), ptr(bias32), ptr(z32), n, c)
        lib.albert_bias_gelu_backward_float_rows(
            ptr(dz32), ptr(y32), ptr(bias32), ptr(dy32), ptr(dbias32), n, c
        )
        lib.albert_softmax_backward_float_rows(
            ptr(dz32), ptr(p32), ctypes.c_float(0.125), ptr(dx32), n, c
        )
        lib.albert_sum_float_terms(
            pointers32, ctypes.c_int64(5), ptr(total32), ctypes.c_int64(0), size
        )
        results[name] += [z32, dy32, dbias32, dx32, total32]
        # The layer-norm gradient with two bfloat16 copies' gradients (dy: the float32 values).
        ln_dx, ln_sums = np.zeros((rows, cols), np.float32), np.zeros((3, cols), np.float32)
        ln_dx16 = np.zeros((rows, cols), np.uint16)
        lib.albert_layer_norm_backward_rows(
            ptr(dz32),
            (ctypes.c_void_p * 2)(dz.ctypes.data, p.ctypes.data),
            ctypes.c_int64(2),
            ptr(xhat),
            ptr(rstd),
            ptr(gamma),
            ptr(ln_dx),
            ptr(ln_dx16),
            ptr(ln_sums[0]),
            ptr(ln_sums[1]),
            ptr(ln_sums[2]),
            n,
            c,
        )
        results[name] += [ln_dx, ln_dx16.view(BF16).astype(np.float64), *ln_sums]
    # Output name -> whether bfloat16 (else float32, compared to float32 rounding).
    names = {"gelu": 1, "dy": 1, "dx": 1, "sum": 1, "db": 0, "ln": 0, "ln16": 1}
    names.update({"moments ln": 0, "moments ln16": 1, "xhat": 0, "rstd": 0})
    names.update({"gelu32": 0, "dy32": 0, "db32": 0, "dx32": 0, "sum32": 0})
    names.update({"ln dx": 0, "ln dx16": 1, "dgamma": 0, "dbeta": 0, "dx_sum": 0})
    for got, want, (what, bfloat16) in zip(results["vector"], results["plain"], names.items()):
        both_nan = np.isnan(got) & np.isnan(want)
        np.testing.assert_array_equal(np.isnan(got), np.isnan(want), err_msg=what)
        got, want = got[~both_nan], want[~both_nan]
        if bfloat16:  # one bfloat16 ulp at most, where float32 rounding differs at a tie
            np.testing.assert_allclose(got, want, rtol=2**-8, atol=1e-30, err_msg=what)
            assert np.mean(got != want) < 0.02, what
        else:
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6, err_msg=what)
    # The float32 sums are the sequential ones to the bit in either build.
    sequential = terms32[0].copy()
    for term in terms32[1:]:
        sequential += term
    for build in ("vector", "plain"):
        np.testing.assert_array_equal(results[build][15], sequential, err_msg=build)
    # The two roundings agree but on float32 subnormals, which vcvtneps2bf16 flushes.
    for got, want, what in zip(results["integer"], results["vector"], names):
        normal = ~(np.abs(got) < 2**-126)
        np.testing.assert_array_equal(got[normal], want[normal], err_msg=what)
        assert np.all(want[~normal] == 0.0), what


def test_residual_layer_norm_moments_for_the_gradient():
    rng = np.random.default_rng(5)
    x16, b16 = _bf16(rng.normal(size=(3, 5, 40))), _bf16(rng.normal(size=40))
    residual = rng.normal(size=(3, 5, 40)).astype(np.float32)
    gamma, beta = rng.normal(size=40).astype(np.float32), rng.normal(size=40).astype(np.float32)
    out, out16, xhat, rstd = native_kernels.residual_layer_norm_moments(
        x16, b16, residual, gamma, beta, 1e-12
    )
    s = _as64(x16) + _as64(b16) + residual
    centred = s - s.mean(-1, keepdims=True)
    want_rstd = 1 / np.sqrt((centred**2).mean(-1, keepdims=True) + 1e-12)
    assert out.shape == out16.shape == xhat.shape == (3, 5, 40) and rstd.shape == (3, 5, 1)
    assert out16.dtype == tf.bfloat16
    np.testing.assert_array_equal(_as64(out16), _as64(tf.cast(out, tf.bfloat16)))
    np.testing.assert_allclose(rstd.numpy(), want_rstd, rtol=1e-5)
    np.testing.assert_allclose(xhat.numpy(), centred * want_rstd, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(
        out.numpy(), albert_numpy.layer_norm(s, beta, gamma, eps=1e-12), rtol=1e-5, atol=1e-5
    )


def test_layer_norm_backward_equals_the_loop():
    rng = np.random.default_rng(6)
    dy, xhat = (tf.constant(rng.normal(size=(70, 48)), tf.float32) for _ in range(2))
    rstd = tf.constant(rng.uniform(0.5, 2.0, size=(70, 1)), tf.float32)
    gamma = tf.constant(rng.normal(size=48), tf.float32)
    dx, dx16, dgamma, dbeta, dx_sum = native_kernels.layer_norm_backward(dy, xhat, rstd, gamma)
    with speed_paths.forced(NO_NATIVE_KERNELS):
        want_dx, want_dgamma, want_dbeta = fe.layer_norm_backward(dy, xhat, rstd, gamma)
    np.testing.assert_allclose(dx.numpy(), want_dx.numpy(), rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(_as64(dx16), _as64(tf.cast(dx, tf.bfloat16)))
    np.testing.assert_allclose(dgamma.numpy(), want_dgamma.numpy(), rtol=1e-5, atol=1e-4)
    np.testing.assert_allclose(dbeta.numpy(), want_dbeta.numpy(), rtol=1e-5, atol=1e-4)
    np.testing.assert_allclose(dx_sum.numpy(), _as64(dx).sum(0), rtol=1e-5, atol=1e-4)
    # The column sums do not depend on the number of threads: fixed blocks, fixed order.
    again = native_kernels.layer_norm_backward(dy, xhat, rstd, gamma)
    np.testing.assert_array_equal(again[2].numpy(), dgamma.numpy())
    np.testing.assert_array_equal(again[4].numpy(), dx_sum.numpy())


def test_layer_norm_backward_adds_the_gradients_of_the_bfloat16_copies():
    rng = np.random.default_rng(8)
    dy, xhat = (tf.constant(rng.normal(size=(70, 48)), tf.float32) for _ in range(2))
    copies = [_bf16(rng.normal(size=(70, 48))) for _ in range(3)]
    rstd = tf.constant(rng.uniform(0.5, 2.0, size=(70, 1)), tf.float32)
    gamma = tf.constant(rng.normal(size=48), tf.float32)
    for count in (1, 3):
        got = native_kernels.layer_norm_backward(dy, xhat, rstd, gamma, copies[:count])
        # As if the graph had added them before the kernel in float32 (up to float32
        # rounding: the compiler may contract the sum into the products that follow).
        total = dy + tf.add_n([tf.cast(c, tf.float32) for c in copies[:count]])
        want = native_kernels.layer_norm_backward(total, xhat, rstd, gamma)
        for g, w in zip(got[::2] + got[3:4], want[::2] + want[3:4]):
            np.testing.assert_allclose(_as64(g), _as64(w), rtol=1e-5, atol=1e-5)
    plain = native_kernels.layer_norm_backward(dy, xhat, rstd, gamma)
    assert np.abs(_as64(got[0]) - _as64(plain[0])).max() > 0.1  # the copies' gradients count
    with pytest.raises(tf.errors.InvalidArgumentError, match="dy_bfloat16 must have the shape"):
        native_kernels.layer_norm_backward(dy, xhat, rstd, gamma, [copies[0], copies[1][:3]])


def _gradients_with_and_without_kernels(model, inputs):
    """A training step's gradients of all trainable variables, with the native kernels
    and with the loops and ops they replace (each traced on its own)."""

    def grads(x):
        with tf.GradientTape() as tape:
            out = model(x, training=True)
            loss = tf.reduce_sum(out["sequence_output"] * tf.sin(tf.range(16.0)))
        return tape.gradient(loss, model.trainable_variables)

    native = tf.function(grads)(inputs)
    with speed_paths.forced(NO_NATIVE_KERNELS):
        loops = tf.function(grads)(inputs)
    return native, loops


def test_float32_layer_norms_against_float64():
    # The same kernels for a float32 x and bias: no bfloat16 copies ([0] in their place).
    rng = np.random.default_rng(11)
    x, residual = (tf.constant(rng.normal(size=(3, 7, 40)), tf.float32) for _ in range(2))
    bias, gamma, beta = (tf.constant(rng.normal(size=40), tf.float32) for _ in range(3))
    s = _as64(x) + _as64(bias) + _as64(residual)
    want = albert_numpy.layer_norm(s, beta.numpy(), gamma.numpy(), eps=1e-12)
    out, no_copy = native_kernels.residual_layer_norm(x, bias, residual, gamma, beta, 1e-12)
    assert out.dtype == tf.float32 and out.shape == (3, 7, 40) and no_copy.shape == (0,)
    np.testing.assert_allclose(out.numpy(), want, rtol=1e-5, atol=1e-5)
    out2, no_copy, xhat, rstd = native_kernels.residual_layer_norm_moments(
        x, bias, residual, gamma, beta, 1e-12
    )
    centred = s - s.mean(-1, keepdims=True)
    want_rstd = 1 / np.sqrt((centred**2).mean(-1, keepdims=True) + 1e-12)
    assert no_copy.shape == (0,) and rstd.shape == (3, 7, 1)
    np.testing.assert_allclose(out2.numpy(), want, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(rstd.numpy(), want_rstd, rtol=1e-5)
    np.testing.assert_allclose(xhat.numpy(), centred * want_rstd, rtol=1e-5, atol=1e-5)
    # The gradient against float64: dx = rstd (g - mean(g) - xhat mean(g xhat)).
    dy = tf.constant(rng.normal(size=(3, 7, 40)), tf.float32)
    dx, no_copy, dgamma, dbeta, dx_sum = native_kernels.layer_norm_backward(
        dy, xhat, rstd, gamma, dtype=tf.float32
    )
    xhat64, dy64 = centred * want_rstd, _as64(dy)
    g = dy64 * _as64(gamma)
    want_dx = want_rstd * (
        g - g.mean(-1, keepdims=True) - xhat64 * (g * xhat64).mean(-1, keepdims=True)
    )
    assert dx.shape == (3, 7, 40) and no_copy.shape == (0,)
    np.testing.assert_allclose(dx.numpy(), want_dx, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(dgamma.numpy(), (dy64 * xhat64).sum((0, 1)), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(dbeta.numpy(), dy64.sum((0, 1)), rtol=1e-5, atol=1e-4)
    np.testing.assert_allclose(dx_sum.numpy(), want_dx.sum((0, 1)), rtol=1e-4, atol=1e-4)
    # A float32 layer norm takes no gradients of bfloat16 copies: it wrote none.
    with pytest.raises(tf.errors.InvalidArgumentError, match="writes no bfloat16 copy"):
        native_kernels.layer_norm_backward(
            dy, xhat, rstd, gamma, [_bf16(dy.numpy())], dtype=tf.float32
        )


def test_float32_elementwise_kernels_against_float64():
    # The GELU, heads, softmax-gradient and sum kernels for float32 tensors: float32
    # results (no rounding to bfloat16), the heads exact, the sums the sequential ones.
    rng = np.random.default_rng(15)
    y = tf.constant(rng.normal(scale=3.0, size=(33, 200)), tf.float32)
    bias = tf.constant(rng.normal(scale=0.5, size=200), tf.float32)
    z = native_kernels.bias_gelu(y, bias)
    x = _as64(y) + _as64(bias)
    with np.errstate(over="ignore"):
        exact = x / (1.0 + np.exp(-2.0 * np.sqrt(2.0 / np.pi) * (x + 0.044715 * x**3)))
    assert z.dtype == tf.float32
    np.testing.assert_allclose(_as64(z), exact, rtol=1e-5, atol=1e-7)
    dz = tf.constant(rng.normal(size=(33, 200)), tf.float32)
    dy, dbias = native_kernels.bias_gelu_backward(dz, y, bias)
    c, a = np.sqrt(2.0 / np.pi), 0.044715
    t = np.tanh(c * (x + a * x**3))
    want_dy = _as64(dz) * (0.5 * (1 + t) + 0.5 * x * (1 - t * t) * c * (1 + 3 * a * x * x))
    assert dy.dtype == dbias.dtype == tf.float32
    np.testing.assert_allclose(_as64(dy), want_dy, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(_as64(dbias), want_dy.sum(0), rtol=1e-5, atol=1e-5)
    rows = tf.constant(rng.normal(size=(5, 30, 24)), tf.float32)  # 150 rows: uneven blocks
    heads = native_kernels.bias_add_heads(rows, bias[:24], 4)
    np.testing.assert_array_equal(
        heads.numpy(), tf.transpose(tf.reshape(rows + bias[:24], [5, 30, 4, 6]), [0, 2, 1, 3])
    )
    back, dbias = native_kernels.heads_backward(heads)
    np.testing.assert_array_equal(back.numpy(), (rows + bias[:24]).numpy())
    np.testing.assert_allclose(_as64(dbias), _as64(back).sum((0, 1)), rtol=1e-5, atol=1e-5)
    probs = tf.nn.softmax(tf.constant(rng.normal(size=(3, 2, 5, 37)) * 3, tf.float32))
    dprobs = tf.constant(rng.normal(size=(3, 2, 5, 37)), tf.float32)
    got = native_kernels.softmax_backward(dprobs, probs, 0.125)
    p, dp = _as64(probs), _as64(dprobs)
    exact = 0.125 * p * (dp - (dp * p).sum(-1, keepdims=True))
    np.testing.assert_allclose(_as64(got), exact, rtol=1e-5, atol=1e-7)
    # Twelve terms in passes of at most FLOAT32_TERMS_PER_PASS: each pass starts from the
    # sum so far, so the result is the sequential sum to the bit.
    terms = [tf.constant(rng.normal(size=(33, 70)) * 10.0 ** rng.integers(-2, 3), tf.float32)]
    terms += [tf.constant(rng.normal(size=(33, 70)), tf.float32) for _ in range(11)]
    sequential = terms[0].numpy()
    for term in terms[1:]:
        sequential = sequential + term.numpy()
    np.testing.assert_array_equal(native_kernels.sum_terms(terms).numpy(), sequential)
    passes = tf.function(fe.sum_terms).get_concrete_function(terms).graph.get_operations()
    assert [op.type for op in passes].count("AlbertSumTerms") == 4  # 4 + 3 + 3 + 2 terms
    np.testing.assert_array_equal(tf.function(fe.sum_terms)(terms).numpy(), sequential)


def test_float32_training_uses_the_native_kernels():
    # A float32 training step: the layer norms (with the dense biases before them), the
    # FFN's bias and GELU, the query/key/value biases and heads, the softmax's gradient and
    # the shared kernels' gradient sums as kernels, the gradients those of the op chains
    # they replace to float32 rounding.
    cfg = CONFIGS["shared_gelu"]
    model, inputs = built_encoder(cfg, "float32")
    train_ops = _training_op_types(model, inputs)
    layers, layer_norms = cfg.num_hidden_layers, 2 * cfg.num_hidden_layers
    assert train_ops.count("AlbertResidualLayerNormMoments") == layer_norms
    assert train_ops.count("AlbertLayerNormBackward") == layer_norms
    assert train_ops.count("AlbertBiasGelu") == train_ops.count("AlbertBiasGeluBackward") == layers
    assert train_ops.count("AlbertBiasAddHeads") == 3 * layers
    assert train_ops.count("AlbertHeadsBackward") == 3 * layers
    assert train_ops.count("AlbertSoftmaxBackward") == layers
    assert train_ops.count("AlbertSumTerms") >= 6  # six shared kernels, in passes of 4
    with speed_paths.forced(NO_NATIVE_KERNELS):
        loop_ops = _training_op_types(model, inputs)
    assert not {op for op in loop_ops if op.startswith("Albert")}
    # The moments' chain (two means, a square, rsqrt, ...), the gradient's column sums,
    # the heads' transposes and biases' sums, the softmax gradient's chain.
    assert len(train_ops) < len(loop_ops) - 8 * layer_norms - 8 * layers

    native, loops = _gradients_with_and_without_kernels(model, inputs)
    compared = {}
    for variable, got, want in zip(model.trainable_variables, native, loops):
        if want is None:  # the pooler's
            assert got is None, variable.name
            continue
        got, want = (tf.convert_to_tensor(g).numpy().astype(np.float64) for g in (got, want))
        compared[variable.path] = got
        if variable.path.endswith("key/bias"):  # zero but for rounding noise (see above)
            continue
        np.testing.assert_allclose(
            got, want, rtol=1e-4, atol=1e-5 * np.max(np.abs(want)), err_msg=variable.name
        )
    assert len(compared) == len(model.trainable_variables) - 2
    key_bias = [g for p, g in compared.items() if p.endswith("key/bias")][0]
    query_bias = [g for p, g in compared.items() if p.endswith("query/bias")][0]
    assert np.max(np.abs(key_bias)) <= 1e-5 * np.max(np.abs(query_bias))


def _heads_by_transpose(y, bias, num_heads):
    """The loops' way: the sum rounded once, reshaped and transposed to heads."""
    b, s_, h = y.shape
    total = tf.cast(tf.cast(y, tf.float32) + tf.cast(bias, tf.float32), tf.bfloat16)
    return tf.transpose(tf.reshape(total, [b, s_, num_heads, h // num_heads]), [0, 2, 1, 3])


def test_bias_add_heads_is_the_rounded_sum_transposed():
    rng = np.random.default_rng(9)
    y, bias = _bf16(rng.normal(size=(3, 7, 24))), _bf16(rng.normal(size=24))
    got = native_kernels.bias_add_heads(y, bias, 4)
    assert got.shape == (3, 4, 7, 6) and got.dtype == tf.bfloat16
    np.testing.assert_array_equal(_as64(got), _as64(_heads_by_transpose(y, bias, 4)))


def test_heads_backward_transposes_back_and_sums_the_bias_gradient():
    rng = np.random.default_rng(10)
    dheads = _bf16(rng.normal(size=(5, 4, 30, 6)))  # 150 rows: uneven blocks of rows
    dy, dbias = native_kernels.heads_backward(dheads)
    assert dy.shape == (5, 30, 24) and dbias.shape == (24,) and dbias.dtype == tf.bfloat16
    want_dy = tf.reshape(tf.transpose(dheads, [0, 2, 1, 3]), [5, 30, 24])
    np.testing.assert_array_equal(_as64(dy), _as64(want_dy))
    want = _as64(want_dy).sum(axis=(0, 1))
    np.testing.assert_allclose(_as64(dbias), want, rtol=2**-8, atol=1e-6)
    again = native_kernels.heads_backward(dheads)[1]
    np.testing.assert_array_equal(_as64(again), _as64(dbias))


def test_bias_add_heads_gradient_equals_the_transpose():
    rng = np.random.default_rng(11)
    y, bias = _bf16(rng.normal(size=(2, 9, 16))), _bf16(rng.normal(size=16))
    weights = tf.constant(rng.normal(size=(2, 4, 9, 4)), tf.float32)

    @tf.function
    def grads(heads_of):
        with tf.GradientTape() as tape:
            tape.watch([y, bias])
            loss = tf.reduce_sum(tf.cast(heads_of(y, bias, 4), tf.float32) * weights)
        return tape.gradient(loss, [y, bias])

    got = grads(lambda y, b, n: fe.bias_add_heads(tf.reshape(y, [18, 16]), b, n, batch=2))
    want = grads(lambda y, b, n: tf.transpose(tf.reshape(y + b, [2, 9, n, 4]), [0, 2, 1, 3]))
    np.testing.assert_array_equal(_as64(got[0]), _as64(want[0]))
    np.testing.assert_allclose(_as64(got[1]), _as64(want[1]), rtol=2**-7, atol=1e-2)


def test_shapes_are_checked():
    x = _bf16(np.ones((4, 8)))
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"bias must be a vector.*\(8\)"):
        native_kernels.bias_gelu(x, _bf16(np.ones(7)))
    ones = np.ones(8, np.float32)
    with pytest.raises(tf.errors.InvalidArgumentError, match="residual must have the shape"):
        native_kernels.residual_layer_norm(
            x, _bf16(ones), np.ones((4, 7), np.float32), ones, ones, 1e-12
        )
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"gamma must be a vector"):
        native_kernels.residual_layer_norm(
            x, _bf16(ones), np.ones((4, 8), np.float32), ones[:3], ones, 1e-12
        )
    with pytest.raises(tf.errors.InvalidArgumentError, match="not divisible by num_heads 5"):
        native_kernels.bias_add_heads(_bf16(np.ones((2, 3, 8))), _bf16(ones), 5)
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"bias must be a vector.*\(8\)"):
        native_kernels.bias_add_heads(_bf16(np.ones((2, 3, 8))), _bf16(ones[:4]), 2)
    # Zero rows: empty outputs, no error.
    dy, dbias = native_kernels.heads_backward(_bf16(np.ones((0, 2, 3, 4))))
    assert dy.shape == (0, 3, 8) and _as64(dbias).tolist() == [0.0] * 8
    assert native_kernels.bias_gelu(_bf16(np.ones((0, 8))), _bf16(ones)).shape == (0, 8)


def test_gradients_equal_the_loops():
    rng = np.random.default_rng(2)
    y, bias = _bf16(rng.normal(size=(16, 24))), _bf16(rng.normal(size=24))
    x, residual = (
        _bf16(rng.normal(size=(16, 24))),
        tf.constant(rng.normal(size=(16, 24)), tf.float32),
    )
    gamma, beta = (
        tf.constant(rng.normal(size=24), tf.float32),
        tf.constant(rng.normal(size=24), tf.float32),
    )
    weights = tf.constant(rng.normal(size=(16, 24)), tf.float32)

    def grads(layer_norm):
        with tf.GradientTape(persistent=True) as tape:
            tape.watch([y, bias, x, residual, gamma, beta])
            gelu = tf.reduce_sum(tf.cast(fe.bias_gelu_tanh(y, bias), tf.float32) * weights)
            ln = tf.reduce_sum(layer_norm(x, residual, gamma, beta, 1e-12, bias=bias) * weights)
        return tape.gradient(gelu, [y, bias]) + tape.gradient(ln, [x, bias, residual, gamma, beta])

    native = tf.function(grads)(fe.layer_norm)
    with speed_paths.forced(NO_NATIVE_KERNELS):  # oneDNN's layer norm has no gradient
        loops = tf.function(grads)(lambda *a, **k: fe.layer_norm_forward(*a, **k)[0])
    for got, want in zip(native, loops):
        assert got.dtype == want.dtype
        np.testing.assert_allclose(_as64(got), _as64(want), rtol=2**-7, atol=1e-2)


def test_model_gradients_equal_the_loops():
    # The whole bfloat16 training step's gradients, native kernels (GELU, layer norms,
    # heads, softmax, the shared kernels' sums) against the loops they replace.
    model, inputs = built_encoder(CONFIGS["shared_gelu"], "mixed_bfloat16")

    native, loops = _gradients_with_and_without_kernels(model, inputs)
    compared = 0
    largest = {}
    for variable, got, want in zip(model.trainable_variables, native, loops):
        assert (got is None) == (want is None), variable.name
        if got is None:  # the pooler's
            continue
        compared += 1
        got, want = (tf.convert_to_tensor(g).numpy().astype(np.float64) for g in (got, want))
        largest[variable.path] = np.max(np.abs(want))
        if variable.path.endswith("key/bias"):
            # Zero in exact arithmetic (the softmax ignores what it adds to a whole row):
            # rounding noise on both sides, compared below with the query bias's scale.
            key_bias = max(np.max(np.abs(got)), largest[variable.path])
            continue
        scale = np.max(np.abs(want))
        # A few bfloat16 roundings apart (0.75% of the largest entry seen).
        assert np.max(np.abs(got - want)) <= 0.02 * scale + 1e-6, variable.name
    assert compared == len(model.trainable_variables) - 2
    query_bias = [v for k, v in largest.items() if k.endswith("query/bias")][0]
    assert key_bias <= 0.01 * query_bias


def test_gradient_through_the_bfloat16_copy_alone():
    rng = np.random.default_rng(7)
    x, bias = _bf16(rng.normal(size=(6, 16))), _bf16(rng.normal(size=16))
    residual = tf.constant(rng.normal(size=(6, 16)), tf.float32)
    gamma, beta = tf.ones([16]), tf.zeros([16])

    @tf.function
    def grads(use):
        with tf.GradientTape() as tape:
            tape.watch(residual)
            out = fe.layer_norm(x, residual, gamma, beta, 1e-12, bias=bias)
            used = fe.cast(out, tf.bfloat16) if use == "copy" else out
            loss = tf.reduce_sum(tf.cast(used, tf.float32) * tf.range(16, dtype=tf.float32))
        return tape.gradient(loss, residual)

    np.testing.assert_allclose(grads("copy").numpy(), grads("float32").numpy(), atol=1e-5)


def _op_types(model, inputs, training=False):
    fn = tf.function(lambda x: model(x, training=training)["sequence_output"])
    return [op.type for op in fn.get_concrete_function(inputs).graph.get_operations()]


def _training_op_types(model, inputs):
    @tf.function
    def step(x):
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(model(x, training=True)["sequence_output"])
        return tape.gradient(loss, model.trainable_variables)

    return [op.type for op in step.get_concrete_function(inputs).graph.get_operations()]


def test_bfloat16_graphs_use_them_accelerators_not():
    cfg = CONFIGS["shared_gelu"]
    model, inputs = built_encoder(cfg, "mixed_bfloat16")
    ops = _op_types(model, inputs)
    assert ops.count("AlbertBiasGelu") == cfg.num_hidden_layers
    assert ops.count("AlbertResidualLayerNorm") == 2 * cfg.num_hidden_layers
    # Training: the layer norms' form that keeps the moments, the GELU and its gradient.
    train_ops = _training_op_types(model, inputs)
    assert "AlbertResidualLayerNorm" not in train_ops
    assert train_ops.count("AlbertResidualLayerNormMoments") == 2 * cfg.num_hidden_layers
    assert train_ops.count("AlbertBiasGelu") == cfg.num_hidden_layers
    assert train_ops.count("AlbertBiasGeluBackward") == cfg.num_hidden_layers
    assert train_ops.count("AlbertLayerNormBackward") == 2 * cfg.num_hidden_layers
    assert train_ops.count("AlbertSoftmaxBackward") == cfg.num_hidden_layers
    # The shared kernels' gradients (six, summed over the layers in one pass each).
    assert train_ops.count("AlbertSumTerms") == 6
    # The products read the layer norms' bfloat16 copies: no cast of a layer-norm output
    # (nor of its gradient), and no sum of the two gradients outside the kernel (each
    # layer norm's but the last's, whose copy nothing reads).
    with speed_paths.forced(NO_NATIVE_KERNELS):
        loop_train_ops = _training_op_types(model, inputs)
    layer_norms = 2 * cfg.num_hidden_layers
    # Query, key and value: bias and heads in one pass, back in one with the bias's sum.
    assert train_ops.count("AlbertBiasAddHeads") == 3 * cfg.num_hidden_layers
    assert train_ops.count("AlbertHeadsBackward") == 3 * cfg.num_hidden_layers
    assert train_ops.count("Transpose") == loop_train_ops.count("Transpose") - 6 * (
        cfg.num_hidden_layers
    )
    assert train_ops.count("Cast") <= loop_train_ops.count("Cast") - 2 * (layer_norms - 1)
    # Nor of the query, key and value products' input gradients (every block's but the
    # first's, whose input is the embeddings' projection): each reaches the layer norm's
    # pass on its own.
    assert train_ops.count("AddN") <= loop_train_ops.count("AddN") - (layer_norms - 1) - (
        cfg.num_hidden_layers - 1
    )
    # The layer-norm gradient's three column sums (dgamma, dbeta, the dense bias's) are
    # in the kernel's pass.
    assert train_ops.count("Sum") <= loop_train_ops.count("Sum") - 3 * layer_norms
    with speed_paths.forced(speed_paths.PLAIN):
        assert not {"AlbertBiasGelu", "AlbertResidualLayerNorm"} & set(_op_types(model, inputs))
    with fe.disabled():
        assert not {"AlbertBiasGelu", "AlbertResidualLayerNorm"} & set(_op_types(model, inputs))
    with speed_paths.forced(NO_NATIVE_KERNELS):
        loops = tf.function(lambda x: model(x)["sequence_output"])(inputs)
    native = tf.function(lambda x: model(x)["sequence_output"])(inputs)
    np.testing.assert_allclose(native.numpy(), loops.numpy(), rtol=0.05, atol=0.05)
    # float32 takes the layer norms (test_float32_training_uses_the_layer_norm_kernels),
    # not the bfloat16 GELU.
    model32, inputs32 = built_encoder(cfg, "float32")
    assert "AlbertBiasGelu" not in _op_types(model32, inputs32)


@pytest.fixture
def products():
    """Skips the test where our products cannot run (no AVX512_BF16, or no kernels)."""
    if not native_kernels.products_ready():
        pytest.skip("no bfloat16 products here (no AVX512_BF16, or no C++ kernels)")


NO_NATIVE_PRODUCTS = dataclasses.replace(speed_paths.CPU_NATIVE, native_products=False)


@pytest.mark.parametrize("rows", [70, 32, 1])
def test_dense_bias_gelu_is_the_exact_result_rounded_once(products, rows):
    # Row counts that fill whole 32-row blocks, end one early, and make one of a single row.
    rng = np.random.default_rng(rows)
    x, kernel = _bf16(rng.normal(size=(rows, 64))), _bf16(rng.normal(size=(64, 96)) * 0.3)
    bias = _bf16(rng.normal(size=96))
    packed = native_kernels.pack_kernel(kernel)
    assert packed.shape == (6, 32, 32) and packed.dtype == tf.bfloat16
    # The packed layout: packed[c, k, 2 j + t] = kernel[2 k + t, 16 c + j].
    np.testing.assert_array_equal(
        _as64(packed)[1, 3, 2 * 5 + 1], _as64(kernel)[2 * 3 + 1, 16 * 1 + 5]
    )
    got = _as64(native_kernels.dense_bias_gelu(x, kernel, packed, bias))
    exact = albert_numpy.gelu_tanh(_as64(x) @ _as64(kernel) + _as64(bias))
    # One rounding of the exact value (a float32 sum order on top): within a bfloat16 ulp.
    np.testing.assert_allclose(got, exact, rtol=2**-8, atol=1e-6)
    # oneDNN's product is rounded to bfloat16 before the bias and GELU: further off.
    loop = _as64(native_kernels.bias_gelu(tf.matmul(x, kernel), bias))
    assert np.abs(got - exact).mean() < np.abs(loop - exact).mean()


def test_products_on_vectors_are_the_exact_result_rounded_once(products, tmp_path):
    # The vector units' product, built without AMX (where this CPU has AMX, the library
    # the model loads takes the tiles instead), against the exact value and against the
    # library as built for this machine: each within a bfloat16 ulp of the exact value.
    import ctypes

    vectors = _loops_library(tmp_path, "vectors", "-mno-amx-tile", "-mno-amx-bf16")
    native = _loops_library(tmp_path, "native")
    rng = np.random.default_rng(21)
    rows, k_size, n_size = 45, 96, 64  # a block and a part, three 32-deep steps of K
    x = rng.normal(size=(rows, k_size)).astype(BF16)
    kernel = (rng.normal(size=(k_size, n_size)) * 0.3).astype(BF16)
    bias = rng.normal(size=n_size).astype(BF16)
    exact = albert_numpy.gelu_tanh(
        x.astype(np.float64) @ kernel.astype(np.float64) + bias.astype(np.float64)
    )

    def ptr(a):
        return a.ctypes.data_as(ctypes.c_void_p)

    sizes = [ctypes.c_int64(v) for v in (k_size, n_size)]
    for lib in (vectors, native):
        assert lib.albert_products_ready() == 1
        packed = np.zeros(k_size * n_size, np.uint16)
        lib.albert_pack_columns(
            ptr(kernel.view(np.uint16)),
            ptr(packed),
            *sizes,
            ctypes.c_int64(0),
            ctypes.c_int64(n_size // 16),
        )
        out = np.zeros((rows, n_size), np.uint16)
        for first, last in ((0, 32), (32, rows)):  # as ops.cc splits the rows
            lib.albert_dense_bias_gelu_rows(
                ptr(x.view(np.uint16)),
                ptr(packed),
                ptr(bias.view(np.uint16)),
                ptr(out),
                ctypes.c_int64(first),
                ctypes.c_int64(last),
                *sizes,
            )
        got = out.view(BF16).astype(np.float64)
        np.testing.assert_allclose(got, exact, rtol=2**-8, atol=1e-6)


def test_dense_heads_is_the_product_split_into_heads(products):
    # 37 positions: row blocks of 32 that cross sequences; heads of 32 = two 16-lane stores.
    rng = np.random.default_rng(4)
    x, kernel = _bf16(rng.normal(size=(3, 37, 64))), _bf16(rng.normal(size=(64, 192)) * 0.3)
    bias = _bf16(rng.normal(size=192))
    packed = native_kernels.pack_kernel(kernel)
    got = _as64(native_kernels.dense_heads(x, kernel, packed, bias, groups=3, num_heads=2))
    exact = _as64(x).reshape(-1, 64) @ _as64(kernel) + _as64(bias)
    exact = exact.reshape(3, 37, 3, 2, 32).transpose(2, 0, 3, 1, 4)
    assert got.shape == (3, 3, 2, 37, 32)
    np.testing.assert_allclose(got, exact, rtol=2**-8, atol=1e-6)
    with pytest.raises(tf.errors.InvalidArgumentError, match="heads of a multiple of 16"):
        native_kernels.dense_heads(x, kernel, packed, bias, groups=3, num_heads=3)


def test_dense_layer_norm_normalises_the_unrounded_sum(products):
    rng = np.random.default_rng(6)
    x, kernel = _bf16(rng.normal(size=(70, 64))), _bf16(rng.normal(size=(64, 96)) * 0.3)
    bias = _bf16(rng.normal(size=96))
    residual = tf.constant(rng.normal(size=(70, 96)), tf.float32)
    gamma, beta = (tf.constant(rng.normal(size=96), tf.float32) for _ in range(2))
    packed = native_kernels.pack_kernel(kernel)
    out, out16 = native_kernels.dense_residual_layer_norm(
        x, kernel, packed, bias, residual, gamma, beta, 1e-12
    )
    s = _as64(x) @ _as64(kernel) + _as64(bias) + _as64(residual)
    centred = s - s.mean(-1, keepdims=True)
    exact = centred / np.sqrt((centred**2).mean(-1, keepdims=True) + 1e-12)
    exact = exact * _as64(gamma) + _as64(beta)
    np.testing.assert_allclose(_as64(out), exact, rtol=1e-4, atol=1e-4 * np.abs(exact).max())
    np.testing.assert_array_equal(_as64(out16), _as64(tf.cast(out, tf.bfloat16)))
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"residual must be \[70, 96\]"):
        native_kernels.dense_residual_layer_norm(
            x, kernel, packed, bias, residual[:, :64], gamma, beta, 1e-12
        )


def test_product_shapes_are_checked(products):
    kernel = _bf16(np.ones((64, 96)))
    with pytest.raises(tf.errors.InvalidArgumentError, match="columns must be a positive multiple"):
        native_kernels.pack_kernel(_bf16(np.ones((64, 40))))
    packed = native_kernels.pack_kernel(kernel)
    x, bias = _bf16(np.ones((5, 64))), _bf16(np.ones(96))
    with pytest.raises(tf.errors.InvalidArgumentError, match="packed is for a kernel of 64 rows"):
        native_kernels.dense_bias_gelu(_bf16(np.ones((5, 32))), kernel, packed, bias)
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"bias must be a vector.*\(96\)"):
        native_kernels.dense_bias_gelu(x, kernel, packed, bias[:95])
    with pytest.raises(tf.errors.InvalidArgumentError, match="kernel must be"):
        native_kernels.dense_bias_gelu(x, kernel[:, :64], packed, bias)


def test_product_gradient_equals_the_loops(products):
    rng = np.random.default_rng(3)
    x, kernel = _bf16(rng.normal(size=(40, 64))), _bf16(rng.normal(size=(64, 32)) * 0.3)
    bias = _bf16(rng.normal(size=32))
    weights = tf.constant(rng.normal(size=(40, 32)), tf.float32)

    @tf.function
    def grads(dense):
        with tf.GradientTape() as tape:
            tape.watch([x, kernel, bias])
            loss = tf.reduce_sum(tf.cast(dense(x, kernel, bias), tf.float32) * weights)
        return tape.gradient(loss, [x, kernel, bias])

    got = grads(lambda x, k, b: fe.dense_bias_gelu(x, k, fe.packed_kernel(k), b))
    want = grads(lambda x, k, b: native_kernels.bias_gelu(tf.matmul(x, k), b))
    # The heads' product: 40 rows = 2 sequences of 20, one group of 2 heads of 16.
    weights_heads = tf.constant(rng.normal(size=(1, 2, 2, 20, 16)), tf.float32)

    @tf.function
    def head_grads(dense):
        with tf.GradientTape() as tape:
            tape.watch([x, kernel, bias])
            heads = dense(tf.reshape(x, [2, 20, 64]), kernel, bias)
            loss = tf.reduce_sum(tf.cast(heads, tf.float32) * weights_heads)
        return tape.gradient(loss, [x, kernel, bias])

    def split(y):  # [2, 20, 32] -> [1, 2, 2, 20, 16]
        return tf.transpose(tf.reshape(y, [2, 20, 1, 2, 16]), [2, 0, 3, 1, 4])

    got += head_grads(lambda x, k, b: fe.dense_heads(x, k, fe.packed_kernel(k), b, 1, 2))
    want += head_grads(lambda x, k, b: split(tf.matmul(x, k) + b))
    # The output products with their layer norms.
    residual = tf.constant(rng.normal(size=(40, 32)), tf.float32)
    gamma, beta = (tf.constant(rng.normal(size=32), tf.float32) for _ in range(2))
    got += grads(
        lambda x, k, b: fe.dense_layer_norm(
            x, k, fe.packed_kernel(k), b, residual, gamma, beta, 1e-12
        )
    )
    want += grads(lambda x, k, b: fe.layer_norm(tf.matmul(x, k), residual, gamma, beta, 1e-12, b))
    for g, w in zip(got, want):
        scale = np.abs(_as64(w)).max()
        np.testing.assert_allclose(_as64(g), _as64(w), rtol=2**-6, atol=0.05 * scale)


# Sizes our products and attention take: multiples of 32, heads of 32.
PRODUCT_SIZED = CONFIGS["shared_gelu"].replace(
    hidden_size=64, intermediate_size=64, num_attention_heads=2
)


def _inference_ops_with_our_products(cfg, model, inputs):
    """The inference graph's op types, checked: each layer's query/key/value product with
    the biases, written as heads, its FFN product with its bias and GELU, and its two
    output products with bias, residual and layer norm are products of ours, each shared
    kernel packed once, and its attention one kernel of ours; training keeps oneDNN's."""
    ops = _op_types(model, inputs)
    assert ops.count("AlbertAttention") == cfg.num_hidden_layers
    assert ops.count("AlbertDenseBiasGelu") == cfg.num_hidden_layers
    assert ops.count("AlbertDenseHeads") == cfg.num_hidden_layers
    assert ops.count("AlbertDenseResidualLayerNorm") == 2 * cfg.num_hidden_layers
    assert ops.count("AlbertPackKernel") == 4  # query/key/value, attention output, FFN x 2
    training_ops = _training_op_types(model, inputs)
    assert not {"AlbertDenseBiasGelu", "AlbertAttention"} & set(training_ops)
    return ops


def test_bfloat16_inference_runs_its_dense_products_as_ours(products):
    cfg = PRODUCT_SIZED
    model, inputs = built_encoder(cfg, "mixed_bfloat16")
    ops = _inference_ops_with_our_products(cfg, model, inputs)
    assert not {"AlbertBiasGelu", "AlbertResidualLayerNorm"} & set(ops)
    with speed_paths.forced(NO_NATIVE_PRODUCTS):
        assert "AlbertDenseBiasGelu" not in _op_types(model, inputs)
        want = tf.function(lambda x: model(x)["sequence_output"])(inputs).numpy()
    got = tf.function(lambda x: model(x)["sequence_output"])(inputs).numpy()
    np.testing.assert_allclose(got, want, rtol=0.05, atol=0.05 * np.abs(want).max())
    assert not np.array_equal(got, want)  # our products did run: unrounded accumulators


@pytest.fixture
def float_products():
    """Skips the test where our float32 products cannot run (no AVX-512, or no kernels)."""
    if not native_kernels.products_ready(tf.float32):
        pytest.skip("no float32 products here (no AVX-512, or no C++ kernels)")


def test_float_products_are_the_float32_result(float_products):
    # 70 rows: two whole 32-row blocks and one that ends early; K = 96, three steps of 32.
    rng = np.random.default_rng(8)
    x = tf.constant(rng.normal(size=(70, 96)), tf.float32)
    kernel = tf.constant(rng.normal(size=(96, 128)) * 0.3, tf.float32)
    bias = tf.constant(rng.normal(size=128), tf.float32)
    packed = native_kernels.pack_kernel(kernel)
    assert packed.shape == (8, 96, 16) and packed.dtype == tf.float32
    # The packed layout: packed[c, k, j] = kernel[k, 16 c + j].
    assert packed[5, 7, 3].numpy() == kernel[7, 16 * 5 + 3].numpy()
    y = _as64(x) @ _as64(kernel) + _as64(bias)
    got = native_kernels.dense_bias_gelu(x, kernel, packed, bias)
    assert got.dtype == tf.float32
    # float32 sums over K in another order than float64's: a few float32 ulps of |y|.
    np.testing.assert_allclose(_as64(got), albert_numpy.gelu_tanh(y), rtol=1e-5, atol=1e-5)
    heads = native_kernels.dense_heads(tf.reshape(x, [2, 35, 96]), kernel, packed, bias, 2, 4)
    want_heads = y.reshape(2, 35, 2, 4, 16).transpose(2, 0, 3, 1, 4)
    np.testing.assert_allclose(_as64(heads), want_heads, rtol=1e-5, atol=1e-5)
    residual = tf.constant(rng.normal(size=(70, 128)), tf.float32)
    gamma, beta = (tf.constant(rng.normal(size=128), tf.float32) for _ in range(2))
    out, no_copy = native_kernels.dense_residual_layer_norm(
        x, kernel, packed, bias, residual, gamma, beta, 1e-12
    )
    assert no_copy.shape == (0,)  # float32 products write no bfloat16 copy
    s = y + _as64(residual)
    centred = s - s.mean(-1, keepdims=True)
    want = centred / np.sqrt((centred**2).mean(-1, keepdims=True) + 1e-12)
    want = want * _as64(gamma) + _as64(beta)
    np.testing.assert_allclose(_as64(out), want, rtol=1e-5, atol=1e-5)
    assert fe.dense_layer_norm(x, kernel, packed, bias, residual, gamma, beta, 1e-12).shape == (
        70,
        128,
    )
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"packed must be \[1,32,16\]"):
        native_kernels.dense_bias_gelu(x[:, :32], kernel[:32], tf.zeros([8, 16, 32]), bias)


def _attention_exact(q, k, v, adder, scale):
    """The attention in float64: q [B, N, P, D], k, v [B, N, S, D] -> [B, P, N * D]."""
    q, k, v = (_as64(t) for t in (q, k, v))
    scores = q @ k.transpose(0, 1, 3, 2) * scale + _as64(adder)
    probs = np.exp(scores - scores.max(-1, keepdims=True))
    probs /= probs.sum(-1, keepdims=True)
    context = probs @ v
    return context.transpose(0, 2, 1, 3).reshape(q.shape[0], q.shape[2], -1)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_attention_is_the_softmax_of_the_scores_times_the_values(float_products, dtype):
    # 40 queries (a block of 32 and a part) over 50 keys (padded to 64 inside), one
    # sequence's last 20 keys masked as the model's adder does; heads of 64.
    if dtype == "bfloat16" and not native_kernels.products_ready(tf.bfloat16):
        pytest.skip("no bfloat16 products here")
    rng = np.random.default_rng(10)
    q, k, v = (tf.cast(rng.normal(size=(2, 3, length, 64)), dtype) for length in (40, 50, 50))
    adder = np.zeros((2, 1, 1, 50), np.float32)
    adder[1, ..., 30:] = -10000.0
    adder = tf.constant(adder)
    got = native_kernels.attention(q, k, v, adder, 0.125)
    assert got.shape == (2, 40, 3 * 64) and got.dtype == q.dtype
    exact = _attention_exact(q, k, v, adder, 0.125)
    # float32: within float32 rounding; bfloat16: the probabilities and the output are
    # rounded once each (the scores are not).
    tolerance = 1e-5 if dtype == "float32" else 2**-7
    np.testing.assert_allclose(_as64(got), exact, rtol=tolerance, atol=tolerance)
    # The masked keys take no weight: changing their values changes nothing.
    v_changed = tf.concat([v[:, :, :30], v[:, :, 30:] + tf.cast(5.0, v.dtype)], axis=2)
    changed = native_kernels.attention(q, k, v_changed, adder, 0.125)
    np.testing.assert_array_equal(_as64(changed)[1], _as64(got)[1])
    with pytest.raises(tf.errors.InvalidArgumentError, match="heads' size must be"):
        native_kernels.attention(q[..., :48], k[..., :48], v[..., :48], adder, 0.125)
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"adder must be \[2, 1, 1, 50\]"):
        native_kernels.attention(q, k, v, adder[:, :, :, :49], 0.125)


def test_attention_gradient_is_the_plain_ops(float_products):
    rng = np.random.default_rng(11)
    q, k, v = (tf.constant(rng.normal(size=(2, 2, length, 32)), tf.float32) for length in (5, 7, 7))
    adder = tf.constant(rng.normal(size=(2, 1, 1, 7)), tf.float32)
    weights = tf.constant(rng.normal(size=(10, 64)), tf.float32)

    def plain(q, k, v, adder):
        probs = tf.nn.softmax(tf.matmul(q, k, transpose_b=True) * 0.25 + adder, -1)
        return tf.reshape(tf.transpose(tf.matmul(probs, v), [0, 2, 1, 3]), [10, 64])

    @tf.function
    def grads(attention):
        with tf.GradientTape() as tape:
            tape.watch([q, k, v, adder])
            loss = tf.reduce_sum(attention(q, k, v, adder) * weights)
        return tape.gradient(loss, [q, k, v, adder])

    got = grads(lambda *a: fe.attention(*a, 0.25))
    for g, w in zip(got, grads(plain)):
        np.testing.assert_allclose(g.numpy(), w.numpy(), rtol=1e-4, atol=1e-4)


def test_float_products_need_avx2_and_fma(tmp_path):
    # Without AVX-512 and FMA, neither kind of product (the model keeps oneDNN's).
    no_fma = _loops_library(tmp_path, "no_fma", "-mno-avx512f", "-mno-fma")
    assert no_fma.albert_float_products_ready() == 0
    assert no_fma.albert_products_ready() == 0


def _cpu_flags():
    with open("/proc/cpuinfo") as f:
        return next((line.split() for line in f if line.startswith("flags")), [])


@pytest.mark.parametrize("build", ["avx2", "native"])
def test_float_product_loops_are_the_float32_result(tmp_path, build):
    # The loops the float32 ops call, as built for a CPU with AVX2 and no AVX-512 (8-lane
    # blocks and finishing code; float32 products, no bfloat16 ones) and for this machine
    # (16 lanes where it has AVX-512), through ctypes against float64: every product with
    # what it carries, and the attention over keys of no multiple of 32 with some masked.
    import ctypes

    lib = _loops_library(tmp_path, build, *(["-mno-avx512f"] if build == "avx2" else []))
    if build == "avx2":
        assert lib.albert_products_ready() == 0
    if not lib.albert_float_products_ready():
        assert "avx2" not in _cpu_flags() or "fma" not in _cpu_flags()
        pytest.skip("this CPU has neither AVX-512 nor AVX2 with FMA")
    rng = np.random.default_rng(17)
    rows, k_size, n_size = 70, 96, 128  # two whole row blocks and a part; K three steps

    def ptr(a):
        return a.ctypes.data_as(ctypes.c_void_p)

    def c64(*values):
        return [ctypes.c_int64(v) for v in values]

    x = rng.normal(size=(rows, k_size)).astype(np.float32)
    kernel = (rng.normal(size=(k_size, n_size)) * 0.3).astype(np.float32)
    bias = rng.normal(size=n_size).astype(np.float32)
    packed = np.zeros(k_size * n_size, np.float32)
    lib.albert_pack_float_columns(ptr(kernel), ptr(packed), *c64(k_size, n_size, 0, n_size // 16))
    y = x.astype(np.float64) @ kernel.astype(np.float64) + bias
    blocks = ((0, 32), (32, 64), (64, rows))  # as ops.cc splits the rows

    # GELU's limits through the bias: large of either sign, infinities, NaN.
    gelu_bias = bias.copy()
    gelu_bias[:5] = [200.0, -200.0, np.inf, -np.inf, np.nan]
    out = np.zeros((rows, n_size), np.float32)
    for first, last in blocks:
        lib.albert_dense_bias_gelu_float_rows(
            ptr(x), ptr(packed), ptr(gelu_bias), ptr(out), *c64(first, last, k_size, n_size)
        )
    with np.errstate(invalid="ignore", over="ignore"):
        want = albert_numpy.gelu_tanh(y - bias + gelu_bias)
    assert np.isinf(out[:, 2]).all() and np.isnan(out[:, 3:5]).all()  # -inf / inf: NaN
    np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-5)

    batch, seq, groups, num_heads, head_size = 2, 35, 2, 4, 16
    heads = np.zeros((groups, batch, num_heads, seq, head_size), np.float32)
    for first, last in blocks:
        lib.albert_dense_heads_float_rows(
            ptr(x), ptr(packed), ptr(bias), ptr(heads),
            *c64(first, last, k_size, batch, seq, groups, num_heads, head_size),
        )  # fmt: skip
    want = y.reshape(batch, seq, groups, num_heads, head_size).transpose(2, 0, 3, 1, 4)
    np.testing.assert_allclose(heads, want, rtol=1e-5, atol=1e-5)

    residual = rng.normal(size=(rows, n_size)).astype(np.float32)
    gamma, beta = rng.normal(size=(2, n_size)).astype(np.float32)
    out = np.zeros((rows, n_size), np.float32)
    for first, last in blocks:
        lib.albert_dense_residual_layer_norm_float_rows(
            ptr(x), ptr(packed), ptr(bias), ptr(residual), ptr(gamma), ptr(beta),
            ctypes.c_float(1e-12), ptr(out), *c64(first, last, k_size, n_size),
        )  # fmt: skip
    centred = y + residual - (y + residual).mean(-1, keepdims=True)
    want = centred / np.sqrt((centred**2).mean(-1, keepdims=True) + 1e-12) * gamma + beta
    np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-5)

    num_heads, queries, keys, head_size = 3, 40, 50, 64
    q, k, v = (
        rng.normal(size=(2, num_heads, length, head_size)).astype(np.float32)
        for length in (queries, keys, keys)
    )
    adder = np.zeros((2, keys), np.float32)
    adder[1, 30:] = -10000.0
    context = np.zeros((2, queries, num_heads * head_size), np.float32)
    lib.albert_attention_float_rows(
        ptr(q), ptr(k), ptr(v), ptr(adder), ctypes.c_float(0.125), ptr(context),
        *c64(0, 2 * num_heads, num_heads, queries, keys, head_size),
    )  # fmt: skip
    want = _attention_exact(q, k, v, adder[:, None, None, :], 0.125)
    np.testing.assert_allclose(context, want, rtol=1e-5, atol=1e-5)


def test_float_product_gradients_are_the_plain_ops(float_products):
    rng = np.random.default_rng(9)
    x = tf.constant(rng.normal(size=(40, 64)), tf.float32)
    kernel = tf.constant(rng.normal(size=(64, 32)) * 0.3, tf.float32)
    bias = tf.constant(rng.normal(size=32), tf.float32)
    residual = tf.constant(rng.normal(size=(40, 32)), tf.float32)
    gamma, beta = (tf.constant(rng.normal(size=32), tf.float32) for _ in range(2))
    weights = tf.constant(rng.normal(size=(40, 32)), tf.float32)

    def layer_norm(s):
        mean, variance = tf.nn.moments(s, [-1], keepdims=True)
        return (s - mean) * tf.math.rsqrt(variance + 1e-12) * gamma + beta

    @tf.function
    def grads(dense):
        with tf.GradientTape() as tape:
            tape.watch([x, kernel, bias])
            loss = tf.reduce_sum(dense(x, kernel, bias) * weights)
        return tape.gradient(loss, [x, kernel, bias])

    pairs = [
        (
            lambda x, k, b: fe.dense_bias_gelu(x, k, fe.packed_kernel(k), b),
            lambda x, k, b: _gelu_tanh_ops(tf.matmul(x, k) + b),
        ),
        (
            lambda x, k, b: fe.dense_layer_norm(
                x, k, fe.packed_kernel(k), b, residual, gamma, beta, 1e-12
            ),
            lambda x, k, b: layer_norm(tf.matmul(x, k) + b + residual),
        ),
    ]
    # The heads' product: 40 rows = 2 sequences of 20, one group of 2 heads of 16.
    pairs.append(
        (
            lambda x, k, b: tf.reshape(
                tf.transpose(
                    fe.dense_heads(tf.reshape(x, [2, 20, 64]), k, fe.packed_kernel(k), b, 1, 2),
                    [1, 3, 0, 2, 4],
                ),
                [40, 32],
            ),
            lambda x, k, b: tf.matmul(x, k) + b,
        )
    )
    for ours, plain in pairs:
        for g, w in zip(grads(ours), grads(plain)):
            np.testing.assert_allclose(g.numpy(), w.numpy(), rtol=1e-4, atol=1e-4)


def _gelu_tanh_ops(y):
    """GELU's tanh form in TensorFlow ops (the original's formula)."""
    return 0.5 * y * (1.0 + tf.tanh(np.sqrt(2 / np.pi) * (y + 0.044715 * y**3)))


def test_float32_inference_runs_its_dense_products_as_ours(float_products):
    # The same four products per layer as in bfloat16, the heads written by the product (no
    # transpose of q, k, v), and the sequence output within float32 rounding of oneDNN's.
    cfg = PRODUCT_SIZED
    model, inputs = built_encoder(cfg, "float32")
    ops = _inference_ops_with_our_products(cfg, model, inputs)
    with speed_paths.forced(NO_NATIVE_PRODUCTS):
        plain_ops = _op_types(model, inputs)
        want = tf.function(lambda x: model(x)["sequence_output"])(inputs).numpy()
    assert "AlbertDenseBiasGelu" not in plain_ops
    # The query/key/value transpose is gone; the attention context's stays.
    assert ops.count("Transpose") == plain_ops.count("Transpose") - cfg.num_hidden_layers
    got = tf.function(lambda x: model(x)["sequence_output"])(inputs).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5 * np.abs(want).max())
    # At selected rows (a classifier's [CLS], the masked positions) every layer but the
    # last still writes its heads in one product; the last takes queries of its rows only.
    positions = tf.constant([[1, 2]] * inputs["input_ids"].shape[0], tf.int32)
    selected = tf.function(lambda x: model(x, output_positions=positions)["sequence_output"])
    ops = [op.type for op in selected.get_concrete_function(inputs).graph.get_operations()]
    assert ops.count("AlbertDenseHeads") == cfg.num_hidden_layers - 1
    np.testing.assert_allclose(
        selected(inputs).numpy(), got[:, 1:3], rtol=1e-5, atol=1e-5 * np.abs(want).max()
    )


_AVX2_INFERENCE = """
import dataclasses
import numpy as np
import tensorflow as tf
from albert_tf import speed_paths
from albert_tf.cpu import native_kernels
from model_fixtures import built_encoder
from test_native_kernels import PRODUCT_SIZED, NO_NATIVE_PRODUCTS, _op_types

speed_paths.use("native")
assert native_kernels.products_ready(tf.float32)
assert not native_kernels.products_ready(tf.bfloat16)
model, inputs = built_encoder(PRODUCT_SIZED, "float32")
ops = _op_types(model, inputs)
layers = PRODUCT_SIZED.num_hidden_layers
assert ops.count("AlbertDenseBiasGelu") == ops.count("AlbertAttention") == layers, ops
got = tf.function(lambda x: model(x)["sequence_output"])(inputs).numpy()
off = dataclasses.replace(NO_NATIVE_PRODUCTS, native_attention=False)
with speed_paths.forced(off):
    want = tf.function(lambda x: model(x)["sequence_output"])(inputs).numpy()
np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5 * np.abs(want).max())
print("AVX2 INFERENCE OK")
"""


@pytest.mark.slow
def test_float32_inference_on_a_cpu_without_avx512():
    # The library as a CPU with AVX2 and no AVX-512 builds it ($ALBERT_TF_KERNEL_FLAGS):
    # float32 inference takes our products and attention (8-lane blocks) and gives
    # oneDNN's sequence output to float32 rounding; no bfloat16 products. A subprocess,
    # as one process loads one library.
    import subprocess
    import sys

    flags = _cpu_flags()
    if "avx2" not in flags or "fma" not in flags:
        pytest.skip("this CPU has no AVX2 with FMA")
    env = dict(os.environ, ALBERT_TF_KERNEL_FLAGS="-mno-avx512f")
    here = os.path.dirname(os.path.abspath(__file__))  # tests/cpu
    tests = os.path.dirname(here)
    env["PYTHONPATH"] = os.pathsep.join([os.path.dirname(tests), tests, here])
    done = subprocess.run(
        [sys.executable, "-c", _AVX2_INFERENCE], env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "AVX2 INFERENCE OK" in done.stdout


def test_extra_kernel_flags_name_another_library(monkeypatch):
    cxx = native_kernels.compiler()
    if cxx is None:
        pytest.skip("no C++ compiler")
    monkeypatch.delenv("ALBERT_TF_KERNEL_FLAGS", raising=False)
    default = native_kernels.library_path(cxx)
    assert native_kernels.loop_flags() == native_kernels.LOOP_FLAGS
    monkeypatch.setenv("ALBERT_TF_KERNEL_FLAGS", " -mno-avx512f  -DX=1 ")
    assert native_kernels.loop_flags() == (*native_kernels.LOOP_FLAGS, "-mno-avx512f", "-DX=1")
    assert native_kernels.library_path(cxx) != default


def test_saved_model_has_none(tmp_path):
    # A SavedModel must load where the kernels were never built.
    bias = tf.Variable(tf.zeros([8], tf.bfloat16))
    module = tf.Module()
    module.bias = bias
    module.serve = tf.function(
        lambda y: fe.bias_gelu_tanh(y, bias),
        input_signature=[tf.TensorSpec([None, 8], tf.bfloat16)],
    )
    assert "AlbertBiasGelu" in {
        op.type for op in module.serve.get_concrete_function().graph.get_operations()
    }
    module.serve = tf.function(
        lambda y: fe.bias_gelu_tanh(y, bias),
        input_signature=[tf.TensorSpec([None, 8], tf.bfloat16)],
    )
    tf.saved_model.save(module, str(tmp_path))
    assert b"AlbertBiasGelu" not in (tmp_path / "saved_model.pb").read_bytes()
    assert tf.saved_model.load(str(tmp_path)).serve(_bf16(np.ones((2, 8)))).shape == (2, 8)


def test_built_once_then_taken_from_the_cache(fresh_cache, monkeypatch):
    # The compiler's steps stubbed: the cache's logic alone (the real build is
    # test_builds_here's, once per test session).
    builds = []

    def fake_build(cxx, target):
        builds.append(target)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        open(target, "wb").close()

    monkeypatch.setattr(native_kernels, "build", fake_build)
    path = native_kernels.built_library()
    assert builds == [path] and os.listdir(fresh_cache) == [os.path.basename(path)]
    assert os.path.basename(path).startswith("albert_tf_kernels_") and path.endswith(".so")
    assert native_kernels.built_library() == path
    assert builds == [path]


def test_no_compiler_falls_back_to_the_loops_with_one_warning(
    fresh_cache, undecided_library, monkeypatch, caplog
):
    monkeypatch.setenv("CXX", "no-such-compiler")
    with caplog.at_level(logging.WARNING):
        assert native_kernels.library() is None
        assert native_kernels.library() is None
    warnings = [r.getMessage() for r in caplog.records if "C++ CPU kernels" in r.getMessage()]
    assert len(warnings) == 1 and "no C++ compiler found" in warnings[0]
    fn = tf.function(lambda y: fe.bias_gelu_tanh(y, tf.zeros([8], tf.bfloat16)))
    graph = fn.get_concrete_function(tf.TensorSpec([4, 8], tf.bfloat16)).graph
    assert "AlbertBiasGelu" not in {op.type for op in graph.get_operations()}
    assert not fresh_cache.exists()


def test_failed_build_names_its_step_and_leaves_nothing(
    fresh_cache, undecided_library, monkeypatch, caplog
):
    monkeypatch.setenv("CXX", "false")  # exits 1 for every command
    with caplog.at_level(logging.WARNING):
        assert native_kernels.library() is None
    message = " ".join(r.getMessage() for r in caplog.records)
    assert "compiling" in message and "loops.cc failed (exit 1)" in message
    # No half-built library, no temporary folder: only the memo of the failure.
    assert [name.endswith(".failed") for name in os.listdir(fresh_cache)] == [True]


def test_a_failed_build_is_remembered_and_not_tried_again(
    fresh_cache, undecided_library, monkeypatch, caplog
):
    """A later process (here: library() decided again) on the same machine, with the same
    compiler and source, warns once with the first failure and builds nothing."""
    monkeypatch.setenv("CXX", "false")
    assert native_kernels.library() is None
    memo = native_kernels.library_path(native_kernels.compiler()) + ".failed"
    assert os.listdir(fresh_cache) == [os.path.basename(memo)]
    native_kernels.library.cache_clear()

    def no_build(*args):
        raise AssertionError("built again after a failed build")

    monkeypatch.setattr(native_kernels, "build", no_build)
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        assert native_kernels.library() is None
        assert native_kernels.library() is None
    warnings = [r.getMessage() for r in caplog.records if "C++ CPU kernels" in r.getMessage()]
    assert len(warnings) == 1, warnings
    assert "loops.cc failed (exit 1)" in warnings[0] and "an earlier build" in warnings[0]
    os.remove(memo)  # deleting the memo tries again
    with pytest.raises(AssertionError, match="built again"):
        native_kernels.built_library()


def test_stale_build_folders_are_removed(tmp_path):
    now = 1_000_000.0
    for name, age in (("build-old", native_kernels.STALE_BUILD_S + 1), ("build-new", 5)):
        (tmp_path / name).mkdir()
        os.utime(tmp_path / name, (now - age, now - age))
    (tmp_path / "albert_tf_kernels_x.so").write_bytes(b"")
    os.utime(tmp_path / "albert_tf_kernels_x.so", (0, 0))
    removed = native_kernels.remove_stale_builds(str(tmp_path), now=now)
    assert removed == [str(tmp_path / "build-old")]
    assert sorted(os.listdir(tmp_path)) == ["albert_tf_kernels_x.so", "build-new"]


@pytest.mark.parametrize("policy", ["float32", "mixed_bfloat16"])
def test_native_paths_equal_the_plain_block(policy):
    """`--speed_paths=native` at head size 32 (our products and attention where this CPU
    has them, the elementwise kernels everywhere) against the plain model: outputs in
    inference, gradients in training."""
    from test_block import HEAD_SIZES, assert_paths_equal_plain, paths_against_plain

    results = paths_against_plain(HEAD_SIZES[32], policy, speed_paths.CPU_NATIVE)
    assert_paths_equal_plain(results, 1e-4 if policy == "float32" else 3e-2)


HANGING_COMPILER = """#!/bin/sh
# Answers --version; any other call starts a child that never ends, says so, and waits.
[ "$1" = "--version" ] && {{ echo "hanging-cc 1.0"; exit 0; }}
sleep 600 &
echo $! > {folder}/child.pid
touch {folder}/started
wait
"""


def _hanging_compiler(folder):
    path = folder / "cc"
    path.write_text(HANGING_COMPILER.format(folder=folder))
    path.chmod(0o755)
    return path


def _alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as f:  # a zombie has ended
        return f.read().split(")")[1].split()[0] != "Z"


def test_a_hanging_compiler_is_stopped_at_the_time_limit_and_the_plain_path_runs(
    fresh_cache, undecided_library, monkeypatch, caplog, tmp_path
):
    monkeypatch.setenv("CXX", str(_hanging_compiler(tmp_path)))
    monkeypatch.setenv("ALBERT_TF_BUILD_TIMEOUT_S", "2")
    with caplog.at_level(logging.WARNING):
        assert native_kernels.library() is None
    warnings = [r.getMessage() for r in caplog.records if "C++ CPU kernels" in r.getMessage()]
    assert len(warnings) == 1 and "no result after 2 s" in warnings[0], warnings
    assert not _alive(int((tmp_path / "child.pid").read_text()))  # its whole group ended


def test_sigterm_during_a_build_ends_the_compiler_and_the_process(tmp_path):
    """The signal is sent once the compiler reports it started; the script's one line and
    143 follow at once, and no compiler process is left."""
    import subprocess
    import sys
    import time

    script = (  # what every script does around its run (albert_tf/cli.py)
        "import sys\n"
        "from albert_tf import interrupts\n"
        "from albert_tf.cpu import native_kernels\n"
        "from albert_tf.errors import RunInterrupted\n"
        "try:\n"
        "    with interrupts.raise_on_signals():\n"
        "        native_kernels.built_library()\n"
        "except RunInterrupted as stop:\n"
        "    sys.stderr.write(f'build: {stop}\\n')\n"
        "    sys.exit(128 + stop.signum)\n"
    )
    env = dict(
        os.environ,
        CXX=str(_hanging_compiler(tmp_path)),
        ALBERT_TF_KERNEL_CACHE=str(tmp_path / "cache"),
        ALBERT_TF_BUILD_TIMEOUT_S="600",
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", script], env=env, stderr=subprocess.PIPE, text=True
    )
    try:
        while not (tmp_path / "started").exists():  # polls the state the compiler reports
            assert proc.poll() is None, proc.stderr.read()
            time.sleep(0.05)
        proc.terminate()
        _, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 143, err
    assert not _alive(int((tmp_path / "child.pid").read_text()))
    assert not (tmp_path / "cache").exists() or not any(
        n.endswith(".failed") for n in os.listdir(tmp_path / "cache")
    )
