"""Every DML statement of the kernel, built once and named by purpose, split by actor."""

from __future__ import annotations

from kernel.statements.adjudication import *  # noqa: F403
from kernel.statements.adjudication import __all__ as _adjudication
from kernel.statements.beat import *  # noqa: F403
from kernel.statements.beat import __all__ as _beat
from kernel.statements.chords import *  # noqa: F403
from kernel.statements.chords import __all__ as _chords
from kernel.statements.claims import *  # noqa: F403
from kernel.statements.claims import __all__ as _claims
from kernel.statements.enqueues import *  # noqa: F403
from kernel.statements.enqueues import __all__ as _enqueues
from kernel.statements.gates import *  # noqa: F403
from kernel.statements.gates import __all__ as _gates
from kernel.statements.history import *  # noqa: F403
from kernel.statements.history import __all__ as _history
from kernel.statements.jobs import *  # noqa: F403
from kernel.statements.jobs import __all__ as _jobs
from kernel.statements.notifications import *  # noqa: F403
from kernel.statements.notifications import __all__ as _notifications
from kernel.statements.operator import *  # noqa: F403
from kernel.statements.operator import __all__ as _operator
from kernel.statements.pools import *  # noqa: F403
from kernel.statements.pools import __all__ as _pools
from kernel.statements.settles import *  # noqa: F403
from kernel.statements.settles import __all__ as _settles
from kernel.statements.worker import *  # noqa: F403
from kernel.statements.worker import __all__ as _worker

__all__ = [
    *_claims,
    *_settles,
    *_worker,
    *_operator,
    *_pools,
    *_beat,
    *_gates,
    *_jobs,
    *_history,
    *_notifications,
    *_adjudication,
    *_enqueues,
    *_chords,
]
