"""Attribute patches on slime's modules, recorded so they can be undone and seen, and re-applied on re-import.

Every replaced name is listed on the module that held it, in `__slime_flashqla_replaced__`
(name -> slime's original object), so a live process shows what the integration changed:
`slime_plugins.models.qwen3_next.__slime_flashqla_replaced__`. A module imported (or
re-imported, `importlib.reload` included) after `install()` is patched as its import finishes, by
a finder placed first on `sys.meta_path` that wraps the real loader.
"""

from __future__ import annotations

import importlib.abc
import sys
import threading
import types
from collections.abc import Callable

REPLACED_ATTR = "__slime_flashqla_replaced__"
_MISSING = object()


class PatchSet:
    """Attribute replacements made on modules and classes, undone in reverse order."""

    def __init__(self) -> None:
        self._done: list[tuple[object, str, object]] = []  # (owner, name, original or _MISSING)
        self._lock = threading.Lock()

    def set(self, owner: object, name: str, value: object) -> None:
        """Replace `owner.name` by `value`, remembering the original (also on a module, in REPLACED_ATTR)."""
        with self._lock:
            if isinstance(owner, types.ModuleType) and REPLACED_ATTR not in owner.__dict__:
                # The module's code ran again (a reload) since it was patched: its names are slime's anew.
                self._done = [done for done in self._done if done[0] is not owner]
            original = owner.__dict__.get(name, _MISSING) if isinstance(owner, type) else getattr(owner, name, _MISSING)
            setattr(owner, name, value)
            self._done.append((owner, name, original))
            if isinstance(owner, types.ModuleType):
                record = owner.__dict__.setdefault(REPLACED_ATTR, {})
                record.setdefault(name, None if original is _MISSING else original)

    def undo(self, *, in_forked_child: bool = False) -> None:
        """Put every original back (a name that was missing is removed again)."""
        if in_forked_child:  # another thread of the parent may have held the lock when it forked
            self._lock = threading.Lock()
        with self._lock:
            while self._done:
                owner, name, original = self._done.pop()
                if original is _MISSING:
                    if name in vars(owner):
                        delattr(owner, name)
                else:
                    setattr(owner, name, original)
                if isinstance(owner, types.ModuleType):
                    owner.__dict__.pop(REPLACED_ATTR, None)

    def targets(self) -> list[str]:
        """'module.name' (or 'Class.name') of every replacement in force."""
        with self._lock:
            return [f"{getattr(owner, '__name__', owner)}.{name}" for owner, name, _ in self._done]


def original_attribute(module: types.ModuleType, name: str):
    """`module.name` as slime defined it, even while the integration has replaced it."""
    replaced = vars(module).get(REPLACED_ATTR, {})
    if name in replaced:
        return replaced[name]
    return getattr(module, name)


class _PatchingLoader(importlib.abc.Loader):
    """The real loader, then the patch, on the module it just executed."""

    def __init__(self, loader, patch: Callable[[types.ModuleType], None]) -> None:
        self._loader, self._patch = loader, patch

    def create_module(self, spec):
        return self._loader.create_module(spec)

    def exec_module(self, module) -> None:
        # A reload runs slime's code again in the same module: what it defines is slime's, to patch again.
        vars(module).pop(REPLACED_ATTR, None)
        self._loader.exec_module(module)
        self._patch(module)

    def __getattr__(self, name):  # get_source, get_filename, ...: the real loader's
        return getattr(self._loader, name)


class PatchOnImport(importlib.abc.MetaPathFinder):
    """Patch named modules whenever they are imported, by wrapping the loader the other finders return."""

    def __init__(self, patches: dict[str, Callable[[types.ModuleType], None]]) -> None:
        self._patches = patches

    def find_spec(self, fullname, path, target=None):
        patch = self._patches.get(fullname)
        if patch is None:
            return None
        for finder in sys.meta_path:
            find = getattr(finder, "find_spec", None)
            if finder is self or find is None:
                continue
            spec = find(fullname, path, target)
            if spec is not None:
                break
        else:
            return None
        if spec.loader is not None and hasattr(spec.loader, "exec_module"):
            spec.loader = _PatchingLoader(spec.loader, patch)
        return spec

    def activate(self) -> None:
        """Patch the named modules already imported, and those imported from now on."""
        if self not in sys.meta_path:
            sys.meta_path.insert(0, self)
        for name, patch in self._patches.items():
            module = sys.modules.get(name)
            if module is not None:
                patch(module)

    def deactivate(self) -> None:
        """Stop patching modules as they import."""
        if self in sys.meta_path:
            sys.meta_path.remove(self)
