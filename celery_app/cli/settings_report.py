"""What ``kernel doctor`` says about settings: every setting the kernel reads or sets, with
where its value came from, the zone Beat reads crontabs in, and the findings a moved app
needs to see (a kernel-looking key the kernel does not read, workers refusing JSON)."""

from __future__ import annotations

from typing import Any

from beat_schedule.sync import beat_zone, read_beat_schedule
from celery_app.installation import KERNEL_DEFAULTS, kernel_defaults_layer
from celery_app.setting_values import FROM_APP
from celery_app.settings import KernelSettings, unread_kernel_keys
from celery_app.web_settings import WebSettings
from kernel import KernelError, masked_url

__all__ = ["job_zone", "settings_checks", "settings_listing"]

_KERNEL_DEFAULT = "kernel default (the app left Celery's)"
_CELERY_DEFAULT = "Celery default"


def _shown(value: Any) -> Any:
    return masked_url(value) if isinstance(value, str) else value


def _celery_setting(conf: Any, key: str) -> dict[str, Any]:
    """A Celery setting the kernel sets by default: its value and the map that gave it."""
    prefix = str(getattr(conf, "prefix", None) or "")
    names = (f"{prefix}{key.upper()}", key) if prefix else (key,)
    layer = kernel_defaults_layer(conf)
    for found in conf.maps:
        for name in names:
            if name in found:
                source = (
                    _KERNEL_DEFAULT
                    if found is layer
                    else _CELERY_DEFAULT
                    if found is conf.maps[-1]
                    else FROM_APP
                )
                return {"setting": name, "value": conf.get(key), "source": source}
    return {"setting": key, "value": conf.get(key), "source": _CELERY_DEFAULT}


def settings_listing(app: Any, settings: KernelSettings) -> list[dict[str, Any]]:
    """Every setting the kernel reads or sets: ``{setting, value, source}``."""
    listing = []
    for attr, name in settings.names.items():
        status = attr.removeprefix("retention_")
        value = (
            settings.retention[status] if status in settings.retention else getattr(settings, attr)
        )
        listing.append(
            {"setting": name, "value": _shown(value), "source": settings.origins.get(attr)}
        )
    zone = beat_zone(app.conf)
    listing.append({"setting": "timezone", "value": zone.name, "source": zone.origin})
    listing += [_celery_setting(app.conf, key) for key in KERNEL_DEFAULTS]
    return listing


def settings_checks(app: Any, settings: KernelSettings) -> list[dict[str, str]]:
    """The zone, and a failure per unread kernel-looking key or refused JSON."""
    zone = beat_zone(app.conf)
    checks = [
        {"name": "zone", "status": "ok", "detail": f"crontabs read in {zone.name} ({zone.origin})"}
        if zone.name
        else {
            "name": "zone",
            "status": "fail",
            "detail": f"no IANA name for {zone.origin}: set the app's timezone",
        }
    ]
    read = set(settings.keys.values())
    try:
        web = WebSettings.from_app(app, "127.0.0.1")
    except KernelError:
        pass  # `kernel web` refuses its own settings when it starts
    else:
        read |= set(web.keys.values())
    for name, why in sorted(unread_kernel_keys(app.conf, read).items()):
        checks.append(
            {
                "name": "settings",
                "status": "fail",
                "detail": f"{name} in the app's configuration is not read: {why}",
            }
        )
    accepted = list(app.conf.accept_content or ())
    if "json" not in accepted and "application/json" not in accepted:
        checks.append(
            {
                "name": "serializer",
                "status": "fail",
                "detail": f"accept_content={accepted!r}: workers would refuse the kernel's "
                "own messages, which are JSON; add 'json' to accept_content",
            }
        )
    return checks


def job_zone(app: Any, job_id: str, spec: dict[str, Any]) -> dict[str, str] | None:
    """The zone a cron job's wall times are read in, and where it came from: the app's
    zone (and the setting behind it) for a job its ``beat_schedule`` defines; else the
    job's own ``schedule.timezone``. None for other schedules."""
    zone = (spec.get("schedule") or {}).get("timezone")
    if zone is None:
        return None
    schedule = read_beat_schedule(app.conf)
    if job_id not in schedule.owned:
        return {"name": zone, "from": "the job's schedule.timezone"}
    if zone == schedule.zone.name:
        return {"name": zone, "from": f"the app's zone: {schedule.zone.origin}"}
    return {
        "name": zone,
        "from": f"the app's zone when Beat last applied beat_schedule; it is now "
        f"{schedule.zone.name} ({schedule.zone.origin}), a new revision at Beat's next start",
    }
