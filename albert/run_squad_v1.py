"""`python -m albert.run_squad_v1`: the original's module path (albert/__init__.py)."""

from albert import _entry

if __name__ == "__main__":
    _entry.run("run_squad_v1")
