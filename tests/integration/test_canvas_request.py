"""What a routed canvas's tasks see and leave (issue 40), against stock Celery on the same
app, Redis broker and result backend, one worker:

* each step's ``self.request.parent_id`` / ``root_id`` and the ``parent_id`` the backend
  stores with its result are Celery's: a chain's step names the step before and the
  chain's first; a group after a chain, a chord's members and its body (started by one of
  the members) too; a task called from inside a routed body names that body;
* a chain step's own ``priority`` reaches its ``self.request.delivery_info``;
* ``group(...) | task`` applied with a countdown delays the header: its members see an
  ``eta`` in their request;
* an eager call of a routed task (``task_always_eager``, ``apply_async(throw=True)``)
  runs eagerly, as Celery runs it, with the canvas its body applies;
* a chain whose step fails for good has its later steps' ids FAILURE in the backend with
  the same exception, so ``.get()`` on the chain raises at once instead of waiting;
* a chord whose member fails: the member's result keeps its group id, the body's failure
  lists its errbacks as its children, and the errback's result names the body, whose
  ``ChordError`` names the failed member (Celery's ``test_chord_on_error``).
"""

from __future__ import annotations

import pytest
from integration.stack import Stack
from integration.test_enqueue import Project

pytestmark = pytest.mark.long

TASKS = """\
from celery import chain, chord
from myproj import app

def ids(self, i):
    return self.request.root_id, self.request.parent_id, i

def collect_ids(self, res, i):
    return res, (self.request.root_id, self.request.parent_id, i)

def return_priority(self, *_args):
    return "Priority: %s" % self.request.delivery_info["priority"]

def return_request_eta(self):
    return self.request.eta

def calls_ids(self):
    inner = app.tasks[self.name.replace("calls_ids", "ids")].si(i=0).delay()
    return self.request.id, inner.id

def identity(x):
    return x

def add(x, y):
    return x + y

def boom(*args):
    raise KeyError("boom")

def errback_old_style(request_id):
    return request_id

def chain_add(self, x, y):
    add = app.tasks[self.name.replace("chain_add", "add")]
    (add.s(x, x) | add.s(y)).apply_async()

def chord_add(self, x, y):
    add = app.tasks[self.name.replace("chord_add", "add")]
    chord(add.s(x, x), add.s(y)).apply_async()

for side in ("routed", "stock"):
    for body in (identity, add, boom, errback_old_style):
        app.task(name=f"myproj.{side}.{body.__name__}", shared=False)(body)
    for body in (ids, collect_ids, return_priority, return_request_eta, calls_ids,
                 chain_add, chord_add):
        app.task(name=f"myproj.{side}.{body.__name__}", shared=False, bind=True)(body)
"""

