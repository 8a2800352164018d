"""Which parameters a virtual step moves: ``"full"``, ``"head"`` or ``"last:N"``.

* ``full``: every floating-point parameter of ``model.torch_module`` (what the paper does).
* ``head``: the last linear map before the output. A model may name it with a ``probe_head``
  attribute (an ``nn.Linear``); otherwise it is the last ``nn.Linear`` called during a forward
  pass whose weight actually influences the output (so an unused BERT pooler is skipped). For a
  CLIP-style model that is the projection head; for a mean-pooled model without one, the last
  dense layer of the last block.
* ``last:N``: the parameters of the last N blocks of the block stack, i.e. the longest
  ``nn.ModuleList`` whose children share one class (``encoder.layer`` in BERT,
  ``transformer.resblocks`` in CLIP). Modules after the stack (final norms, projections) are not
  included; use ``full`` or ``head`` for those.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from normrank.errors import InvalidParameterError

if TYPE_CHECKING:
    import torch

__all__ = ["Scope", "find_block_stack", "find_head", "resolve_scope"]


@dataclass
class Scope:
    """A resolved scope: the parameters to move, and the head ``nn.Linear`` for ``"head"``."""

    name: str
    params: list[tuple[str, torch.nn.Parameter]]
    head: Any = None  # torch.nn.Linear for scope "head"
    head_path: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def n_params(self) -> int:
        return int(sum(p.numel() for _, p in self.params))


def _module_path(root: torch.nn.Module, target: torch.nn.Module) -> str:
    for name, mod in root.named_modules():
        if mod is target:
            return name
    return "?"


def find_head(model: Any, sample_text: str) -> torch.nn.Linear:
    """The last ``nn.Linear`` called in a forward pass whose weight reaches the output."""
    import torch

    explicit = getattr(model, "probe_head", None)
    if explicit is not None:
        if not isinstance(explicit, torch.nn.Linear):
            raise InvalidParameterError(f"model.probe_head must be a torch.nn.Linear, got {type(explicit)}")
        return explicit
    module: torch.nn.Module = model.torch_module
    order: list[torch.nn.Linear] = []
    hooks = [
        m.register_forward_hook(lambda mod, _i, _o: order.append(mod))
        for m in module.modules()
        if isinstance(m, torch.nn.Linear)
    ]
    flags = {id(p): p.requires_grad for p in module.parameters()}
    try:
        for p in module.parameters():
            p.requires_grad_(True)
        z = model.embed_tensor([sample_text])
        seen: list[torch.nn.Linear] = list(dict.fromkeys(order))  # call order, deduplicated
        grads = torch.autograd.grad(
            z.float().pow(2).sum(), [m.weight for m in seen], allow_unused=True, retain_graph=False
        )
    finally:
        for h in hooks:
            h.remove()
        for p in module.parameters():
            p.requires_grad_(flags[id(p)])
    used = [m for m, g in zip(seen, grads, strict=True) if g is not None]
    if not used:
        raise InvalidParameterError("no nn.Linear layer reaches the model output; cannot use scope='head'")
    return used[-1]


def find_block_stack(module: torch.nn.Module) -> torch.nn.ModuleList:
    """The longest ``nn.ModuleList`` of same-class children (ties: the one with more parameters)."""
    import torch

    best: torch.nn.ModuleList | None = None
    best_key = (0, 0)
    for m in module.modules():
        if isinstance(m, torch.nn.ModuleList) and len(m) > 0:
            if len({type(c) for c in m}) != 1:
                continue
            key = (len(m), sum(p.numel() for p in m.parameters()))
            if key > best_key:
                best, best_key = m, key
    if best is None:
        raise InvalidParameterError(
            "the model has no stack of repeated blocks (nn.ModuleList); use 'full' or 'head'"
        )
    return best


def resolve_scope(model: Any, scope: str, sample_text: str) -> Scope:
    """Resolve a scope string against ``model.torch_module``."""
    module: torch.nn.Module = model.torch_module
    if not isinstance(scope, str):
        raise InvalidParameterError(f"scope must be 'full', 'head' or 'last:N', got {scope!r}")
    if scope == "full":
        params = [(n, p) for n, p in module.named_parameters() if p.is_floating_point()]
        return Scope("full", params)
    if scope == "head":
        head = find_head(model, sample_text)
        path = _module_path(module, head)
        params = [(f"{path}.weight", head.weight)]
        if head.bias is not None:
            params.append((f"{path}.bias", head.bias))
        return Scope("head", params, head=head, head_path=path)
    if scope.startswith("last:"):
        try:
            n_blocks = int(scope.split(":", 1)[1])
        except ValueError as e:
            raise InvalidParameterError(f"scope 'last:N' needs an integer N, got {scope!r}") from e
        stack = find_block_stack(module)
        if not 1 <= n_blocks <= len(stack):
            raise InvalidParameterError(
                f"scope {scope!r}: the model has {len(stack)} blocks, N must be in [1, {len(stack)}]"
            )
        path = _module_path(module, stack)
        params = []
        for i in range(len(stack) - n_blocks, len(stack)):
            params += [
                (f"{path}.{i}.{n}", p) for n, p in stack[i].named_parameters() if p.is_floating_point()
            ]
        return Scope(scope, params, extra={"blocks": f"{path}[{len(stack) - n_blocks}:{len(stack)}]"})
    raise InvalidParameterError(f"scope must be 'full', 'head' or 'last:N', got {scope!r}")
