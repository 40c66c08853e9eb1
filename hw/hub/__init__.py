"""The PIM module's HUB, one block per file (docs/architecture.md):
``module`` (the PIM module: the blocks and their connections), ``host``
(host interface and response register), ``ibuf``
(instruction buffer), ``cbuf`` (configuration buffer and VA2PA),
``decoder`` (Dyn-Loop / Dyn-Modi walk, commit check, fault drain),
``sequencer`` (Op-size, translation, range checks), ``multicast``
(multicast register and read-beat return), ``gpr`` (global register file),
``ports`` (the layouts and port signatures between them)."""

from hw.hub.module import PimModule
from hw.hub.ports import HostLayout, ResponseLayout

__all__ = ["HostLayout", "PimModule", "ResponseLayout"]
