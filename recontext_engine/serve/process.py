"""``recontext serve`` as a child process on a free loopback port, for tests, recipes and load runs.

Standard library only (no FastAPI needed in the parent). The process is always stopped on exit
from the ``with`` block, killed if it does not stop within a few seconds.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

from ..errors import ReContextError


def free_port(host: str = "127.0.0.1") -> int:
    """A port nothing listens on right now (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def end_process_group(group: int, grace: float = 5.0) -> None:
    """Stop what is left of process group ``group`` (a server's vLLM engine core and workers, which
    outlive a server killed before it could stop them): SIGTERM, then SIGKILL after ``grace`` s."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(group, sig)
        except (ProcessLookupError, PermissionError):
            return
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline:
            try:
                os.killpg(group, 0)  # raises once no process of the group is left
            except ProcessLookupError:
                return
            time.sleep(0.1)


def stop_process(process: subprocess.Popen[bytes], sig: int = signal.SIGTERM, timeout: float = 10.0) -> None:
    """Ask a server to stop with ``sig``, kill it after ``timeout`` s, then end what is left of its
    process group (it must have been started with ``start_new_session=True``)."""
    if process.poll() is None:
        process.send_signal(sig)
        try:
            process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
    end_process_group(process.pid)


class ServerProcess:
    """``python -m recontext_engine.cli serve ARGS --port <free>``; ``base_url`` ends in ``/v1``.

    ``with ServerProcess(["--rounds", "2"]) as server: ...`` waits until ``/health`` answers (the
    model is loaded) or raises :class:`ReContextError` with the end of the server's log.
    """

    def __init__(
        self,
        args: Sequence[str] = (),
        *,
        host: str = "127.0.0.1",
        startup_timeout: float = 600.0,
        cwd: str | Path | None = None,
        env: dict[str, str] | None = None,
    ) -> None:
        self.args = list(args)
        self.host = host
        self.port = free_port(host)
        self.startup_timeout = startup_timeout
        self.cwd = cwd
        self.env = {**os.environ, "HF_HUB_OFFLINE": "1", **(env or {})}
        self.process: subprocess.Popen[bytes] | None = None
        # Kept after the process ends: it is what explains a failed start.
        self._log = tempfile.NamedTemporaryFile(  # noqa: SIM115
            prefix="recontext-serve-", suffix=".log", delete=False
        )

    @property
    def root_url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def base_url(self) -> str:
        return f"{self.root_url}/v1"

    @property
    def log_path(self) -> Path:
        return Path(self._log.name)

    def log_tail(self, chars: int = 4000) -> str:
        return self.log_path.read_text(encoding="utf-8", errors="replace")[-chars:]

    def health(self, timeout: float = 5.0) -> dict[str, Any]:
        """``GET /health``: status, model and request counts."""
        with urllib.request.urlopen(f"{self.root_url}/health", timeout=timeout) as response:
            return json.loads(response.read())

    def start(self) -> ServerProcess:
        command = [sys.executable, "-m", "recontext_engine.cli", "serve", "--host", self.host]
        command += ["--port", str(self.port), *self.args]
        # its own process group, so that stop() reaches the engine's processes too (vLLM's)
        self.process = subprocess.Popen(
            command,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            cwd=self.cwd,
            env=self.env,
            start_new_session=True,
        )
        deadline = time.monotonic() + self.startup_timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                self.stop()
                raise ReContextError(
                    f"recontext serve exited with {self.process.returncode}:\n{self.log_tail()}"
                )
            try:
                self.health(timeout=2.0)
                return self
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                time.sleep(0.5)
        self.stop()
        raise ReContextError(
            f"recontext serve was not ready after {self.startup_timeout:.0f} s:\n{self.log_tail()}"
        )

    def stop(self) -> None:
        if self.process is not None:
            stop_process(self.process)
        self._log.close()

    def __enter__(self) -> ServerProcess:
        try:
            return self.start()
        except BaseException:
            self.stop()
            raise

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        self.stop()
