"""Profiles and ``user_options``: what a student may ask for, validated on the hub (pure logic).

A profile is what ops offer in the spawn form ("CPU only", "1 GPU", ...). ``user_options`` are
untrusted: :func:`parse_user_options` accepts only ``profile``, ``gpus`` and
``spark_driver_memory``, with values of the right type and range, and says what is wrong.
Why: docs/design-notes.md, scalelab.spawner.profiles.
"""

from __future__ import annotations

import json
import re
import reprlib
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from jupyterhub.traitlets import ByteSpecification
from traitlets import TraitError

#: Keys a client may send in ``user_options``.
OPTION_KEYS = frozenset({"profile", "gpus", "spark_driver_memory"})
_SLUG = re.compile(r"^[a-z0-9][a-z0-9-]{0,62}$")
_JVM_SIZE = re.compile(r"^[1-9][0-9]{0,5}[mg]$")


_repr = reprlib.Repr()
_repr.maxstring = _repr.maxother = 40
_repr.maxlist = _repr.maxdict = 4
#: repr() cut to about 40 characters: untrusted values never flood a message or the log.
_short = _repr.repr


class OptionsError(ValueError):
    """Unacceptable ``user_options``; the message names the option and what is allowed."""


class ProfileForbidden(OptionsError):
    """``user_options`` name a profile kept for JupyterHub groups the user is not in (a
    tampered form or a REST client: the form does not offer it)."""


@dataclass(frozen=True)
class Profile:
    """One choice of the spawn form.

    Attributes
    ----------
    slug
        Identifier sent in ``user_options["profile"]`` (lowercase letters, digits, ``-``).
    display_name
        What the form shows, e.g. ``"1 GPU"``.
    gpus
        GPUs a server of this profile gets (0: CPU only).
    description
        One line under the name in the form.
    default
        The profile used when none is asked for.
    groups
        JupyterHub groups whose members alone are offered this profile and may start it
        (empty: everyone).
    mem_limit
        Bytes of memory a server of this profile, its kernels and all they start may use
        together (the spawner's ``mem_limit`` for this start: the local spawner's cgroup,
        KubeSpawner's pod limit), or None for the spawner's own.
    cpu_limit
        CPUs for the same (the spawner's ``cpu_limit``), or None for the spawner's own.
    """

    slug: str
    display_name: str
    gpus: int = 0
    description: str = ""
    default: bool = False
    groups: tuple[str, ...] = ()
    mem_limit: int | None = None
    cpu_limit: float | None = None

    def open_to(self, groups: Collection[str]) -> bool:
        """Whether a member of ``groups`` (JupyterHub group names) may have this profile."""
        return not self.groups or bool(set(self.groups) & set(groups))


@dataclass(frozen=True)
class SpawnRequest:
    """Validated options of one spawn attempt."""

    profile: Profile
    gpus: int
    spark_driver_memory: str


PROFILE_KEYS = frozenset(
    {"slug", "display_name", "gpus", "description", "default", "groups", "mem_limit", "cpu_limit"}
)


def _memory_limit(value: Any, where: str) -> int | None:
    """A profile's ``mem_limit`` in bytes: JupyterHub's notation (``"8G"``, ``"512M"``, a whole
    number of bytes; K, M, G, T are powers of 1024), or None when not given (pure).

    Raises
    ------
    ValueError
        Anything else, or not above 0; the message names the profile.
    """
    if value is None:
        return None
    try:
        if isinstance(value, bool):
            raise TraitError(value)
        size = ByteSpecification().validate(None, value)
    except (TraitError, TypeError, ValueError):  # TypeError: a list, say
        size = 0
    if not size or size <= 0:
        raise ValueError(
            f'{where}: \'mem_limit\' must be a size like "8G" or "512M" (K, M, G, T: powers '
            f"of 1024) or a number of bytes above 0, not {_short(value)}"
        )
    return int(size)


def _cpu_limit(value: Any, where: str) -> float | None:
    """A profile's ``cpu_limit``: a number of CPUs above 0, or None when not given (pure).

    Raises
    ------
    ValueError
        Anything else; the message names the profile.
    """
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
        raise ValueError(
            f"{where}: 'cpu_limit' must be a number of CPUs above 0 (e.g. 2 or 0.5), not "
            f"{_short(value)}"
        )
    return float(value)


