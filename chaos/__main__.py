"""``python -m chaos``: see chaos.cli."""

from chaos.cli import main

if __name__ == "__main__":
    main()
