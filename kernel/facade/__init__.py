"""The parts of the :class:`~kernel.store.Kernel` facade, one module a noun.

Each part is a set of methods, each one transaction (``@write``) or read (``@read``,
:mod:`kernel.facade.base`) that calls the kernel's functions of its noun itself;
:mod:`kernel.store` composes them into ``Kernel``.
"""

from __future__ import annotations

from kernel.facade.base import FacadeBase
from kernel.facade.beat import BeatFacade
from kernel.facade.enqueue import EnqueueFacade
from kernel.facade.gates import GateFacade
from kernel.facade.health import HealthFacade
from kernel.facade.jobs import JobFacade
from kernel.facade.observe import ObserveFacade
from kernel.facade.operators import OperatorFacade
from kernel.facade.schedules import ScheduleFacade
from kernel.facade.upkeep import UpkeepFacade
from kernel.facade.verdicts import VerdictFacade
from kernel.facade.workers import WorkerFacade

__all__ = [
    "FacadeBase",
    "BeatFacade",
    "EnqueueFacade",
    "GateFacade",
    "HealthFacade",
    "JobFacade",
    "ObserveFacade",
    "OperatorFacade",
    "ScheduleFacade",
    "UpkeepFacade",
    "VerdictFacade",
    "WorkerFacade",
]
