"""The operator console and HTTP API served by ``celery -A celery_app kernel web``.

``app`` builds the ASGI application, ``api`` the JSON routes under ``/api/``,
``console`` the page machinery (login, rendering, the overview, Swagger UI at
``/docs``), ``job_pages`` and ``occurrence_pages`` the pages of each, ``event_log`` the
events page and the live stream, ``charts`` the server-drawn SVG charts, ``actions`` the
actions both surfaces offer with the role each needs, ``confirm`` their forms, ``auth``
bearer tokens, sessions and CSRF, ``users`` the users file.
"""
