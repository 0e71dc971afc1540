"""Batch-invariant kernels of exact mode written in Pallas (``exact_kernels="pallas"``): the
order of every sum is fixed by the kernel's own code, on any backend.

Each kernel tiles the rows with a fixed block of :data:`BM` rows and walks the reduced axis in
blocks of a fixed width, accumulating the blocks **sequentially, in index order** (a
``fori_loop`` inside the kernel: no grid axis is reduced over, so the construction holds on
TPU, where a grid runs in order, and on GPU, where it does not). Every block product has the
same shape whatever the number of rows ``M``, so an output element's sum is a function of its
own row and column only: the row of an ``M = 1`` product is the same row of an ``M = 37`` one.

* :func:`matmul` / :func:`batched_matmul`: ``[G, M, K] x [G, K, N]``, output tiles ``BM x BN``,
  K in blocks of :data:`BK` (zero padding adds exact zeros).
* :func:`rms_norm`: the mean square accumulated over :data:`BD`-wide column blocks, one lane
  reduction at the end.
* :func:`log_softmax` / :func:`softmax` over the vocabulary: the row max (exact in any order),
  then ``sum exp(z - max)`` over :data:`BV`-wide blocks, then ``z - lse`` (or its exp).
* Attention: ``policy/pallas_attention.py``.

Inside a kernel everything is float32 (callers round bf16 values in and out with
``kernels.cast``); no float64, so Mosaic (TPU) compiles it. Block shapes are multiples of
(8, 128) (Mosaic's tile) and :data:`BM` = 16 is the bf16 tile and Triton's smallest dot. On the
CPU the kernels run in Pallas interpret mode (:func:`interpret`); on GPU (Triton) every padded
width is also rounded up to a power of two, as Triton's block shapes must be.
"""

from __future__ import annotations

import contextlib
import functools

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl

F32 = jnp.float32
HIGHEST = jax.lax.Precision.HIGHEST
BM = 16  # rows per block (every kernel)
BN = 128  # output columns per matmul block
BK = 128  # contraction block of the matmul
BD = 128  # column block of RMSNorm's mean square
BV = 128  # vocabulary block of the softmax sums
BMV = 8  # rows per block of the vocabulary kernels (a whole padded vocabulary row per block)
NEG_INF = -1e30

_FORCED: list[bool | None] = [None]


def interpret() -> bool:
    """Whether the Pallas kernels run in interpret mode: yes on the CPU backend (Pallas has no
    CPU lowering), no on TPU (Mosaic) and GPU (Triton); :func:`interpret_mode` overrides it
    (the TPU AOT compile from a CPU host sets False)."""
    forced = _FORCED[-1]
    return jax.default_backend() == "cpu" if forced is None else forced


@contextlib.contextmanager
def interpret_mode(value: bool | None):
    """Within the block, trace the kernels with ``interpret=value`` (None: by backend)."""
    _FORCED.append(value)
    try:
        yield
    finally:
        _FORCED.pop()


def decision() -> str:
    """The interpret decision and its reason, for logs and reports."""
    if _FORCED[-1] is not None:
        return f"interpret={_FORCED[-1]} (forced by interpret_mode)"
    backend = jax.default_backend()
    return f"interpret={backend == 'cpu'} (default backend {backend!r})"


def _triton() -> bool:
    return not interpret() and jax.default_backend() == "gpu"


