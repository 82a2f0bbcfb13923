"""`python -m albert.export_to_tfhub`: the original's module path (albert/__init__.py)."""

from albert import _entry

if __name__ == "__main__":
    _entry.run("export_to_tfhub")
