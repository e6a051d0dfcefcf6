"""Token counting with tiktoken, offline: the BPE files ship in ``context/encodings``.

``tiktoken.get_encoding`` downloads its files at run time; Bosun loads the vendored copies
and checks their SHA-256 against tiktoken's published hashes, so nothing is fetched and
a corrupted file fails loudly. Claude has no public tokenizer: its counts use
``cl100k_base`` times a safety factor, and are estimates for budgeting only; the
provider's reported usage stays the truth for cost.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import math
import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from importlib import resources
from pathlib import Path

import tiktoken
from tiktoken.model import encoding_name_for_model

from providers import Message, ModelRequest, TextPart, ToolCall, ToolResult

ENDOFTEXT = "<|endoftext|>"
_CL100K_PATTERN = (
    r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}++|\p{N}{1,3}+| ?[^\s\p{L}\p{N}]++[\r\n]*+"""
    r"""|\s++$|\s*[\r\n]|\s+(?!\S)|\s"""
)
_O200K_PATTERN = "|".join(
    [
        r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
        r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
        r"""\p{N}{1,3}""",
        r""" ?[^\s\p{L}\p{N}]+[\r\n/]*""",
        r"""\s*[\r\n]+""",
        r"""\s+(?!\S)""",
        r"""\s+""",
    ]
)


@dataclass(frozen=True, slots=True)
class _EncodingFile:
    sha256: str
    pattern: str
    special_tokens: dict[str, int]


# Hashes, patterns and special tokens as in tiktoken 0.14.0 tiktoken_ext/openai_public.py.
_FILES = {
    "cl100k_base": _EncodingFile(
        "223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7",
        _CL100K_PATTERN,
        {
            ENDOFTEXT: 100257,
            "<|fim_prefix|>": 100258,
            "<|fim_middle|>": 100259,
            "<|fim_suffix|>": 100260,
            "<|endofprompt|>": 100276,
        },
    ),
    "o200k_base": _EncodingFile(
        "446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d",
        _O200K_PATTERN,
        {ENDOFTEXT: 199999, "<|endofprompt|>": 200018},
    ),
}
ENCODINGS = tuple(_FILES)
# Local counts for Claude are cl100k_base estimates; third-party comparisons put Claude's
# tokenizer 20-50% above it on typical text, so budgets check against a padded count.
CLAUDE_SAFETY_FACTOR = 1.35
# Models behind openai-compatible servers (Llama, Qwen, Mistral...) use tokenizers we do
# not ship; o200k_base is close for the large-vocabulary ones, the pad covers the rest.
OPEN_MODEL_SAFETY_FACTOR = 1.2
LARGE_TEXT_CHARS = 20_000  # above this, counting moves off the event loop
_KEY_CHARS = 1_024  # longer texts are cached under a digest, so the cache stays small

# Per-request framing the providers add around content (role markers, separators); these
# follow OpenAI's published chat-format accounting and are estimates for other providers.
REQUEST_OVERHEAD = 3
MESSAGE_OVERHEAD = 4
PART_OVERHEAD = 3  # a tool call or tool result block inside a message


class EncodingIntegrityError(RuntimeError):
    """A vendored encoding file does not match tiktoken's published hash."""


def load_encoding(name: str, directory: Path | None = None) -> tiktoken.Encoding:
    """The named encoding from the vendored files (or ``directory``), hash-checked.

    Loading parses a few MB, so each (name, directory) is loaded once per process.
    """
    if name not in _FILES:
        raise ValueError(f"Unknown encoding {name!r}; the vendored ones are {list(_FILES)}")
    return _load(name, directory)


