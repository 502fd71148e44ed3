"""Answer verification with math-verify, under a per-answer time limit, from any thread.

math-verify (https://github.com/huggingface/Math-Verify) parses both answers into SymPy and compares them
(string, numeric and symbolic equality, sets, intervals, matrices...); numbers are compared exactly by
:mod:`sagerl.grading.numbers` instead, since math-verify rounds them. Its own time limits use
``signal.alarm``: whole seconds, main thread only, and they cancel any alarm the caller had armed (such as
pytest-timeout's). sagerl therefore turns them off and keeps one deadline per answer itself:

- In the main thread, a ``SIGALRM`` interval timer (``signal.setitimer``, fractional seconds) interrupts
  parsing and comparison once ``timeout`` seconds have passed, and keeps firing every 50 ms until the
  comparison has unwound, so code that catches the first interruption cannot run on. The caller's own
  ``SIGALRM`` handler and timer are restored afterwards, with the time spent here deducted. A signal only
  interrupts Python code: a single C call that runs long (a huge integer power inside CPython) finishes
  before the interruption lands.
- In any other thread (signals cannot be used there), the comparison runs in a helper process
  (``python -c "from sagerl.grading.verify import serve_worker; serve_worker()"``), started on first use
  and kept for later calls. It applies the same deadline in its own main thread; if it has not answered
  ``timeout + 0.5`` seconds after the request, it is killed (so C calls cannot hang the caller either) and
  a new one starts on the next call. Calls from threads share that one process and so run one at a time.
  Starting it (importing math-verify and SymPy, 1-3 s) is not counted in the per-answer limit. POSIX only.

A comparison that runs out of time counts as incorrect.
"""

from __future__ import annotations

import atexit
import functools
import json
import logging
import os
import select
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from sagerl.grading.answers import extract_answer
from sagerl.grading.knights import kk_extract, kk_is_correct
from sagerl.grading.numbers import canonical_form, normalize_thousands, numbers_equal

__all__ = ["answer_key", "answers_match", "grade", "is_correct", "serve_worker"]

_T = TypeVar("_T")
_RETRIGGER_S = 0.05
_WORKER_GRACE_S = 0.5
_WORKER_START_TIMEOUT_S = 120.0


class _Deadline(BaseException):
    """Raised by the SIGALRM handler. A BaseException, so ``except Exception`` in libraries lets it pass."""


class _DropTimeoutDisabledWarning(logging.Filter):
    """math-verify warns once that its own timeouts are off; here that is intended."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith("Timeout is disabled")


_quiet = _DropTimeoutDisabledWarning()
for _name in ("math_verify.parser", "math_verify.grader"):
    logging.getLogger(_name).addFilter(_quiet)


def _wrap(answer: str) -> str:
    return "\\boxed{" + answer + "}"


def _math_equal(pred: str, gold: str) -> bool:
    """Equality of two bare answers: parsed by math-verify; numbers decided by
    :func:`sagerl.grading.numbers.numbers_equal` (exact, or a relative tolerance for decimals), everything
    else by math-verify's ``verify``. math-verify's own timeouts are off (the caller bounds the time)."""
    from math_verify import parse, verify
    from sympy import Basic

    gold_parsed = parse(_wrap(gold), parsing_timeout=None)  # type: ignore[arg-type]
    pred_parsed = parse(_wrap(pred), parsing_timeout=None)  # type: ignore[arg-type]
    if not gold_parsed or not pred_parsed:
        return False
    if isinstance(gold_parsed[0], Basic) and isinstance(pred_parsed[0], Basic):
        verdict = numbers_equal(gold_parsed[0], pred_parsed[0])
        if verdict is not None:
            return verdict
    return bool(verify(gold_parsed, pred_parsed, timeout_seconds=None))


def _parsed_key(answer: str) -> str | None:
    """:func:`sagerl.grading.numbers.canonical_form` of a bare answer parsed by math-verify; None when it does
    not parse into SymPy. math-verify's own timeouts are off (the caller bounds the time)."""
    from math_verify import parse
    from sympy import Basic

    parsed = parse(_wrap(answer), parsing_timeout=None)  # type: ignore[arg-type]
    if not parsed or not isinstance(parsed[0], Basic):
        return None
    return canonical_form(parsed[0])


