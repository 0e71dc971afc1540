"""Batch-invariant kernels of exact mode: by exact summation (``exact_kernels="exact_sum"``,
described below) or by fixed order (``"ordered"``: each kernel's ``kind="ordered"`` branch calls
the CPU custom calls of :mod:`agentjax.policy.ordered`; ``"pallas"``: the ``kind="pallas"``
branches call the Pallas kernels of :mod:`agentjax.policy.pallas_kernels`; the standard-gradient
wrapper, ``cast`` and the float64 RoPE are shared).

(One module, over 300 lines: every kernel shares the grid and rounding rules defined at its top,
and both constructions share each kernel's signature and standard backward. Attention, the one
kernel with four constructions and a mask, is :mod:`agentjax.policy.exact_attention`.)

A floating-point sum depends on the order of its terms, and XLA picks that order per shape
(XLA:CPU hands dots to YNNPACK, whose kernel for a ``[N, 128] x [128, 512]`` product changes
between N <= 48 and N >= 56; N = 1 becomes a vector-matrix product with yet another order).
These kernels remove the order instead of pinning it: every sum they compute is **exact** in
float64, so every order, tiling, thread split or kernel gives the same bits.

* Contractions (:func:`dot_general`): each operand is rounded to a power-of-two grid per
  output row/column, ``a = a_int * 2^ea`` with ``|a_int| <= 2^b``, and ``b`` is chosen so that
  ``K * 2^(2b) <= 2^53``: every product and every partial sum of the float64 dot of the
  integers is an integer below 2^53, hence exact. The result is scaled back by ``2^(ea+eb)``
  (exact) and rounded once to float32. For K = 128, b = 23: an f32 operand loses at most one bit
  relative to its row's largest element; a bf16 operand keeps every element >= 2^-15 of it.
* Sums of terms (:func:`exact_sum`): the terms (float64) are rounded to one grid with
  ``n * 2^b <= 2^53`` and summed: exact, whatever the order.
* Low precision (bf16): XLA may skip the rounding of an intermediate to bf16 when it fuses ops
  (``xla_allow_excess_precision``, on by default), and whether it does depends on the
  surrounding graph (the sampler's unrolled layers vs the learner's scan). Every bf16 value a
  kernel reads or writes therefore goes through :func:`cast`, an explicit ``reduce_precision``
  XLA must honour: a value already representable in bf16 is unchanged by a skipped convert.
* Everything else is elementwise. Products of two f32 values are exact in float64, so where a
  multiply feeds an add the kernels do it in float64: LLVM's fused multiply-add contraction
  (XLA:CPU allows it) cannot change such a result, whichever fusion the ops land in.

The grid widths depend only on model constants (d_model, d_ff, head_dim, vocab, max_seq_len),
never on the batch or the number of keys present, so the sampler's KV-cache decode and the
learner's teacher-forced pass round every operand identically. Gradients: each kernel is a
``jax.custom_vjp`` whose backward is the VJP of the standard float32 kernel at the same inputs.
Needs float64 (CPU and GPU; TPUs have no float64 units).
"""

from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp
import numpy as np

from agentjax.policy import layers, ordered, pallas_kernels, pallas_moe

F64 = jnp.float64


def _log2_ceil(n: int) -> int:
    return max(int(n) - 1, 0).bit_length()


def _pow2(e):
    """``2.0 ** e`` for an int64 array, exactly (float64 bit pattern)."""
    e = jnp.clip(e, -1022, 1023).astype(jnp.int64)
    return jax.lax.bitcast_convert_type((e + 1023) << 52, F64)


def _round(x, dt):
    """``x`` rounded to ``dt``'s precision by ``lax.reduce_precision`` (kept in x's dtype)."""
    fi = jnp.finfo(dt)
    x = x.astype(jnp.float32) if x.dtype.itemsize < 4 else x
    return jax.lax.reduce_precision(x, exponent_bits=fi.nexp, mantissa_bits=fi.nmant)