@cache
def _load(name: str, directory: Path | None) -> tiktoken.Encoding:
    spec = _FILES[name]
    filename = f"{name}.tiktoken"
    if directory is None:
        where = f"context/encodings/{filename}"
        data = (resources.files("context") / "encodings" / filename).read_bytes()
    else:
        where = str(directory / filename)
        data = (directory / filename).read_bytes()
    digest = hashlib.sha256(data).hexdigest()
    if digest != spec.sha256:
        raise EncodingIntegrityError(
            f"{where} has SHA-256 {digest}, expected {spec.sha256}; "
            "restore the file from tiktoken's published encodings (context/encodings/README.md)"
        )
    ranks = {
        base64.b64decode(token): int(rank)
        for token, rank in (line.split() for line in data.splitlines() if line)
    }
    return tiktoken.Encoding(
        name=name, pat_str=spec.pattern, mergeable_ranks=ranks, special_tokens=spec.special_tokens
    )


def encoding_for(model_spec: str | None) -> tuple[str, float]:
    """The encoding name and safety factor for a model spec (``PROVIDER:MODEL``) or name.

    OpenAI models get their own encoding, exactly (factor 1.0); Claude gets
    ``cl100k_base`` padded by ``CLAUDE_SAFETY_FACTOR``; other named models (behind
    openai-compatible servers) ``o200k_base`` padded by ``OPEN_MODEL_SAFETY_FACTOR``.
    No spec, and the test doubles, count exactly with ``o200k_base``.
    """
    spec = (model_spec or "").strip()
    provider, sep, model = spec.partition(":")
    if not sep:
        provider, model = "", spec
    if provider == "anthropic" or "claude" in model.lower():
        return "cl100k_base", CLAUDE_SAFETY_FACTOR
    if provider in ("scripted", "function") or not model:
        return "o200k_base", 1.0
    try:
        name = encoding_name_for_model(model.lower())
    except KeyError:
        return "o200k_base", OPEN_MODEL_SAFETY_FACTOR
    exact = 1.0 if provider in ("openai", "") else OPEN_MODEL_SAFETY_FACTOR
    if name.startswith("o200k"):  # o200k_harmony only adds special tokens
        return "o200k_base", exact
    if name == "cl100k_base":
        return "cl100k_base", exact
    return "cl100k_base", OPEN_MODEL_SAFETY_FACTOR  # retired GPT-3 encodings