def _can_use_signals() -> bool:
    """Main thread, POSIX timers, and a SIGALRM handler we can restore (None: one not set from Python)."""
    if threading.current_thread() is not threading.main_thread() or not hasattr(signal, "setitimer"):
        return False
    return signal.getsignal(signal.SIGALRM) is not None


def _call_with_deadline(fn: Callable[[], _T], seconds: float) -> tuple[bool, _T | None]:
    """Run ``fn()`` in the main thread, interrupted after ``seconds``: (finished in time, its result).

    The caller's SIGALRM handler and interval timer are restored; a timer of the caller's that was due
    earlier than ours shortens our deadline, and fires right after we return.
    """
    state = {"armed": False}

    def on_alarm(signum: int, frame: object) -> None:
        if state["armed"]:
            raise _Deadline
        # not armed: the caller's own timer fired while we were swapping handlers; it is re-armed below

    old_delay, old_interval = signal.getitimer(signal.ITIMER_REAL)
    started = time.monotonic()
    old_handler = signal.getsignal(signal.SIGALRM)
    signal.signal(signal.SIGALRM, on_alarm)
    finished, result = False, None
    try:
        try:
            delay = seconds if old_delay <= 0 else min(seconds, old_delay - (time.monotonic() - started))
            state["armed"] = True
            signal.setitimer(signal.ITIMER_REAL, max(delay, 1e-6), _RETRIGGER_S)
            result = fn()
            finished = True
        finally:
            _disarm(state)
    except _Deadline:
        _disarm(state)
    finally:
        signal.signal(signal.SIGALRM, old_handler)
        if old_delay > 0:
            remaining = old_delay - (time.monotonic() - started)
            signal.setitimer(signal.ITIMER_REAL, max(remaining, 1e-6), old_interval)
    return finished, result


def _disarm(state: dict[str, bool]) -> None:
    """Stop our timer. An alarm already on its way may still interrupt once: catch it and retry."""
    while True:
        try:
            state["armed"] = False
            signal.setitimer(signal.ITIMER_REAL, 0)
            return
        except _Deadline:
            continue


def _compare_in_this_thread(pred: str, gold: str, timeout: float) -> bool:
    finished, result = _call_with_deadline(lambda: _math_equal(pred, gold), timeout)
    return bool(finished and result)


def _key_in_this_thread(answer: str, timeout: float) -> str | None:
    finished, result = _call_with_deadline(lambda: _parsed_key(answer), timeout)
    return result if finished else None


