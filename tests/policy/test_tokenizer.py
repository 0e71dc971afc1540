"""Tokenizers: the built-in word-level one (ids by hand) and a local HF tokenizer.json."""

import json

import pytest
import tokenizers
from tokenizers import decoders, models, pre_tokenizers, trainers

from agentjax.policy.tokenizer import DEFAULT_SPECIALS, HFTokenizer, Tokenizer, WordTokenizer


def test_word_tokenizer_ids_by_hand():
    tok = WordTokenizer(["ls", "cat", "ok"])
    assert isinstance(tok, Tokenizer)
    assert tok.vocab_size == len(DEFAULT_SPECIALS) + 3 == 11
    assert (tok.pad_id, tok.bos_id, tok.eos_id, tok.unk_id) == (0, 1, 2, 3)
    assert tok.specials["<turn_agent>"] == 4 and tok.specials["</tool>"] == 7
    # specials split out of words even without spaces; unknown word -> <unk>
    ids = tok.encode("<turn_agent> <tool>ls</tool>\n cat  banana<eos>")
    assert ids == [4, 6, 8, 7, 9, 3, 2]
    assert tok.decode(ids) == "<turn_agent> <tool> ls </tool> cat <unk> <eos>"
    assert tok.decode(ids, skip_specials=True) == "ls cat"
    assert tok.decode(tok.encode(" ok\tcat ")) == "ok cat"
    with pytest.raises(ValueError, match="out of range"):
        tok.decode([11])


def test_word_tokenizer_is_deterministic_and_serialisable():
    texts = ["b a <tool>c</tool>", "a d"]
    t1, t2 = WordTokenizer.from_texts(texts), WordTokenizer.from_texts(reversed(texts))
    assert t1.words == t2.words == ("a", "b", "c", "d")
    assert t1.encode("d c b a") == [11, 10, 9, 8]
    t3 = WordTokenizer.from_dict(json.loads(json.dumps(t1.to_dict())))
    assert t3.encode(texts[0]) == t1.encode(texts[0])


def test_word_tokenizer_errors_and_custom_specials():
    tok = WordTokenizer(["x"], specials=("<pad>", "<sep>"))
    assert (tok.pad_id, tok.bos_id, tok.eos_id, tok.unk_id) == (0, None, None, None)
    assert tok.encode("x<sep>x") == [2, 1, 2]
    with pytest.raises(KeyError, match="'y'"):
        tok.encode("x y")
    with pytest.raises(ValueError, match="duplicate"):
        WordTokenizer(["a", "a"])
    with pytest.raises(ValueError, match="duplicate"):
        WordTokenizer(["<eos>"])
    with pytest.raises(ValueError, match="whitespace"):
        WordTokenizer(["a b"])
    with pytest.raises(ValueError, match="<pad>"):
        WordTokenizer(["a"], specials=("<eos>",))


def _save_wordlevel(tmp_path):
    vocab = {"<pad>": 0, "<s>": 1, "</s>": 2, "[UNK]": 3, "hello": 4, "world": 5, "!": 6}
    tok = tokenizers.Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.add_special_tokens(["<pad>", "<s>", "</s>", "<tool>"])
    tok.save(str(tmp_path / "tokenizer.json"))
    return tok


def test_hf_tokenizer_from_directory(tmp_path):
    _save_wordlevel(tmp_path)
    (tmp_path / "tokenizer_config.json").write_text(
        json.dumps({"bos_token": {"content": "<s>"}, "eos_token": "</s>", "pad_token": None})
    )
    tok = HFTokenizer.from_file(tmp_path)
    assert isinstance(tok, Tokenizer)
    assert tok.vocab_size == 8
    assert (tok.bos_id, tok.eos_id, tok.pad_id) == (1, 2, 2)  # pad falls back to eos
    assert tok.specials == {"<pad>": 0, "<s>": 1, "</s>": 2, "<tool>": 7}
    assert tok.encode("hello world! <tool> moon") == [4, 5, 6, 7, 3]
    assert tok.decode([4, 5, 2], skip_specials=True) == "hello world"
    tok2 = HFTokenizer.from_file(tmp_path / "tokenizer.json", pad="<pad>", eos="<tool>")
    assert (tok2.bos_id, tok2.eos_id, tok2.pad_id) == (1, 7, 0)  # bos from tokenizer_config
    with pytest.raises(ValueError, match="'<nope>'"):
        HFTokenizer.from_file(tmp_path, eos="<nope>")
    with pytest.raises(FileNotFoundError, match="tokenizer.json"):
        HFTokenizer.from_file(tmp_path / "missing")


def test_hf_bytelevel_bpe_round_trip(tmp_path):
    tok = tokenizers.Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=300, special_tokens=["<|endoftext|>"], initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    tok.train_from_iterator(["def f(x):\n    return x + 1\n"] * 20, trainer)
    tok.save(str(tmp_path / "tokenizer.json"))
    hf = HFTokenizer.from_file(tmp_path / "tokenizer.json", eos="<|endoftext|>")
    text = "def g(y):\n    return y * 2  # ünï\n"
    ids = hf.encode(text)
    assert hf.decode(ids) == text
    assert len(ids) < len(text.encode())  # merges were learned and used
    assert (hf.eos_id, hf.bos_id, hf.pad_id) == (0, None, 0)
    assert hf.specials == {"<|endoftext|>": 0}
