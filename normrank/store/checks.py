"""What the adapters check before anything changes: keyword arguments (unknown or misspelt names
raise ``TypeError`` naming the right one), alpha by the index's own rule, metadata JSON can hold
as it is, and the rerankers' constructor arguments."""

from __future__ import annotations

import difflib
import math
import numbers
from collections.abc import Iterable, Mapping
from typing import Any

from normrank.errors import InvalidInputError, InvalidParameterError, NormrankError
from normrank.validation import as_alpha

__all__ = [
    "MAX_METADATA_DEPTH",
    "UnknownArgumentError",
    "UnstorableMetadataError",
    "UnsupportedOperationError",
    "check_alpha",
    "check_json_value",
    "refuse_untrained_factory",
    "reject_unknown",
    "reranker_arguments",
]

#: Deeper metadata is refused: deep-copying or re-serialising it would hit Python's recursion limit.
MAX_METADATA_DEPTH = 64


class UnknownArgumentError(NormrankError, TypeError):
    """A keyword argument that no normrank method takes (often a misspelling or another store's)."""


class UnsupportedOperationError(NormrankError, NotImplementedError):
    """A peer store's method normrank deliberately does not offer; the message names what to use."""


class UnstorableMetadataError(InvalidInputError):
    """Metadata that JSON cannot hold as given (dates, tuples, sets, non-str keys, NaN, too deep)."""


def reject_unknown(
    kwargs: Mapping[str, Any], allowed: Iterable[str], where: str, hints: Mapping[str, str] | None = None
) -> None:
    """Raise :class:`UnknownArgumentError` for any key of ``kwargs``, naming what to use instead.

    ``hints`` maps names users bring from other libraries to a sentence on what to do; other
    names get the closest allowed one (``nrom_alpha`` -> ``norm_alpha``).
    """
    if not kwargs:
        return
    allowed = sorted(allowed)
    name = sorted(kwargs)[0]
    if hints and name in hints:
        raise UnknownArgumentError(f"{where} got {name}=: {hints[name]}")
    close = difflib.get_close_matches(name, allowed, n=1, cutoff=0.6)
    tail = (
        f"did you mean {close[0]!r}?" if close else f"it takes {', '.join(allowed) or 'no keyword arguments'}"
    )
    raise UnknownArgumentError(f"{where} got an unexpected keyword argument {name!r}: {tail}")


def check_alpha(alpha: Any, name: str = "alpha") -> float:
    """One alpha by the index's own rule (finite, within +-16), as a float."""
    if isinstance(alpha, bool) or not isinstance(alpha, numbers.Real):
        raise InvalidParameterError(f"{name} must be a real number, got {alpha!r}")
    try:
        return float(as_alpha(alpha, 1)[0])
    except InvalidParameterError as e:
        raise InvalidParameterError(f"{name}: {e}") from e


def check_json_value(value: Any, what: str = "metadata") -> None:
    """Refuse what JSON would not give back unchanged: only str, finite float, int, bool, None,
    lists and dicts with str keys, nested at most :data:`MAX_METADATA_DEPTH` levels."""
    stack: list[tuple[Any, int, str]] = [(value, 0, what)]
    while stack:
        v, depth, where = stack.pop()
        if depth > MAX_METADATA_DEPTH:
            raise UnstorableMetadataError(f"{what} is nested deeper than {MAX_METADATA_DEPTH} levels")
        if v is None or isinstance(v, (str, bool, int)):
            continue
        if isinstance(v, float):
            if not math.isfinite(v):
                raise UnstorableMetadataError(
                    f"{where} is {v}: JSON has no NaN or inf; store None or a string"
                )
            continue
        if isinstance(v, list):
            stack.extend((x, depth + 1, f"{where}[{i}]") for i, x in enumerate(v))
            continue
        if isinstance(v, dict):
            for k, x in v.items():
                if not isinstance(k, str):
                    raise UnstorableMetadataError(
                        f"{where} has key {k!r}: JSON keys are strings; use str keys"
                    )
                stack.append((x, depth + 1, f"{where}[{k!r}]"))
            continue
        advice = (
            "a list (a tuple would come back as a list)"
            if isinstance(v, tuple)
            else "a str, number, bool, None, list or dict"
        )
        if hasattr(v, "isoformat"):
            advice = "its .isoformat() string"
        raise UnstorableMetadataError(
            f"{where} is a {type(v).__name__}, which JSON cannot hold as it is: store {advice}"
        )


def reranker_arguments(
    data: Mapping[str, Any], fields: Iterable[str], alpha_name: str, where: str
) -> dict[str, Any]:
    """A reranker's constructor arguments checked before pydantic sees them (pydantic would wrap
    a typed error in its ValidationError): no unknown names, alpha by the index's rule, ``top_n``
    a positive integer or ``None``."""
    fields = tuple(fields)
    reject_unknown({k: v for k, v in data.items() if k not in fields}, fields, where)
    out = dict(data)
    out[alpha_name] = check_alpha(data.get(alpha_name), alpha_name)
    top_n = data.get("top_n")
    if top_n is not None and (
        isinstance(top_n, bool) or not isinstance(top_n, numbers.Integral) or top_n < 1
    ):
        raise InvalidParameterError(f"top_n must be a positive integer or None, got {top_n!r}")
    return out


def refuse_untrained_factory(factory: object, dim: int | None, from_index: str) -> None:
    """Refuse, when a store is made, a factory whose FAISS index needs training (IVF, PQ, SQ...):
    a store never trains its index, so its first add would fail with advice (``train(x)``) that
    no store user can follow. ``from_index`` is the adapter's call that takes a trained index.

    Raises :class:`InvalidParameterError`; a malformed factory passes here (the index's own
    check says what is wrong with it at the first add)."""
    if not isinstance(factory, str) or factory == "Flat":
        return
    import faiss

    try:
        trained = faiss.index_factory(dim or 96, factory, faiss.METRIC_INNER_PRODUCT).is_trained
    except Exception:  # a malformed factory: NormIndex's own check names the fault
        return
    if not trained:
        raise InvalidParameterError(
            f"factory={factory!r} builds a FAISS index that must be trained before the first add, and "
            "the store does not train one: train a NormIndex on a sample of your vectors "
            f"(index = NormIndex(dim, factory={factory!r}); index.train(sample)) and make the store "
            f"over it with {from_index}; or use 'Flat' (exact) or 'HNSW32' (approximate)"
        )
