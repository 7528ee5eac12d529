-- PostgreSQL roles for the console (`kernel web`) and for read-only viewers.
-- Run as the owner of the kernel's tables after `celery -A celery_app kernel migrate`,
-- in the kernel's database; change the passwords. Workers, Beat and `kernel migrate`
-- keep using the owner role; only the owner can change the schema.
-- tests/web/test_postgres_roles.py runs this file and checks both roles.

CREATE ROLE kernel_console LOGIN PASSWORD 'change-me';
CREATE ROLE kernel_viewer LOGIN PASSWORD 'change-me';

GRANT USAGE ON SCHEMA public TO kernel_console, kernel_viewer;

-- Viewer: reads every table (the schema check reads alembic_version), writes nothing.
GRANT SELECT ON alembic_version, jobs, occurrences, controls, requeue_grants,
    operator_requests, events, beats, pools, job_sources, budgets, budget_windows,
    budget_reservations, adjudication_asks, notifications, rate_limits, chords TO kernel_viewer;

-- Console: reads everything and makes the operator and admin actions' writes
-- (pause, resume, requeue, adjudicate, cancel, run-now, apply, enable, disable, delete,
-- prune).
-- No CREATE, ALTER, DROP or TRUNCATE; of beats only DELETE (prune forgets silent
-- Beats); no writes to pools.
GRANT SELECT ON alembic_version, jobs, occurrences, controls, requeue_grants,
    operator_requests, events, beats, pools, job_sources, budgets, budget_windows,
    budget_reservations, adjudication_asks, notifications, rate_limits, chords TO kernel_console;
GRANT INSERT, UPDATE, DELETE ON jobs TO kernel_console;
GRANT INSERT, UPDATE, DELETE ON occurrences, controls, requeue_grants, operator_requests,
    budgets, budget_windows, budget_reservations TO kernel_console;
GRANT INSERT, DELETE ON events TO kernel_console;
GRANT INSERT, UPDATE ON pools TO kernel_console;
GRANT DELETE ON beats TO kernel_console;
-- An operator's verdict or cancel records the notification (and a routed run's owed
-- result) it causes, and fails a chord its run belonged to, in its own transaction.
GRANT INSERT ON notifications TO kernel_console;
GRANT UPDATE ON chords TO kernel_console;
-- Workers ask adapters (adjudication_asks) and deliver notifications; the console's
-- prune only deletes those rows.
GRANT DELETE ON adjudication_asks, notifications TO kernel_console;
GRANT USAGE ON ALL SEQUENCES IN SCHEMA public TO kernel_console;
