"""The one ``torch._dynamo`` setting a capture changes, and only while it is attached.

``torch.compile`` reuses the code it compiled for a frame for any call whose guards pass. With
``torch._dynamo.config.skip_nnmodule_hook_guards = True`` (torch's default) those guards ignore empty
hook dicts, so code compiled for a model without hooks would be reused for a captured model and run
none of its hooks. While at least one capture (or monitor) is attached, the flag is ``False``: code
compiled in that time checks that the hooks it was traced with are still the module's (one length
check per hook dict per call), so a captured model recompiles with its hooks instead of reusing
hook-less code.

- Attaching a capture sets the flag to ``False`` when it is ``True``; a ``False`` found at the first
  attach is the user's choice and is left alone (and never restored).
- When the last attached capture detaches, the flag goes back to ``True`` if this module set it and it
  is still ``False`` (a ``True`` the user set in between is kept).
- ``import vitplast_kernels`` changes nothing.
- A capture that is never detached counts as attached until it is garbage collected.

Code compiled *before* the first attach (or after the last detach) was compiled without these guards;
`.forward_check` raises `MissedForwardError` where such code runs a
monitored model without its hooks.
"""

from __future__ import annotations

import threading
import weakref

_lock = threading.Lock()
_attached: weakref.WeakSet = weakref.WeakSet()  # captures attached now (a dropped capture leaves it)
_set_by_us = False  # this module set the flag to False and restores it at the last detach


def _config():
    import torch._dynamo.config as config  # imported on first attach, never by importing the package

    return config


def hook_guards_on(holder: object) -> None:
    """``holder`` (a capture) is attached: code compiled from now on guards on module hooks."""
    global _set_by_us
    config = _config()
    with _lock:
        if config.skip_nnmodule_hook_guards:
            config.skip_nnmodule_hook_guards = False
            _set_by_us = True
        _attached.add(holder)


def hook_guards_off(holder: object) -> None:
    """``holder`` detached: after the last one, torch's setting is restored if this module changed it."""
    global _set_by_us
    config = _config()
    with _lock:
        _attached.discard(holder)
        if len(_attached) == 0 and _set_by_us:
            if config.skip_nnmodule_hook_guards is False:
                config.skip_nnmodule_hook_guards = True
            _set_by_us = False


def hook_guards_active() -> bool:
    """Whether code compiled now guards on module hooks (the flag is ``False``)."""
    return not _config().skip_nnmodule_hook_guards
