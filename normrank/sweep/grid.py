"""Parameter grids: ``"-2:1:0.25"`` (start:stop:step, stop included) or ``"-1,0,0.5"``."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from normrank.errors import InvalidParameterError
from normrank.settings import DEFAULT_ALPHAS

__all__ = ["parse_alphas", "parse_grid"]


def parse_grid(spec: str | Sequence[float], what: str = "alpha") -> list[float]:
    """A grid spec -> sorted values with 0 (the cosine baseline) always included."""
    if isinstance(spec, str):
        s = spec.strip()
        try:
            if ":" in s:
                start, stop, step = (float(x) for x in s.split(":"))
                if step <= 0 or stop < start:
                    raise InvalidParameterError(f"{what} range {spec!r}: need start <= stop and step > 0")
                n = int(np.floor((stop - start) / step + 1e-9)) + 1
                values = [round(start + i * step, 10) for i in range(n)]
            else:
                values = [float(x) for x in s.split(",") if x.strip()]
        except ValueError as e:
            raise InvalidParameterError(
                f"bad {what} grid {spec!r}: use START:STOP:STEP or a comma list"
            ) from e
    else:
        values = [float(x) for x in spec]
    if not values or not all(np.isfinite(values)):
        raise InvalidParameterError(f"{what} grid {spec!r} is empty or not finite")
    return sorted(set(values) | {0.0})


def parse_alphas(spec: str | Sequence[float] = DEFAULT_ALPHAS) -> list[float]:
    """``"-2:1:0.25"`` (start:stop:step, stop included) or ``"-1,0,0.5"`` -> sorted α list with 0."""
    return parse_grid(spec, "alpha")
