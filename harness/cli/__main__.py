"""`python -m harness.cli`: the `tickwork` command, for processes tickwork starts itself."""

from harness.cli import main

if __name__ == "__main__":
    main()