def cast(x, dtype):
    """``x.astype(dtype)`` with the value explicitly rounded to every float format narrower than
    float64 it leaves or enters (``lax.reduce_precision``, which XLA must honour). A plain
    convert pair such as float64 -> float32 -> float64 (or float32 -> bf16 -> float32) may be
    elided under ``xla_allow_excess_precision``, and whether it is depends on the fusions around
    it, i.e. on the shapes: measured, the learner's log-probs changed with its batch size (batch 8
    vs 16, 1536 tokens: 17% differed by 1 ulp) until every narrowing went through here."""
    dtype = jnp.dtype(dtype)
    if not (jnp.issubdtype(x.dtype, jnp.floating) and jnp.issubdtype(dtype, jnp.floating)):
        return x.astype(dtype)
    if x.dtype == F64 and dtype != F64:  # through float32 first, as a plain astype chain would
        x = _round(x, jnp.float32).astype(jnp.float32)
    for dt in (x.dtype, dtype):
        if jnp.finfo(dt).bits < 64:
            x = _round(x, dt)
    return x.astype(dtype)


def _grid(a, axes, bits: int):
    """``a`` as integers on a power-of-two grid per slice over ``axes``: ``a ~= a_int * 2^e``,
    ``|a_int| <= 2^bits``; ``e`` keeps ``axes`` as size-1 dims."""
    a = cast(a, F64)
    m = jnp.max(jnp.abs(a), axis=axes, keepdims=True)
    raw = jax.lax.bitcast_convert_type(m, jnp.int64)
    top = ((raw >> 52) & 0x7FF) - 1022  # smallest t with m < 2^t (m normal)
    e = jnp.where(m > 0, top, -900) - bits
    return jnp.round(a * _pow2(-e)), e


def _with_standard_grad(exact_fn, standard_fn):
    """``exact_fn`` forward; backward = VJP of ``standard_fn`` at the same (array) arguments."""
    f = jax.custom_vjp(exact_fn)
    f.defvjp(lambda *a: (exact_fn(*a), a), lambda a, g: jax.vjp(standard_fn, *a)[1](g))
    return f


def exact_sum(t, axis: int, n_max: int | None = None):
    """Exact float64 sum of ``t`` over ``axis`` (after rounding the terms to a grid of 2^-(53 -
    log2 n) times the largest). ``n_max`` bounds the number of nonzero terms (default: the
    axis length); give it when the axis length differs between callers."""
    axis = axis % t.ndim
    bits = 53 - _log2_ceil(n_max or t.shape[axis])
    ti, e = _grid(t, (axis,), bits)
    return jnp.sum(ti, axis=axis) * _pow2(jnp.squeeze(e, axis))


def _dot_exact(a, b, dims, k_max, out_dtype):
    with jax.enable_x64(True):
        (ca, cb), _ = dims
        k = k_max or math.prod(a.shape[i] for i in ca)
        bits = (53 - _log2_ceil(k)) // 2
        ai, ea = _grid(a, tuple(ca), bits)
        bi, eb = _grid(b, tuple(cb), bits)
        out = jax.lax.dot_general(ai, bi, dims)  # integers < 2^53: exact in any order
        scale = jax.lax.dot_general(_pow2(ea), _pow2(eb), dims)  # one product per entry
        return cast(cast(out * scale, jnp.float32), out_dtype)


def _dot_ordered(a, b, dims, out_dtype, dot=ordered.dot):
    """``lax.dot_general`` as one fixed-order product ``[batch, M, K] x [batch, K, N]`` (``dot``:
    the ordered custom call or the Pallas kernel)."""
    (ca, cb), (ba, bb) = dims
    fa = [i for i in range(a.ndim) if i not in ca and i not in ba]
    fb = [i for i in range(b.ndim) if i not in cb and i not in bb]
    size = lambda x, axes: math.prod(x.shape[i] for i in axes)
    a3 = jnp.transpose(cast(a, jnp.float32), (*ba, *fa, *ca)).reshape(size(a, ba), size(a, fa), size(a, ca))
    if not (dot is pallas_kernels.batched_matmul and b.dtype == jnp.bfloat16):
        b = cast(b, jnp.float32)  # the Pallas kernel takes bf16 weights (half the gathered bytes)
    b3 = jnp.transpose(b, (*bb, *cb, *fb)).reshape(size(b, bb), size(b, cb), size(b, fb))
    out = dot(a3, b3).reshape(*(a.shape[i] for i in (*ba, *fa)), *(b.shape[i] for i in fb))
    return cast(out, out_dtype)


