"""Fork hooks: a forked worker must not break the connections of the process it was forked from.

The loader's DataLoader workers and the prepare and audit pools are forked from processes that
have usually done remote I/O already. `storage.fs` installs these hooks when it is imported; the
story of why they are needed is in `_after_fork_in_child` and docs/storage.md.
"""

from __future__ import annotations

import gc
import os
import selectors
import sys
import weakref

_fork_state: dict = {}
_inherited: list = []  # in a forked child: the parent's filesystems, held so they are never closed here


def _before_fork() -> None:
    asyn = sys.modules.get("fsspec.asyn")
    _fork_state["loop"] = loop = asyn.loop[0] if asyn is not None else None
    if loop is not None:
        gc.collect()  # unreachable sessions and responses: close them here, where closing is right


def _after_fork_in_parent() -> None:
    _fork_state.clear()


def _after_fork_in_child() -> None:
    """Runs in every forked child (loader workers, the prepare and audit pools) of a process that has
    done remote I/O. The child inherits the parent's fsspec event loop, aiohttp sessions and pooled
    sockets — and the parent's epoll instance, which is shared, not copied. Anything the child closes
    (fsspec drops the inherited filesystems; their finalizers and the garbage collector close
    sessions and connections) would unregister the parent's sockets from that epoll instance, and
    the parent would then wait forever for a reply it can no longer see. So: the inherited loop gets
    a private selector (closing there touches nothing shared), and the inherited filesystems are
    held and their close-at-exit finalizers detached (forked children end with os._exit)."""
    loop = _fork_state.pop("loop", None)
    if loop is None:
        return
    loop._selector = selectors.SelectSelector()  # bookkeeping in Python only: no kernel object
    spec = sys.modules.get("fsspec.spec")
    todo, seen = [spec.AbstractFileSystem] if spec is not None else [], set()
    while todo:
        cls = todo.pop()
        _inherited.extend(cls.__dict__.get("_cache", {}).values())
        for sub in cls.__subclasses__():
            if sub not in seen:
                seen.add(sub)
                todo.append(sub)
    try:
        for fin, info in list(weakref.finalize._registry.items()):
            if getattr(info.func, "__name__", "") == "close_session":
                fin.detach()
    except AttributeError:  # CPython's private registry changed: the private selector still protects us
        pass


_installed: list = []


def install() -> None:
    """Register the hooks with os.register_at_fork, once per process (further calls do nothing)."""
    if not _installed and hasattr(os, "register_at_fork"):
        os.register_at_fork(before=_before_fork, after_in_parent=_after_fork_in_parent,
                            after_in_child=_after_fork_in_child)
        _installed.append(True)
