from runtime.cli import main

main(prog_name="python -m runtime")