class _VerifyWorker:
    """One helper process that compares answers for callers outside the main thread (see module doc)."""

    def __init__(self, command: list[str] | None = None) -> None:
        package_root = str(Path(__file__).resolve().parents[2])
        self._command = command or [
            sys.executable,
            "-c",
            "from sagerl.grading.verify import serve_worker; serve_worker()",
        ]
        self._env = dict(os.environ)
        self._env["PYTHONPATH"] = os.pathsep.join(
            p for p in (package_root, os.environ.get("PYTHONPATH")) if p
        )
        self._lock = threading.Lock()
        self._proc: subprocess.Popen[bytes] | None = None
        self._owner_pid = 0
        self._buffer = b""

    def compare(self, pred: str, gold: str, timeout: float) -> bool:
        """True when ``pred`` equals ``gold``; False when not, or when no answer came within the limit."""
        reply = self._ask({"pred": pred, "gold": gold, "timeout": timeout}, timeout)
        return bool(reply is not None and reply.get("equal"))

    def key(self, answer: str, timeout: float) -> str | None:
        """:func:`_parsed_key` of ``answer``; None when it does not parse or no answer came within the limit."""
        reply = self._ask({"key": answer, "timeout": timeout}, timeout)
        value = None if reply is None else reply.get("key")
        return value if isinstance(value, str) else None

    def _ask(self, request: dict, timeout: float) -> dict | None:
        """Send one request, return its JSON reply; None (and the helper stopped) when none came in time."""
        with self._lock:
            proc = self._ensure_started()
            try:
                assert proc.stdin is not None
                proc.stdin.write((json.dumps(request) + "\n").encode())
                proc.stdin.flush()
            except OSError:
                self._stop()
                return None
            line = self._read_line(timeout + _WORKER_GRACE_S)
            if line is None:
                self._stop()
                return None
            try:
                reply = json.loads(line)
            except ValueError:
                reply = None
            if not isinstance(reply, dict):
                self._stop()
                return None
            return reply

    def close(self) -> None:
        """Stop the helper process, if any (a later call starts a new one)."""
        with self._lock:
            self._stop()

    def _ensure_started(self) -> subprocess.Popen[bytes]:
        if self._proc is not None and self._owner_pid == os.getpid() and self._proc.poll() is None:
            return self._proc
        if self._owner_pid != os.getpid():
            self._proc = None  # inherited through fork: that process belongs to the parent
        else:
            self._stop()
        try:
            self._proc = subprocess.Popen(
                self._command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=self._env, bufsize=0
            )
        except OSError as exc:
            raise RuntimeError(f"cannot start the answer-verification helper process: {exc}") from exc
        self._owner_pid = os.getpid()
        self._buffer = b""
        ready = self._read_line(_WORKER_START_TIMEOUT_S)
        try:
            started = ready is not None and json.loads(ready) == {"ready": True}
        except ValueError:
            started = False
        if not started:
            self._stop()
            raise RuntimeError(
                f"the answer-verification helper process ({' '.join(self._command)}) did not report ready "
                f"within {_WORKER_START_TIMEOUT_S:.0f} s"
            )
        assert self._proc is not None
        return self._proc

    def _read_line(self, seconds: float) -> bytes | None:
        assert self._proc is not None and self._proc.stdout is not None
        fd = self._proc.stdout.fileno()
        deadline = time.monotonic() + seconds
        while b"\n" not in self._buffer:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return None
            readable, _, _ = select.select([fd], [], [], remaining)
            if not readable:
                return None
            chunk = os.read(fd, 65536)
            if not chunk:  # the process died
                return None
            self._buffer += chunk
        line, self._buffer = self._buffer.split(b"\n", 1)
        return line

    def _stop(self) -> None:
        proc, self._proc = self._proc, None
        self._buffer = b""
        if proc is None or self._owner_pid != os.getpid():
            return
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        for stream in (proc.stdin, proc.stdout):
            if stream is not None:
                stream.close()


_WORKER = _VerifyWorker()
atexit.register(_WORKER.close)


def serve_worker() -> None:
    """Main loop of the helper process: one JSON request per stdin line, one JSON answer per stdout line.

    Not for direct use. Exits at the end of stdin (the parent closed it, or died). SIGINT is ignored, so
    Ctrl-C in a terminal stops the parent, not the helper that is half-way through an answer.
    """
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    out = os.fdopen(os.dup(sys.stdout.fileno()), "w", buffering=1)
    sys.stdout = sys.stderr  # library prints must not corrupt the protocol
    import math_verify  # noqa: F401  (import before answering "ready", so the first request is not slower)

    out.write(json.dumps({"ready": True}) + "\n")
    for line in sys.stdin:
        try:
            request = json.loads(line)
            if "key" in request:
                reply = {"key": _key_in_this_thread(str(request["key"]), float(request["timeout"]))}
            else:
                reply = {
                    "equal": _compare_in_this_thread(
                        str(request["pred"]), str(request["gold"]), float(request["timeout"])
                    )
                }
        except Exception:
            reply = {"key": None} if isinstance(request, dict) and "key" in request else {"equal": False}
        out.write(json.dumps(reply) + "\n")


def answers_match(pred: str, gold: str, *, timeout: float = 5.0) -> bool:
    """True when the extracted answer ``pred`` is mathematically equal to the reference ``gold``.

    Both are bare answers, as they would stand inside ``\\boxed{}``. LaTeX thousands separators are dropped
    (``1{,}000`` -> ``1000``); identical strings then match without parsing. Otherwise each is wrapped in
    ``\\boxed{}`` and parsed with ``math_verify.parse``; numbers, and tuples or sets of numbers, are
    compared by :func:`sagerl.grading.numbers.numbers_equal` (exact values exactly, decimals within a
    relative 1e-6), everything else by ``math_verify.verify(gold, pred)``.

    Args:
        timeout: seconds allowed for the comparison; once spent, the answer counts as incorrect (see the
            module docstring for how this holds in the main thread and in other threads).

    Raises:
        ValueError: ``timeout`` is not positive.
        RuntimeError: outside the main thread only, when the helper process cannot be started.
    """
    if not timeout > 0:
        raise ValueError(f"timeout must be positive seconds, got {timeout!r}")
    pred, gold = normalize_thousands(pred.strip()), normalize_thousands(gold.strip())
    if pred == gold:
        return bool(pred)
    if _can_use_signals():
        return _compare_in_this_thread(pred, gold, timeout)
    return _WORKER.compare(pred, gold, timeout)