class TokenCounter:
    """Counts tokens for one model family, with a thread-safe LRU cache of recent texts.

    ``count`` is the budgeting number (raw tokens times the family's safety factor);
    ``acount`` and ``acount_request`` move large texts to a thread so the event loop keeps
    serving streams while a 200 KB source is counted.
    """

    def __init__(
        self,
        model_spec: str | None = None,
        *,
        cache_size: int = 4096,
        encodings_dir: Path | None = None,
    ) -> None:
        name, self.safety_factor = encoding_for(model_spec)
        self.encoding_name = name
        self._encoding = load_encoding(name, encodings_dir)
        self._cache: OrderedDict[str | bytes, int] = OrderedDict()
        self._cache_size = cache_size
        self._lock = threading.Lock()  # fitting may run in a worker thread

    def encode(self, text: str) -> list[int]:
        """Token ids of ``text``; special-token strings in user text count as plain text."""
        return self._encoding.encode(text, disallowed_special=())

    def decode(self, tokens: Sequence[int]) -> str:
        return self._encoding.decode(list(tokens))

    def raw_count(self, text: str) -> int:
        """Exact tokens of ``text`` in this counter's encoding (no safety factor)."""
        key = _cache_key(text)
        cached = self._cached(key)
        if cached is not None:
            return cached
        tokens = len(self.encode(text))
        self._remember(key, tokens)
        return tokens

    def count(self, text: str) -> int:
        """Tokens to budget for ``text``: the raw count times the family's safety factor."""
        return self.pad(self.raw_count(text))

    async def acount(self, text: str) -> int:
        """``count`` that encodes texts over ``LARGE_TEXT_CHARS`` in a worker thread."""
        if len(text) <= LARGE_TEXT_CHARS:
            return self.count(text)
        key = _cache_key(text)
        cached = self._cached(key)
        if cached is None:
            cached = await asyncio.to_thread(lambda: len(self.encode(text)))
            self._remember(key, cached)
        return self.pad(cached)

    def truncate(self, text: str, max_tokens: int) -> str:
        """The longest prefix of ``text`` cut at a token boundary with ``count`` <= max_tokens.

        A cut inside a multi-byte character drops the partial character rather than
        leaving a replacement mark in the prompt.
        """
        if max_tokens <= 0:
            return ""
        tokens = self.encode(text)
        keep = min(len(tokens), int(max_tokens / self.safety_factor))
        while keep > 0:
            prefix = self._encoding.decode_bytes(tokens[:keep]).decode("utf-8", errors="ignore")
            excess = self.count(prefix) - max_tokens
            if excess <= 0:
                return prefix
            keep -= max(1, int(excess / self.safety_factor))
        return ""

    def count_request(self, request: ModelRequest) -> int:
        """An estimate of a whole request's input tokens: system blocks, messages, tools.

        Content is counted exactly (then padded); the framing per block and message uses
        the fixed overheads above. Good for a pre-flight budget check, not for billing.
        """
        total = REQUEST_OVERHEAD
        total += sum(self.count(block.text) + MESSAGE_OVERHEAD for block in request.system)
        total += sum(self._message_tokens(message) for message in request.messages)
        if request.tools:
            total += self.count(tools_json(request))
        if request.response_schema is not None:
            total += self.count(_json(request.response_schema.schema))
        return total

    async def acount_request(self, request: ModelRequest) -> int:
        """``count_request`` in a worker thread when the request carries a lot of text."""
        if _request_chars(request) <= LARGE_TEXT_CHARS:
            return self.count_request(request)
        return await asyncio.to_thread(self.count_request, request)

    def _message_tokens(self, message: Message) -> int:
        total = MESSAGE_OVERHEAD
        for part in message.parts:
            match part:
                case TextPart(text=text):
                    total += self.count(text)
                case ToolCall(name=name, input=data):
                    total += PART_OVERHEAD + self.count(name) + self.count(_json(data))
                case ToolResult(content=content):
                    total += PART_OVERHEAD + self.count(content)
        return total

    def pad(self, raw: int) -> int:
        """A raw token count times the safety factor, rounded up."""
        if self.safety_factor == 1.0:
            return raw
        return math.ceil(round(raw * self.safety_factor, 6))  # round: 100 * 1.35 is 135.00..03

    def _cached(self, key: str | bytes) -> int | None:
        with self._lock:
            cached = self._cache.get(key)
            if cached is not None:
                self._cache.move_to_end(key)
            return cached

    def _remember(self, key: str | bytes, tokens: int) -> None:
        with self._lock:
            self._cache[key] = tokens
            self._cache.move_to_end(key)
            while len(self._cache) > self._cache_size:
                self._cache.popitem(last=False)


def _cache_key(text: str) -> str | bytes:
    if len(text) <= _KEY_CHARS:
        return text
    return hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=16).digest()


def _json(value: object) -> str:
    return json.dumps(value, sort_keys=True, ensure_ascii=False, separators=(",", ":"))


def tools_json(request: ModelRequest) -> str:
    """The tool specs as one canonical JSON text (what counting and prefix checks see)."""
    return _json(
        [
            {"name": t.name, "description": t.description, "input_schema": t.input_schema}
            for t in request.tools
        ]
    )


def _request_chars(request: ModelRequest) -> int:
    chars = sum(len(block.text) for block in request.system)
    for message in request.messages:
        for part in message.parts:
            match part:
                case TextPart(text=text):
                    chars += len(text)
                case ToolResult(content=content):
                    chars += len(content)
                case ToolCall():
                    chars += 64  # inputs are small; the whole request is judged by its text
    return chars + sum(len(t.description) + 256 for t in request.tools)
