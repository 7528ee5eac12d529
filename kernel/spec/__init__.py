"""The job spec's models: field checks, sections, error translation and the job-file schema.

:mod:`kernel.spec.jobspec` assembles them into :class:`~kernel.spec.jobspec.JobSpec`; the
payloads of the built-in kinds are in :mod:`kernel.spec.payloads`.
"""