@functools.lru_cache(maxsize=65536)
def answer_key(answer: str, *, timeout: float = 5.0) -> str | None:
    """The identity of a bare final answer: two answers the grader holds equal share it (with the one exception
    of :func:`sagerl.grading.numbers.canonical_form`: a decimal is its exact value). For counting and clustering
    answers (outcome-based exploration's N(x, a), DARLING's answer partition), where ``1/2`` and ``0.5`` must be
    one answer.

    Thousands separators are dropped and the answer is parsed by math-verify under the same per-answer time limit
    as :func:`answers_match`; the key is the :func:`~sagerl.grading.numbers.canonical_form` of what it parses
    (``1/2`` for ``0.5``, ``\\frac{1}{2}`` and ``x = 0.5``). An answer that does not parse, or not in time, keeps its
    own text with white space removed. Results are cached (the same answers recur across rollouts).

    Returns:
        The key; None for an empty answer.

    Raises:
        ValueError: ``timeout`` is not positive.
        RuntimeError: outside the main thread only, when the helper process cannot be started.
    """
    if not timeout > 0:
        raise ValueError(f"timeout must be positive seconds, got {timeout!r}")
    text = normalize_thousands(answer.strip())
    if not text:
        return None
    key = _key_in_this_thread(text, timeout) if _can_use_signals() else _WORKER.key(text, timeout)
    return key if key is not None else "".join(text.split())


def is_correct(
    completion: str, answer: str, *, fallback_to_last_number: bool = False, timeout: float = 5.0
) -> bool:
    """True when the final answer of ``completion`` equals ``answer`` (:func:`answers_match`, bounded by
    ``timeout`` s).

    The final answer is :func:`sagerl.grading.extract_answer` of the completion: its final box (the last box
    it opens; none if that box never closes; boxes joined only by separators form one answer), else (only
    when ``fallback_to_last_number`` and there is no box) its last number. No answer: False. Model text
    never makes this raise; a pathological answer returns False after about ``timeout`` seconds.

    Raises:
        ValueError: ``timeout`` is not positive.
    """
    pred = extract_answer(completion, fallback_to_last_number=fallback_to_last_number)
    if pred is None:
        return False
    return answers_match(pred, answer, timeout=timeout)


def grade(
    completion: str, answer: str, kind: str = "math", *, fallback_to_last_number: bool = False
) -> tuple[str | None, bool]:
    """Grade one completion: (the answer read from it, or None; whether it is correct).

    ``kind="math"``: :func:`is_correct` with its default 5 s limit; the answer read is
    :func:`~sagerl.grading.extract_answer`. ``kind="kk"``: :func:`~sagerl.grading.kk_is_correct`; the answer
    read is the roles the final answer states, written as "Name is a knight, Name is a knave".
    ``kind="exact"``: the answer read is :func:`~sagerl.grading.extract_answer`, correct only when it equals
    ``answer`` character for character (after stripping white space): for synthetic tasks whose answers
    have one spelling, such as the planted-strategy task; no math-verify, so it costs microseconds.

    Raises:
        ValueError: ``kind`` is not "math", "kk" or "exact".
    """
    if kind == "exact":
        pred = extract_answer(completion, fallback_to_last_number=fallback_to_last_number)
        return pred, pred is not None and pred == answer.strip()
    if kind == "math":
        pred = extract_answer(completion, fallback_to_last_number=fallback_to_last_number)
        return pred, pred is not None and answers_match(pred, answer)
    if kind == "kk":
        return kk_extract(completion, answer), kk_is_correct(completion, answer)
    raise ValueError(f"unknown grading kind {kind!r}: expected 'math', 'kk' or 'exact'")
