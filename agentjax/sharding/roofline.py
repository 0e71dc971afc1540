"""Roofline step time of a compiled program: loop-aware FLOPs and HBM bytes, and chip peaks.

XLA's ``compiled.cost_analysis()`` counts the body of every ``while`` loop once (measured: a
``lax.scan`` of 16 matmuls reports the FLOPs of one), and the learner runs its layers, its
gradient accumulation and (exact mode) its fixed-size row tiles as loops. :func:`hlo_cost`
therefore reads the compiled HLO itself: matmul FLOPs (``dot``, ``convolution``) in every
computation, HBM bytes as the operands and results of each top-level instruction (a fusion's
inside stays on chip), and each loop body times its trip count when the loop condition compares
the counter with a constant (``lax.scan``, ``fori_loop``, ``lax.map``). A data-dependent loop
(the sampler's decode ``while_loop``) counts once, and :meth:`Cost.per_iteration` gives the
cost of that one iteration alone: for decode, one step.

:func:`roofline_seconds` is ``max(flops / peak_flops, bytes / hbm_bandwidth)`` per chip, with
the published peaks of :data:`CHIP_PEAKS`. Assumptions: every matmul runs at the chip's bf16
peak (XLA's default precision runs float32 matmuls as one bf16 pass on TPU; the compiled
program of an exact_f32 step shows bf16 operands), elementwise work is free, collectives and
host transfers overlap with compute, and the compiler's choice of which values stay in on-chip
memory is ignored (all top-level operands count as HBM reads), and an in-place update
(``dynamic-update-slice`` / ``scatter`` into a KV cache) counts its whole buffer, so a
memory-bound step (decode) comes out pessimistic. For sizing a pod, not a measurement.
"""

from __future__ import annotations

import dataclasses
import math
import re

import numpy as np

# Per chip, by ``device.device_kind``: (bf16 FLOP/s, HBM bytes/s). Google Cloud TPU docs:
# v4 275 TFLOP/s, 1.2 TB/s; v5e 197 TFLOP/s, 819 GB/s; v5p 459 TFLOP/s, 2.765 TB/s;
# v6e (Trillium) 918 TFLOP/s, 1.64 TB/s.
CHIP_PEAKS: dict[str, tuple[float, float]] = {
    "TPU v4": (275e12, 1.2e12),
    "TPU v5 lite": (197e12, 819e9),
    "TPU v5": (459e12, 2765e9),
    "TPU v6 lite": (918e12, 1640e9),
}

DTYPE_BYTES = {  # HLO element type -> bytes
    "pred": 1,
    "s8": 1,
    "u8": 1,
    "bf16": 2,
    "f16": 2,
    "s16": 2,
    "u16": 2,
    "f32": 4,
    "s32": 4,
    "u32": 4,
    "f64": 8,
    "s64": 8,
    "u64": 8,
    "f8e4m3fn": 1,
    "f8e5m2": 1,
}
_ARRAY = re.compile(r"\b([a-z0-9]+)\[([\d,]*)\]")
_NO_TRAFFIC = {
    "parameter",
    "constant",
    "tuple",
    "get-tuple-element",
    "bitcast",
    "while",
    "call",
    "conditional",
    "after-all",
    "partition-id",
    "replica-id",
    "iota",
}


@dataclasses.dataclass(frozen=True)
class Cost:
    flops: float = 0.0
    bytes: float = 0.0
    open_loops: int = 0  # loops without a constant trip count, counted once
    loop_flops: float = 0.0  # of one iteration of those loops (decode: one step)
    loop_bytes: float = 0.0

    def __add__(self, o: Cost) -> Cost:
        return Cost(*(a + b for a, b in zip(dataclasses.astuple(self), dataclasses.astuple(o), strict=True)))

    def times(self, n: int) -> Cost:
        return Cost(self.flops * n, self.bytes * n, self.open_loops, self.loop_flops * n, self.loop_bytes * n)

    def per_iteration(self) -> Cost:
        """One iteration of the data-dependent loop(s) when there are any, else the whole.

        The sampler's decode program is a ``while_loop`` of decode steps plus work done once
        per call (restacking the per-layer KV cache): its step time is the loop body's.
        """
        if not self.open_loops:
            return self
        return Cost(self.loop_flops, self.loop_bytes, self.open_loops)


