"""C++ CPU kernels for the encoder's elementwise work and dense products, built on this
machine.

Some passes of the encoder are cheaper as hand-written loops than as anything TensorFlow
2.21 offers on CPU (docs/benchmarks.md). Each takes bfloat16 or float32 tensors (one type
per call; bfloat16 computed in float32 and rounded once):

  * `bias_gelu` and `bias_gelu_backward`: the FFN's bias and GELU after its plain
    product, and its gradient (with the bias's). XLA's CPU loops compute the tanh with
    8-lane vectors; these use the machine's widest and an exp-based form
    (albert_tf/cpu/native/loops.cc).
  * `residual_layer_norm`: LN(x + bias + residual) and its bfloat16 copy for the next
    product, in one pass over the rows, where an inference graph otherwise runs an XLA
    loop for the sum, oneDNN's layer norm and a cast; `residual_layer_norm_moments`,
    its training form, also writes what the gradient needs, and `layer_norm_backward`
    computes that gradient in one pass (with the bfloat16 copy of dx the product before
    it takes, and adding the gradients of the output's bfloat16 copies). For float32
    inputs there are no copies; a float32 training step otherwise runs a chain of
    TensorFlow ops for the moments and two row means, a loop and three column sums for
    the gradient.
  * `bias_add_heads` and `heads_backward`: the query, key and value biases added and
    the product split into attention heads in one pass (an XLA loop or the product's
    bias, and a transpose otherwise), and back, with the bias's gradient from the same
    pass.
  * `softmax_backward`: the attention softmax's gradient, one pass over each row (an
    XLA loop or a chain of TensorFlow ops otherwise).
  * `sum_terms`: tensors added in float32 in their order (the shared kernels' gradients
    over the layers), bfloat16 rounded once, where TensorFlow's bfloat16 AddN rounds as
    it goes; float32 in fewer passes over memory than a running sum.
  * `dense_heads`, `dense_bias_gelu` and `dense_residual_layer_norm` (with
    `pack_kernel`; `products_ready(dtype)`): matrix products of our own, bfloat16 on CPUs
    with AVX512_BF16 (on AMX tiles where the CPU has them, else its vector units) and
    float32 on CPUs with AVX-512 or AVX2 and FMA, each finishing its float32 accumulators
    itself: the query/key/value product with its biases written as attention heads, the
    FFN's first product with its bias and GELU, the output products with bias, residual
    and layer norm. The shared kernel is packed once per pass, where oneDNN prepares it at every
    product (and, in bfloat16, rounds the product before the bias) and leaves the rest
    to passes of their own.
  * `attention`: each head's scores, softmax and product with the values in one pass
    (bfloat16 or float32, on the same product engines), the context written as rows.

With AVX-512 the loops work on 16 floats at a time with explicit vector code (exp by
vscalefps, bfloat16 rounding by vcvtneps2bf16 where AVX512_BF16 is there; masked loads
and stores only for a row's last columns), else as plain loops the compiler vectorises;
the float32 products and their finishing code have an AVX2 form of 8 floats as well.

Nothing here is compiled or loaded unless the switch asks for the kernels
(`--speed_paths=native`, albert_tf.cpu.speed_paths; `SpeedPaths.native_cpu_kernels`).
Then the sources (albert_tf/cpu/native/) are compiled with the C++ compiler found here
($CXX, else c++ or g++) and TensorFlow's own headers, for this CPU (-march=native), once
per machine, compiler, source and TensorFlow version: the first trace that uses them on
a new machine (bfloat16, or float32 inference) takes about 15-50 s longer. The library
is kept in $ALBERT_TF_KERNEL_CACHE, else $XDG_CACHE_HOME/albert_tf/kernels, else
~/.cache/albert_tf/kernels, under a name that hashes all of these, built in a temporary
folder (`build-*`, removed by later builds once older than `STALE_BUILD_S`, where a
killed build left it) and renamed (concurrent builds are safe). $ALBERT_TF_KERNEL_FLAGS,
where set, adds compiler flags after -march=native (part of the name too):
`-mno-avx512f` builds what a CPU with AVX2 and no AVX-512 gets, which the benches use to
measure that kind of machine on this one.

Where no compiler is found or the build fails, one warning says why and `library()` is
None: the callers (albert_tf.cpu.fused_elementwise) keep their XLA loops and oneDNN's
products. A failed build is remembered beside the library's name (`<name>.failed`, its
first error line): later processes on this machine, with this compiler and source, warn
once and do not try again until that file is deleted.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import os
import platform
import shutil
import signal
import subprocess
import tempfile
import time

from absl import logging

SOURCE_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "native")
# loops.cc alone gets -march=native: TensorFlow's headers (ops.cc) do not compile with
# every -march (Eigen's AVX512-FP16 code fails on GCC 12).
LOOP_FLAGS = (
    "-O3",
    "-march=native",
    # x86 only: other compilers' targets refuse it (every ARM build failed on it).
    *(("-mprefer-vector-width=512",) if platform.machine() in ("x86_64", "AMD64") else ()),
    "-ffast-math",  # reassociated row sums (vectorised); NaN and inf still handled
    "-fno-finite-math-only",
    "-fPIC",
)
OP_FLAGS = ("-O2", "-fPIC", "-w")  # -w: TensorFlow's headers warn about themselves
# Seconds one compiler call may take (the whole build takes 15-50 s); a compiler that
# hangs fails the build after this, and the plain path runs. $ALBERT_TF_BUILD_TIMEOUT_S
# sets another limit.
BUILD_TIMEOUT_S = 300
# A temporary build folder this old belongs to a build that was killed.
STALE_BUILD_S = 2 * BUILD_TIMEOUT_S
GROUP_END_S = 2.0  # the longest wait for a killed compiler's group to be gone
BUILD_PREFIX = "build-"


class BuildError(Exception):
    """The kernels could not be built here: one line saying why."""


def cache_dir() -> str:
    """Where built libraries are kept (see the module docstring)."""
    if os.environ.get("ALBERT_TF_KERNEL_CACHE"):
        return os.environ["ALBERT_TF_KERNEL_CACHE"]
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "albert_tf", "kernels")


def compiler() -> str | None:
    """The C++ compiler's path: $CXX if set (even if it does not exist), else c++ or g++."""
    if os.environ.get("CXX"):
        return shutil.which(os.environ["CXX"])
    return shutil.which("c++") or shutil.which("g++")


