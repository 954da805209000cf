"""Vocabulary: the exact bytes of every token id of a tokenizer, its special tokens and EOS ids.

Grammar matching works on bytes, so every token must map to the exact bytes it stands for in text:
- byte-level BPE (GPT-2, Llama 3, Qwen): token strings are bytes spelled with GPT-2's
  ``bytes_to_unicode`` alphabet;
- SentencePiece (Llama 2, Mistral): ``▁`` is a space and, with byte fallback, ``<0xNN>`` is one byte.
Special tokens never match grammar text; they are flagged and only EOS ids are ever allowed (where
the language accepts). Added tokens that are not special (Qwen's ``<think>``, ``</think>``,
``<tool_call>``) stand for their text, as the tokenizer decodes them. ``size`` may exceed the tokenizer's ids to match a padded lm_head; ids
past the tokenizer are never allowed.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field, replace
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np

from guided.errors import TokenizerError

from .regex_ast import HARMONY_SPECIALS, SPECIAL_CLOSE, SPECIAL_OPEN

__all__ = ["Vocabulary", "bytes_to_unicode"]

# Names of end-of-turn / end-of-text tokens across model families; any that exist as special tokens
# count as EOS besides the tokenizer's own eos_token.
KNOWN_EOS_NAMES = (
    "</s>",
    "<|endoftext|>",
    "<|end_of_text|>",
    "<|eot_id|>",
    "<|eom_id|>",
    "<|im_end|>",
    "<|end|>",
)

_BYTE_FALLBACK = re.compile(r"^<0x([0-9A-Fa-f]{2})>$")

# In a tokenizer that has gpt-oss's harmony special tokens, these take part in grammars, spelled as
# ``regex_ast.special_token`` matches them; no text token holds those bytes (the few single-byte tokens
# of 0xFE/0xFF, which no valid text contains either, are flagged instead). Its ``<|end|>`` then ends a
# message, not the output (it is not an EOS there).


def bytes_to_unicode() -> dict[int, str]:
    """GPT-2's reversible byte -> printable character map used by byte-level BPE vocabularies."""
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1))
    printable += list(range(ord("®"), ord("ÿ") + 1))
    chars = list(printable)
    extra = 0
    for b in range(256):
        if b not in printable:
            printable.append(b)
            chars.append(256 + extra)
            extra += 1
    return {b: chr(c) for b, c in zip(printable, chars, strict=True)}


def _byte_level_table() -> dict[int, str]:
    # str.translate table: byte-level char -> latin-1 char of its byte; characters outside the
    # alphabet map to U+0100, which makes the latin-1 encode fail loudly instead of guessing.
    table = {c: "\u0100" for c in range(324)}
    table.update({ord(ch): chr(b) for b, ch in bytes_to_unicode().items()})
    return table


