"""Model configuration: a small frozen dataclass; derived values are properties."""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp

from agentjax.choice import Choice

_DTYPES = {"float32": jnp.float32, "bfloat16": jnp.bfloat16, "float16": jnp.float16}


class DType(Choice):
    FLOAT32 = "float32"
    BFLOAT16 = "bfloat16"
    FLOAT16 = "float16"


class Remat(Choice):
    NONE = "none"
    LAYER = "layer"  # recompute each layer in the backward pass (jax.checkpoint)


class ExactKernels(Choice):
    AUTO = "auto"  # "pallas" on TPU/GPU; on CPU "ordered" where it builds and fits, else "exact_sum"
    ORDERED = "ordered"  # float32, every sum in an order fixed per element (policy/ordered.cc, CPU)
    EXACT_SUM = "exact_sum"  # every sum exact in float64 (policy/kernels.py; CPU and GPU)
    TILED = "tiled"  # fixed row tiles of exact_tile rows (the reference construction)
    PALLAS = "pallas"  # float32, every sum in an order fixed by Pallas kernels (any backend)


class AttentionKernel(Choice):
    """Fast mode's attention (exact mode keeps its batch-invariant kernels whatever this says)."""

    AUTO = "auto"  # full scores below attention_blockwise_from keys or attention_block queries
    FULL = "full"  # the full score tensor [B, Hkv, G, T, S] (layers.attention_standard / _cache)
    BLOCKWISE = "blockwise"  # online softmax over blocks of attention_block keys (policy/blockwise.py)


class RopeType(Choice):
    DEFAULT = "default"  # plain RoPE
    LINEAR = "linear"  # frequencies / rope_factor
    LLAMA3 = "llama3"  # Llama-3.1+: low frequencies / factor, a smooth band between
    YARN = "yarn"  # YaRN (Qwen long context): ramped interpolation, cos/sin x rope_attention_factor


class Activation(Choice):
    SILU = "silu"  # SwiGLU (Llama, Qwen, Mistral)
    GELU_TANH = "gelu_tanh"  # GeGLU with the tanh approximation (Gemma's gelu_pytorch_tanh)


# What the ordered CPU kernels implement; other settings need the exact-sum or tiled kernels.
ORDERED_LACKS = ("mlp_act", "attn_softcap", "final_softcap")


class ValueHead(Choice):
    NONE = "none"  # no critic (GRPO family)
    SHARED = "shared"  # a linear value head on the policy trunk
    SEPARATE = "separate"  # a separate small critic model (params["critic"])


class ConfigError(ValueError):
    """An invalid configuration; the message names the field and the allowed values."""


def _check_positive(field: str, value: int) -> None:
    if not isinstance(value, int) or value <= 0:
        raise ConfigError(f"{field}={value!r} is invalid; must be a positive integer")