def _cpu_features() -> str:
    """What -march=native depends on: the CPU's flags line, where Linux shows it."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith(("flags", "Features")):
                    return line
    except OSError:
        pass
    return platform.machine() + platform.processor()


def _tensorflow_flags():
    import tensorflow as tf

    return list(tf.sysconfig.get_compile_flags()), list(tf.sysconfig.get_link_flags())


def loop_flags() -> tuple:
    """LOOP_FLAGS and then $ALBERT_TF_KERNEL_FLAGS (split on spaces), where set."""
    return LOOP_FLAGS + tuple(os.environ.get("ALBERT_TF_KERNEL_FLAGS", "").split())


def _sources():
    return [os.path.join(SOURCE_DIR, name) for name in ("loops.cc", "ops.cc")]


def library_path(cxx: str) -> str:
    """The cached library's path for compiler `cxx` on this machine."""
    import tensorflow as tf

    key = hashlib.sha256()
    for path in _sources():
        with open(path, "rb") as f:
            key.update(f.read())
    compile_flags, link_flags = _tensorflow_flags()
    version = _run([cxx, "--version"], f"{cxx} --version", check=False)
    for part in (
        tf.__version__,
        cxx,
        version,
        _cpu_features(),
        loop_flags(),
        OP_FLAGS,
        compile_flags,
        link_flags,
    ):
        key.update(repr(part).encode())
    return os.path.join(cache_dir(), f"albert_tf_kernels_{key.hexdigest()[:20]}.so")


def build_timeout() -> float:
    """The time limit of one compiler call, in seconds (BUILD_TIMEOUT_S)."""
    value = os.environ.get("ALBERT_TF_BUILD_TIMEOUT_S")
    try:
        return float(value) if value else BUILD_TIMEOUT_S
    except ValueError:
        raise BuildError(f"ALBERT_TF_BUILD_TIMEOUT_S={value}: expected seconds") from None