@dataclass(frozen=True, eq=False)
class Vocabulary:
    """Token id -> exact bytes, with special-token flags, EOS ids and the (padded) size."""

    tokens: tuple[bytes, ...]  # bytes of ids 0..n_tokens-1 (b"" for holes and special tokens' text)
    special: np.ndarray  # bool [n_tokens]: special/added/unused ids, never matched against text
    eos_ids: tuple[int, ...]
    size: int  # >= n_tokens; the model's lm_head width
    add_prefix_space: bool = False  # the tokenizer prepends a space-marker to the text it encodes
    name: str = ""
    special_text: dict[int, str] = field(default_factory=dict)  # id -> text of special tokens

    def __post_init__(self) -> None:
        n = len(self.tokens)
        if self.special.shape != (n,) or self.special.dtype != np.bool_:
            raise TokenizerError(f"special flags must be bool[{n}], got {self.special.dtype}{self.special.shape}")
        if self.size < n:
            raise TokenizerError(f"vocabulary size {self.size} is smaller than the tokenizer's {n} ids")
        if not self.eos_ids:
            raise TokenizerError(f"vocabulary {self.name!r} has no EOS token; pass eos_ids explicitly")
        for i in self.eos_ids:
            if not 0 <= i < n:
                raise TokenizerError(f"EOS id {i} is outside the tokenizer's {n} ids")

    # ------------------------------------------------------------------ construction
    @classmethod
    def from_tokenizer(
        cls, tokenizer: Any, size: int | None = None, eos_ids: list[int] | None = None, name: str = ""
    ) -> Vocabulary:
        """Build from a transformers tokenizer (fast / TokenizersBackend) or a ``tokenizers.Tokenizer``.

        Parameters
        ----------
        tokenizer : transformers tokenizer or tokenizers.Tokenizer
        size : int, optional
            The model's lm_head width, when it is padded past the tokenizer's ids.
        eos_ids : list of int, optional
            EOS ids to use instead of the tokenizer's eos token and the known end-of-turn names.
        """
        backend = getattr(tokenizer, "backend_tokenizer", tokenizer)
        if not hasattr(backend, "to_str"):
            raise TokenizerError(
                f"{type(tokenizer).__name__} is not a fast tokenizer; load it with transformers' "
                "AutoTokenizer (a tokenizer.json) or guided.load_tokenizer"
            )
        spec = _light_spec(backend)
        scheme = _scheme(spec)
        n = backend.get_vocab_size(with_added_tokens=True)
        vocab = backend.get_vocab(with_added_tokens=True)
        n = max(n, max(vocab.values(), default=-1) + 1)
        tokens: list[bytes] = [b""] * n
        special = np.ones(n, dtype=np.bool_)  # holes stay flagged
        added_tokens = backend.get_added_tokens_decoder()
        added = {int(i): tok.content for i, tok in added_tokens.items()}
        decode = _byte_level_decoder() if scheme == "byte_level" else _metaspace_decoder(spec)
        for text, i in vocab.items():
            if i in added:
                continue
            tokens[i] = decode(text)
            special[i] = False
        for i, tok in added_tokens.items():  # added text tokens (Qwen's <think>, <tool_call>): their text
            if not getattr(tok, "special", True) and tok.content:
                tokens[int(i)] = tok.content.encode("utf-8")
                special[int(i)] = False
        unk = _unk_id(spec, vocab)
        if unk is not None:
            special[unk] = True
            tokens[unk] = b""
        spelled = _spell_harmony(tokens, special, added)
        if eos_ids is None:
            eos_ids = [i for i in _eos_ids(tokenizer, vocab, added) if i not in spelled]
        return cls(
            tokens=tuple(tokens),
            special=special,
            eos_ids=tuple(sorted(set(int(i) for i in eos_ids))),
            size=max(n, size or 0),
            add_prefix_space=_adds_prefix_space(spec),
            name=name or getattr(tokenizer, "name_or_path", "") or "",
            special_text=added,
        )

    def padded(self, size: int) -> Vocabulary:
        """The same vocabulary with ``size`` ids (a padded lm_head); extra ids are never allowed."""
        return replace(self, size=size)

    # ------------------------------------------------------------------ queries
    @property
    def n_tokens(self) -> int:
        return len(self.tokens)

    @property
    def bitmask_words(self) -> int:
        """int32 words per bitmask row: ceil(size / 32)."""
        return (self.size + 31) // 32

    def token_bytes(self, token_id: int) -> bytes:
        return self.tokens[token_id] if token_id < len(self.tokens) else b""

    def decode_bytes(self, token_ids: list[int]) -> bytes:
        """Concatenated bytes of non-special tokens (special tokens contribute nothing)."""
        special = self.special
        return b"".join(self.tokens[i] for i in token_ids if i < len(self.tokens) and not special[i])

    @cached_property
    def token_offsets(self) -> np.ndarray:
        """int64 [n_tokens + 1]: token i is ``token_data[token_offsets[i]:token_offsets[i+1]]``."""
        lengths = np.fromiter((len(t) for t in self.tokens), dtype=np.int64, count=len(self.tokens))
        offsets = np.zeros(len(self.tokens) + 1, dtype=np.int64)
        np.cumsum(lengths, out=offsets[1:])
        return offsets

    @cached_property
    def token_data(self) -> np.ndarray:
        """uint8: all token bytes, concatenated in id order."""
        return np.frombuffer(b"".join(self.tokens), dtype=np.uint8)

    @cached_property
    def fingerprint(self) -> str:
        """A stable hash of everything a compiled grammar depends on (cache key)."""
        h = hashlib.sha256()
        h.update(self.token_offsets.tobytes())
        h.update(self.token_data.tobytes())
        h.update(np.packbits(self.special).tobytes())
        h.update(repr((self.eos_ids, self.size, self.add_prefix_space)).encode())
        return h.hexdigest()[:32]

    # ------------------------------------------------------------------ cache
    def save(self, path: str | Path) -> None:
        meta = {
            "eos_ids": list(self.eos_ids),
            "size": self.size,
            "add_prefix_space": self.add_prefix_space,
            "name": self.name,
            "special_text": {str(k): v for k, v in self.special_text.items()},
        }
        with open(path, "wb") as f:
            np.savez(
                f,
                offsets=self.token_offsets,
                data=self.token_data,
                special=self.special,
                meta=np.frombuffer(json.dumps(meta).encode(), dtype=np.uint8),
            )

    @classmethod
    def load(cls, path: str | Path) -> Vocabulary:
        with np.load(path) as z:
            offsets, data, special = z["offsets"], z["data"].tobytes(), z["special"]
            meta = json.loads(z["meta"].tobytes())
        tokens = tuple(data[offsets[i] : offsets[i + 1]] for i in range(len(offsets) - 1))
        return cls(
            tokens=tokens,
            special=special.astype(np.bool_),
            eos_ids=tuple(meta["eos_ids"]),
            size=meta["size"],
            add_prefix_space=meta["add_prefix_space"],
            name=meta["name"],
            special_text={int(k): v for k, v in meta["special_text"].items()},
        )

    def __repr__(self) -> str:
        return (
            f"Vocabulary({self.name!r}, n_tokens={self.n_tokens}, size={self.size}, "
            f"special={int(self.special.sum())}, eos_ids={list(self.eos_ids)})"
        )


