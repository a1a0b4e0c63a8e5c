"""Ops' own spawn-form fields beside ScaleLab's (issue 12): ``c.ScaleLabSpawner.options_from_form``
is honoured (ScaleLab's reading was a method that silently overrode it), a template of ops' own
can extend ScaleLab's form, and the fields it adds pass ScaleLab's check when listed in
``extra_options`` (any other unknown key is still refused).

In-process spawners on a hub of two declared (fake) GPUs, run through JupyterHub's own
``run_options_from_form`` and ``_run_apply_user_options``.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from types import SimpleNamespace

import pytest
import pytest_asyncio
from tornado import web
from traitlets.config import Config

from scalelab.spawner import ScaleLabSpawner
from scalelab.spawner.gpu_pool import GPUPool
from scalelab.spawner.profiles import EXTRA_OPTION_CHARS

TWO = [{"uuid": "GPU-fake-0"}, {"uuid": "GPU-fake-1"}]


@pytest_asyncio.fixture
async def make(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[Callable[..., ScaleLabSpawner]]:
    """Makes alice's spawner with settings of ``c.ScaleLabSpawner``; no GPU pool yet."""
    monkeypatch.setattr(GPUPool, "_current", None)
    monkeypatch.setattr(GPUPool, "_building", None)
    monkeypatch.setattr(GPUPool, "_restores", [])

    def make_spawner(**settings) -> ScaleLabSpawner:
        c = Config()
        c.ScaleLabSpawner.declared_gpus = TWO
        c.ScaleLabSpawner.gpu_queue_file = str(tmp_path / "queue.json")
        for key, value in settings.items():
            setattr(c.ScaleLabSpawner, key, value)
        user = SimpleNamespace(name="alice", url="/user/alice/", groups=[], admin=False)
        return ScaleLabSpawner(config=c, user=user)

    yield make_spawner
    others = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
    for task in others:
        task.cancel()
    await asyncio.gather(*others, return_exceptions=True)


@pytest.mark.asyncio
async def test_scalelab_reads_its_own_form_by_default(make):
    form = {"profile": ["gpu-1"], "spark_driver_memory": ["2g"], "_xsrf": ["token"]}
    assert make().run_options_from_form(form) == {"profile": "gpu-1", "spark_driver_memory": "2g"}


@pytest.mark.asyncio
async def test_ops_options_from_form_is_used_and_its_result_still_checked(make):
    def ours(form):
        return {"profile": form["size"][0]}

    spawner = make(options_from_form=ours)
    assert spawner.run_options_from_form({"size": ["gpu-2"]}) == {"profile": "gpu-2"}
    with pytest.raises(web.HTTPError) as refused:
        await spawner._run_apply_user_options(spawner.run_options_from_form({"size": ["a100"]}))
    assert refused.value.status_code == 400
    assert "unknown profile 'a100'" in refused.value.get_message()


@pytest.mark.asyncio
async def test_jupyterhubs_simple_reading_is_accepted(make):
    spawner = make(options_from_form="simple")
    assert spawner.run_options_from_form({"profile": ["cpu"]}) == {"profile": "cpu"}


@pytest.mark.asyncio
async def test_listed_extra_options_pass_unread_and_others_are_refused(make):
    spawner = make(extra_options=["course_group"])
    await spawner._run_apply_user_options({"profile": "gpu-1", "course_group": "A"})
    assert spawner._request is not None and spawner._request.gpus == 1

    with pytest.raises(web.HTTPError) as refused:
        await make()._run_apply_user_options({"profile": "cpu", "course_group": "A"})
    assert refused.value.status_code == 400
    assert "unknown option(s) ['course_group']" in refused.value.get_message()

    with pytest.raises(web.HTTPError) as long:
        await spawner._run_apply_user_options({"course_group": "x" * EXTRA_OPTION_CHARS})
    assert long.value.status_code == 400
    assert f"option 'course_group' is too long: {EXTRA_OPTION_CHARS + 2} characters" in (
        long.value.get_message()
    )


@pytest.mark.asyncio
async def test_ops_template_extends_scalelabs_form(make, tmp_path: Path):
    ops = tmp_path / "ops-templates"
    ops.mkdir()
    (ops / "spawn_options.html").write_text(
        '{% extends "scalelab/spawn_options.html" %}'
        "{% block extra_fields %}"
        '<input name="course_group" id="ops-field" data-total="{{ total }}">'
        "{% endblock %}"
    )
    html = await make(options_template_paths=[str(ops)]).render_options_form()
    assert 'name="profile"' in html and 'name="spark_driver_memory"' in html  # ScaleLab's
    assert '<input name="course_group" id="ops-field" data-total="2">' in html  # and ops'
    plain = await make().render_options_form()
    assert 'name="profile"' in plain and "ops-field" not in plain


@pytest.mark.parametrize(
    ("spawner", "explained"),
    [
        (SimpleNamespace(requested_gpus=1), True),
        (SimpleNamespace(requested_gpus=0), False),  # CPU only: no queue to explain
        (SimpleNamespace(), True),  # another spawner class: as before
    ],
)
def test_the_pending_page_explains_the_queue_for_a_gpu_request_only(spawner, explained):
    """ScaleLab's pending page over a stand-in for JupyterHub's own (its ``message`` block)."""
    from jinja2 import ChoiceLoader, DictLoader, Environment, FileSystemLoader

    from scalelab.templates import templates_dir

    hubs_own = DictLoader({"templates/spawn_pending.html": "{% block message %}{% endblock %}"})
    env = Environment(loader=ChoiceLoader([FileSystemLoader(str(templates_dir())), hubs_own]))
    page = env.get_template("spawn_pending.html").render(spawner=spawner)
    assert "Your server is starting up." in page
    assert ('id="scalelab-queue-help"' in page) is explained
