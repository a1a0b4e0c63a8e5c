"""A university directory for the sign-in tests: Debian's OpenLDAP ``slapd`` on a loopback port,
its own configuration and database in a temporary folder (no system service), with people and
groups (``groupOfNames``) as a university's directory has them."""

from __future__ import annotations

import shutil
import subprocess
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from scalelab.common.ports import free_port

SUFFIX = "dc=university,dc=example"
ROOT_DN = f"cn=admin,{SUFFIX}"
PEOPLE = f"ou=people,{SUFFIX}"
GROUPS = f"ou=groups,{SUFFIX}"
SCHEMAS = ("core", "cosine", "inetorgperson", "nis")


def user_dn(uid: str) -> str:
    return f"uid={uid},{PEOPLE}"


def group_dn(cn: str) -> str:
    return f"cn={cn},{GROUPS}"


def _config_ldif(folder: Path, root_password: str) -> str:
    schemas = "".join(f"include: file:///etc/ldap/schema/{name}.ldif\n\n" for name in SCHEMAS)
    return f"""dn: cn=config
objectClass: olcGlobal
cn: config
olcPidFile: {folder}/slapd.pid

dn: cn=schema,cn=config
objectClass: olcSchemaConfig
cn: schema

{schemas}dn: cn=module{{0}},cn=config
objectClass: olcModuleList
cn: module{{0}}
olcModulePath: /usr/lib/ldap
olcModuleLoad: back_mdb

dn: olcDatabase={{1}}mdb,cn=config
objectClass: olcDatabaseConfig
objectClass: olcMdbConfig
olcDatabase: {{1}}mdb
olcDbDirectory: {folder}/data
olcSuffix: {SUFFIX}
olcRootDN: {ROOT_DN}
olcRootPW: {root_password}
olcAccess: to attrs=userPassword by self read by anonymous auth by * none
olcAccess: to * by users read by * none
"""


def _entries_ldif(people: Mapping[str, str], groups: Mapping[str, Sequence[str]]) -> str:
    blocks = [
        f"dn: {SUFFIX}\nobjectClass: dcObject\nobjectClass: organization\ndc: university\n"
        "o: University\n",
        f"dn: {PEOPLE}\nobjectClass: organizationalUnit\nou: people\n",
        f"dn: {GROUPS}\nobjectClass: organizationalUnit\nou: groups\n",
    ]
    for uid, password in people.items():
        blocks.append(
            f"dn: {user_dn(uid)}\nobjectClass: inetOrgPerson\nuid: {uid}\ncn: {uid}\nsn: {uid}\n"
            f"userPassword: {password}\n"
        )
    for cn, members in groups.items():
        lines = "".join(f"member: {user_dn(m)}\n" for m in members) or f"member: {ROOT_DN}\n"
        blocks.append(f"dn: {group_dn(cn)}\nobjectClass: groupOfNames\ncn: {cn}\n{lines}")
    return "\n".join(blocks)


class Directory:
    """A running ``slapd`` with ``people`` (uid -> password) and ``groups`` (cn -> member uids);
    use as a context (stopped at its end)."""

    def __init__(
        self, folder: Path, people: Mapping[str, str], groups: Mapping[str, Sequence[str]]
    ) -> None:
        self.folder = folder
        self.port = free_port()
        self.url = f"ldap://127.0.0.1:{self.port}"
        self.root_password = "directory-admin-secret"
        (folder / "config").mkdir(parents=True)
        (folder / "data").mkdir()
        (folder / "config.ldif").write_text(_config_ldif(folder, self.root_password))
        (folder / "entries.ldif").write_text(_entries_ldif(people, groups))
        slapadd = shutil.which("slapadd", path="/usr/sbin:/usr/bin") or "slapadd"
        self.slapd = shutil.which("slapd", path="/usr/sbin:/usr/bin") or "slapd"
        for args in (["-n", "0", "-l", "config.ldif"], ["-n", "1", "-l", "entries.ldif"]):
            subprocess.run(
                [slapadd, "-F", "config", *args], cwd=folder, check=True, capture_output=True
            )
        self.proc: subprocess.Popen | None = None

    def __enter__(self) -> Directory:
        self.log = open(self.folder / "slapd.log", "wb")
        self.proc = subprocess.Popen(
            [self.slapd, "-d", "0", "-h", f"{self.url}/", "-F", str(self.folder / "config")],
            stdout=self.log, stderr=subprocess.STDOUT,
        )  # fmt: skip
        deadline = time.monotonic() + 30
        while self.search(GROUPS, "(objectClass=*)").returncode != 0:
            assert self.proc.poll() is None, (self.folder / "slapd.log").read_text()
            assert time.monotonic() < deadline, "slapd did not answer within 30 s"
            time.sleep(0.2)
        return self

    def search(self, base: str, ldap_filter: str) -> subprocess.CompletedProcess:
        """``ldapsearch`` as the directory's admin."""
        argv = ["ldapsearch", "-x", "-H", self.url, "-D", ROOT_DN, "-w", self.root_password]
        return subprocess.run([*argv, "-b", base, ldap_filter], capture_output=True, text=True)

    def modify(self, ldif: str) -> None:
        """``ldapmodify`` as the directory's admin."""
        argv = ["ldapmodify", "-x", "-H", self.url, "-D", ROOT_DN, "-w", self.root_password]
        subprocess.run(argv, input=ldif, text=True, check=True, capture_output=True)

    def __exit__(self, *_exc: object) -> None:
        if self.proc is not None:
            self.proc.terminate()
            self.proc.wait(timeout=30)
        self.log.close()