def _dims(type_str: str) -> list[int]:
    m = _ARRAY.search(type_str)
    return [int(d) for d in m.group(2).split(",") if d] if m else []


def _array_bytes(type_str: str) -> int:
    """Bytes of an array type; a tuple type (async start/done, loop state) counts as 0."""
    if type_str.startswith("("):
        return 0
    m = _ARRAY.search(type_str)
    if not m or m.group(1) not in DTYPE_BYTES:
        return 0
    return DTYPE_BYTES[m.group(1)] * math.prod(int(d) for d in m.group(2).split(",") if d)


def _split_instruction(line: str):
    """``(name, type, opcode, operand text, attributes)`` of one HLO instruction line."""
    m = re.match(r"\s*(?:ROOT )?%?([\w.\-]+) = ", line)
    if not m:
        return None
    rest = line[m.end() :]
    if rest.startswith("("):  # tuple type: up to the matching parenthesis
        depth, end = 0, 0
        while end < len(rest):
            depth += (rest[end] == "(") - (rest[end] == ")")
            end += 1
            if depth == 0:
                break
        typ, rest = rest[:end], rest[end + 1 :]
    else:
        typ, _, rest = rest.partition(" ")
    op, _, rest = rest.partition("(")
    depth, i = 1, 0
    while i < len(rest) and depth:
        depth += (rest[i] == "(") - (rest[i] == ")")
        i += 1
    return m.group(1), typ, op, rest[: i - 1], rest[i:]


def _parse(hlo_text: str):
    """``{computation: [instruction tuples]}`` and the entry computation's name."""
    comps, cur, entry = {}, None, None
    for line in hlo_text.splitlines():
        head = re.match(r"(ENTRY )?%?([\w.\-]+) \(.*\{\s*$", line)
        if head and not line.startswith(" "):
            cur = comps.setdefault(head.group(2), [])
            entry = head.group(2) if head.group(1) else entry
        elif line.startswith("}"):
            cur = None
        elif cur is not None and (ins := _split_instruction(line)):
            cur.append(ins)
    return comps, entry


def _names(text: str) -> list[str]:
    return re.findall(r"%([\w.\-]+)", text)


def _trip_count(comps, cond: str) -> int | None:
    """N when the loop condition (or a fusion in it) is ``counter < N`` with a constant N."""
    todo, seen = [cond], set()
    while todo:
        name = todo.pop()
        seen.add(name)
        ins = comps.get(name, [])
        consts = {
            n: int(t) for n, _, op, t, _ in ins if op == "constant" and re.fullmatch(r"-?\d+", t.strip())
        }
        for _, _, op, text, attrs in ins:
            ops = _names(text)
            if op == "compare" and len(ops) == 2:
                if "direction=LT" in attrs and ops[1] in consts:
                    return consts[ops[1]]
                if "direction=GT" in attrs and ops[0] in consts:
                    return consts[ops[0]]
            todo += [c for c in re.findall(r"calls=%?([\w.\-]+)", attrs) if c not in seen]
    return None


def hlo_cost(hlo_text: str) -> Cost:
    """Loop-aware matmul FLOPs and HBM bytes of a compiled (per-chip) HLO module."""
    comps, entry = _parse(hlo_text)
    memo: dict[tuple[str, bool], Cost] = {}

    def cost(name: str, fused: bool) -> Cost:
        if (name, fused) in memo:
            return memo[(name, fused)]
        types = {n: t for n, t, *_ in comps.get(name, [])}
        total = Cost()
        for _, typ, op, text, attrs in comps.get(name, []):
            operands = _names(text)
            called = dict(re.findall(r"\b(calls|body|condition)=%?([\w.\-]+)", attrs))
            if op in ("dot", "convolution"):
                total += Cost(flops=_matmul_flops(typ, op, operands, attrs, types))
            elif op == "fusion":
                total += Cost(flops=cost(called["calls"], True).flops)
            elif op == "while":
                known = re.search(r'"known_trip_count":\{"n":"(\d+)"', attrs)
                n = int(known.group(1)) if known else _trip_count(comps, called["condition"])
                body = cost(called["body"], False)
                total += body.times(n) if n else body + Cost(0, 0, 1, body.flops, body.bytes)
            elif op == "conditional" and "branch_computations=" in attrs:
                branches = _names(attrs.split("branch_computations=")[1].split("}")[0])
                total += max((cost(b, fused) for b in branches), key=lambda c: c.flops, default=Cost())
            elif "calls" in called:
                total += cost(called["calls"], fused)
            if not fused and op not in _NO_TRAFFIC and not op.endswith("-done"):
                io = _array_bytes(typ) + sum(_array_bytes(types.get(o, "")) for o in operands)
                total += Cost(bytes=io)
        memo[(name, fused)] = total
        return total

    return cost(entry, False)