def _run(command, what, check=True) -> str:
    """Runs one compiler call; returns its stdout (BuildError for a non-zero exit with
    `check`). The compiler and everything it starts
    (cc1plus, as, ld) run in a process group of their own, which is killed when the call
    exceeds `build_timeout()` and when anything stops the wait: SIGINT or SIGTERM (the
    scripts raise on them), an error. So no compiler outlives this process's wait."""
    limit = build_timeout()
    try:
        child = subprocess.Popen(
            command,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,  # its own group: killed as a whole below
        )
    except OSError as e:
        raise BuildError(f"{what}: {e}") from None
    try:
        out, err = child.communicate(timeout=limit)
    except subprocess.TimeoutExpired:
        raise BuildError(
            f"{what}: no result after {limit:g} s (ALBERT_TF_BUILD_TIMEOUT_S sets the limit)"
        ) from None
    finally:
        if child.poll() is None:
            _end_group(child)
    if check and child.returncode:
        errors = [line for line in err.splitlines() if "error" in line.lower()]
        detail = (errors or err.splitlines() or ["no output"])[0]
        raise BuildError(f"{what} failed (exit {child.returncode}): {detail.strip()}")
    return out


def _end_group(child: subprocess.Popen) -> None:
    """SIGKILLs `child`'s process group and waits for `child`, then for the rest of the
    group (a compiler pass it started) for at most GROUP_END_S: SIGKILL takes effect when
    the kernel next schedules a process, so on a busy machine a grandchild outlives the
    call for a moment otherwise. (Zombies count as members until reaped; the limit keeps
    a parent that does not reap from holding this up.)"""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(child.pid, signal.SIGKILL)
    child.wait()
    deadline = time.monotonic() + GROUP_END_S
    while time.monotonic() < deadline:
        try:
            os.killpg(child.pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.005)


def build(cxx: str, target: str) -> None:
    """Compiles the sources with `cxx` into the shared library `target` (atomically)."""
    compile_flags, link_flags = _tensorflow_flags()
    loops, ops = _sources()
    os.makedirs(os.path.dirname(target), exist_ok=True)
    with tempfile.TemporaryDirectory(dir=os.path.dirname(target), prefix=BUILD_PREFIX) as work:
        loops_o, ops_o = os.path.join(work, "loops.o"), os.path.join(work, "ops.o")
        library = os.path.join(work, "kernels.so")
        _run([cxx, *loop_flags(), "-c", loops, "-o", loops_o], f"compiling {loops}")
        _run([cxx, *OP_FLAGS, *compile_flags, "-c", ops, "-o", ops_o], f"compiling {ops}")
        _run([cxx, "-shared", loops_o, ops_o, "-o", library, *link_flags], "linking")
        os.replace(library, target)


def build_loops(target: str, *flags: str, source: str | None = None) -> None:
    """loops.cc alone (no TensorFlow) as the shared library `target`, with the kernels'
    loop flags and then `flags` (e.g. -DALBERT_PLAIN_LOOPS): for tests and benches that
    call the loops through ctypes. `source`: another copy of loops.cc to build (a bench
    comparing versions). Raises BuildError where it cannot be built."""
    cxx = compiler()
    if cxx is None:
        raise BuildError("no C++ compiler found ($CXX, c++, g++)")
    loops = source or _sources()[0]
    _run([cxx, *LOOP_FLAGS, *flags, "-shared", loops, "-o", target], f"compiling {loops}")


def built_library() -> str:
    """The path of this machine's library, built first if the cache has none; raises
    BuildError where it cannot be built, or where a build of the same library failed
    before (`<library>.failed`)."""
    cxx = compiler()
    if cxx is None:
        raise BuildError("no C++ compiler found ($CXX, c++, g++)")
    target = library_path(cxx)
    if os.path.exists(target):
        return target
    failed = target + ".failed"
    if os.path.exists(failed):
        with open(failed) as f:
            reason = f.read().strip()
        raise BuildError(f"{reason} (an earlier build; delete {failed} to try again)")
    remove_stale_builds(os.path.dirname(target))
    logging.info("Building albert_tf's C++ CPU kernels (once) into %s", target)
    try:
        build(cxx, target)
    except BuildError as e:
        try:
            with open(failed, "w") as f:
                f.write(f"{e}\n")
        except OSError:  # a cache this process cannot write in: not remembered
            pass
        raise
    return target


def remove_stale_builds(folder: str, now: float | None = None) -> list[str]:
    """Removes the temporary build folders in `folder` older than STALE_BUILD_S (killed
    builds); returns their paths."""
    now = time.time() if now is None else now
    removed = []
    try:
        names = os.listdir(folder)
    except OSError:
        return removed
    for name in names:
        path = os.path.join(folder, name)
        try:
            stale = name.startswith(BUILD_PREFIX) and now - os.path.getmtime(path) > STALE_BUILD_S
        except OSError:  # removed meanwhile
            continue
        if stale and os.path.isdir(path):
            shutil.rmtree(path, ignore_errors=True)
            removed.append(path)
    return removed


