"""System-level models and studies on top of the hardware specification.

The specification (``golden/``: isa, numerics, mx, config, channel, dcs,
hub, alu, kernels) never imports from here. ``model``: the full-system
decode model; ``kernel_timing``: cycle-exact or fast kernel timings;
``pimphony``, ``librapim``, ``sherpa``/``sherpa_study``, ``jitq_study``,
``hetero``: the studies; ``scenario``, ``sweep``: their configuration and
execution; ``reference``: workload inputs from the papers; ``studies``:
the golden-only studies behind ``pimorch run``."""
