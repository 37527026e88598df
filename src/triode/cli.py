"""`triode serve [flags]`: flags and environment → Settings → trio.run(system.main)."""

from __future__ import annotations

import argparse
import logging
import sys
from typing import Sequence

from . import settings as settings_mod


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="triode", description="OpenAI Responses API server "
                                     "for local MLX models")
    sub = parser.add_subparsers(dest="command", required=True)
    serve = sub.add_parser("serve", help="start the server")
    settings_mod.add_arguments(serve)
    args = parser.parse_args(argv)
    try:
        settings = settings_mod.resolve(vars(args))
    except settings_mod.SettingsError as exc:
        parser.exit(2, f"triode: {exc}\n")
    logging.basicConfig(level=settings.log_level.upper(),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    import trio

    from .system import main as system_main

    try:
        trio.run(system_main, settings)
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
