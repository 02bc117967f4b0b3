"""Start Longread: the Gradio app on http://127.0.0.1:7860 (`--help` for flags, `--cli` for a
terminal chat)."""
import sys

from app.cli import main

if __name__ == "__main__":
    sys.exit(main())
