"""Owners: synchronous SQLite stores the owner-local runtime runs on."""

from .base import Owner, Row, SqlValue
from .durable_object import DurableObjectOwner
from .sqlite3_owner import Sqlite3Owner

__all__ = ["DurableObjectOwner", "Owner", "Row", "SqlValue", "Sqlite3Owner"]
