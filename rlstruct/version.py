"""The package's version, as ``pyproject.toml`` declares it (``rlstruct.__version__``, ``rlstruct --version``)."""

__version__ = "0.3.0"