def _valid_pairs(n_in: int, n_out: int, size: int, stride: int, lo: int, lhs_dil: int, rhs_dil: int) -> int:
    """(output position, window position) pairs of one spatial dimension that read a real
    input element (not padding, not a hole of the input dilation), as XLA's cost analysis."""
    out = np.arange(n_out)[:, None] * stride
    win = np.arange(size)[None, :] * rhs_dil
    idx = out + win - lo
    real = (idx >= 0) & (idx <= (n_in - 1) * lhs_dil) & (idx % lhs_dil == 0)
    return int(real.sum())


def _window(attrs: str, n: int) -> list[dict]:
    """Per spatial dimension: size, stride, low padding and dilations of a convolution."""
    spec = re.search(r"window=\{([^}]*)\}", attrs)
    fields = dict(re.findall(r"(\w+)=(\S+)", spec.group(1))) if spec else {}
    get = lambda k, d: [v for v in fields[k].split("x")] if k in fields else [d] * n
    return [
        {"size": int(sz), "stride": int(st), "lo": int(p.split("_")[0]), "lhs": int(ld), "rhs": int(rd)}
        for sz, st, p, ld, rd in zip(
            get("size", "1"),
            get("stride", "1"),
            get("pad", "0_0"),
            get("lhs_dilate", "1"),
            get("rhs_dilate", "1"),
            strict=True,
        )
    ]


def _matmul_flops(typ, op, operands, attrs, types) -> float:
    """2 x multiply-adds of a ``dot`` or ``convolution`` (TPU lowers matmuls to both)."""
    out = _dims(typ)
    lhs, rhs = (_dims(types.get(o, "")) for o in operands[:2])
    if op == "dot":
        idx = re.search(r"lhs_contracting_dims=\{([\d,]*)\}", attrs)
        k = math.prod(lhs[int(i)] for i in idx.group(1).split(",") if i) if idx else 1
        return 2.0 * math.prod(out) * k
    labels = re.search(r"dim_labels=(\w+)_(\w+)->(\w+)", attrs)
    if not labels or len(labels.group(2)) != len(rhs) or len(labels.group(3)) != len(out):
        return 0.0
    lhs_l, rhs_l, out_l = labels.groups()
    spatial = sorted(c for c in out_l if c.isdigit())
    macs = math.prod(d for d, c in zip(out, out_l, strict=True) if not c.isdigit())
    macs *= math.prod(d for d, c in zip(rhs, rhs_l, strict=True) if c == "i")
    for w, c in zip(_window(attrs, len(spatial)), spatial, strict=True):
        macs *= _valid_pairs(
            lhs[lhs_l.index(c)], out[out_l.index(c)], w["size"], w["stride"], w["lo"], w["lhs"], w["rhs"]
        )
    return 2.0 * macs


def roofline_seconds(cost: Cost, device_kind: str) -> float:
    """``max(flops / peak, bytes / bandwidth)`` on one chip of ``device_kind``."""
    if device_kind not in CHIP_PEAKS:
        raise KeyError(f"no published peaks for device kind {device_kind!r}; known: {sorted(CHIP_PEAKS)}")
    flops, bw = CHIP_PEAKS[device_kind]
    return max(cost.flops / flops, cost.bytes / bw)
