"""`python -m albert.create_pretraining_data`: the original's module path (albert/__init__.py)."""

from albert import _entry

if __name__ == "__main__":
    _entry.run("create_pretraining_data")
