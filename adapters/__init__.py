"""What an occurrence runs: the adapter contract, the built-ins and their registry.

Imports only the kernel's public types; the Celery runtime builds an
:class:`ExecutionContext` per claim and calls the adapter found by
:func:`load_adapters` for the occurrence's ``kind``.
"""

from __future__ import annotations

from adapters.base import (
    CHECKPOINT_V1,
    NO_RUNTIME_CONTROL,
    Adapter,
    AdapterError,
    BaseAdapter,
    Cancelled,
    ErrorClass,
    ExecutionContext,
    HandBack,
    RuntimeControl,
)
from adapters.registry import ENTRY_POINT_GROUP, load_adapters

__all__ = [
    "Adapter",
    "AdapterError",
    "BaseAdapter",
    "CHECKPOINT_V1",
    "Cancelled",
    "ENTRY_POINT_GROUP",
    "ErrorClass",
    "ExecutionContext",
    "HandBack",
    "NO_RUNTIME_CONTROL",
    "RuntimeControl",
    "load_adapters",
]