def dot_general(a, b, dims, *, k_max: int | None = None, kind: str = "exact_sum"):
    """``lax.dot_general(a, b, dims)`` with the batch-invariant kernels ``kind`` (see the
    module doc; ``k_max`` bounds the contraction length of the exact-sum grids), in ``a``'s dtype."""
    dt = a.dtype
    if not (kind == "pallas" and b.dtype == jnp.bfloat16):
        b = cast(b, dt)  # (a bf16 b is exact in any dtype: the Pallas kernel widens each block)
    if kind == "ordered":
        exact = lambda a_, b_: _dot_ordered(a_, b_, dims, dt)
    elif kind == "pallas":
        exact = lambda a_, b_: _dot_ordered(a_, b_, dims, dt, pallas_kernels.batched_matmul)
    else:
        exact = lambda a_, b_: _dot_exact(a_, b_, dims, k_max, dt)
    standard = lambda a_, b_: jax.lax.dot_general(a_, b_.astype(dt), dims).astype(dt)
    return _with_standard_grad(exact, standard)(a, b)


def matmul(x, w, kind: str = "exact_sum"):
    """``x @ w`` for ``x [..., K]``, ``w [K, F]``."""
    return dot_general(x, w, (((x.ndim - 1,), (0,)), ((), ())), kind=kind)


def rms_norm(x, scale, eps: float, kind: str = "exact_sum"):
    def standard(x_, s_):
        xf = x_.astype(jnp.float32)
        y = xf * jax.lax.rsqrt(jnp.mean(xf * xf, axis=-1, keepdims=True) + eps)
        return (y * s_.astype(jnp.float32)).astype(x_.dtype)

    def exact(x_, s_):
        if kind == "ordered":
            return cast(ordered.rms_norm(cast(x_, jnp.float32), cast(s_, jnp.float32), eps), x_.dtype)
        if kind == "pallas":
            return cast(pallas_kernels.rms_norm(cast(x_, jnp.float32), cast(s_, jnp.float32), eps), x_.dtype)
        with jax.enable_x64(True):
            x64 = cast(x_, F64)  # squares of f32/bf16 values are exact in float64
            ms = cast(exact_sum(x64 * x64, -1) / x_.shape[-1], jnp.float32)
        y = cast(x_, jnp.float32) * jax.lax.rsqrt(ms + jnp.float32(eps))[..., None]
        return cast(y * cast(s_, jnp.float32), x_.dtype)

    return _with_standard_grad(exact, standard)(x, scale)


@functools.lru_cache(maxsize=16)
def _rope_tables(max_len: int, d: int, theta):
    """cos and sin tables [max_len, d] (float32) of plain RoPE of base ``theta``, or [R, max_len,
    d] of a tuple of ``Rotary`` (``policy/rope.py``): angles and the scale applied in float64."""
    if isinstance(theta, tuple):
        tabs = [_rope_tables_of(max_len, np.asarray(r.inv_freq, np.float64), r.scale) for r in theta]
        return tuple(np.stack(t) for t in zip(*tabs, strict=True))
    return _rope_tables_of(max_len, 1.0 / (theta ** (np.arange(0, d, 2, dtype=np.float64) / d)), 1.0)


def _rope_tables_of(max_len: int, inv, scale: float):
    ang = np.arange(max_len, dtype=np.float64)[:, None] * inv[None, :]
    cos, sin = np.cos(ang) * scale, np.sin(ang) * scale
    return (
        np.concatenate([cos, cos], -1).astype(np.float32),
        np.concatenate([sin, sin], -1).astype(np.float32),
    )