SIDE_BY_SIDE = """\
import json, re, time
from celery import chain, chord, group
from celery.result import AsyncResult
from myproj import app
app.loader.import_default_modules()

UUID = r"[0-9A-Fa-f]{8}-([0-9A-Fa-f]{4}-){3}[0-9A-Fa-f]{12}"

def stored_parent(task_id):
    return AsyncResult(task_id, app=app)._get_task_meta().get("parent_id")

def parent_ids(t):
    wrong = []
    def check(what, got, want):
        if got != want:
            wrong.append(f"{what}: {got!r}, not {want!r}")

    # A chain: each step's parent is the step before, its root the first.
    res = chain(t("ids").si(i=i) for i in range(4))()
    node, i, nodes = res, 3, []
    while node is not None:
        nodes.append(node)
        node = node.parent
    root = nodes[-1]
    for node in nodes:
        root_id, parent_id, value = node.get(timeout=30)
        want = node.parent.id if node.parent else None
        check(f"chain[{value}] root", root_id, root.id)
        check(f"chain[{value}] parent", parent_id, want)
        check(f"chain[{value}] stored parent", stored_parent(node.id), want)

    # A group after a chain: each member's parent is the step before the group.
    res = (t("ids").si(i=1) | t("ids").si(i=2) | group(t("ids").si(i=i) for i in range(2, 6)))()
    for value in res.get(timeout=30):
        check(f"group[{value[2]}] root", value[0], res.parent.parent.id)
        check(f"group[{value[2]}] parent", value[1], res.parent.id)

    # A chord in a chain: its members' parent is the step before, its body's one of its
    # members, the step after the body's the body.
    first = t("ids").si(i=1)
    root_id = first.freeze().id
    res = (first | t("ids").si(i=2) | group(t("ids").si(i=i) for i in range(3, 7))
           | t("collect_ids").s(i=50) | t("ids").si(i=51))()
    body, header, second = res.parent, res.parent.parent, res.parent.parent.parent
    got = res.get(timeout=30)
    check("after body root", got[0], root_id)
    check("after body parent", got[1], body.id)
    members, (body_root, body_parent, _) = body.get(timeout=30)
    check("body root", body_root, root_id)
    check("body parent is a member", body_parent in [r.id for r in header.results], True)
    for member in members:
        check(f"member[{member[2]}] root", member[0], root_id)
        check(f"member[{member[2]}] parent", member[1], second.id)
    check("second's parent", second.get(timeout=30)[1], second.parent.id)

    # A task called from inside a task: its parent is the caller.
    caller = t("calls_ids").delay()
    caller_id, inner_id = caller.get(timeout=30)
    inner = AsyncResult(inner_id, app=app).get(timeout=30)
    check("inner root", inner[0], caller_id)
    check("inner parent", inner[1], caller_id)
    check("caller's children", [r.id for r in caller.children], [inner_id])
    return wrong

def failed_chain(t):
    res = chain(t("add").s(1, 1), t("boom").s(), t("add").s(5), t("add").s(6)).apply_async()
    try:
        res.get(timeout=20)
        raised = None
    except Exception as exc:
        raised = type(exc).__name__
    later = [res.parent, res]
    for _ in range(100):  # .get() raised from the failed step: its later ones follow it
        if all(r.ready() for r in later):
            break
        time.sleep(0.1)
    return {"raised": raised, "later": [(r.state, type(r.result).__name__) for r in later]}

def chord_on_error(t):
    # Celery's test_chord_on_error: the failed member's meta keeps its group id, the
    # body's failure lists its errbacks as its children, whose result names the body.
    body = t("identity").s("never").on_error(t("errback_old_style").s())
    res = chord([t("add").s(1, 2), t("add").s(3, 4), t("boom").s()], body)()
    try:
        res.get(timeout=30, propagate=True)
        raised = None
    except Exception as exc:
        raised = type(exc).__name__
    for _ in range(300):  # as Celery's test: until the errback's result is in
        children = res.children
        if children and children[0].children and children[0].children[0].result:
            break
        time.sleep(0.1)
    else:
        return {"raised": raised, "body's children": str(res.children)}
    errback = res.children[0].children[0].result
    failed = re.search(UUID, str(AsyncResult(errback, app=app).result)).group()
    return {
        "raised": raised,
        "errback_names_the_body": errback == res.id,
        "failed_is_a_member": failed in [r.id for r in res.parent.results],
        "failed_group": AsyncResult(failed, app=app)._get_task_meta().get("group_id")
                        == res.parent.id,
    }

def eager(t):
    app.conf.task_always_eager = True
    try:
        return [t("chain_add").apply_async(args=(4, 8), throw=True).get(),
                t("chord_add").apply_async(args=(4, 8), throw=True).get()]
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}"
    finally:
        app.conf.task_always_eager = False

out = {}
for side in ("routed", "stock"):
    t = lambda name: app.tasks[f"myproj.{side}.{name}"]
    priority = t("return_priority")
    header = group(t("return_request_eta").s(), t("return_request_eta").s())
    out[side] = {
        "parent_ids": parent_ids(t),
        "priority": (priority.signature(priority=3) | priority.signature(priority=5))()
                    .get(timeout=30),
        "etas": [eta is not None for eta in
                 (header | t("identity").s()).apply_async(countdown=2).get(timeout=30)],
        "eager": eager(t),
        "failed_chain": failed_chain(t),
        "chord_on_error": chord_on_error(t),
    }
print(json.dumps(out))
"""


@pytest.mark.parametrize("stack", ["redis"], indirect=True)
def test_a_routed_canvas_s_requests_and_results_are_stock_celery_s(stack: Stack) -> None:
    project, _ = Project.running(stack, TASKS, concurrency=2)

    out = project.client(SIDE_BY_SIDE)
    routed, stock = out["routed"], out["stock"]
    assert stock["parent_ids"] == []
    assert routed["parent_ids"] == []
    assert stock["priority"] == "Priority: 5"
    assert routed["priority"] == stock["priority"]
    assert stock["etas"] == [True, True]
    assert routed["etas"] == stock["etas"]
    assert stock["eager"] == [None, None]
    assert routed["eager"] == stock["eager"]
    # The failing step's exception, at once, under every later step's id too.
    assert stock["failed_chain"] == {
        "raised": "KeyError", "later": [["FAILURE", "KeyError"], ["FAILURE", "KeyError"]],
    }  # fmt: skip
    assert routed["failed_chain"] == stock["failed_chain"]
    assert stock["chord_on_error"] == {
        "raised": "KeyError", "errback_names_the_body": True, "failed_is_a_member": True,
        "failed_group": True,
    }  # fmt: skip
    assert routed["chord_on_error"] == stock["chord_on_error"]