# ---------------------------------------------------------------------- tokenizer.json inspection
def _light_spec(backend: Any) -> dict:
    """The parts of tokenizer.json that say how tokens map to bytes, without serialising the
    whole tokenizer (its merges make ``to_str`` + ``json.loads`` cost ~0.5 s at 128k ids)."""

    def state(component: Any) -> Any:
        return json.loads(component.__getstate__()) if component is not None else None

    model = backend.model
    kind = type(model).__name__
    if kind == "Unigram":
        model_spec = json.loads(backend.to_str())["model"]
        model_spec.pop("vocab", None)
    else:
        model_spec = {
            "type": kind,
            "byte_fallback": getattr(model, "byte_fallback", False),
            "unk_token": getattr(model, "unk_token", None),
        }
    return {
        "model": model_spec,
        "decoder": state(backend.decoder),
        "pre_tokenizer": state(backend.pre_tokenizer),
        "normalizer": state(backend.normalizer),
    }


def _components(node: Any) -> list[dict]:
    """Flatten a (possibly Sequence) normalizer / pre-tokenizer / decoder spec into its parts."""
    if not node:
        return []
    if node.get("type") == "Sequence":
        parts = node.get("decoders") or node.get("pretokenizers") or node.get("normalizers") or []
        return [p for part in parts for p in _components(part)]
    return [node]


def _scheme(spec: dict) -> str:
    model = spec.get("model", {}).get("type")
    if model not in ("BPE", "Unigram", "WordLevel"):
        raise TokenizerError(f"tokenizer model {model!r} is not supported (BPE, Unigram, WordLevel are)")
    decoders = {d.get("type") for d in _components(spec.get("decoder"))}
    pre = {p.get("type") for p in _components(spec.get("pre_tokenizer"))}
    if "ByteLevel" in decoders or ("ByteLevel" in pre and not decoders):
        return "byte_level"
    if decoders & {"Metaspace", "Replace", "ByteFallback"} or "Metaspace" in pre:
        return "metaspace"
    raise TokenizerError(
        f"cannot tell how tokens map to bytes (decoder {sorted(decoders)}, pre-tokenizer {sorted(pre)}): "
        "only byte-level BPE and SentencePiece-style (▁, <0xNN>) vocabularies are supported"
    )


def _byte_level_decoder():
    table = _byte_level_table()

    def decode(text: str) -> bytes:
        try:
            return text.translate(table).encode("latin-1")
        except UnicodeEncodeError:
            raise TokenizerError(f"token {text!r} is not in the byte-level alphabet") from None

    return decode


def _metaspace_decoder(spec: dict):
    replacement = "▁"
    for part in _components(spec.get("pre_tokenizer")) + _components(spec.get("decoder")):
        if part.get("type") == "Metaspace":
            replacement = part.get("replacement", replacement)
    byte_fallback = bool(spec.get("model", {}).get("byte_fallback"))

    def decode(text: str) -> bytes:
        if byte_fallback:
            m = _BYTE_FALLBACK.match(text)
            if m:
                return bytes([int(m.group(1), 16)])
        return text.replace(replacement, " ").encode("utf-8")

    return decode


def _adds_prefix_space(spec: dict) -> bool:
    for part in _components(spec.get("pre_tokenizer")):
        if part.get("type") == "Metaspace":
            scheme = part.get("prepend_scheme")
            if scheme is None:
                return bool(part.get("add_prefix_space", True))
            return scheme in ("always", "first")
        if part.get("type") == "ByteLevel" and part.get("add_prefix_space"):
            return True
    for part in _components(spec.get("normalizer")):
        if part.get("type") == "Prepend":
            return True
    return False


def _unk_id(spec: dict, vocab: dict[str, int]) -> int | None:
    model = spec.get("model", {})
    if model.get("type") == "Unigram":
        return model.get("unk_id")
    unk = model.get("unk_token")
    return vocab.get(unk) if unk else None


def _spell_harmony(tokens: list[bytes], special: np.ndarray, added: dict[int, str]) -> set[int]:
    """In a harmony tokenizer (it has ``<|channel|>`` and ``<|message|>``), spell its structural special
    tokens for grammars (see HARMONY_SPECIALS) and flag the text tokens that hold those bytes; the ids
    spelled (none elsewhere)."""
    harmony = {i: text for i, text in added.items() if text in HARMONY_SPECIALS}
    if not {"<|channel|>", "<|message|>"} <= set(harmony.values()):
        return set()
    marks = set(SPECIAL_OPEN + SPECIAL_CLOSE)
    for i, tok in enumerate(tokens):
        if not special[i] and marks.intersection(tok):
            special[i], tokens[i] = True, b""
    for i, text in harmony.items():
        tokens[i] = SPECIAL_OPEN + text.encode("utf-8") + SPECIAL_CLOSE
        special[i] = False
    return set(harmony)


def _eos_ids(tokenizer: Any, vocab: dict[str, int], added: dict[int, str]) -> list[int]:
    ids = set()
    eos = getattr(tokenizer, "eos_token_id", None)
    if isinstance(eos, int):
        ids.add(eos)
    specials = set(added.values())
    for name in KNOWN_EOS_NAMES:
        if name in specials and name in vocab:
            ids.add(vocab[name])
    return sorted(ids)
