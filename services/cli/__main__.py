"""`python -m services.cli`: the same as the `passk` console script."""

from services.cli.main import main

if __name__ == "__main__":
    main()
