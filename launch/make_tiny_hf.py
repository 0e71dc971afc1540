# ruff: noqa: E501 - the chat template is data, kept line for line
"""Writes a tiny random-init Qwen3 checkpoint with a BPE tokenizer trained on the codefix corpus.

    python -m launch.make_tiny_hf --out=workdir/tiny_qwen3          # then configs/codefix_tiny.py

The result is a standard HF directory (``config.json``, ``model.safetensors``, ``tokenizer.json``,
``tokenizer_config.json`` with a Qwen-style ChatML chat template that renders tools and tool
messages, ``generation_config.json``): ``transformers.AutoModelForCausalLM`` and
``AutoTokenizer`` load it, and so does ``--config.model.hf_path``. The tokenizer is a byte-level
BPE trained here with ``tokenizers`` on every file of the bundled codefix tasks and the scripted
honest agents' actions written as ``<tool_call>`` JSON (no download; deterministic).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from absl import app, flags

SPECIAL = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")
ADDED = ("<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>", "<think>", "</think>")
CHAT_TEMPLATE = """{%- if tools %}
{{- '<|im_start|>system\\n' }}
{%- if messages[0].role == 'system' %}{{- messages[0].content + '\\n\\n' }}{%- endif %}
{{- '# Tools\\n\\nYou may call one or more functions to assist with the user query.\\n\\nYou are provided with function signatures within <tools></tools> XML tags:\\n<tools>' }}
{%- for tool in tools %}{{- '\\n' }}{{- tool | tojson }}{%- endfor %}
{{- '\\n</tools>\\n\\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\\n<tool_call>\\n{\\"name\\": <function-name>, \\"arguments\\": <args-json-object>}\\n</tool_call><|im_end|>\\n' }}
{%- elif messages[0].role == 'system' %}
{{- '<|im_start|>system\\n' + messages[0].content + '<|im_end|>\\n' }}
{%- endif %}
{%- for message in messages %}
{%- if message.role == 'user' or message.role == 'assistant' or (message.role == 'system' and not loop.first) %}
{{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>\\n' }}
{%- elif message.role == 'tool' %}
{%- if loop.first or messages[loop.index0 - 1].role != 'tool' %}{{- '<|im_start|>user' }}{%- endif %}
{{- '\\n<tool_response>\\n' + message.content + '\\n</tool_response>' }}
{%- if loop.last or messages[loop.index0 + 1].role != 'tool' %}{{- '<|im_end|>\\n' }}{%- endif %}
{%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}
"""
MODEL = dict(
    hidden_size=64,
    intermediate_size=192,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=16,
    max_position_embeddings=8192,
    rms_norm_eps=1e-6,
    rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
    tie_word_embeddings=True,
    hidden_act="silu",
    attention_bias=False,
    use_sliding_window=False,
)


GENERATED = 256  # generated training tasks (host-drawn, seed 0) whose files join the corpus


def corpus() -> list[str]:
    """Every text file of the bundled codefix tasks, the honest agents' tool calls, and the files
    of :data:`GENERATED` generated training tasks."""
    from agentjax.envs import codefix  # noqa: PLC0415
    from agentjax.envs.codefix.agents import HONEST  # noqa: PLC0415
    from agentjax.envs.codefix.api import TASKS_DIR  # noqa: PLC0415
    from agentjax.envs.codefix.generated import store  # noqa: PLC0415
    from agentjax.policy.chat import compile_template  # noqa: PLC0415
    from agentjax.tasks.codefix import SYSTEM, TOOLS  # noqa: PLC0415
    from agentjax.toolcall import calls as toolcalls  # noqa: PLC0415

    chat = compile_template(CHAT_TEMPLATE)
    msgs = [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": "fix"},
        {"role": "tool", "content": "ok"},
    ]
    texts = [chat.render(messages=msgs, tools=list(TOOLS), add_generation_prompt=True)] * 8
    for root, _, files in sorted(os.walk(TASKS_DIR)):
        for f in sorted(files):
            if f.endswith((".py", ".json")):
                texts.append(Path(root, f).read_text())
    for name in codefix.list_tasks():
        task = codefix.load_task(name)
        for agent, _ in HONEST.values():
            texts += [toolcalls.render(a, "hermes", TOOLS) for a in agent(task)]
    # generated tasks of the TRAINING templates only (no held-out source shapes the vocabulary)
    for gen in store.draw(GENERATED, "train", 0)[0]:
        texts += [gen.description, *gen.files.values(), gen.patch]
    return texts


def train_tokenizer(vocab_size: int, texts: list[str] | None = None):
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, trainers  # noqa: PLC0415

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=list(SPECIAL),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(corpus() if texts is None else texts, trainer)
    tok.add_tokens([AddedToken(t, special=False, normalized=False) for t in ADDED])
    return tok


# Copy pretraining (agentjax/learner/copy_rows.py): (share of the steps, rows, length, context,
# span, batch, code texts). Short dense rows first: the induction head forms there (measured:
# benchmarks/induction_probe.py); then long rows, half of them code, so it reaches further back.
COPY_PHASES = (
    (0.6, 4096, 57, (32, 32), (24, 24), 64, False),
    (0.4, 2048, 256, (32, 192), (8, 24), 16, True),
)
COPY_LR = 1e-3


def copy_pretrain(params, config, tok, texts: list[str], steps: int, seed: int, log=print):
    """``steps`` Adam steps on copy-by-content rows over the tokenizer's ordinary tokens and the
    corpus's texts: the model learns to copy a span it saw (an induction head), which a random
    init cannot do and a code agent's edit needs (``agentjax/learner/copy_rows.py``).
    Returns ``(params, losses)``."""
    import numpy as np  # noqa: PLC0415

    from agentjax.learner.copy_rows import copy_rows  # noqa: PLC0415
    from agentjax.learner.sft import sft_train  # noqa: PLC0415

    reserved = {tok.token_to_id(t) for t in (*SPECIAL, *ADDED)}
    ids = [i for i in range(tok.get_vocab_size(with_added_tokens=True)) if i not in reserved]
    coded = [e.ids for e in tok.encode_batch(texts)]
    rng, sep, losses = np.random.default_rng(seed), tok.token_to_id("<|endoftext|>"), []
    ends = np.round(np.cumsum([share for share, *_ in COPY_PHASES]) * steps).astype(int)
    for (_, n, length, context, span, batch, code), k in zip(
        COPY_PHASES, np.diff(ends, prepend=0), strict=True
    ):
        if k < 1:
            continue
        rows = copy_rows(rng, n, length, ids, sep, coded if code else (), context=context, span=span)
        params, phase = sft_train(
            params, config, rows, steps=int(k), batch_size=batch, learning_rate=COPY_LR, seed=seed,
            decay=False, log_every=max(k // 5, 1), log=log, name=f"copy pretraining ({length}-token rows)",
        )  # fmt: skip
        losses += phase
    return params, losses


def make(out: str | os.PathLike, *, vocab_size: int = 1024, seed: int = 0, copy_steps: int = 0) -> Path:
    """Writes the tiny HF directory ``out``; returns its path.

    ``copy_steps`` > 0 pretrains the random init to copy by content (:func:`copy_pretrain`)."""
    import jax  # noqa: PLC0415

    from agentjax.policy.hf import config_from_hf  # noqa: PLC0415
    from agentjax.policy.hf_export import export_hf  # noqa: PLC0415
    from agentjax.policy.model import init_params  # noqa: PLC0415

    if copy_steps < 0:
        raise ValueError(f"copy_steps={copy_steps} is invalid; allowed values: an int >= 0")
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    texts = corpus()
    tok = train_tokenizer(vocab_size, texts)
    tok.save(str(out / "tokenizer.json"))
    n = tok.get_vocab_size(with_added_tokens=True)
    ids = {t: tok.token_to_id(t) for t in SPECIAL}
    src = dict(
        MODEL,
        architectures=["Qwen3ForCausalLM"],
        model_type="qwen3",
        vocab_size=-(-n // 64) * 64,
        bos_token_id=None,
        eos_token_id=ids["<|im_end|>"],
        pad_token_id=ids["<|endoftext|>"],
    )
    config = config_from_hf(src)
    decoder = {
        str(tok.token_to_id(t)): {
            "content": t,
            "special": t in SPECIAL,
            "lstrip": False,
            "rstrip": False,
            "normalized": False,
            "single_word": False,
        }
        for t in (*SPECIAL, *ADDED)
    }
    tcfg = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "model_max_length": MODEL["max_position_embeddings"],
        "bos_token": None,
        "eos_token": "<|im_end|>",
        "pad_token": "<|endoftext|>",
        "unk_token": None,
        "add_prefix_space": False,
        "clean_up_tokenization_spaces": False,
        "errors": "replace",
        "split_special_tokens": False,
        "added_tokens_decoder": decoder,
        "chat_template": CHAT_TEMPLATE,
    }
    (out / "tokenizer_config.json").write_text(json.dumps(tcfg, indent=2))
    (out / "generation_config.json").write_text(
        json.dumps({"eos_token_id": ids["<|im_end|>"], "pad_token_id": ids["<|endoftext|>"]}, indent=2)
    )
    params = init_params(config, jax.random.key(seed))
    if copy_steps > 0:
        params, _ = copy_pretrain(params, config, tok, texts, copy_steps, seed)
    (out / "config.json").unlink(missing_ok=True)
    export_hf(params, config, src, out)
    return out


def main(argv):
    del argv
    path = make(flags.FLAGS.out, vocab_size=flags.FLAGS.vocab_size, copy_steps=flags.FLAGS.copy_steps)
    print(f"wrote {path}")


if __name__ == "__main__":  # flags defined here: tests import make() next to other launchers
    flags.DEFINE_string("out", "workdir/tiny_qwen3", "Directory to write.")
    flags.DEFINE_integer("vocab_size", 1024, "BPE vocabulary size (before added tokens).")
    flags.DEFINE_integer("copy_steps", 0, "Copy-by-content pretraining steps (0: random init).")
    app.run(main)
