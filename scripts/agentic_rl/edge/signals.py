"""A stop that Python dropped is delivered again. A signal handler's exception raised while a weakref
callback, a __del__ or a GC callback runs is dropped ("Exception ignored in ..."), and the stop it stands
for is lost; redeliver_if_swallowed re-arms the handler and sends the signal again (procs.signal_self).
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable

from agentic_rl.edge.procs import signal_self

# Exceptions a signal handler raises, by type: what re-arms the handler before the signal is sent again.
_REDELIVER: dict[type, Callable[[BaseException], None]] = {}


_HOOK_BEFORE: list = []



def redeliver_if_swallowed(kind: type, rearm: Callable[[BaseException], None]) -> None:
    """A signal handler's exception that is raised while a weakref callback, a __del__ or a GC callback runs is
    dropped by Python ("Exception ignored in ..."), and the stop it stands for is lost: a SIGTERM that came
    during an import left a rehearsal running with its handler disarmed. From now on an exception of kind
    (with .signum) dropped that way calls rearm(exc), then sends the signal to this process again 50 ms
    later, so that the handler raises it at an ordinary line of the main thread."""
    _REDELIVER[kind] = rearm
    if sys.unraisablehook is not _unraisable:
        _HOOK_BEFORE[:] = [sys.unraisablehook]
        sys.unraisablehook = _unraisable



def forget_swallowed(kind: type) -> None:
    _REDELIVER.pop(kind, None)



def _unraisable(unraisable) -> None:
    exc = unraisable.exc_value
    for kind, rearm in list(_REDELIVER.items()):
        if isinstance(exc, kind) and isinstance(getattr(exc, "signum", None), int):
            rearm(exc)
            # Not from here: a signal sent now is handled before this hook returns, and dropped again.
            later = threading.Timer(0.05, signal_self, (exc.signum,))
            later.daemon = True
            later.start()
            return
    (_HOOK_BEFORE[0] if _HOOK_BEFORE else sys.__unraisablehook__)(unraisable)
