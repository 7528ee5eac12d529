"""The operator console and HTTP API served by ``celery -A celery_app kernel web``.

``app`` builds the ASGI application, ``api`` the JSON routes under ``/api/``,
``console`` the server-rendered pages, ``actions`` the actions both offer with the
role each needs, ``auth`` bearer tokens, sessions and CSRF, ``users`` the users file.
"""
