"""Entry point: apply every extension, then hand over to moto's own server."""

import importlib
import sys

from joiner_local import EXTENSIONS


def main() -> None:
    for name in EXTENSIONS:
        module = importlib.import_module(f"joiner_local.{name}")
        module.install()
    from moto.server import main as moto_main

    moto_main(sys.argv[1:])


if __name__ == "__main__":
    main()