# The library this process loaded: a second one (another cache, another source) would
# register the same kernels again, which TensorFlow refuses when they run.
_loaded = {}


@functools.cache
def library():
    """The loaded op library (a module with `albert_bias_gelu` and
    `albert_residual_layer_norm`), building it first if this machine has none; None,
    after one warning, where it cannot be built or loaded."""
    import tensorflow as tf

    if _loaded:
        return _loaded["module"]
    try:
        _loaded["module"] = tf.load_op_library(built_library())
        return _loaded["module"]
    except (BuildError, OSError, tf.errors.OpError) as e:
        logging.warning(
            "albert_tf's C++ CPU kernels are not available (%s); the encoder's products "
            "are oneDNN's and bfloat16 GELU and layer norms run as XLA loops instead",
            str(e).splitlines()[0] if str(e) else type(e).__name__,
        )
        return None


def bias_gelu(y, bias):
    """gelu(y + bias) in GELU's tanh form, y [..., F] and bias [F] bfloat16 (or both
    float32) -> [..., F] of their dtype, computed in float32 (bfloat16 rounded once).
    `library()` must not be None."""
    return library().albert_bias_gelu(y, bias)


def bias_gelu_backward(dz, y, bias):
    """(dy, dbias): dy = dz * gelu'(y + bias), the gradient of `bias_gelu` w.r.t. y, all
    bfloat16 or all float32 ([..., F], bias [F]), computed in float32 (bfloat16 rounded
    once); dbias [F] the sum of dy over all rows, the bias's gradient (float32 sums over
    fixed blocks of rows in a fixed order, bfloat16 rounded once)."""
    return tuple(library().albert_bias_gelu_backward(dz, y, bias))


def residual_layer_norm_moments(x, bias, residual, gamma, beta, epsilon):
    """`residual_layer_norm`'s outputs with what its gradient needs: (out [..., H]
    float32, its bfloat16 copy as there, xhat [..., H] the normalised sum, rstd [..., 1]
    the reciprocal standard deviation of each row), float32 but the copy."""
    out, out_bfloat16, xhat, rstd = library().albert_residual_layer_norm_moments(
        x, bias, residual, gamma, beta, epsilon=epsilon
    )
    return out, out_bfloat16, xhat, rstd[..., None]


def layer_norm_backward(dy, xhat, rstd, gamma, dy_bfloat16=(), dtype="bfloat16"):
    """A layer norm's gradient: dy and xhat [..., H], rstd [..., 1], gamma [H], float32,
    and `dy_bfloat16`, a list of bfloat16 [..., H] (the gradients of the output's
    bfloat16 copies, added to dy in float32 in the pass) -> (dx [..., H], for `dtype`
    (the layer norm's input dtype) bfloat16 the same rounded to bfloat16, for float32 an
    empty [0], dgamma [H], dbeta [H], dx summed over all rows [H]). The column sums add
    fixed blocks of rows in a fixed order (the same on any thread count)."""
    import tensorflow as tf

    return tuple(
        library().albert_layer_norm_backward(
            dy, list(dy_bfloat16), xhat, rstd, gamma, T=tf.as_dtype(dtype)
        )
    )


def residual_layer_norm(x, bias, residual, gamma, beta, epsilon):
    """LN(x + bias + residual) over the last axis: x [..., H] and bias [H] bfloat16 (or
    both float32), residual [..., H], gamma and beta [H] float32 -> (float32 [..., H],
    for bfloat16 x the same rounded to bfloat16, for float32 an empty [0]). Any CPU;
    `library()` must not be None."""
    return library().albert_residual_layer_norm(x, bias, residual, gamma, beta, epsilon=epsilon)


def bias_add_heads(y, bias, num_heads):
    """y [B, S, H] + bias [H], both bfloat16 or both float32, split into attention heads
    -> [B, num_heads, S, H / num_heads] (each sum in float32, bfloat16 rounded once). Its
    gradient: `heads_backward`."""
    return library().albert_bias_add_heads(y, bias, num_heads=num_heads)


def heads_backward(dheads):
    """The gradient of `bias_add_heads`: dheads [B, N, S, D] bfloat16 or float32 -> (dy
    [B, S, N * D], dbias [N * D], the sum over B and S in float32 over fixed blocks of
    rows in a fixed order, bfloat16 rounded once), of dheads' dtype."""
    return tuple(library().albert_heads_backward(dheads))


