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


def run(fn: Callable, items: Sequence, scheduler: str = "serial",
        progress: Progress | None = None, workers: int | None = None) -> list:
    """``[fn(item) for item in items]``, on ``scheduler``."""
    if scheduler == "serial":
        out = []
        for item in items:
            out.append(fn(item))
            if progress:
                progress.step()
        return out
    try:
        from distributed import Client, LocalCluster, as_completed
    except ImportError:  # pragma: no cover - a dependency of the project
        raise ConfigError("Dask sweeps need the distributed package: pip install "
                          "'dask[distributed]'") from None
    cluster = None
    try:
        if scheduler == "local":
            n = workers or min(os.cpu_count() or 1, len(items) or 1)
            cluster = LocalCluster(n_workers=n, threads_per_worker=1, processes=True,
                                   dashboard_address=":0")
            client = Client(cluster)
        else:
            try:
                client = Client(scheduler, timeout="10s")
            except (OSError, TimeoutError, ValueError) as e:
                raise ConfigError(f"--scheduler {scheduler}: cannot connect ({e})") from None
        with client:
            futures = client.map(fn, list(items), pure=False)
            index = {f.key: i for i, f in enumerate(futures)}
            out = [None] * len(futures)
            for f in as_completed(futures):
                out[index[f.key]] = f.result()
                if progress:
                    progress.step()
            return out
    finally:
        if cluster is not None:
            cluster.close()
