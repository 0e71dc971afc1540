"""Batch-invariant kernels of exact mode written in Pallas (``exact_kernels="pallas"``): the
order of every sum is fixed by the kernel's own code, on any backend.

Each kernel tiles the rows with a fixed block of :data:`BM` rows and walks the reduced axis in
blocks of a fixed width, accumulating the blocks **sequentially, in index order** (a
``fori_loop`` inside the kernel: no grid axis is reduced over, so the construction holds on
TPU, where a grid runs in order, and on GPU, where it does not). Every block product has the
same shape whatever the number of rows ``M``, so an output element's sum is a function of its
own row and column only: the row of an ``M = 1`` product is the same row of an ``M = 37`` one.

* :func:`matmul` / :func:`batched_matmul`: ``[G, M, K] x [G, K, N]``, output tiles ``BM x BN``,
  K in blocks of :data:`BK` (zero padding adds exact zeros). bf16 weights enter the kernel as
  bf16 and each block is widened to float32 there (exact), so a gathered weight (the LM head on
  every chip of an FSDP mesh: 1.2 GiB in bf16) is not copied in float32 first.
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

**Partitioning** (a mesh of several devices): Mosaic kernels cannot be partitioned by XLA, so
inside :func:`on_mesh` every kernel runs in a ``jax.shard_map`` over all the mesh's axes, and the
split never touches a reduced axis: rows (and the batch of attention) are split over the row
axes, a matmul's output columns ``N`` (and attention's kv heads) over ``tensor``, a batched
matmul's groups over ``expert``; the reduced axis (K, a row's columns, the keys) arrives whole
on every device (the weights are all-gathered over ``fsdp`` by the shard_map's input
resharding). Each output element is therefore computed by the same kernel code, over the same
blocks in the same order, as without a mesh: the partitioned result is bitwise the unpartitioned
one by construction (``tests/policy/test_pallas_exact.py`` checks it on 8 CPU devices). Rows are
zero-padded up to a multiple of the row split (a padded row changes no other row). The mesh is
the caller's, given explicitly (``forward(mesh=...)``, the scorer, ``podcheck``'s sampler
programs enter :func:`on_mesh`); without one the kernels run unwrapped.
"""

from __future__ import annotations

import contextlib
import functools

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.sharding import PartitionSpec as P

F32 = jnp.float32
HIGHEST = jax.lax.Precision.HIGHEST
BM = 16  # rows per block (every kernel)
BN = 128  # output columns per matmul block
BK = 128  # contraction block of the matmul
BD = 128  # column block of RMSNorm's mean square
BV = 128  # vocabulary block of the softmax sums
BMV = 8  # rows per block of the vocabulary kernels (a whole padded vocabulary row per block)
NEG_INF = -1e30
# Scoped VMEM a Mosaic kernel may use (the compiler's default is 16 MiB on v5e, 32 MiB on v5p and
# v6e; their VMEM is 128 / 95 / 128 MiB): a vocabulary block of Qwen's 151,936 columns takes
# 18.6 MiB double-buffered in and out, a K = 25,600 matmul column block 28 MiB (measured, v5e).
VMEM_LIMIT = 64 << 20

_FORCED: list[bool | None] = [None]
_MESH: list = [None]  # (mesh, row axes) of the innermost on_mesh, or None


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


@contextlib.contextmanager
def on_mesh(mesh, rows: tuple[str, ...] = ()):
    """Within the block, trace every kernel in a ``shard_map`` over ``mesh`` (a ``Mesh`` or
    ``AbstractMesh``; None or one device: unwrapped). ``rows``: the mesh axes the activations'
    rows are split over (``ModelConfig.activation_rows``), tried first for the row split."""
    if mesh is not None and mesh.size <= 1:
        mesh = None
    _MESH.append(None if mesh is None else (mesh, tuple(rows)))
    try:
        yield
    finally:
        _MESH.pop()


def current_mesh():
    """``(mesh, row axes)`` of the innermost :func:`on_mesh`, or None."""
    return _MESH[-1]


