"""The generated pages of the documentation site, built from the code by ``mkdocs build``.

Each module renders one reference from what the product itself uses, so a page cannot
drift from the code: :mod:`.states` the state diagrams (the kernel's transition table),
:mod:`.job_file` the job-file reference (its JSON Schema), :mod:`.cli` the command line
(the ``kernel`` click group), :mod:`.http_api` the HTTP API (the web app's OpenAPI
document). :mod:`.hook` adds them to the site.
"""
