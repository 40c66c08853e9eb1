"""Sweeps over independent points, serially or on Dask.

``scheduler``: ``"serial"`` runs in this process; ``"local"`` (the default
of the CLI) starts a local Dask cluster of one single-threaded worker
process per core; anything else is the address of a running Dask scheduler
(``tcp://host:8786``). The results come back in the order of ``items``
whatever order the workers finish in, so a sweep equals its serial run.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Sequence

from golden.config import ConfigError


class Progress:
    """A one-line progress bar on stderr (only when asked or a terminal)."""

    def __init__(self, total: int, label: str, enabled: bool | None = None):
        self.total, self.label, self.done = total, label, 0
        self.enabled = sys.stderr.isatty() if enabled is None else enabled

    def step(self, n: int = 1) -> None:
        self.done += n
        if self.enabled:
            width = 30
            filled = width * self.done // max(self.total, 1)
            sys.stderr.write(f"\r{self.label} [{'#' * filled}{'.' * (width - filled)}] "
                             f"{self.done}/{self.total}")
            if self.done >= self.total:
                sys.stderr.write("\n")
            sys.stderr.flush()


class Sweep:
    """A sweep session: ``map(fn, items)`` is ``[fn(item) for item in
    items]`` on ``scheduler``. The Dask client starts at the first map and
    stops when the session closes (use it as a context manager)."""

    def __init__(self, scheduler: str = "serial", workers: int | None = None):
        self.scheduler, self.workers = scheduler, workers
        self.client = self.cluster = None

    def __enter__(self) -> Sweep:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        if self.client is not None:
            self.client.close()
        if self.cluster is not None:
            self.cluster.close()
        self.client = self.cluster = None

    def _connect(self):
        try:
            from distributed import Client, LocalCluster
        except ImportError:  # pragma: no cover - a dependency of the project
            raise ConfigError("Dask sweeps need the distributed package: pip install "
                              "'dask[distributed]'") from None
        if self.scheduler == "local":
            n = self.workers or os.cpu_count() or 1
            self.cluster = LocalCluster(n_workers=n, threads_per_worker=1, processes=True,
                                        dashboard_address=":0")
            self.client = Client(self.cluster)
        else:
            try:
                self.client = Client(self.scheduler, timeout="10s")
            except (OSError, TimeoutError, ValueError) as e:
                raise ConfigError(f"--scheduler {self.scheduler}: cannot connect ({e})") from None

    def map(self, fn: Callable, items: Sequence, progress: Progress | None = None) -> list:
        if self.scheduler == "serial" or not items:
            out = []
            for item in items:
                out.append(fn(item))
                if progress:
                    progress.step()
            return out
        from distributed import as_completed

        if self.client is None:
            self._connect()
        futures = self.client.map(fn, list(items), pure=False)
        index = {f.key: i for i, f in enumerate(futures)}
        out = [None] * len(futures)
        for f in as_completed(futures):
            out[index[f.key]] = f.result()
            if progress:
                progress.step()
        return out


def significant(v):
    """Six significant digits, through dicts and lists (a study's rows:
    breakdowns, decisions); anything but a float as it is."""
    if isinstance(v, float):
        return float(f"{v:.6g}")
    if isinstance(v, dict):
        return {k: significant(x) for k, x in v.items()}
    if isinstance(v, list):
        return [significant(x) for x in v]
    return v
