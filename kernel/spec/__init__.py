"""What a user may write, checked: job specs and their sections, payloads, durations, run
parameters, the retry decision, the job-file schema.

The job spec's models are field checks, sections, error translation and the job-file schema.

:mod:`kernel.spec.jobspec` assembles them into :class:`~kernel.spec.jobspec.JobSpec`; the
payloads of the built-in kinds are in :mod:`kernel.spec.payloads`.
"""
