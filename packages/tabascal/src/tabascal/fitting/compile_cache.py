"""jax's persistent compilation cache, which the ``tabascal`` command turns on, and the count of
a run's compilations that summary.json reports (``compile``).

XLA compiling a fit's programs dominates the time before its first step (minutes on a TPU,
tens of seconds on a CPU) and is paid again by every run of the same shapes; with the cache a
later run reads the programs back instead. jax settles whether and where it caches once per
process, at its first compilation: ``use_cache`` must come before that.
"""

from __future__ import annotations

import functools
import logging
import os
import tempfile
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import NamedTuple

log = logging.getLogger(__name__)

#: jax's monitoring events (jax/_src/dispatch.py, compiler.py): one, timed, for every program
#: jax asks XLA for, compiled or read back from the persistent cache; one for every read back.
BACKEND_COMPILE_EVENT = "/jax/core/compile/backend_compile_duration"
CACHE_HIT_EVENT = "/jax/compilation_cache/cache_hits"

#: The thresholds below which jax caches no program (by default, one compiled in under a
#: second), each set to 0 so that a second run of the same shapes compiles nothing, unless the
#: user's environment sets it.
THRESHOLDS = {
    "jax_persistent_cache_min_compile_time_secs": "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS",
    "jax_persistent_cache_min_entry_size_bytes": "JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES",
}


def cache_folder(environ: Mapping[str, str], configured: str | None = None) -> Path:
    """The persistent cache's folder: the one jax is already configured with (``configured``:
    the user's, or a test session's), else $JAX_COMPILATION_CACHE_DIR, else
    $XDG_CACHE_HOME/tabascal/jax, else ~/.cache/tabascal/jax (the XDG base directory
    specification's default, which also stands for a relative $XDG_CACHE_HOME)."""
    chosen = configured or environ.get("JAX_COMPILATION_CACHE_DIR")
    if chosen:
        return Path(chosen)
    xdg = environ.get("XDG_CACHE_HOME", "")
    home = Path(environ.get("HOME") or Path.home())
    return (Path(xdg) if os.path.isabs(xdg) else home / ".cache") / "tabascal" / "jax"


def _unwritable(folder: Path) -> str | None:
    """Why ``folder`` cannot hold the cache (created if absent), or None when it can."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=folder):
            pass
    except OSError as err:
        return err.strerror or str(err)
    return None


def use_cache(enabled: bool = True) -> str | None:
    """Turn jax's persistent compilation cache on in ``cache_folder``'s folder, caching every
    program, or off (``enabled`` False, ``--no-compile-cache``); return the folder in use, or
    None without a cache.

    A folder jax was already given is kept, and a cache the user turned off stays off. A folder
    that cannot be created or written leaves the cache off with one warning: the run goes on,
    compiling every program as it would without the cache."""
    import jax

    if not enabled or not jax.config.jax_enable_compilation_cache:
        jax.config.update("jax_enable_compilation_cache", False)
        return None
    configured = jax.config.jax_compilation_cache_dir
    folder = cache_folder(os.environ, configured)
    if not configured:
        problem = _unwritable(folder)
        if problem:
            log.warning("%s: %s; running without a compilation cache", folder, problem)
            return None
        jax.config.update("jax_compilation_cache_dir", str(folder))
    for option, variable in THRESHOLDS.items():
        if variable not in os.environ:
            jax.config.update(option, 0)
    return str(folder)


class CompileCounts(NamedTuple):
    """Programs jax asked XLA for in this process (``requests``), of them those read back from
    the persistent cache (``cache_hits``), and the seconds spent getting them either way."""

    requests: int = 0
    cache_hits: int = 0
    seconds: float = 0.0


class _Listener:
    """Adds up jax's monitoring events into a ``CompileCounts``; they may come from any
    thread."""

    def __init__(self):
        self._lock = threading.Lock()
        self.counts = CompileCounts()

    def event(self, event: str, **kwargs) -> None:
        if event == CACHE_HIT_EVENT:
            with self._lock:
                self.counts = self.counts._replace(cache_hits=self.counts.cache_hits + 1)

    def duration(self, event: str, duration: float, **kwargs) -> None:
        if event == BACKEND_COMPILE_EVENT:
            with self._lock:
                self.counts = self.counts._replace(
                    requests=self.counts.requests + 1, seconds=self.counts.seconds + duration
                )


@functools.cache
def _listener() -> _Listener:
    import jax

    listener = _Listener()
    jax.monitoring.register_event_listener(listener.event)
    jax.monitoring.register_event_duration_secs_listener(listener.duration)
    return listener


def compile_counts() -> CompileCounts:
    """The process's counts so far, from the first call of ``compile_counts`` on."""
    return _listener().counts


def compile_summary(start: CompileCounts) -> dict:
    """summary.json's ``compile``: ``cache``, the persistent cache's folder (None without
    one); ``compiled``, the programs XLA compiled since ``start`` (a ``compile_counts()``);
    ``cache_hits``, those read back from the cache instead; ``seconds``, the time spent
    getting them, either way."""
    import jax

    now = compile_counts()
    hits = now.cache_hits - start.cache_hits
    on = jax.config.jax_enable_compilation_cache and jax.config.jax_compilation_cache_dir
    return {
        "cache": str(jax.config.jax_compilation_cache_dir) if on else None,
        "compiled": now.requests - start.requests - hits,
        "cache_hits": hits,
        "seconds": round(now.seconds - start.seconds, 3),
    }
