"""Loading tokenizers from local files only, and the tokenizers the project builds for itself.

``load_tokenizer(spec)`` takes:
- a model or tokenizer directory (``tokenizer.json`` / ``tokenizer.model`` + ``tokenizer_config.json``),
- a ``tokenizer.json`` file,
- a tiktoken ``.model`` file (``base64-bytes rank`` per line, Llama 3's pattern and 256 specials),
- a SentencePiece ``.model`` file,
- ``"builtin"``: a byte-level BPE the project trains itself from the Python standard library's
  sources, deterministically, so a machine with nothing else still has a real tokenizer.
Converted and trained tokenizers are cached under ``cache_dir()`` (``$GUIDED_CACHE`` or
``~/.cache/guided``). Nothing is ever fetched from a model hub: a name that is not a local path is an
error, at once.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import shutil
import sys
import sysconfig
import tempfile
from pathlib import Path
from typing import Any

from guided.errors import TokenizerError

__all__ = [
    "cache_dir",
    "load_tokenizer",
    "tokenizer_dir",
    "builtin_tokenizer_dir",
    "cached_dir",
    "LLAMA3_PATTERN",
    "LLAMA3_SPECIAL_TOKENS",
]

LLAMA3_PATTERN = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)
LLAMA3_SPECIAL_TOKENS = [
    "<|begin_of_text|>",
    "<|end_of_text|>",
    "<|reserved_special_token_0|>",
    "<|reserved_special_token_1|>",
    "<|finetune_right_pad_id|>",
    "<|step_id|>",
    "<|start_header_id|>",
    "<|end_header_id|>",
    "<|eom_id|>",
    "<|eot_id|>",
    "<|python_tag|>",
    "<|image|>",
] + [f"<|reserved_special_token_{i}|>" for i in range(2, 246)]

LLAMA3_CHAT_TEMPLATE = (
    "{{- bos_token }}{%- for message in messages %}"
    "{{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n' + message['content'] | trim"
    " + '<|eot_id|>' }}{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{%- endif %}"
)
CHATML_TEMPLATE = (
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)

# The builtin tokenizer: trained on these standard-library modules (sorted, fixed) so it is the same
# on every machine with the same Python minor version.
BUILTIN_VOCAB_SIZE = 8192
BUILTIN_SPECIAL_TOKENS = ["<|begin_of_text|>", "<|end_of_text|>", "<|im_start|>", "<|im_end|>", "<|pad|>"]
BUILTIN_CORPUS = [
    "argparse.py", "ast.py", "base64.py", "calendar.py", "collections/__init__.py", "csv.py",
    "dataclasses.py", "datetime.py", "decimal.py", "difflib.py", "email/message.py", "enum.py",
    "fractions.py", "functools.py", "glob.py", "gzip.py", "heapq.py", "html/parser.py",
    "http/client.py", "http/server.py", "inspect.py", "ipaddress.py", "json/decoder.py",
    "json/encoder.py", "logging/__init__.py", "mailbox.py", "pathlib.py", "pprint.py", "random.py",
    "re/_parser.py", "shutil.py", "smtplib.py", "statistics.py", "string.py", "subprocess.py",
    "tarfile.py", "textwrap.py", "threading.py", "typing.py", "unittest/case.py", "urllib/parse.py",
    "uuid.py", "zipfile/__init__.py", "zipfile.py",
]  # fmt: skip


def cache_dir() -> Path:
    """Where converted tokenizers, trained tokenizers and tiny models are cached."""
    root = os.environ.get("GUIDED_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "guided")
    path = Path(root)
    path.mkdir(parents=True, exist_ok=True)
    return path


def load_tokenizer(spec: str | os.PathLike) -> Any:
    """A transformers tokenizer from a local directory, tokenizer.json, .model file or "builtin"."""
    return _auto_tokenizer(tokenizer_dir(spec))


def tokenizer_dir(spec: str | os.PathLike) -> Path:
    """A directory that transformers' AutoTokenizer loads offline, converting files when needed."""
    if str(spec) == "builtin":
        return builtin_tokenizer_dir()
    path = Path(spec).expanduser()
    if not path.exists():
        raise TokenizerError(
            f"tokenizer {str(spec)!r} is not a local path; guided never downloads from a model hub: "
            "pass a directory with tokenizer.json, a tokenizer.json, a tokenizer.model, or 'builtin'"
        )
    if path.is_dir():
        if (path / "tokenizer.json").exists() or (path / "tokenizer_config.json").exists():
            return path
        if (path / "tokenizer.model").exists():
            return tokenizer_dir(path / "tokenizer.model")
        raise TokenizerError(f"{path} has no tokenizer.json, tokenizer_config.json or tokenizer.model")
    if path.name.endswith(".json"):
        return _cached(f"json-{_digest(path)}", lambda out: shutil.copy(path, out / "tokenizer.json"))
    if _is_tiktoken(path):
        return _cached(f"tiktoken-{_digest(path)}", lambda out: _convert_tiktoken(path, out))
    return _cached(f"spm-{_digest(path)}", lambda out: _convert_sentencepiece(path, out))