def profiles_from_config(entries: Sequence[Mapping[str, Any]]) -> list[Profile]:
    """Build and check the configured profiles (``ScaleLabSpawner.profiles``).

    Raises
    ------
    ValueError
        An unknown key, a bad slug, a negative GPU count, ``groups`` not a list of group names,
        a slug used twice, no profile at all, more than one default, a default kept for some
        groups, or no profile open to everyone. The message names the profile.
    """
    profiles = []
    for index, entry in enumerate(entries):
        where = f"ScaleLabSpawner.profiles[{index}]"
        unknown = set(entry) - PROFILE_KEYS
        if unknown:
            raise ValueError(
                f"{where}: unknown key(s) {sorted(unknown)}; allowed: {sorted(PROFILE_KEYS)}"
            )
        slug = entry.get("slug")
        if not isinstance(slug, str) or not _SLUG.match(slug):
            raise ValueError(
                f"{where}: 'slug' must be lowercase letters, digits and '-', not {slug!r}"
            )
        gpus = entry.get("gpus", 0)
        if not isinstance(gpus, int) or isinstance(gpus, bool) or gpus < 0:
            raise ValueError(f"{where}: 'gpus' must be a whole number >= 0, not {gpus!r}")
        groups = entry.get("groups", [])
        if not isinstance(groups, list | tuple) or not all(
            isinstance(g, str) and g for g in groups
        ):
            raise ValueError(
                f"{where}: 'groups' must be a list of JupyterHub group names, not {groups!r}"
            )
        profiles.append(
            Profile(
                slug=slug,
                display_name=str(entry.get("display_name") or slug),
                gpus=gpus,
                description=str(entry.get("description", "")),
                default=bool(entry.get("default", False)),
                groups=tuple(groups),
                mem_limit=_memory_limit(entry.get("mem_limit"), where),
                cpu_limit=_cpu_limit(entry.get("cpu_limit"), where),
            )
        )
    slugs = [p.slug for p in profiles]
    if not profiles:
        raise ValueError("ScaleLabSpawner.profiles is empty: offer at least a CPU-only profile")
    if len(set(slugs)) != len(slugs):
        raise ValueError(f"ScaleLabSpawner.profiles: a slug is used twice: {slugs}")
    if sum(p.default for p in profiles) > 1:
        raise ValueError("ScaleLabSpawner.profiles: more than one profile is marked default")
    if not any(not p.groups for p in profiles):
        raise ValueError(
            "ScaleLabSpawner.profiles: every profile is kept for some groups; leave one (a "
            "CPU-only one) without 'groups', for every student"
        )
    if any(p.default and p.groups for p in profiles):
        raise ValueError(
            "ScaleLabSpawner.profiles: the default profile is kept for some groups; mark a "
            "profile without 'groups' as the default"
        )
    return profiles


def check_profile_access(
    options: Mapping[str, Any] | None, profiles: Sequence[Profile], groups: Collection[str]
) -> None:
    """Refuse ``user_options`` that ask for a profile kept for groups the user is not in.

    Parameters
    ----------
    options
        Untrusted ``user_options``.
    profiles
        Every configured profile (those offered to the user and the others).
    groups
        The user's JupyterHub group names.

    Raises
    ------
    ProfileForbidden
        The message names the profile and its groups.
    """
    slug = (options or {}).get("profile")
    profile = next((p for p in profiles if p.slug == slug), None)
    if profile is not None and not profile.open_to(groups):
        raise ProfileForbidden(
            f"profile {profile.slug!r} is for members of the group(s) "
            f"{', '.join(profile.groups)} only; pick another profile, or ask the course's "
            "operators to add you to one of these groups"
        )


def default_profile(profiles: Sequence[Profile]) -> Profile:
    """The profile marked default, else the first."""
    return next((p for p in profiles if p.default), profiles[0])


#: Characters of one extra option's value as JSON, at most (it is kept in the hub's database).
EXTRA_OPTION_CHARS = 4096


