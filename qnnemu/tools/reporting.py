"""How every qnnemu command-line tool runs and reports, following the conventions of the QNN SDK
tools: success prints one summary line on stdout (``<tool>: wrote out/model.bin (25256 bytes,
1 graph)``); a failure prints one ``<tool>: error: ...`` line on stderr (a graph description's
errors name the JSON path, a QNN call's name the function, the code and the library's reason)
and exits with status 1; a bad command line exits with 2 (argparse's usage message), an
interrupt with 130. What the QNN libraries log comes in between as ``<tool>: backend <level>:
...`` (``system library``), each message once (:class:`_Reporter`).
"""
from __future__ import annotations

import logging
import sys
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from ..headers import Q

log = logging.getLogger("qnnemu.tools")

LOG_LEVELS = ("error", "warn", "info", "verbose", "debug")
_PY_LEVELS = {"error": logging.ERROR, "warn": logging.WARNING, "info": logging.INFO,
              "verbose": logging.DEBUG, "debug": logging.DEBUG}


class ToolError(Exception):
    """A user-facing failure: reported as ``<prog>: error: <message>``, exit status 1."""


# Exit statuses, the same for every tool (documented in README.md "Tools").
EXIT_OK, EXIT_FAILURE, EXIT_USAGE, EXIT_INTERRUPTED = 0, 1, 2, 130

_LEVEL_WORDS = {logging.ERROR: "error", logging.WARNING: "warning", logging.INFO: "info"}
# Loggers whose records are the tool's own; everything else under "qnnemu" is a library's: the
# backend's or System library's QnnLog callback (qnnemu.client / qnnemu.system_client) or, when
# qnnemu's libraries run in this very interpreter, their Python-side mirror of the same message.
_CALLBACK_LOGGERS = {"qnnemu.client": "backend", "qnnemu.system_client": "system library"}
_OUR_PREFIX = "qnnemu "  # what qnnemu's QnnLog messages start with (core/log.py)


def _normalized(text: str) -> str:
    text = text.strip()
    return text[len(_OUR_PREFIX):].lstrip() if text.startswith(_OUR_PREFIX) else text


@dataclass
class _Message:
    label: str          # "" for the tool's own messages, else "backend" / "system library"
    levelno: int
    text: str
    in_process: bool    # a Python-side mirror whose QnnLog copy may follow


class _Reporter(logging.Handler):
    """Writes the tools' and the QNN libraries' messages to stderr, one line each:
    ``<prog>: <level>: ...`` for the tool's, ``<prog>: backend <level>: ...`` (or ``system
    library``) for what a library logged.

    A failure is reported once. qnnemu's libraries log each message twice when they run in this
    interpreter (the ``qnnemu`` Python logger, then the QnnLog callback): the second copy is
    dropped. Library errors are held back until the next message or the end of the run: when
    the run fails, those the final error line already quotes (our backend's ``errorGetMessage``
    repeats its log message) are dropped, and the last one completes a final line that has no
    reason of its own (a System library call, which has no errorGetMessage)."""

    def __init__(self, prog: str, stream=None):
        super().__init__()
        self.prog = prog
        self.stream = stream if stream is not None else sys.stderr
        self.held: list[_Message] = []

    def emit(self, record: logging.LogRecord) -> None:
        try:
            text = record.getMessage()
            name = record.name
            if name == "qnnemu.tools" or name.startswith("qnnemu.tools."):
                if record.exc_info:
                    text += "\n" + "".join(traceback.format_exception(*record.exc_info)).rstrip()
                self.flush_held()
                self._write(_Message("", record.levelno, text, False))
                return
            label = _CALLBACK_LOGGERS.get(name)
            message = _Message(label or "backend", record.levelno, _normalized(text), label is None)
            last = self.held[-1] if self.held else None
            if (label is not None and last is not None and last.in_process
                    and last.text == message.text):
                self.held[-1] = message  # the QnnLog copy of the mirror just seen
            else:
                self.held.append(message)
            # Print everything up to the last message that need not wait.
            waiting = [m.levelno >= logging.ERROR or m.in_process for m in self.held]
            if not all(waiting):
                cut = len(waiting) - waiting[::-1].index(False)
                ready, self.held = self.held[:cut], self.held[cut:]
                for m in ready:
                    self._write(m)
        except Exception:  # noqa: BLE001 - logging must never break a tool
            self.handleError(record)

    def flush_held(self) -> None:
        held, self.held = self.held, []
        for m in held:
            self._write(m)

    def fail(self, text: str, complete: bool) -> None:
        """The final error line ``text``; ``complete`` False when it gives no reason."""
        held = [m for m in self.held if not (m.levelno >= logging.ERROR and m.text and m.text in text)]
        self.held = []
        if not complete:
            errors = [i for i, m in enumerate(held) if m.levelno >= logging.ERROR]
            if errors:
                text = f"{text}: {held.pop(errors[-1]).text}"
        for m in held:
            self._write(m)
        self._write(_Message("", logging.ERROR, text, False))

    def _write(self, m: _Message) -> None:
        level = _LEVEL_WORDS.get(m.levelno, "debug") if m.levelno < logging.ERROR else "error"
        where = f"{m.label} {level}" if m.label else level
        self.stream.write(f"{self.prog}: {where}: {m.text}\n")
        self.stream.flush()


