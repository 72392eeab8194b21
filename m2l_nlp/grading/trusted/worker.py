"""The process that runs a student's code for the trusted grader (never imports the reference).

Started by :class:`m2l_nlp.grading.trusted.remote.Worker` as
``python -I -B -m m2l_nlp.grading.trusted.worker IN_FD OUT_FD``, its limits already set
(:mod:`~m2l_nlp.grading.trusted.limits`): it reads requests (plain data, see
:mod:`m2l_nlp.grading.checks.wire`) from ``IN_FD`` and writes one reply per request to ``OUT_FD``.
A request loads the student's file, returns a function's source, calls a function, or runs
a named build (:class:`~m2l_nlp.grading.checks.tools.BuildSpec`) through haiku. The reply is the
output as plain data, or the exception's type, message and frames. Nothing here compares or
judges: the grader does that with values this process never sees.
"""

from __future__ import annotations

import importlib.util
import inspect
import os
import sys
import traceback
import types
from typing import Any

from m2l_nlp.grading.checks import wire

PACKAGE = "m2l_submission"  # the graded file's package: its folder, practicals side by side


def describe(err: BaseException) -> dict[str, Any]:
    """An exception as plain data."""
    try:
        message = str(err)
    except Exception:  # noqa: BLE001 - a __str__ that raises
        message = "(the message could not be shown)"
    frames = [
        [f.filename, f.lineno or 0, f.name, f.line or ""]
        for f in traceback.extract_tb(err.__traceback__)
    ]
    builtins = [c.__name__ for c in type(err).__mro__ if c.__module__ == "builtins"]
    return {
        "type": type(err).__name__,
        "builtins": builtins,  # e.g. ValueError for a check that expects one
        "message": message[:4000],
        "frames": frames[-20:],
    }


class Server:
    """Holds the student's module and answers the grader's requests."""

    def __init__(self) -> None:
        self.module: Any = None
        self.path = ""

    def load(self, path: str, name: str) -> None:
        from m2l_nlp.grading.checks.runner import import_error_message

        # Started isolated (no current folder on the path): a practical that imports another
        # (practical 3 imports practical 2) finds it beside itself, once the limits are set,
        # by name (a notebook's `from practical2_transformers import`) or as a module of the
        # same package (the handout file's `from .practical2_transformers import`).
        folder = os.path.dirname(os.path.abspath(path))
        if folder not in sys.path:
            sys.path.insert(0, folder)
        package = types.ModuleType(PACKAGE)
        package.__path__ = [folder]
        sys.modules[PACKAGE] = package
        spec = importlib.util.spec_from_file_location(f"{PACKAGE}.{name}", path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module
        try:
            spec.loader.exec_module(module)
        except BaseException as err:  # noqa: BLE001 - reported in words
            raise ImportFailed(import_error_message(err, path)) from None
        self.module, self.path = module, path

    def namespace(self) -> Any:
        from m2l_nlp.grading.checks.runner import StudentNamespace

        return StudentNamespace(vars(self.module), self.path)

    def handle(self, request: dict[str, Any]) -> Any:
        op = request["op"]
        if op == "load":
            return self.load(request["path"], request["name"])
        if op == "source":
            try:
                return inspect.getsource(getattr(self.module, request["name"]))
            except Exception:  # noqa: BLE001 - no source: the grader runs the checks
                return None
        if op == "call":
            func = getattr(self.namespace(), request["name"])
            if request.get("jit") is not None:  # the static argument numbers
                import jax

                func = jax.jit(func, static_argnums=tuple(int(i) for i in request["jit"]))
            return func(*request["args"], **request["kwargs"])
        if op == "haiku":
            from m2l_nlp.grading.checks.tools import BuildSpec, run_haiku

            build = request["build"]
            spec = BuildSpec(build["module"], build["name"], tuple(build["args"]))
            return run_haiku(
                spec,
                self.namespace(),
                request["params"],
                *request["args"],
                key=request["key"],
                jit=bool(request.get("jit")),
            )
        raise ValueError(f"unknown request {op!r}")


class ImportFailed(Exception):
    """The student's file could not be imported; the message says why, in words."""


def main(argv: list[str]) -> int:
    fd_in, fd_out = int(argv[0]), int(argv[1])
    import jax

    from m2l_nlp.devices import on_checking_device

    jax.config.update("jax_default_matmul_precision", "highest")  # as the grader's checks
    server = Server()
    with on_checking_device():  # as the grader's checks: on the CPU wherever there is one
        while True:
            try:
                request = wire.receive(fd_in)
            except EOFError:
                return 0
            try:
                reply = wire.encode({"ok": server.handle(request)})
            except BaseException as err:  # noqa: BLE001 - everything goes back as data
                reply = wire.encode({"error": describe(err)})
            if len(reply) > wire.MAX_BYTES:
                error = {"type": "OutputTooLarge", "message": "", "frames": []}
                reply = wire.encode({"error": error})
            wire.send_bytes(fd_out, reply)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
