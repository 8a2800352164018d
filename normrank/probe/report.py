"""Write a probe run to a directory: ``probe.npz``, ``probe.json`` and ``probe.png``."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np

from normrank.errors import InvalidInputError
from normrank.probe.estimator import ProbeResult
from normrank.probe.theory import loglog_fit, theory_checks

__all__ = ["plot_heat_norm", "write_probe"]


def _jsonable(x: Any) -> Any:
    if isinstance(x, dict):
        return {k: _jsonable(v) for k, v in x.items()}
    if isinstance(x, float) and not math.isfinite(x):
        return None  # JSON has no NaN
    return x


def write_probe(
    result: ProbeResult,
    doc_ids: list[str],
    out_dir: str | Path,
    *,
    settings: dict[str, Any] | None = None,
    weight_decay: float | None = None,
    plot: bool = True,
) -> dict[str, Any]:
    """Write the arrays, the settings with the theory checks, and the Fig. 3b-style plot.

    ``probe.npz`` (``allow_pickle=False`` readable): ``doc_ids`` (unicode), ``norm``, ``drift``,
    ``heat``, ``energy`` (float64). The correlations in ``probe.json`` are computed from exactly
    these arrays. Returns the JSON payload.
    """
    if len(doc_ids) != len(result.norm):
        raise InvalidInputError(f"{len(doc_ids)} doc ids for {len(result.norm)} probe values")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    np.savez(
        out / "probe.npz",
        doc_ids=np.asarray([str(i) for i in doc_ids], dtype=np.str_),
        norm=result.norm,
        drift=result.drift,
        heat=result.heat,
        energy=result.energy,
    )
    checks = theory_checks(result, weight_decay=weight_decay)
    payload = {"settings": {**result.settings, **(settings or {})}, **checks}
    (out / "probe.json").write_text(json.dumps(_jsonable(payload), indent=2, allow_nan=False) + "\n")
    if plot:
        plot_heat_norm(
            result.heat, result.norm, out / "probe.png", title=str(payload["settings"].get("title", ""))
        )
    return payload


def plot_heat_norm(heat: np.ndarray, norm: np.ndarray, path: str | Path, *, title: str = "") -> None:
    """Log-log scatter of V~^2 against R with the fitted slope and a slope-0.25 reference line."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as e:
        from normrank.errors import MissingDependencyError

        raise MissingDependencyError("probe.png needs matplotlib: pip install 'normrank[bench]'") from e
    fit = loglog_fit(heat, norm)
    ok = (heat > 0) & (norm > 0)
    fig, ax = plt.subplots(figsize=(5, 4), dpi=120)
    ax.scatter(heat[ok], norm[ok], s=4, alpha=0.4, lw=0)
    if fit["n"] >= 2:
        xs = np.geomspace(heat[ok].min(), heat[ok].max(), 50)
        ax.plot(
            xs,
            np.exp(fit["intercept"]) * xs ** fit["slope"],
            "r-",
            label=f"fit: slope {fit['slope']:.3f} (r={fit['r']:.3f})",
        )
        x0, y0 = np.exp(np.mean(np.log(heat[ok]))), np.exp(np.mean(np.log(norm[ok])))
        ax.plot(xs, y0 * (xs / x0) ** 0.25, "k--", label="theory: slope 0.25")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel(r"heat $\tilde{V}^2$")
    ax.set_ylabel(r"norm $R=\|z\|$")
    ax.set_title(title or "heat vs norm", fontsize=9)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
