#!/usr/bin/env python3
"""Generate streamscope's Grafana dashboard and Prometheus rules from the mixin in dashboards/mixin/.

Usage::

    python dashboards/generate.py                    # rewrite dashboards/*.json and dashboards/rules.yml
    python dashboards/generate.py --check            # exit 1 if the committed files are stale
    python dashboards/generate.py --print-config     # every setting with its default, as TOML
    python dashboards/generate.py --config my.toml --output-dir out/   # your thresholds and selector

The committed files are the defaults; overrides belong in your own file and output directory
(see dashboards/README.md). Other code (the live tests, render.py) imports this file by path and
uses what it re-exports from the mixin, e.g. :func:`panel_expressions`.
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType

HERE = Path(__file__).resolve().parent


def _load_mixin() -> ModuleType:
    """Import dashboards/mixin/ by path under one fixed name (``dashboards_mixin``): dashboards/ is
    not a package, and putting it on sys.path would let its scripts (live.py, render.py) shadow
    other modules."""
    name = "dashboards_mixin"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(
            name, HERE / "mixin" / "__init__.py", submodule_search_locations=[str(HERE / "mixin")])
        assert spec and spec.loader
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module  # the submodules' relative imports look the package up here
        spec.loader.exec_module(module)
    return sys.modules[name]


mixin = _load_mixin()
Config, ConfigError, DEFAULT = mixin.Config, mixin.ConfigError, mixin.DEFAULT
RULES_FILE, SUBSTITUTIONS, DASHBOARDS = mixin.RULES_FILE, mixin.SUBSTITUTIONS, mixin.DASHBOARDS
RUNBOOK_URL: str = DEFAULT.runbook_url
dashboard_model, triage_dashboard, panels = mixin.dashboard_model, mixin.triage_dashboard, mixin.panels
panel_expressions, substitute = mixin.panel_expressions, mixin.substitute
rendered_files, render_rules, rules_document = mixin.rendered_files, mixin.render_rules, mixin.rules_document
load_config = mixin.load


def stale_files(directory: Path = HERE, cfg: Config = DEFAULT) -> list[str]:  # type: ignore[valid-type]
    """Files in ``directory`` that differ from what ``cfg`` generates, are missing, or are stray JSON."""
    return mixin.stale_files(directory, cfg)


def main(argv: Sequence[str] | None = None) -> int:
    """Write the files, or with ``--check`` report the stale ones and return 1."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--config", type=Path, metavar="FILE",
                        help="overrides from a .toml or .yaml file (keys: --print-config)")
    parser.add_argument("--output-dir", type=Path, default=HERE, metavar="DIR",
                        help="where to write (default: dashboards/, the committed defaults)")
    parser.add_argument("--check", action="store_true",
                        help="exit 1 if the files in the output directory differ from the generated ones")
    parser.add_argument("--print-config", action="store_true",
                        help="print every setting with its default and documentation, as TOML")
    args = parser.parse_args(argv)
    if args.print_config:
        print(mixin.defaults_toml(), end="")
        return 0
    try:
        cfg = load_config(args.config) if args.config else DEFAULT
    except (ConfigError, OSError) as error:
        print(f"generate.py: {error}", file=sys.stderr)
        return 2
    out: Path = args.output_dir
    if args.check:
        stale = stale_files(out, cfg)
        for name in stale:
            print(f"stale: {out / name} (run `make dashboards`)", file=sys.stderr)
        return 1 if stale else 0
    out.mkdir(parents=True, exist_ok=True)
    for name, text in rendered_files(cfg).items():
        (out / name).write_text(text, encoding="utf-8")
        print(f"wrote {_shown(out / name)}")
    return 0


def _shown(path: Path) -> str:
    """A written file as the user would type it: relative to the repository when inside it."""
    try:
        return str(path.resolve().relative_to(HERE.parent))
    except ValueError:
        return str(path)


if __name__ == "__main__":
    sys.exit(main())