def softmax_backward(dprobs, probs, scale=1.0):
    """scale * probs * (dprobs - sum(dprobs * probs)) over the last axis: the gradient of
    a softmax (probs its output) w.r.t. scores it took times `scale` (a Python float),
    all bfloat16 or all float32 [..., S], in float32 (bfloat16 rounded once)."""
    return library().albert_softmax_backward(dprobs, probs, scale=scale)


def sum_terms(terms):
    """The sum of a list of tensors of one shape and dtype (bfloat16 or float32), added in
    float32 in the order given, bfloat16 rounded once (TensorFlow's bfloat16 AddN rounds
    as it goes, and moves about 4 GB/s here); float32 sums are the sequential sums to
    the bit."""
    return library().albert_sum_terms(terms)


@functools.cache
def _products_ready(dtype_name: str) -> bool:
    import tensorflow as tf

    if library() is None:
        return False
    with tf.init_scope():  # an eager question even inside a trace
        return bool(library().albert_products_ready(T=tf.as_dtype(dtype_name)).numpy())


def products_ready(dtype="bfloat16") -> bool:
    """Whether the products below can run in this process for `dtype`: the library is
    there and was built for a CPU with AVX512_BF16 for bfloat16 (the products run on AMX
    tiles where the CPU has them and Linux lets the process use them, else on the vector
    units), with AVX-512 or AVX2 and FMA for float32."""
    import tensorflow as tf

    return _products_ready(tf.as_dtype(dtype).name)


def pack_kernel(kernel):
    """A kernel [K, N] (K, N multiples of 32) in the layout our products read: bfloat16
    [N / 16, K / 2, 32], float32 [N / 16, K, 16]. Packed once per pass for a kernel the
    layers share."""
    return library().albert_pack_kernel(kernel)


def dense_bias_gelu(x, kernel, packed, bias):
    """gelu(x . kernel + bias) as our product: x [rows, K], kernel [K, N] (read only by the
    gradient) and packed, the same from `pack_kernel`, bias [N] -> [rows, N], all
    bfloat16 or all float32. The product is accumulated in float32 and the bias and GELU
    (tanh form) applied to it in float32, stored once (a oneDNN bfloat16 product rounds
    to bfloat16 before the bias). `products_ready(x.dtype)` must be True."""
    return library().albert_dense_bias_gelu(x, kernel, packed, bias)


def dense_heads(x, kernel, packed, bias, groups, num_heads):
    """x . kernel + bias as our product, written as attention heads: x [B, S, K], kernel
    [K, N] (read only by the gradient) and packed, the same from `pack_kernel`, bias [N],
    all bfloat16 or all float32, the N columns `groups` blocks side by side (the query,
    key and value kernels) of num_heads heads of D (a multiple of 16) -> [groups, B,
    num_heads, S, D] in x's dtype, the bias added in float32 to the float32 accumulators
    and stored once. `products_ready(x.dtype)` must be True."""
    return library().albert_dense_heads(x, kernel, packed, bias, groups=groups, num_heads=num_heads)


def dense_residual_layer_norm(x, kernel, packed, bias, residual, gamma, beta, epsilon):
    """LN(x . kernel + bias + residual) over each row, the product ours: x [rows, K],
    kernel [K, N] (read only by the gradient) and packed, the same from `pack_kernel`,
    bias [N], all bfloat16 or all float32; residual [rows, N], gamma and beta [N] float32
    -> (float32 [rows, N], for bfloat16 x the same rounded to bfloat16, for float32 an
    empty [0]). The sum is taken from the float32 accumulators. `products_ready(x.dtype)`
    must be True."""
    return tuple(
        library().albert_dense_residual_layer_norm(
            x, kernel, packed, bias, residual, gamma, beta, epsilon=epsilon
        )
    )


def attention(q, k, v, adder, scale):
    """softmax(q . k^T * scale + adder) . v for every head, written as rows: q [B, N, P, D],
    k and v [B, N, S, D] (all bfloat16 or all float32), adder [B, 1, 1, S] float32 ->
    context [B, P, N * D] in q's dtype; D a multiple of 32. Scores and softmax in
    float32 (bfloat16 scores unrounded), the probabilities stored in q's dtype before their
    product with v. `products_ready(q.dtype)` must be True."""
    return library().albert_attention(q, k, v, adder, scale=scale)
