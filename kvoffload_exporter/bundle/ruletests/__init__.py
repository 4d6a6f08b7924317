"""promtool unit tests for the rules as rendered (`alerts/tests/rendered-<alert>.test.yaml`): one firing
and one silent case per alert, built from the same settings and selectors as the rules, so a bundle
rendered with `--set`/`--selector` can be checked with `promtool test rules` like the committed one.
Series are shaped from the thresholds and evaluated after the window and `for` have passed; label values
satisfy the user's selectors. The hand-written `alerts/tests/kvoffload.test.yaml` (real failure replays)
stays the independent check. A case the rendered rules cannot make fire (a selector on a label its series
never carry, `absent_for` not shorter than `absent_memory`) is left out and named in the file's header.
"""

from kvoffload_exporter.bundle.ruletests.base import DIR
from kvoffload_exporter.bundle.ruletests.cases import BUILDERS, STEPS
from kvoffload_exporter.bundle.ruletests.files import path, render, tests

__all__ = ["BUILDERS", "DIR", "STEPS", "path", "render", "tests"]