def parse_user_options(
    options: Mapping[str, Any] | None,
    profiles: Sequence[Profile],
    memory_choices: Sequence[str],
    memory_default: str | None = None,
    extra_keys: Collection[str] = (),
) -> SpawnRequest:
    """Validate untrusted ``user_options``.

    Parameters
    ----------
    options
        As received from the spawn form or a REST client (None or ``{}``: every default).
    profiles
        The configured profiles.
    memory_choices
        Offered Spark driver memory sizes (JVM sizes such as ``"2g"``).
    memory_default
        The size used when none is asked for; the first choice when None.
    extra_keys
        Keys of ops' own form fields (``extra_options``): let through unread, each value at
        most :data:`EXTRA_OPTION_CHARS` characters as JSON.

    Returns
    -------
    SpawnRequest

    Raises
    ------
    OptionsError
        An unknown key, a wrong type, an unknown profile, more GPUs than the profile gives, a
        memory size not offered, or an extra option's value too long or not JSON. Nothing has
        been allocated.
    """
    options = dict(options or {})
    allowed = OPTION_KEYS | set(extra_keys)
    unknown = set(options) - allowed
    if unknown:
        shown = _short(sorted(map(str, unknown)))
        raise OptionsError(f"unknown option(s) {shown}; allowed: {sorted(allowed)}")
    for key in sorted(set(options) & set(extra_keys) - OPTION_KEYS):
        try:
            size = len(json.dumps(options[key]))
        except (TypeError, ValueError):
            raise OptionsError(f"option {key!r} must be JSON data") from None
        if size > EXTRA_OPTION_CHARS:
            raise OptionsError(
                f"option {key!r} is too long: {size} characters as JSON, at most "
                f"{EXTRA_OPTION_CHARS}"
            )
    by_slug = {p.slug: p for p in profiles}
    slug = options.get("profile", default_profile(profiles).slug)
    if not isinstance(slug, str) or slug not in by_slug:
        raise OptionsError(f"unknown profile {_short(slug)}; offered: {', '.join(by_slug)}")
    profile = by_slug[slug]
    gpus = options.get("gpus", profile.gpus)
    if not isinstance(gpus, int) or isinstance(gpus, bool):
        raise OptionsError(f"'gpus' must be a whole number, not {_short(gpus)}")
    if not 0 <= gpus <= profile.gpus:
        raise OptionsError(
            f"'gpus' must be between 0 and {profile.gpus} for profile {profile.slug!r}, not {gpus}"
        )
    memory = options.get("spark_driver_memory", memory_default or memory_choices[0])
    if memory not in memory_choices:
        raise OptionsError(
            f"'spark_driver_memory' must be one of {', '.join(memory_choices)}, "
            f"not {_short(memory)}"
        )
    return SpawnRequest(profile, gpus, memory)


def check_memory_choices(choices: Sequence[str]) -> list[str]:
    """Check offered Spark driver memory sizes: JVM sizes like ``512m`` or ``2g``.

    Raises
    ------
    ValueError
        Empty, or a size that the JVM would not accept.
    """
    bad = [c for c in choices if not isinstance(c, str) or not _JVM_SIZE.match(c)]
    if not choices or bad:
        raise ValueError(
            f"Spark driver memory choices must be sizes like '512m' or '2g': {list(choices)}"
        )
    return list(choices)


def options_from_form(formdata: Mapping[str, Sequence[str]]) -> dict[str, Any]:
    """The spawn form's fields (lists of strings) -> ``user_options``, still to be validated.

    A form sends only strings: a ``gpus`` field of decimal digits becomes that number, so that a
    count the profile does not give is refused as such ("between 0 and N"), not as "not a whole
    number" (a JSON ``user_options`` through the REST API keeps its own types).
    """
    options: dict[str, Any] = {}
    for key, values in formdata.items():
        if key == "_xsrf":
            continue
        options[key] = values[0] if len(values) == 1 else list(values)
    gpus = options.get("gpus")
    if isinstance(gpus, str) and gpus.strip().isdecimal() and len(gpus.strip()) <= 6:
        options["gpus"] = int(gpus.strip())
    return options
