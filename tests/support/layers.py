"""The layers of `exporter`, bottom to top: the layering test keeps imports inside them, the module-map
test holds docs/design.md's layer column against them."""

from __future__ import annotations

LAYERS: tuple[tuple[str, ...], ...] = (
    # foundation: closed sets, declarations, parsers with no project state
    (
        "kvoffload_exporter",
        "kvoffload_exporter.enums",
        "kvoffload_exporter.config.schema",
        "kvoffload_exporter.config.sections",
        "kvoffload_exporter.ingest.families",
        "kvoffload_exporter.ingest.interning",
        "kvoffload_exporter.ingest.lineplan",
        "kvoffload_exporter.expose.mergeplan",
        "kvoffload_exporter.expose.gzipparts",
        "kvoffload_exporter.ingest.exposition",
        "kvoffload_exporter.config.webconfig",
        "kvoffload_exporter.config.credentials",
        "kvoffload_exporter.redact",
        "kvoffload_exporter.config.limits",
        "kvoffload_exporter.server.logs",
        "kvoffload_exporter.ingest.backends",
        "kvoffload_exporter.saferegex",
        "kvoffload_exporter.config.yamlsafe",
        "kvoffload_exporter.safewrite",
        "kvoffload_exporter.config.values",
    ),
    (
        "kvoffload_exporter.config.settings",
        "kvoffload_exporter.ingest.snapshot",
        "kvoffload_exporter.catalogue",
    ),  # settings, snapshots, the metric catalogue
    # pure derivation and rendering: snapshot -> derived values -> findings -> exposition text
    (
        "kvoffload_exporter.derive.capacity",
        "kvoffload_exporter.ingest.samples",
        "kvoffload_exporter.ingest.signalmap",
        "kvoffload_exporter.ingest.histplan",
        "kvoffload_exporter.ingest.routes",
        "kvoffload_exporter.ingest.normalise",
        "kvoffload_exporter.derive.window",
        "kvoffload_exporter.derive.procmem",
        "kvoffload_exporter.expose.render",
        "kvoffload_exporter.derive.convoy",
        "kvoffload_exporter.derive.history",
        "kvoffload_exporter.expose.selfmon",
        "kvoffload_exporter.derive.reasons",
        "kvoffload_exporter.derive.payback",
        "kvoffload_exporter.derive.findings",
        "kvoffload_exporter.derive.intervalreport",
        "kvoffload_exporter.expose.collector",
    ),
    # the running exporter (I/O) and the monitoring bundle
    (
        "kvoffload_exporter.sources",
        "kvoffload_exporter.server.gctune",
        "kvoffload_exporter.server.guards",
        "kvoffload_exporter.server.listener",
        "kvoffload_exporter.server.webauth",
        "kvoffload_exporter.server.reloader",
        "kvoffload_exporter.server.targetpoller",
        "kvoffload_exporter.server.plugins",
        "kvoffload_exporter.server.exporter",
        "kvoffload_exporter.server.probe",
        "kvoffload_exporter.server.app",
        "kvoffload_exporter.bundle",
    ),
    ("kvoffload_exporter.canary",),  # the plugin: registers what it needs through kvoffload_exporter.server.plugins
    ("kvoffload_exporter.sim",),  # the simulator (its client reuses the canary's SSE parser)
    # entry points, and the README's generated blocks (counts over the whole product, simulator included)
    (
        "kvoffload_exporter.commands",
        "kvoffload_exporter.configdoc",
        "kvoffload_exporter.bundle.readme",
        "kvoffload_exporter.cli",
        "kvoffload_exporter.__main__",
    ),
)
"""Bottom to top; a module may import its own layer and those below. A module belongs to the longest
prefix listed (`kvoffload_exporter.canary.config` to `kvoffload_exporter.canary`)."""

LAYER_NAMES = ("foundation", "data", "derivation", "service", "plugin", "simulator", "entry")
"""The layers' names in the module map (docs/design.md), in the order of LAYERS."""


def layer_of(module: str) -> int:
    """Index in LAYERS of the longest prefix that `module` falls under."""
    best = max((p for layer in LAYERS for p in layer if module == p or module.startswith(p + ".")), key=len)
    return next(i for i, layer in enumerate(LAYERS) if best in layer)