def builtin_tokenizer_dir() -> Path:
    """The project's own byte-level BPE (8,192 ids incl. specials), trained once and cached."""
    key = f"builtin-bpe-{BUILTIN_VOCAB_SIZE}-py{sys.version_info.major}{sys.version_info.minor}"
    return _cached(key, _train_builtin)


# ---------------------------------------------------------------------- helpers
def _auto_tokenizer(path: Path) -> Any:
    from transformers import AutoTokenizer

    try:
        return AutoTokenizer.from_pretrained(str(path), local_files_only=True)
    except Exception as e:  # transformers raises many types here; report one
        raise TokenizerError(f"cannot load the tokenizer in {path}: {e}") from e


def _digest(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()[:16]


def _cached(key: str, build) -> Path:
    return cached_dir(cache_dir() / "tokenizers" / key, build, ("tokenizer_config.json", "tokenizer.json"))


def cached_dir(final: Path, build, markers: tuple[str, ...]) -> Path:
    """``final`` if it holds any of ``markers``; else ``build(tmp)`` into a temporary directory beside
    it, renamed into place atomically, so concurrent processes never see a half-written entry."""
    if any((final / m).exists() for m in markers):
        return final
    root = final.parent
    root.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}-", dir=root))
    try:
        build(tmp)
        try:
            tmp.rename(final)
        except OSError:  # another process won the race; its entry is identical
            pass
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return final


def _is_tiktoken(path: Path) -> bool:
    with open(path, "rb") as f:
        head = f.read(256)
    first = head.split(b"\n", 1)[0].split()
    if len(first) != 2 or not first[1].isdigit():
        return False
    try:
        base64.b64decode(first[0], validate=True)
    except ValueError:
        return False
    return True


def _write_config(out: Path, **config: Any) -> None:
    (out / "tokenizer_config.json").write_text(json.dumps(config, indent=1))


def _convert_tiktoken(path: Path, out: Path) -> None:
    """tiktoken ranks -> tokenizer.json with Llama 3's pattern and specials (ids 128000+ in order)."""
    from tokenizers import AddedToken
    from transformers.convert_slow_tokenizer import TikTokenConverter

    try:
        backend = TikTokenConverter(vocab_file=str(path), pattern=LLAMA3_PATTERN).converted()
    except ImportError as e:
        raise TokenizerError(f"converting {path} needs the tiktoken package: pip install tiktoken ({e})") from e
    base = backend.get_vocab_size()
    backend.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in LLAMA3_SPECIAL_TOKENS])
    if backend.token_to_id("<|begin_of_text|>") != base:
        raise TokenizerError(f"special tokens of {path} did not land at id {base}")
    backend.save(str(out / "tokenizer.json"))
    _write_config(
        out,
        tokenizer_class="PreTrainedTokenizerFast",
        bos_token="<|begin_of_text|>",
        eos_token="<|eot_id|>",
        pad_token="<|finetune_right_pad_id|>",
        model_max_length=131072,
        chat_template=LLAMA3_CHAT_TEMPLATE,
    )


def _convert_sentencepiece(path: Path, out: Path) -> None:
    shutil.copy(path, out / "tokenizer.model")
    _write_config(
        out,
        tokenizer_class="LlamaTokenizer",
        bos_token="<s>",
        eos_token="</s>",
        unk_token="<unk>",
        add_bos_token=True,
        add_eos_token=False,
        legacy=True,
    )
    tok = _auto_tokenizer(out)  # converts the SentencePiece model; keep the result as tokenizer.json
    if len(tok) < 3:
        raise TokenizerError(f"{path} is neither a tiktoken ranks file nor a SentencePiece model")
    tok.backend_tokenizer.save(str(out / "tokenizer.json"))


def _train_builtin(out: Path) -> None:
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers, trainers

    stdlib = Path(sysconfig.get_paths()["stdlib"])
    files = [str(stdlib / name) for name in BUILTIN_CORPUS if (stdlib / name).exists()]
    if len(files) < 10:
        raise TokenizerError(f"the Python standard library sources under {stdlib} are missing")
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(
                Regex(LLAMA3_PATTERN), behavior="isolated", invert=False
            ),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=BUILTIN_VOCAB_SIZE - len(BUILTIN_SPECIAL_TOKENS),
        min_frequency=2,
        special_tokens=[],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train(files, trainer)
    tokenizer.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in BUILTIN_SPECIAL_TOKENS])
    tokenizer.save(str(out / "tokenizer.json"))
    _write_config(
        out,
        tokenizer_class="PreTrainedTokenizerFast",
        bos_token="<|begin_of_text|>",
        eos_token="<|end_of_text|>",
        pad_token="<|pad|>",
        model_max_length=8192,
        chat_template=CHATML_TEMPLATE,
    )
