"""One AST-producing compile at a time, with no garbage collection inside it (CPython < 3.12).

CPython 3.11.7 (the CI's Python) keeps the recursion-depth bookkeeping of the C function that
turns a parse tree into ``ast`` objects in state shared by the whole interpreter. Anything that
runs Python code in the middle of that conversion -- the garbage collector calling a finalizer,
which may switch threads or itself format a traceback (3.11 tracebacks call ``ast.parse``) -- and
parses again corrupts it: ``SystemError: AST constructor recursion depth mismatch``. Two CI runs
failed so: pytest rewriting a lazily imported module while another parse was under way.
``ast.parse`` is only one way in (anyio's lazy imports and griffe call ``compile(...,
ast.PyCF_ONLY_AST)``), so this wraps ``builtins.compile`` itself: AST-producing calls take one lock
and run with the collector off, so the conversion runs no Python code. Fixed upstream (gh-106905)
in later releases.

No ``from __future__`` import here: a wrapped ``compile`` passes on its caller's future flags, as
the builtin does, and takes none of its own.
"""

import __future__

import builtins
import gc
import sys
import threading
from typing import Any

_FUTURE_FLAGS = 0
for _name in __future__.all_feature_names:
    _FUTURE_FLAGS |= getattr(__future__, _name).compiler_flag

_ONLY_AST = 0x400  # ast.PyCF_ONLY_AST, without importing ast before the wrap

original_compile = builtins.compile  # what the wrapper calls, looked up at each call


def install() -> None:
    """Wrap builtins.compile once; a no-op on CPython 3.12+ and when already wrapped."""
    if sys.version_info >= (3, 12) or hasattr(builtins.compile, "__wrapped__"):
        return
    lock = threading.RLock()

    def compile(
        source: Any,
        filename: Any,
        mode: str,
        flags: int = 0,
        dont_inherit: bool = False,
        optimize: int = -1,
        **kwargs: Any,
    ) -> Any:
        if not dont_inherit:  # what the builtin does: inherit the calling frame's futures
            flags |= sys._getframe(1).f_code.co_flags & _FUTURE_FLAGS
        if not flags & _ONLY_AST:
            return original_compile(source, filename, mode, flags, True, optimize, **kwargs)
        with lock:
            collecting = gc.isenabled()
            gc.disable()
            try:
                return original_compile(source, filename, mode, flags, True, optimize, **kwargs)
            finally:
                if collecting:
                    gc.enable()

    compile.__wrapped__ = original_compile  # type: ignore[attr-defined]
    compile.__doc__ = original_compile.__doc__
    builtins.compile = compile
