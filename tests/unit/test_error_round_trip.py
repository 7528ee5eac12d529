"""A kernel error raised in a routed run reaches the caller as itself: Celery's result
backend stores an exception as its type and ``args`` and rebuilds it from them, and the
prefork pool pickles it the same way. Each error keeps its class, code and message."""

from __future__ import annotations

import pickle

import pytest
from celery import Celery

from celery_app.enqueueing import RunFailed
from kernel import errors

EXAMPLES = [
    errors.KernelError("kernel refused", occurrence_id=3),
    errors.InvalidArgument("replace", "task 'x' is not routed through the kernel"),
    errors.NotFound("occurrence 7 does not exist"),
    errors.LeaseLost("the lease of occurrence 7 has expired"),
    errors.StorageUnavailable("database unreachable", commit_state="unknown"),
    RunFailed("the run was dead-lettered", "LEASE_LOST"),
]


@pytest.mark.parametrize("error", EXAMPLES, ids=lambda e: type(e).__name__)
def test_a_kernel_error_is_rebuilt_by_celerys_result_backend(error: errors.KernelError) -> None:
    backend = Celery(backend="cache+memory://").backend
    rebuilt = backend.exception_to_python(backend.prepare_exception(error))
    assert type(rebuilt) is type(error)
    assert (rebuilt.code, rebuilt.message, str(rebuilt)) == (error.code, error.message, str(error))


@pytest.mark.parametrize("error", EXAMPLES, ids=lambda e: type(e).__name__)
def test_a_kernel_error_survives_pickling(error: errors.KernelError) -> None:
    rebuilt = pickle.loads(pickle.dumps(error))
    assert type(rebuilt) is type(error)
    assert (rebuilt.code, rebuilt.message, str(rebuilt)) == (error.code, error.message, str(error))


def test_the_field_and_commit_state_come_back() -> None:
    backend = Celery(backend="cache+memory://").backend
    invalid = backend.exception_to_python(backend.prepare_exception(EXAMPLES[1]))
    storage = backend.exception_to_python(backend.prepare_exception(EXAMPLES[4]))
    assert invalid.field == "replace"
    assert storage.commit_state == "unknown"