def split_axes(mesh, n: int, candidates) -> tuple[str, ...]:
    """The axes of ``candidates`` (in order, size > 1) whose product divides ``n``, greedily."""
    out, size = [], 1
    for ax in candidates:
        k = mesh.shape[ax]
        if k > 1 and n % (size * k) == 0:
            out.append(ax)
            size *= k
    return tuple(out)


def row_axes(mesh, rows: tuple[str, ...], exclude=()) -> tuple[str, ...]:
    """Every axis of ``mesh`` but ``exclude``, size > 1: ``rows`` first, then the others."""
    order = [a for a in rows if a in mesh.axis_names] + [a for a in mesh.axis_names if a not in rows]
    return tuple(a for a in order if a not in exclude and mesh.shape[a] > 1)


def dividing_rows(mesh, m: int, axes) -> tuple[str, ...]:
    """The axes of ``axes`` that split ``m`` rows without padding (greedily, in order), or all of
    ``axes`` when none does. Padding rows a sharded array does not divide makes XLA reshard it
    through uneven per-device pieces, whose TPU code generation grows with the rows: an RMSNorm
    of 131,088 x 4,096 rows on data 4 x tensor 8 compiled in 21.9 s, of 131,072 rows in 0.5 s
    (docs/pod_fit.md). Row-wise kernels give the same bits on any split."""
    div = split_axes(mesh, m, axes)
    return div if div or not axes else tuple(axes)


def axes_size(mesh, axes) -> int:
    size = 1
    for a in axes:
        size *= mesh.shape[a]
    return size


def spec_axes(axes):
    """A PartitionSpec entry for ``axes`` (None, a name or a tuple)."""
    return None if not axes else axes[0] if len(axes) == 1 else tuple(axes)


def shard(fn, mesh, in_specs, out_specs):
    """``fn`` in a ``jax.shard_map`` over every axis of ``mesh`` (the kernels are per device)."""
    return jax.shard_map(fn, mesh=mesh, in_specs=in_specs, out_specs=out_specs, check_vma=False)


