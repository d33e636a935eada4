"""The children's result file and their stall watchdog, shared by ``real_runtime_child.py`` and
``real_runtime_bench_child.py`` (standard library only: a child imports it from this folder, placed last on its
``sys.path``, and no other module of this project).

A child writes its result to the spec's ``out`` after every step (:meth:`Progress.save`): the parent reads it, also
after a stop, and takes a changed file as progress (``real_runtime.wait_while_progressing``). The watchdog fires on
a stall, ``bound`` seconds after the last save, never on the run's total time: a loaded machine slows a run down, it
does not stop it. Until :meth:`Progress.arm` (once torch_npu is imported and the launchers loaded) the bound is the
child's import bound, a bound on a hang only.
"""
from __future__ import annotations

import json
import os
import sys
import threading
import time
import traceback
from typing import Callable


class Progress:
    """``result`` saved to ``out``; each save is progress for the watchdog (:meth:`watch`), which until :meth:`arm`
    allows ``import_bound`` seconds without (torch and torch_npu imported, the launchers loaded)."""

    def __init__(self, out: str, result: dict, import_bound: float):
        self.out, self.result = out, result
        self.lock = threading.Lock()
        self._at, self._bound = time.monotonic(), float(import_bound)

    def save(self) -> None:
        """The result written (atomically: the parent may read it at any time); progress for the watchdog."""
        with self.lock:
            tmp = self.out + ".tmp"
            with open(tmp, "w") as f:
                json.dump(self.result, f)
            os.replace(tmp, self.out)
            self._at = time.monotonic()

    def run(self, main: Callable[[], None]) -> None:
        """Runs the child's ``main``: an exception that ends it is said in the result (its type, message and
        traceback), which is saved, and the process exits 1; the parent judges."""
        try:
            main()
        except BaseException as exc:
            self.result["error"] = f"{type(exc).__name__}: {exc}"
            self.result["traceback"] = traceback.format_exc()[-4000:]
            self.save()
            sys.exit(1)

    def arm(self, seconds: float) -> None:
        """From now on the watchdog fires once the child has gone ``seconds`` without progress (:meth:`save`)."""
        with self.lock:
            self._at, self._bound = time.monotonic(), float(seconds)

    def watch(self, report: Callable[[], dict] | None = None) -> None:
        """Starts the watchdog: on a stall, ``timed_out``, every thread's stack and ``report()``'s fields (what the
        child saw so far) go into the result, it is saved, and the process exits 3."""
        def fire():
            self.result["timed_out"] = True
            try:
                lines = [f"thread {tid}:\n" + "".join(traceback.format_stack(frame)[-6:])
                         for tid, frame in sys._current_frames().items()]
                self.result["stacks"] = "".join(lines)[-6000:]
            except Exception as exc:  # the report matters more than the stacks
                self.result["stacks"] = repr(exc)
            if report is not None:
                try:
                    self.result.update(report())
                except Exception as exc:
                    self.result["report_error"] = repr(exc)
            self.save()
            os._exit(3)

        def loop():
            while True:
                time.sleep(0.2)
                with self.lock:
                    stalled = time.monotonic() - self._at > self._bound
                if stalled:
                    fire()

        threading.Thread(target=loop, name="watchdog", daemon=True).start()