def rope(x, pos, theta, max_len: int, which=None, kind: str = "exact_sum"):
    """Rotary embedding with float32 tables of positions ``0 .. max_len - 1`` (computed once in
    float64 on the host); positions outside are clipped (padding). x: [N, H, D], pos: [N].
    ``theta``, ``which``: as :func:`agentjax.policy.layers.rope`; ``kind="pallas"``: float32 in
    a Pallas kernel (TPUs have no float64)."""
    d = x.shape[-1]
    cos_t, sin_t = _rope_tables(max_len, d, theta if isinstance(theta, tuple) else float(theta))

    def exact(x_, pos_):
        idx = jnp.clip(pos_, 0, max_len - 1)
        cos, sin = jnp.asarray(cos_t), jnp.asarray(sin_t)
        if which is not None:
            cos, sin = cos[which], sin[which]
        cos, sin = cos[idx][:, None, :], sin[idx][:, None, :]
        if kind == "pallas":
            xf = cast(x_, jnp.float32)
            rot = jnp.concatenate([-xf[..., d // 2 :], xf[..., : d // 2]], -1)
            cs = [jnp.broadcast_to(a, xf.shape) for a in (cos, sin)]
            out = pallas_kernels.elementwise(lambda a, r, c, s: a * c + r * s, xf, rot, *cs)
            return cast(out, x_.dtype)
        with jax.enable_x64(True):
            xf = cast(x_, F64)
            rot = jnp.concatenate([-xf[..., d // 2 :], xf[..., : d // 2]], -1)
            out = xf * cos.astype(F64) + rot * sin.astype(F64)  # exact products, one rounding
            return cast(cast(out, jnp.float32), x_.dtype)

    return _with_standard_grad(exact, lambda x_, p_: layers.rope(x_, p_, theta, which))(x, pos)


def scale(x, c: float, kind: str = "exact_sum"):
    """``x * c`` (``c`` rounded to x's dtype) as one exact float64 product rounded once: the f32
    multiply fused into different consumers changed sampler-vs-learner bits (Gemma's sqrt(d));
    ``kind="pallas"``: the float32 product in a Pallas kernel."""

    def exact(x_):
        if kind == "pallas":
            c32 = float(np.asarray(c, x_.dtype).astype(np.float32))
            return cast(
                pallas_kernels.elementwise(lambda a: a * np.float32(c32), cast(x_, jnp.float32)), x_.dtype
            )
        with jax.enable_x64(True):
            c64 = np.float64(np.asarray(c, x_.dtype).astype(np.float32))
            return cast(cast(x_, F64) * c64, x_.dtype)

    return _with_standard_grad(exact, lambda x_: x_ * jnp.asarray(c, x_.dtype))(x)


def softcap(z, cap: float, kind: str = "exact_sum"):
    """float32 ``cap * tanh(z / cap)`` computed in float64 (Gemma's final-logit soft-capping;
    ``kind="pallas"``: in float32 in a Pallas kernel)."""

    def exact(z_):
        if kind == "pallas":
            c = np.float32(cap)
            return pallas_kernels.elementwise(lambda a: c * jnp.tanh(a / c), cast(z_, jnp.float32))
        with jax.enable_x64(True):
            return cast(cap * jnp.tanh(cast(z_, F64) / cap), jnp.float32)

    return _with_standard_grad(exact, lambda z_: layers.softcap(z_.astype(jnp.float32), cap))(z)


def _log_softmax64(z, then=lambda x: x):
    """``then(log_softmax(z))`` over the last axis in float64 with an exact sum, as float32."""
    with jax.enable_x64(True):
        z = cast(z, F64)
        zs = z - jnp.max(z, axis=-1, keepdims=True)
        return cast(then(zs - jnp.log(exact_sum(jnp.exp(zs), -1))[..., None]), jnp.float32)


def log_softmax(z, kind: str = "exact_sum"):
    """float32 log-softmax over the last axis with the batch-invariant kernels ``kind``."""
    if kind == "ordered":
        exact = lambda z_: ordered.softmax(cast(z_, jnp.float32), ordered.LOG_SOFTMAX)
    elif kind == "pallas":
        exact = lambda z_: pallas_kernels.log_softmax(cast(z_, jnp.float32))
    else:
        exact = lambda z_: _log_softmax64(z_)
    return _with_standard_grad(exact, lambda z_: jax.nn.log_softmax(z_.astype(jnp.float32)))(z)


def softmax(z, kind: str = "exact_sum"):
    """float32 softmax over the last axis with the batch-invariant kernels ``kind`` (exact sum:
    ``exp(log_softmax)``)."""
    if kind == "ordered":
        exact = lambda z_: ordered.softmax(cast(z_, jnp.float32), ordered.SOFTMAX)
    elif kind == "pallas":
        exact = lambda z_: pallas_kernels.softmax(cast(z_, jnp.float32))
    else:
        exact = lambda z_: _log_softmax64(z_, jnp.exp)
    return _with_standard_grad(exact, lambda z_: jax.nn.softmax(z_.astype(jnp.float32)))(z)


def gated(g, u, kind: str = "exact_sum", act: str = "silu"):
    """SwiGLU's ``silu(g) * u`` (or GeGLU's, ``act="gelu_tanh"``) in g's dtype; the ordered
    kernels use their own exp (XLA's exp differs between the libraries it hands fusions to) and
    implement only silu (``ModelConfig`` refuses the rest with them)."""
    if kind != "ordered":
        return layers.act(g, act) * u
    if act != "silu":
        raise ValueError(f"the ordered kernels implement only silu; got {act!r} (see ModelConfig)")
    exact = lambda g_, u_: cast(ordered.swiglu(cast(g_, jnp.float32), cast(u_, jnp.float32)), g_.dtype)
    return _with_standard_grad(exact, lambda g_, u_: jax.nn.silu(g_) * u_)(g, u)


MASS_BITS = 30  # top-p's probability grid: 2^-30, so a row's int32 sum stays below 2^31


def exclusive_mass(p):
    """``cumsum(p) - p`` over the last axis for probabilities ``p`` (each row summing to ~1), as
    int32 multiples of ``2^-MASS_BITS``: each probability rounded to the grid, then summed in
    integers, which is exact in any order, so the result is a function of the row alone on
    every backend, with no float64 (top-p in exact mode)."""
    q = jnp.round(p.astype(jnp.float32) * jnp.float32(2**MASS_BITS)).astype(jnp.int32)
    return jnp.cumsum(q, axis=-1) - q


def normalize(p, kind: str = "exact_sum"):
    """``p / sum(p)`` over the last axis (MoE gates; ``kind="pallas"``: the sum in column order,
    in float32 kernels)."""

    def exact(p_):
        if kind == "pallas":
            return pallas_moe.normalize(p_)
        with jax.enable_x64(True):
            return cast(p_.astype(F64) / exact_sum(p_.astype(F64), -1)[..., None], p_.dtype)

    return _with_standard_grad(exact, lambda p_: p_ / jnp.sum(p_, -1, keepdims=True))(p)


def weighted_sum(h, w, kind: str = "exact_sum"):
    """``sum_e h[:, e] * w[:, e, None]`` for h [N, E, D], w [N, E] (MoE combine), in h's dtype
    (``kind="pallas"``: accumulated over e in order, in float32 kernels)."""

    def exact(h_, w_):
        if kind == "pallas":
            return cast(pallas_moe.weighted_sum(cast(h_, jnp.float32), w_), h_.dtype)
        with jax.enable_x64(True):
            t = cast(h_, F64) * cast(w_, F64)[..., None]  # exact products
            return cast(cast(exact_sum(t, 1), jnp.float32), h_.dtype)

    standard = lambda h_, w_: jnp.sum(h_ * w_.astype(h_.dtype)[..., None], axis=1)
    return _with_standard_grad(exact, standard)(h, w)


def moe(x, p, k: int, forced=None, kind: str = "exact_sum"):
    """:func:`agentjax.policy.layers.moe` with exact kernels (same arguments and returns)."""
    logits = matmul(x, p["router"], kind).astype(jnp.float32)  # [N, E]
    probs = softmax(logits, kind)
    chosen = jax.lax.top_k(logits, k)[1] if forced is None else forced.astype(jnp.int32)
    gates = normalize(jnp.take_along_axis(probs, chosen, axis=-1), kind)  # [N, k]
    n_exp = logits.shape[-1]
    # at most one nonzero term per expert (distinct choices): exact in any order
    weight = jnp.sum(jax.nn.one_hot(chosen, n_exp, dtype=jnp.float32) * gates[..., None], axis=1)
    up = (((1,), (1,)), ((), ()))  # nd,edf->nef
    g = dot_general(x, p["w_gate"], up, kind=kind)
    u = dot_general(x, p["w_up"], up, kind=kind)
    down = (((2,), (1,)), ((1,), (0,)))
    h = dot_general(cast(gated(g, u, kind), x.dtype), p["w_down"], down, kind=kind)  # [E,N,D]
    y = weighted_sum(h.swapaxes(0, 1), weight, kind)
    return y, chosen.astype(jnp.int32), probs
