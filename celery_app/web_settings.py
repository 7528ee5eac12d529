"""``kernel web``'s settings: one object from ``app.conf`` and the environment, checked
when the server starts."""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field
from typing import Any

from celery_app.setting_values import (
    SettingSource,
    flag,
    networks,
    number_between,
    seconds_between,
)

__all__ = ["WebSettings"]


def _loopback(host: str) -> bool:
    """Whether only this machine can reach ``host`` (cookies need no TLS there)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


@dataclass(frozen=True)
class WebSettings:
    """``kernel web``'s settings (Celery ``kernel_web_*`` keys; environment variables win).

    Attributes:
        max_body: bytes a request body may have (``KERNEL_WEB_MAX_BODY``, default 1 MiB);
            a larger one is answered 413 before it is read.
        secure_cookies: mark the console's cookies ``Secure`` (``KERNEL_WEB_SECURE_COOKIES``):
            on by default when the server binds anything but loopback, as it is then
            meant to sit behind a TLS-terminating proxy.
        sign_in_limit: failed sign-ins (bad token or login) allowed per client address, and
            per user name at it, before it must wait (``KERNEL_WEB_SIGN_IN_LIMIT``): 429.
        trusted_proxies: addresses or networks of the proxies whose ``X-Forwarded-For`` and
            ``X-Forwarded-Proto`` are believed (``KERNEL_WEB_TRUSTED_PROXIES``, comma-
            separated); none by default, so no client can pick the address it is limited by.
        header_timeout: seconds a request's headers may take to arrive, from the connection
            or its first byte (``KERNEL_WEB_HEADER_TIMEOUT``, default 10); then 408 and closed.
        body_timeout: seconds a request's body may take to arrive after its headers
            (``KERNEL_WEB_BODY_TIMEOUT``, default 30); then the connection is closed.
    """

    max_body: int
    secure_cookies: bool
    sign_in_limit: int
    trusted_proxies: tuple[str, ...] = ()
    header_timeout: float = 10.0
    body_timeout: float = 30.0
    #: Per attribute, the Celery key it is read from.
    keys: dict[str, str] = field(default_factory=dict, compare=False, repr=False)

    @classmethod
    def from_app(cls, app: Any, host: str) -> WebSettings:
        """Read and check the web settings of a server bound to ``host``.

        Raises:
            ConfigInvalid: a value cannot work; the message names its variable or key.
        """
        source = SettingSource(app.conf)
        read = source.read
        return cls(
            max_body=read(
                "max_body",
                "KERNEL_WEB_MAX_BODY",
                "kernel_web_max_body",
                1024 * 1024,
                number_between(1024, 1024**3),
                "a number of bytes from 1024 to 1073741824",
            ),
            secure_cookies=read(
                "secure_cookies",
                "KERNEL_WEB_SECURE_COOKIES",
                "kernel_web_secure_cookies",
                not _loopback(host),
                flag,
                "true or false (1/0, yes/no, on/off)",
            ),
            sign_in_limit=read(
                "sign_in_limit",
                "KERNEL_WEB_SIGN_IN_LIMIT",
                "kernel_web_sign_in_limit",
                20,
                number_between(1, 100_000),
                "a whole number from 1 to 100000",
            ),
            trusted_proxies=read(
                "trusted_proxies",
                "KERNEL_WEB_TRUSTED_PROXIES",
                "kernel_web_trusted_proxies",
                (),
                networks,
                "IP addresses or networks, comma-separated (127.0.0.1, 10.0.0.0/8)",
            ),
            header_timeout=read(
                "header_timeout",
                "KERNEL_WEB_HEADER_TIMEOUT",
                "kernel_web_header_timeout",
                10.0,
                seconds_between(0.5, 3600),
                "a duration from 0.5 s to 1 h",
            ),
            body_timeout=read(
                "body_timeout",
                "KERNEL_WEB_BODY_TIMEOUT",
                "kernel_web_body_timeout",
                30.0,
                seconds_between(0.5, 3600),
                "a duration from 0.5 s to 1 h",
            ),
            keys=source.keys,
        )
