"""This machine: cores, caches, line size and SIMD width, the facts every other demo builds on."""
from __future__ import annotations


def main(argv: list[str] | None = None) -> None:
    import argparse

    from sympathy.cli import cmd_info

    parser = argparse.ArgumentParser(prog="sympathy demo info", description=__doc__)
    parser.add_argument("--no-gpu", action="store_true", help="do not import torch to look for a GPU")
    cmd_info(parser.parse_args(argv))


if __name__ == "__main__":
    main()
