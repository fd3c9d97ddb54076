"""Where the repository and the shared GLUE files are, for a test in any folder of ``tests/`` (``from repo_paths
import REPO_ROOT``: ``tests/`` is on the path of every test, as the folder of ``tests/conftest.py``)."""
from __future__ import annotations

import os
from pathlib import Path

#: The checkout: README.md, pyproject.toml, methods/, benchmark/, results/.
REPO_ROOT = Path(__file__).resolve().parents[1]
#: The real GLUE files: $GLUE_DIR, else ../shared/data/glue beside the checkout.
GLUE_ROOT = Path(os.environ.get("GLUE_DIR") or REPO_ROOT.parent / "shared" / "data" / "glue")
