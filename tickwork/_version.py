"""This package's version, in a module of its own so that any part (the
HTTP API's health answer) can name it without importing the package root."""

#: pyproject.toml's version (the tests pin the two equal).
VERSION = "0.1.0"
