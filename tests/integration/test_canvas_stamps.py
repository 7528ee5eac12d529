"""Stamps on a canvas's steps and links mean on the kernel what they mean to stock Celery
(issue 40): the same app (``options_app.py``), run as stock Celery and then with its tasks
routed through the kernel, applies the same stamped canvases — a stamped chain, a link and
an errback stamped after linking (Celery's ``mtask_id`` visitor), a list stamp, a stamped
task retried once. Each step's, link's and errback's body sees the stamps Celery's would
(``self.request.stamps``), and so do monitors: each message's headers when published
(never its properties) and ``task_received``'s request, the retried delivery's too.
"""

from __future__ import annotations

import re
import subprocess
import sys
from collections import defaultdict
from typing import Any

import pytest
from integration.stack import Stack
from integration.test_celery_options import Side

pytestmark = pytest.mark.long

CANVAS = """\
from celery import chain
from celery.canvas import StampingVisitor
import options_app as opts

class Stamp(StampingVisitor):
    def __init__(self, **stamps):
        self.stamps = stamps

    def on_signature(self, sig, **headers):
        return dict(self.stamps)

steps = chain(opts.request.si("c1"), opts.request.si("c2"))
steps.stamp(visitor=Stamp(stamp=42))
steps.apply_async()

linked = opts.request.si("l0")
linked.stamp(visitor=Stamp(mtask_id="first"))
linked.link(opts.request.si("l1"))
linked.stamp(visitor=Stamp(mtask_id="1234"))
linked.apply_async()

failing = opts.fails.si("e0")
failing.stamp(visitor=Stamp(mtask_id="first"))
failing.link_error(opts.request.si("e1"))
failing.stamp(visitor=Stamp(mtask_id="1234"))
failing.apply_async()

listed = opts.request.si("v0")
listed.stamp(visitor=Stamp(stamp=[4, 2]))
listed.apply_async()

retried = opts.retry_once.si("r0")
retried.stamp(visitor=Stamp(stamp=42))
retried.apply_async()
"""

#: The tags whose body records its request (opts.request).
_RECORDED = {"c1", "c2", "l0", "l1", "e1", "v0"}


class StampSide(Side):
    @property
    def env(self) -> dict[str, str]:
        return {**super().env, "OPTS_SIGNALS": "1"}


@pytest.mark.parametrize("stack", ["redis"], indirect=True)
def test_stamps_of_a_canvas_s_steps_and_links_reach_their_runs_as_under_stock(
    stack: Stack,
) -> None:
    seen = {}
    for side in (StampSide(stack, kernel=False), StampSide(stack, kernel=True)):
        side.start_worker()
        if side.kernel:
            side.start_beat()  # its pump hints a retried run again
        subprocess.run([sys.executable, "-c", CANVAS], cwd=stack.root, env=side.env,
                       check=True, timeout=120)  # fmt: skip
        stack.wait(
            lambda side=side: {x["tag"] for x in side.ledger(task="request")} == _RECORDED
            and side.ledger(task="retry_once") and side.ledger(task="fails"),
            timeout=90, what=f"{side.name}: the canvases ran",
        )  # fmt: skip
        seen[side.name] = _what_was_seen(side)
    stock, kernel = seen["stock"], seen["kernel"]
    assert kernel == stock, seen
    # What Celery's own tests check, read from stock's run: stamps on every step and link.
    assert stock["bodies"]["c2"] == [["stamp"], {"stamp": 42}]
    assert stock["bodies"]["l1"] == stock["bodies"]["e1"] == [["mtask_id"], {"mtask_id": "1234"}]
    assert stock["received"]["r0"] == [{"stamp": 42}]  # its retried delivery's too
    assert stock["published"]["v0"] == [[["stamp"], {"stamp": [4, 2]}, []]]


def _what_was_seen(side: Side) -> dict[str, Any]:
    """Per tag: what its body saw (stamped_headers, stamps); the distinct stamps each
    delivery of it had (``task_received``); the distinct headers each message of it was
    published with (and the stamps found among its properties: none)."""
    bodies = {x["tag"]: [x["stamped_headers"], x["stamps"]] for x in side.ledger(task="request")}
    received: dict[str, list[Any]] = defaultdict(list)
    published: dict[str, list[Any]] = defaultdict(list)
    for line in side.ledger():
        tag = _tag(line.get("argsrepr"))
        if tag is None:
            continue
        if line.get("signal") == "received" and line["stamps"] not in received[tag]:
            received[tag].append(line["stamps"])
        seen = [line.get("stamped_headers"), line.get("stamps"), line.get("in_properties")]
        if line.get("signal") == "published" and seen not in published[tag]:
            published[tag].append(seen)
    return {"bodies": bodies, "received": dict(received), "published": dict(published)}


def _tag(argsrepr: Any) -> str | None:
    """The tag a call's args repr shows (Celery's ``('c1',)``, a hint's ``['c1']``)."""
    found = re.fullmatch(r"[\[(]'([a-z]\d)',?[\])]", argsrepr or "")
    return found.group(1) if found else None


CHORDS = """\
from celery import chain, chord, group
import options_app as opts

# Celery's test_link_option_on_chain_ending_in_chord: the chain's link follows its chord's body.
chain(opts.record.si("a1"), chord([opts.record.si("h1"), opts.record.si("h2")],
                                   opts.request.si("b1"))).apply_async(link=opts.request.si("k1"))
# test_link_error_option_runs_on_header_failure[chord]: a chord whose body is a chord, its
# header failing: the link_error (its body's) runs once.
chord([opts.record.si("h3"), opts.fails.si("f1")],
      chord([opts.record.si("h4")], opts.request.si("b2"))).apply_async(
    link_error=opts.request.si("x1"))
# test_upgraded_chord_link_error_with_header_errback_enabled: a group followed by a task is a
# chord; its errback goes on each header task as Celery clones it, immutable.
opts.app.conf.task_allow_error_cb_on_chord_header = True
chain(opts.record.si("u0"), group(opts.fails.si("u1"), opts.fails.si("u2")),
      opts.request.si("u3")).on_error(opts.request.si("x2")).apply_async()
"""


@pytest.mark.parametrize("stack", ["redis"], indirect=True)
def test_a_chord_step_s_link_and_link_error_and_an_immutable_errback_run_as_under_stock(
    stack: Stack,
) -> None:
    ran = {}
    for side in (Side(stack, kernel=False), Side(stack, kernel=True)):
        side.start_worker()
        if side.kernel:
            side.start_beat()
        subprocess.run([sys.executable, "-c", CHORDS], cwd=stack.root, env=side.env,
                       check=True, timeout=120)  # fmt: skip
        stack.wait(
            lambda side=side: {"k1", "x1", "x2"} <= {x["tag"] for x in side.ledger(task="request")},
            timeout=90, what=f"{side.name}: the link and errbacks ran",
        )  # fmt: skip
        if side.kernel:
            stack.wait(lambda: all(stack.settled(f"task:opts.{name}")
                                   for name in ("record", "fails", "request")),
                       timeout=60, what="the kernel's runs settled")  # fmt: skip
        ran[side.name] = sorted(x["tag"] for x in side.ledger(task="request"))
    assert ran["kernel"] == ran["stock"], ran
    # The chain's link after its chord's body; x1 once; x2 (immutable: no argument) by
    # each failing header task and by the chord's failure.
    assert ran["stock"].count("x1") == 1 and {"b1", "k1"} <= set(ran["stock"])
    assert ran["stock"].count("x2") == 3
