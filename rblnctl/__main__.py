"""`python -m rblnctl` -> the CLI."""

from rblnctl.cli.app import main

if __name__ == "__main__":
    main()