@dataclasses.dataclass(frozen=True)
class ModelConfig:
    """A decoder-only transformer of the Llama/Qwen/Mistral/Gemma family (RMSNorm, RoPE, GQA).

    ``exact_tile > 0`` selects the batch-invariant kernels (0 = standard XLA kernels); the sampler
    and the learner then produce bitwise-equal log-probs (see docs/consistency.md). Which ones:
    ``exact_kernels="ordered"`` computes every contraction and long sum in float32 in an order
    its CPU kernels fix per output element (``policy/ordered.py``); ``"exact_sum"`` computes
    every sum exactly in float64 (``policy/kernels.py``), so no reduction order exists to depend
    on the batch; ``"pallas"`` computes every contraction and long sum in float32 in Pallas
    kernels whose blocks and sequential block order fix it (``policy/pallas_kernels.py``,
    ``pallas_attention.py``; Mosaic on TPU, Triton on GPU, interpret mode on the CPU);
    ``"auto"`` (default) is ``"pallas"`` when JAX's default backend is a TPU or GPU, else
    ``"ordered"`` when the CPU kernels build and implement the model (not
    :data:`ORDERED_LACKS`), else ``"exact_sum"``;
    ``exact_kernels="tiled"`` is the reference construction: every row-wise op runs over fixed
    tiles of ``exact_tile`` rows and attention per query row over ``max_seq_len`` slots. It is a
    kernel choice made once per model, not a mode: both sides always run the same kernels.
    """

    vocab_size: int = 64
    d_model: int = 128
    n_layers: int = 2
    n_heads: int = 4
    n_kv_heads: int = 2
    head_dim: int = 32
    d_ff: int = 512
    max_seq_len: int = 128
    rope_theta: float = 10000.0
    norm_eps: float = 1e-6
    tie_embeddings: bool = True
    qkv_bias: bool = False  # Qwen2
    qk_norm: bool = False  # Qwen3, Gemma-3
    # RoPE scaling (policy/rope.py): rope_type and its parameters, as in HF's rope_parameters.
    rope_type: RopeType = RopeType.DEFAULT
    rope_factor: float = 1.0
    rope_original_max_len: int = 0  # original_max_position_embeddings (llama3, yarn)
    rope_low_freq_factor: float = 1.0  # llama3
    rope_high_freq_factor: float = 4.0  # llama3
    rope_beta_fast: float = 32.0  # yarn
    rope_beta_slow: float = 1.0  # yarn
    rope_truncate: bool = True  # yarn: integer correction range
    rope_attention_factor: float = 1.0  # yarn: cos and sin are multiplied by it
    # Sliding-window attention: a query sees the keys at distance < sliding_window, in the layers
    # sliding_layers (() = every layer); those layers use plain RoPE of base local_rope_theta
    # when it is > 0 (Gemma-3), else the model's RoPE. 0 = full attention everywhere.
    sliding_window: int = 0
    sliding_layers: tuple[int, ...] = ()
    local_rope_theta: float = 0.0
    # Gemma-2/3: embeddings x sqrt(d_model), norm scale (norm_offset + w), GeGLU, a norm after
    # attention and after the MLP (before each residual add), tanh soft-capping of attention
    # scores and final logits (0 = none), scores scaled by attn_scalar**-0.5 (0 = head_dim).
    embed_scale: bool = False
    norm_offset: float = 0.0
    mlp_act: Activation = Activation.SILU
    post_norms: bool = False
    attn_softcap: float = 0.0
    final_softcap: float = 0.0
    attn_scalar: float = 0.0
    n_experts: int = 0  # 0 = dense feed-forward
    n_experts_per_token: int = 2
    param_dtype: DType = DType.FLOAT32
    compute_dtype: DType = DType.FLOAT32
    head_dtype: DType = DType.FLOAT32  # LM head (float32 head with bf16 body: the MiniMax-M1 lesson)
    value_head: ValueHead = ValueHead.NONE
    critic_layers: int = 1  # layers of the separate critic (value_head="separate")
    exact_tile: int = 0
    exact_kernels: ExactKernels = ExactKernels.AUTO  # used when exact_tile > 0
    remat: Remat = Remat.NONE
    # Fast mode's attention (policy/attention.py: attention_plan): "auto" keeps the full score
    # tensor below attention_blockwise_from keys (the default run's shapes, bit-identical to
    # earlier versions) and for fewer queries than attention_block (decode: its scores are
    # linear in the keys already), and attends by blocks of attention_block keys otherwise
    # (memory O(T x block) instead of O(T x S); "blockwise" forces it for decode too).
    attention_kernel: AttentionKernel = AttentionKernel.AUTO
    attention_block: int = 512
    attention_blockwise_from: int = 4096
    # Unroll factor of the learner's ``lax.scan`` over the stacked layers: 1 keeps one compiled
    # layer (compile time independent of depth, the choice for deep models); n_layers unrolls
    # them all (a small model's train step ran 12% faster on CPU). The sampler always unrolls.
    layer_unroll: int = 1
    # The learner's scorer projects onto the vocabulary and takes log-probs this many tokens
    # per row at a time, each chunk recomputed in the backward pass (policy/scoring.py), so no
    # [B, T, V] logits buffer is live: 0 = the whole sequence at once. Exact mode: same bits.
    score_chunk: int = 0
    # Mesh axes the hidden rows [N, D] (N = batch x tokens) are split over at the start of every
    # layer (``with_sharding_constraint``; resolved on the mesh set by ``jax.set_mesh``), e.g.
    # ("data", "fsdp"): the "batch" activation rule. () = no constraint (the model as is).
    activation_rows: tuple[str, ...] = ()
    init_scale: float = 0.02

    def __post_init__(self):
        if not isinstance(self.vocab_size, int) or self.vocab_size < 0:
            raise ConfigError(
                f"vocab_size={self.vocab_size!r} is invalid; a positive integer (0: not yet known)"
            )
        for f in (
            "d_model",
            "n_layers",
            "n_heads",
            "n_kv_heads",
            "head_dim",
            "d_ff",
            "max_seq_len",
            "critic_layers",
            "layer_unroll",
            "attention_block",
            "attention_blockwise_from",
        ):
            _check_positive(f, getattr(self, f))
        if self.n_heads % self.n_kv_heads:
            raise ConfigError(f"n_heads={self.n_heads} must be a multiple of n_kv_heads={self.n_kv_heads}")
        for f, cls in (
            ("param_dtype", DType),
            ("compute_dtype", DType),
            ("head_dtype", DType),
            ("value_head", ValueHead),
            ("remat", Remat),
            ("exact_kernels", ExactKernels),
            ("attention_kernel", AttentionKernel),
            ("rope_type", RopeType),
            ("mlp_act", Activation),
        ):
            try:
                object.__setattr__(self, f, cls.parse(f, getattr(self, f)))
            except ValueError as e:
                raise ConfigError(str(e)) from None
        rows = self.activation_rows
        rows = (rows,) if isinstance(rows, str) else tuple(rows)  # lists come from JSON/configs
        if not all(isinstance(a, str) and a for a in rows) or len(set(rows)) != len(rows):
            raise ConfigError(
                f"activation_rows={self.activation_rows!r} is invalid; "
                "a tuple of distinct mesh axis names, () for no constraint"
            )
        object.__setattr__(self, "activation_rows", rows)
        if self.n_experts < 0:
            raise ConfigError(f"n_experts={self.n_experts} is invalid; must be >= 0 (0 = dense)")
        if self.n_experts and not 1 <= self.n_experts_per_token <= self.n_experts:
            raise ConfigError(
                f"n_experts_per_token={self.n_experts_per_token} is invalid; "
                f"allowed: 1..n_experts={self.n_experts}"
            )
        if self.score_chunk < 0:
            raise ConfigError(f"score_chunk={self.score_chunk} is invalid; 0 (off) or tokens per chunk > 0")
        if self.exact_tile < 0:
            raise ConfigError(f"exact_tile={self.exact_tile} is invalid; 0 (off) or a tile size > 0")
        self._check_layers()

    def _check_layers(self) -> None:
        layers = tuple(self.sliding_layers)
        object.__setattr__(self, "sliding_layers", layers)
        if self.sliding_window < 0 or (layers and not self.sliding_window):
            raise ConfigError(
                f"sliding_window={self.sliding_window} is invalid; > 0 (sliding_layers={layers}), 0 = none"
            )
        if len(set(layers)) != len(layers) or not all(0 <= i < self.n_layers for i in layers):
            raise ConfigError(f"sliding_layers={layers} is invalid; distinct layer indices < n_layers")
        if self.rope_type in ("llama3", "yarn") and self.rope_original_max_len <= 0:
            raise ConfigError(
                f"rope_original_max_len={self.rope_original_max_len} is invalid; rope_type="
                f"{self.rope_type!r} needs the pretraining length (original_max_position_embeddings)"
            )
        for f in ("rope_factor", "attn_softcap", "final_softcap", "attn_scalar", "local_rope_theta"):
            if not getattr(self, f) >= 0:
                raise ConfigError(f"{f}={getattr(self, f)!r} is invalid; must be >= 0")
        if self.exact and self.exact_kernels == "ordered":
            lacking = [f for f in ORDERED_LACKS if getattr(self, f) not in (0.0, "silu")]
            if lacking:
                raise ConfigError(
                    f"{lacking[0]}={getattr(self, lacking[0])!r} is not implemented by "
                    "exact_kernels='ordered'; use 'exact_sum' or 'tiled' ('auto' picks 'exact_sum')"
                )

    @property
    def is_moe(self) -> bool:
        return self.n_experts > 0

    @property
    def exact(self) -> bool:
        return self.exact_tile > 0

    @property
    def invariant(self) -> str:
        """In exact mode with the batch-invariant kernels of ``policy/kernels.py``, which ones:
        ``"ordered"``, ``"exact_sum"`` or ``"pallas"`` (``"auto"`` resolved); else ``""``."""
        if not self.exact or self.exact_kernels == "tiled":
            return ""
        if self.exact_kernels == "auto" and jax.default_backend() in ("tpu", "gpu"):
            return "pallas"
        if self.exact_kernels == "auto":
            from agentjax.policy import ordered

            lacking = any(getattr(self, f) not in (0.0, "silu") for f in ORDERED_LACKS)
            cpu = jax.default_backend() == "cpu" and not lacking
            return "ordered" if cpu and ordered.available() else "exact_sum"
        return str(self.exact_kernels)

    @property
    def is_sliding(self) -> tuple[bool, ...]:
        """Per layer: whether it attends within ``sliding_window`` (and uses the local RoPE)."""
        if not self.sliding_window:
            return (False,) * self.n_layers
        return tuple(not self.sliding_layers or i in self.sliding_layers for i in range(self.n_layers))

    @property
    def row_tile(self) -> int:
        """Rows per tile of the tiled reference kernels (0: no tiling)."""
        return self.exact_tile if self.exact and self.exact_kernels == "tiled" else 0

    @property
    def q_per_kv(self) -> int:
        return self.n_heads // self.n_kv_heads

    @property
    def pdtype(self):
        return _DTYPES[self.param_dtype]

    @property
    def cdtype(self):
        return _DTYPES[self.compute_dtype]

    @property
    def hdtype(self):
        return _DTYPES[self.head_dtype]

    def replace(self, **kw) -> ModelConfig:
        return dataclasses.replace(self, **kw)

    @classmethod
    def from_dict(cls, d) -> ModelConfig:
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(d) - names)
        if unknown:
            raise ConfigError(f"unknown model config fields {unknown}; allowed fields: {sorted(names)}")
        return cls(**dict(d))
