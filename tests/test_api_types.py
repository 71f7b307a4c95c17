"""The public API says what it takes: ``Any`` in at most 5% of the public parameters.

Every function and class of ``imitation_meg.__all__`` and of each subpackage's ``__all__`` is
read with :func:`inspect.signature`; a parameter counts as ``Any`` when its annotation mentions
``Any`` (containers such as ``dict[str, Any]`` included). Named aliases and protocols of
:mod:`imitation_meg.type_aliases` (``PolicySource``, ``EnvLike``, ``TargetLike`` ...) say what is
accepted instead.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import imitation_meg

MAX_ANY_SHARE = 0.05


def _public_parameters() -> tuple[int, list[str]]:
    names = ["imitation_meg"] + [
        f"imitation_meg.{m.name}" for m in pkgutil.iter_modules(imitation_meg.__path__) if m.ispkg
    ]
    seen: set[int] = set()
    total, anys = 0, []
    for module_name in names:
        module = importlib.import_module(module_name)
        for name in getattr(module, "__all__", []):
            obj = getattr(module, name, None)
            if inspect.isclass(obj):
                fns = [(f"{name}.__init__", obj.__init__)] + [
                    (f"{name}.{k}", v)
                    for k, v in vars(obj).items()
                    if inspect.isfunction(v) and not k.startswith("_")
                ]
            elif callable(obj):
                fns = [(name, obj)]
            else:
                continue
            for fname, fn in fns:
                if id(fn) in seen:
                    continue
                seen.add(id(fn))
                try:
                    sig = inspect.signature(fn)
                except (TypeError, ValueError):
                    continue
                for p in sig.parameters.values():
                    if p.name in ("self", "cls") or p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
                        continue
                    total += 1
                    if "Any" in str(p.annotation):
                        anys.append(f"{module_name}.{fname}({p.name}: {p.annotation})")
    return total, anys


def test_any_is_rare_in_the_public_api():
    total, anys = _public_parameters()
    assert total > 300  # the walk found the API
    assert len(anys) <= MAX_ANY_SHARE * total, "\n".join(anys)
