"""``python -m runtime`` and the ``ragline`` script."""

from runtime import commands  # noqa: F401  (registers status, failures, retry)
from runtime.cli import main


def run() -> None:
    main(prog_name="ragline")


if __name__ == "__main__":
    main(prog_name="python -m runtime")
