"""The repository's root, for tests in any folder under tests/."""

import os

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
