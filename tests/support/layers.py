"""The layers of `exporter`, bottom to top: the layering test keeps imports inside them, the module-map
test holds docs/design.md's layer column against them."""

from __future__ import annotations

LAYERS: tuple[tuple[str, ...], ...] = (
    # foundation: closed sets, declarations, parsers with no project state
    (
        "exporter",
        "exporter.enums",
        "exporter.schema",
        "exporter.sections",
        "exporter.families",
        "exporter.exposition",
        "exporter.webconfig",
        "exporter.credentials",
        "exporter.redact",
        "exporter.limits",
        "exporter.logs",
        "exporter.backends",
        "exporter.saferegex",
        "exporter.yamlsafe",
        "exporter.safewrite",
        "exporter.configvalues",
    ),
    ("exporter.config", "exporter.model", "exporter.catalogue"),  # settings, snapshots, the metric catalogue
    # pure derivation and rendering: snapshot -> derived values -> findings -> exposition text
    (
        "exporter.capacity",
        "exporter.samples",
        "exporter.normalise",
        "exporter.derive",
        "exporter.procmem",
        "exporter.render",
        "exporter.convoy",
        "exporter.selfmon",
        "exporter.reasons",
        "exporter.payback",
        "exporter.findings",
        "exporter.intervalreport",
        "exporter.collector",
    ),
    # the running exporter (I/O) and the monitoring bundle
    (
        "exporter.sources",
        "exporter.guards",
        "exporter.listener",
        "exporter.webauth",
        "exporter.reloader",
        "exporter.targetpoller",
        "exporter.plugins",
        "exporter.poller",
        "exporter.probe",
        "exporter.app",
        "exporter.bundle",
    ),
    ("exporter.canary",),  # the plugin: registers what it needs through exporter.plugins
    ("exporter.sim",),  # the simulator (its client reuses the canary's SSE parser)
    # entry points, and the README's generated blocks (counts over the whole product, simulator included)
    ("exporter.commands", "exporter.configdoc", "exporter.bundle.readme", "exporter.cli", "exporter.__main__"),
)
"""Bottom to top; a module may import its own layer and those below. A module belongs to the longest
prefix listed (`exporter.canary.config` to `exporter.canary`)."""

LAYER_NAMES = ("foundation", "data", "derivation", "service", "plugin", "simulator", "entry")
"""The layers' names in the module map (docs/design.md), in the order of LAYERS."""


def layer_of(module: str) -> int:
    """Index in LAYERS of the longest prefix that `module` falls under."""
    best = max((p for layer in LAYERS for p in layer if module == p or module.startswith(p + ".")), key=len)
    return next(i for i, layer in enumerate(LAYERS) if best in layer)