def span(n: int, block: int) -> int:
    """``n`` padded up to a multiple of ``block`` (and to a power of two for Triton)."""
    m = -(-max(n, 1) // block) * block
    return 1 << (m - 1).bit_length() if _triton() else m


def pad_to(x, axis: int, size: int, value=0):
    extra = size - x.shape[axis]
    if extra == 0:
        return x
    widths = [(0, 0)] * x.ndim
    widths[axis] = (0, extra)
    return jnp.pad(x, widths, constant_values=value)


def _call(kernel, out_shape, grid, in_specs, out_specs):
    return pl.pallas_call(
        kernel, out_shape=out_shape, grid=grid, in_specs=in_specs, out_specs=out_specs, interpret=interpret()
    )


def _mm_kernel(x_ref, w_ref, o_ref, *, bk: int):
    def body(j, acc):
        k0 = pl.multiple_of(j * bk, bk)
        xb, wb = x_ref[:, pl.ds(k0, bk)], w_ref[pl.ds(k0, bk), :]
        return acc + jnp.dot(xb, wb, preferred_element_type=F32, precision=HIGHEST)

    n_blocks = x_ref.shape[-1] // bk
    o_ref[...] = jax.lax.fori_loop(0, n_blocks, body, jnp.zeros(o_ref.shape, F32))


def batched_matmul(x, w):
    """float32 ``x @ w`` for ``x [G, M, K]``, ``w [G, K, N]``: fixed blocks, K in order."""
    g, m, k = x.shape
    n = w.shape[-1]
    bk = BK
    mp, kp, np_ = -(-m // BM) * BM, span(k, bk), span(n, BN)
    x = pad_to(pad_to(x.astype(F32), 1, mp), 2, kp)
    w = pad_to(pad_to(w.astype(F32), 1, kp), 2, np_)
    out = _call(
        functools.partial(_mm_kernel, bk=bk),
        jax.ShapeDtypeStruct((g, mp, np_), F32),
        (g, mp // BM, np_ // BN),
        [
            pl.BlockSpec((None, BM, kp), lambda b, i, j: (b, i, 0)),
            pl.BlockSpec((None, kp, BN), lambda b, i, j: (b, 0, j)),
        ],
        pl.BlockSpec((None, BM, BN), lambda b, i, j: (b, i, j)),
    )(x, w)
    return out[:, :m, :n]


def matmul(x, w):
    """float32 ``x @ w`` for ``x [..., K]``, ``w [K, N]``."""
    lead = x.shape[:-1]
    out = batched_matmul(x.reshape(1, -1, x.shape[-1]), w[None])
    return out.reshape(*lead, w.shape[-1])


def _rows(kernel, x, *extra, block_rows=BM, out_cols=None):
    """Runs ``kernel(x_ref, *extra_refs, o_ref)`` over row blocks of ``x [M, C]`` (``extra``:
    ``[1, C]`` arrays given whole to every block); returns the ``[Mp, out_cols]`` output."""
    mp, c = x.shape[0], x.shape[1]
    out_cols = out_cols or c
    whole = [pl.BlockSpec((1, e.shape[1]), lambda i: (0, 0)) for e in extra]
    return _call(
        kernel,
        jax.ShapeDtypeStruct((mp, out_cols), F32),
        (mp // block_rows,),
        [pl.BlockSpec((block_rows, c), lambda i: (i, 0)), *whole],
        pl.BlockSpec((block_rows, out_cols), lambda i: (i, 0)),
    )(x, *extra)


def _chunks(ref, width: int, fn, init):
    """``fn(acc, block)`` over the column blocks of ``ref``, in order."""

    def body(j, acc):
        return fn(acc, ref[:, pl.ds(pl.multiple_of(j * width, width), width)])

    return jax.lax.fori_loop(0, ref.shape[-1] // width, body, init)


def _rms_kernel(x_ref, s_ref, o_ref, *, d: int, eps: float):
    acc = _chunks(x_ref, BD, lambda a, xb: a + xb * xb, jnp.zeros((x_ref.shape[0], BD), F32))
    ms = jnp.sum(acc, axis=-1, keepdims=True) / F32(d)
    o_ref[...] = (x_ref[...] * jax.lax.rsqrt(ms + F32(eps))) * s_ref[...]


def rms_norm(x, scale, eps: float):
    """float32 RMSNorm of ``x [..., D]`` by ``scale [D]``."""
    d = x.shape[-1]
    x2 = x.reshape(-1, d).astype(F32)
    m, dp = x2.shape[0], span(d, BD)
    x2 = pad_to(pad_to(x2, 0, -(-m // BM) * BM), 1, dp)
    s = pad_to(scale.astype(F32).reshape(1, d), 1, dp)
    out = _rows(functools.partial(_rms_kernel, d=d, eps=eps), x2, s)
    return out[:m, :d].reshape(x.shape)


def _softmax_kernel(z_ref, o_ref, *, v: int, log: bool):
    rows = z_ref.shape[0]
    mx = _chunks(z_ref, BV, jnp.maximum, jnp.full((rows, BV), NEG_INF, F32))
    mx = jnp.max(mx, axis=-1, keepdims=True)  # exact in any order

    def add(carry, zb):
        acc, j = carry
        col = j * BV + jax.lax.broadcasted_iota(jnp.int32, zb.shape, 1)
        return acc + jnp.where(col < v, jnp.exp(zb - mx), 0.0), j + 1

    acc, _ = _chunks(z_ref, BV, add, (jnp.zeros((rows, BV), F32), jnp.int32(0)))
    lse = mx + jnp.log(jnp.sum(acc, axis=-1, keepdims=True))
    y = z_ref[...] - lse
    o_ref[...] = y if log else jnp.exp(y)


def _softmax(z, log: bool):
    v = z.shape[-1]
    z2 = z.reshape(-1, v).astype(F32)
    m, vp = z2.shape[0], span(v, BV)
    z2 = pad_to(pad_to(z2, 0, -(-m // BMV) * BMV), 1, vp, NEG_INF)
    out = _rows(functools.partial(_softmax_kernel, v=v, log=log), z2, block_rows=BMV)
    return out[:m, :v].reshape(z.shape)


def log_softmax(z):
    """float32 log-softmax over the last axis."""
    return _softmax(z, log=True)


def softmax(z):
    """float32 softmax over the last axis (``exp`` of the log-softmax, in the kernel)."""
    return _softmax(z, log=False)


def _map_kernel(*refs, fn):
    refs, o_ref = refs[:-1], refs[-1]
    o_ref[...] = fn(*(r[...] for r in refs))


def elementwise(fn, *xs):
    """float32 ``fn(*xs)`` (same-shape arrays) inside a kernel: the code that runs is fixed, so
    no compiler fuses a multiply of it into a neighbour's add differently for one caller than
    for another (RoPE's ``x cos + rot sin``, a scale, soft-capping's tanh)."""
    shape, c = xs[0].shape, xs[0].shape[-1]
    m, cp = xs[0].size // c, span(c, 128)
    prep = lambda a: pad_to(pad_to(a.astype(F32).reshape(m, c), 0, -(-m // BM) * BM), 1, cp)
    args = [prep(a) for a in xs]
    out = _call(
        functools.partial(_map_kernel, fn=fn),
        jax.ShapeDtypeStruct(args[0].shape, F32),
        (args[0].shape[0] // BM,),
        [pl.BlockSpec((BM, cp), lambda i: (i, 0)) for _ in args],
        pl.BlockSpec((BM, cp), lambda i: (i, 0)),
    )(*args)
    return out[:m, :c].reshape(shape)
