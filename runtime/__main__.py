"""``python -m runtime`` and the ``ragline`` script."""

from runtime.process.heap import limit_malloc_arenas

limit_malloc_arenas()  # before any thread starts

from runtime.cli.main import main  # noqa: E402
from runtime.process.private import private_umask  # noqa: E402


def run() -> None:
    private_umask()
    main(prog_name="ragline")


if __name__ == "__main__":
    private_umask()
    main(prog_name="python -m runtime")