def setup_logging(prog: str, level: str) -> _Reporter:
    """Messages of the qnnemu loggers (the tools', the clients' and, through the clients'
    QnnLog callbacks, the libraries') to stderr at ``level``; returns the handler to remove."""
    handler = _Reporter(prog)
    root = logging.getLogger("qnnemu")
    root.addHandler(handler)
    root.setLevel(_PY_LEVELS[level])
    handler.setLevel(_PY_LEVELS[level])
    return handler


def error_code_name(code: int) -> str:
    """The QNN name of an error code, when one is unambiguous enough to help (common codes)."""
    return Q.enum("QNN_COMMON_ERROR_").get(code, "")


def _failure_text(e: BaseException) -> tuple[str, bool]:
    """The final error line for ``e`` and whether it carries a reason: a QNN call's error
    (QnnCallError, SystemCallError) is ``<function> failed with error <code>[ (<name>)][:
    <reason>]``; the reason is the library's errorGetMessage, which a System library lacks."""
    text = str(e)
    function, code = getattr(e, "function", None), getattr(e, "code", None)
    prefix = f"{function} failed with error {code}"
    if function is None or not isinstance(code, int) or not text.startswith(prefix):
        return text, True
    rest = text[len(prefix):]
    if not rest and error_code_name(code):
        text = f"{text} ({error_code_name(code)})"
    return text, ": " in rest


def run_main(prog: str, body: Callable[[], int | None], level: str = "warn") -> int:
    """Runs ``body`` with logging set up. A failure is one ``<prog>: error: ...`` line on
    stderr and exit status 1: a user's (bad files, arguments, libraries; a QNN call refusing)
    or not (an internal error: its traceback at debug level). Interrupted: status 130."""
    handler = setup_logging(prog, level)
    try:
        status = int(body() or 0)
        handler.flush_held()
        return status
    except ToolError as e:
        handler.fail(str(e), True)
        return EXIT_FAILURE
    except KeyboardInterrupt:
        handler.fail("interrupted", True)
        return EXIT_INTERRUPTED
    # RuntimeError covers QnnCallError, SystemCallError and "no usable provider" (a library
    # that is not a QNN backend / System library); OSError a library that does not load.
    except (RuntimeError, OSError, ValueError) as e:
        handler.fail(*_failure_text(e))
        log.debug("traceback", exc_info=True)
        return EXIT_FAILURE
    except Exception as e:  # a bug: still one line, the traceback with --log_level debug
        handler.fail(f"internal error: {type(e).__name__}: {e} (--log_level debug shows the "
                     f"traceback; please report it)", True)
        log.debug("traceback", exc_info=True)
        return EXIT_FAILURE
    finally:
        logging.getLogger("qnnemu").removeHandler(handler)
        handler.close()


def plural(count: int, noun: str) -> str:
    """``1 graph``, ``2 graphs``."""
    return f"{count} {noun}{'' if count == 1 else 's'}"


def tool_main(prog: str, parser, argv: Sequence[str] | None, body: Callable[[Any], int | None]) -> int:
    """A tool's ``main(argv)``: the command line parsed (a bad one: status 2, see
    :func:`parse_args`), then ``body(args)`` run by :func:`run_main` at ``args.log_level``
    (warn for tools without ``--log_level``)."""
    args, status = parse_args(parser, argv)
    if args is None:
        return status
    return run_main(prog, lambda: body(args), getattr(args, "log_level", "warn"))


def parse_args(parser, argv: Sequence[str] | None):
    """argparse, but a bad command line returns (None, status 2) instead of raising
    SystemExit, so that ``main(argv)`` can be called in-process."""
    try:
        return parser.parse_args(argv), 0
    except SystemExit as e:  # argparse has printed the usage and the error
        return None, int(e.code or 0)