def _by_rows(fn, *xs, extra=()):
    """``fn(*xs_local, *extra)`` with the ``[M, C]`` arrays ``xs`` split by rows over every mesh
    axis (padded to a multiple of the split) and ``extra`` whole on each device; unwrapped
    without a mesh. ``fn`` must be row-wise (a row's result depends on that row only)."""
    ctx = current_mesh()
    if ctx is None:
        return fn(*xs, *extra)
    mesh, rows = ctx
    m = xs[0].shape[0]
    axes = dividing_rows(mesh, m, row_axes(mesh, rows))
    mp = -(-m // axes_size(mesh, axes)) * axes_size(mesh, axes)
    xs = [pad_to(x, 0, mp) for x in xs]
    r = P(spec_axes(axes), None)
    out = shard(fn, mesh, (*(r for _ in xs), *(P() for _ in extra)), r)(*xs, *extra)
    return out[:m]


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


def compiler_params():
    """Mosaic's parameters (the scoped VMEM limit) when compiling for TPU; None otherwise."""
    if interpret() or _triton():
        return None
    from jax.experimental.pallas import tpu as pltpu

    return pltpu.CompilerParams(vmem_limit_bytes=VMEM_LIMIT)


def _call(kernel, out_shape, grid, in_specs, out_specs):
    return pl.pallas_call(
        kernel,
        out_shape=out_shape,
        grid=grid,
        in_specs=in_specs,
        out_specs=out_specs,
        interpret=interpret(),
        compiler_params=compiler_params(),
    )


def _mm_kernel(x_ref, w_ref, o_ref, *, bk: int):
    def body(j, acc):
        k0 = pl.multiple_of(j * bk, bk)
        xb, wb = x_ref[:, pl.ds(k0, bk)], w_ref[pl.ds(k0, bk), :].astype(F32)  # bf16 -> f32: exact
        return acc + jnp.dot(xb, wb, preferred_element_type=F32, precision=HIGHEST)

    n_blocks = x_ref.shape[-1] // bk
    o_ref[...] = jax.lax.fori_loop(0, n_blocks, body, jnp.zeros(o_ref.shape, F32))


def batched_matmul(x, w):
    """float32 ``x @ w`` for ``x [G, M, K]``, ``w [G, K, N]``: fixed blocks, K in order.

    On a mesh (:func:`on_mesh`): ``G`` over ``expert``, ``N`` over ``tensor`` (when they divide),
    ``M`` over the remaining axes that divide it (:func:`dividing_rows`); K is never split, so every
    output element is the same fixed-order sum as unpartitioned."""
    ctx = current_mesh()
    if ctx is None:
        return _batched_matmul(x, w)
    mesh, rows = ctx
    g, m, _ = x.shape
    g_axes = split_axes(mesh, g, ("expert",) if "expert" in mesh.axis_names else ())
    n_axes = split_axes(mesh, w.shape[-1], ("tensor",) if "tensor" in mesh.axis_names else ())
    m_axes = dividing_rows(mesh, m, row_axes(mesh, rows, exclude=g_axes + n_axes))
    size = axes_size(mesh, m_axes)
    x = pad_to(x, 1, -(-m // size) * size)
    xs = P(spec_axes(g_axes), spec_axes(m_axes), None)
    ws = P(spec_axes(g_axes), None, spec_axes(n_axes))
    os = P(spec_axes(g_axes), spec_axes(m_axes), spec_axes(n_axes))
    out = shard(_batched_matmul, mesh, (xs, ws), os)(x, w)
    return out[:, :m]


def _batched_matmul(x, w):
    g, m, k = x.shape
    n = w.shape[-1]
    bk = BK
    mp, kp, np_ = -(-m // BM) * BM, span(k, bk), span(n, BN)
    x = pad_to(pad_to(x.astype(F32), 1, mp), 2, kp)
    w = w if w.dtype == jnp.bfloat16 else w.astype(F32)  # bf16 weights are widened per block
    w = pad_to(pad_to(w, 1, kp), 2, np_)
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
    ``[1, C]`` arrays given whole to every block; rows zero-padded to a multiple of
    ``block_rows``); returns the ``[M, out_cols]`` output."""
    m, c = x.shape[0], x.shape[1]
    mp = -(-m // block_rows) * block_rows
    x = pad_to(x, 0, mp)
    out_cols = out_cols or c
    whole = [pl.BlockSpec((1, e.shape[1]), lambda i: (0, 0)) for e in extra]
    return _call(
        kernel,
        jax.ShapeDtypeStruct((mp, out_cols), F32),
        (mp // block_rows,),
        [pl.BlockSpec((block_rows, c), lambda i: (i, 0)), *whole],
        pl.BlockSpec((block_rows, out_cols), lambda i: (i, 0)),
    )(x, *extra)[:m]


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
    x2 = pad_to(x2, 1, dp)  # rows: padded per device by _rows
    s = pad_to(scale.astype(F32).reshape(1, d), 1, dp)
    out = _by_rows(lambda a, s_: _rows(functools.partial(_rms_kernel, d=d, eps=eps), a, s_), x2, extra=(s,))
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
    z2 = pad_to(z2, 1, vp, NEG_INF)
    kernel = functools.partial(_softmax_kernel, v=v, log=log)
    out = _by_rows(lambda a: _rows(kernel, a, block_rows=BMV), z2)
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
    args = [pad_to(a.astype(F32).reshape(m, c), 1, cp) for a in xs]

    def local(*a):
        m0 = a[0].shape[0]
        mp = -(-m0 // BM) * BM
        a = [pad_to(x, 0, mp) for x in a]
        return _call(
            functools.partial(_map_kernel, fn=fn),
            jax.ShapeDtypeStruct(a[0].shape, F32),
            (mp // BM,),
            [pl.BlockSpec((BM, cp), lambda i: (i, 0)) for _ in a],
            pl.BlockSpec((BM, cp), lambda i: (i, 0)),
        )(*a)[:m0]

    out = _by_rows(local, *args)
    return out[:m, :c].reshape(shape)
