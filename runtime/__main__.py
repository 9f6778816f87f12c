"""``python -m runtime`` and the ``ragline`` script."""

from runtime import commands  # noqa: F401  (registers status, failures, retry)
from runtime.cli import main
from runtime.private import private_umask


def run() -> None:
    private_umask()
    main(prog_name="ragline")


if __name__ == "__main__":
    private_umask()
    main(prog_name="python -m runtime")
