"""Who the end of term retires and what of each (pure): ``scalelab.commands.retire_plan``.
The command run for real, as root: ``tests/integration/hub/test_end_of_term.py``."""

from __future__ import annotations

import pytest

from scalelab.commands.retire_plan import (
    Account,
    HubUser,
    PlanError,
    Retirement,
    choose_students,
    plan_retirement,
)
from scalelab.spawner.system_users import COMMENT

USERS = [
    HubUser("zoe", groups=("course-a",)),
    HubUser("amy", groups=("course-a", "course-b")),
    HubUser("ta", admin=True, groups=("course-a",)),
    HubUser("ben", groups=("course-b",)),
]


def names(users: list[HubUser]) -> list[str]:
    return [u.name for u in users]


def test_every_student_is_every_hub_user_but_the_admins_sorted():
    assert names(choose_students(USERS)) == ["amy", "ben", "zoe"]


def test_a_group_gives_its_members_but_its_admins():
    assert names(choose_students(USERS, group="course-a")) == ["amy", "zoe"]
    assert names(choose_students(USERS, group="course-b")) == ["amy", "ben"]
    with pytest.raises(PlanError, match="no group 'course-c' with members"):
        choose_students(USERS, group="course-c")


def test_named_students_must_be_hub_users_and_not_admins():
    assert names(choose_students(USERS, names=["zoe", "amy", "zoe"])) == ["amy", "zoe"]
    with pytest.raises(PlanError, match=r"^no hub user named eve, max: nothing was changed$"):
        choose_students(USERS, names=["max", "amy", "eve"])
    with pytest.raises(PlanError, match="ta is an admin, never retired"):
        choose_students(USERS, names=["amy", "ta"])


ACCOUNTS = {
    "jupyter-amy": Account("/srv/homes/amy", COMMENT),
    "jupyter-old": Account("/home/jupyter-old", "TLJH user"),  # same prefix, not ScaleLab's
    "old": Account("/home/old", "Old Student,,,"),
    "own": Account("/home/own", "Own Account,,,"),
}


def plan(name: str, home_root: str = "") -> Retirement:
    return plan_retirement(
        name, home_root=home_root, system_user_prefix="jupyter-", account=ACCOUNTS.get
    )


def test_a_system_user_scalelab_made_goes_with_the_home_its_record_names():
    assert plan("amy", home_root="/elsewhere") == Retirement(
        "amy", "/srv/homes/amy", True, "jupyter-amy", "home/amy"
    )


def test_without_a_scalelab_account_the_home_under_home_root_goes():
    assert plan("ben", home_root="/srv/homes/") == Retirement(
        "ben", "/srv/homes/ben", True, None, "home/ben"
    )
    # An account with the prefix that ScaleLab did not make is never deleted.
    assert plan("old", home_root="/srv/homes").system_user is None


def test_an_account_scalelab_did_not_make_is_archived_and_kept_with_its_home():
    kept = plan("own")
    assert (kept.home, kept.remove_home, kept.system_user) == ("/home/own", False, None)
    assert kept.kept == "account own and its home /home/own kept: not made by ScaleLab"
    nothing = plan("ghost")
    assert (nothing.home, nothing.remove_home, nothing.kept) == (
        None,
        False,
        "no home on this host",
    )
    assert nothing.store_home == "home/ghost"


class BrokenStore:
    """A store whose file cannot be read (an fsspec back end's own error)."""

    def exists(self, _path: str) -> bool:
        return True

    def find(self, path: str) -> list[str]:
        return [f"{path}/runs/metrics.csv"]

    def size(self, _path: str) -> int:
        return 10

    def open(self, _path: str, _mode: str):
        raise ConnectionError("[Errno 111] Connection refused")


def test_a_failed_archive_keeps_everything_and_leaves_no_archive_to_skip(tmp_path):
    from scalelab.commands.retire import RetireError, retire_one

    home = tmp_path / "homes" / "amy"
    home.mkdir(parents=True)
    (home / "lab1.ipynb").write_text("{}")
    archive = tmp_path / "archive"
    archive.mkdir()
    deleted: list[str] = []
    plan = Retirement("amy", str(home), True, None, "home/amy")
    with pytest.raises(RetireError, match=r"archiving the store's home/amy failed: .*refused"):
        retire_one(plan, fs=BrokenStore(), archive=archive, delete_hub_user=deleted.append)
    assert (home / "lab1.ipynb").read_text() == "{}" and deleted == []
    assert list(archive.iterdir()) == []  # no amy/ (a rerun would skip it), no partial copy
