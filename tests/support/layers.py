"""The layers of `kvoffload_exporter`, bottom to top, one package (or the root's few modules) each: the layering test keeps imports inside them, the module-map
test holds docs/design.md's layer column against them."""

from __future__ import annotations

LAYERS: tuple[tuple[str, ...], ...] = (
    # foundation: closed sets and small helpers with no project state (the package root)
    (
        "kvoffload_exporter",
        "kvoffload_exporter.enums",
        "kvoffload_exporter.redact",
        "kvoffload_exporter.saferead",
        "kvoffload_exporter.saferegex",
        "kvoffload_exporter.safewrite",
        "kvoffload_exporter.revision",
    ),
    ("kvoffload_exporter.config",),  # settings: declarations, values, files, limits
    ("kvoffload_exporter.ingest",),  # a target's body -> one immutable snapshot (backends/ inside)
    ("kvoffload_exporter.catalogue",),  # the one metric catalogue
    ("kvoffload_exporter.derive",),  # pure: snapshots -> windowed evidence, reasons, findings
    ("kvoffload_exporter.expose",),  # pure: evidence -> exposition text, merged and compressed
    # the running exporter (I/O) and the monitoring bundle
    ("kvoffload_exporter.sources", "kvoffload_exporter.server", "kvoffload_exporter.bundle"),
    ("kvoffload_exporter.canary",),  # the plugin: registers what it needs through kvoffload_exporter.server.plugins
    ("kvoffload_exporter.sim",),  # the simulator (its client reuses the canary's SSE parser)
    # entry points, and the README's generated blocks (counts over the whole product, simulator included)
    (
        "kvoffload_exporter.commands",
        "kvoffload_exporter.configdoc",
        "kvoffload_exporter.variables",
        "kvoffload_exporter.bundle.texts.readme",
        "kvoffload_exporter.cli",
        "kvoffload_exporter.__main__",
    ),
)
"""Bottom to top; a module may import its own layer and those below. A module belongs to the longest
prefix listed (`kvoffload_exporter.canary.config` to `kvoffload_exporter.canary`)."""

LAYER_NAMES = (
    "foundation",
    "config",
    "ingest",
    "catalogue",
    "derive",
    "expose",
    "service",
    "plugin",
    "simulator",
    "entry",
)
"""The layers' names in the module map (docs/design.md), in the order of LAYERS."""


def layer_of(module: str) -> int:
    """Index in LAYERS of the longest prefix that `module` falls under."""
    best = max((p for layer in LAYERS for p in layer if module == p or module.startswith(p + ".")), key=len)
    return next(i for i, layer in enumerate(LAYERS) if best in layer)
