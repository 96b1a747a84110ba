"""The broker's ACLs, durable: ``triolog-acls.json`` at the root of the first log directory.

Kafka keeps ACLs in its metadata log; a single-node triolog keeps them as it keeps its topics
(storage/topics.py): one JSON file replaced atomically on every CreateAcls and DeleteAcls that
changes something, read once at start, feeding an :class:`~.acl.AclAuthorizer` that answers the
checks. The file is written before memory changes, so a failed write leaves both as they were.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterable
from pathlib import Path

from triolog.broker.storage.fs import OS_FS, FileSystem

from .acl import AclAuthorizer, AclBinding, AclBindingFilter, AclOperation, InvalidAclError, ResourceType
from .files import CorruptSecurityFileError, load_json, save_json

__all__ = ["ACLS_FILE", "AclStore"]

ACLS_FILE = "triolog-acls.json"


class AclStore:
    """The durable ACL set and its authorizer; safe to call from several threads.

    ``directory`` is the first log directory (``log_manager.log_dirs[0].path``) and ``fs`` the log
    manager's file system. The file is loaded by the constructor: a store never exists empty
    because its file could not be read (CorruptSecurityFileError names the file)."""

    def __init__(
        self,
        directory: str | os.PathLike,
        fs: FileSystem = OS_FS,
        *,
        super_users: Iterable[str] = (),
        allow_everyone_if_no_acl_found: bool = False,
    ):
        self.fs = fs
        self.path = Path(directory) / ACLS_FILE
        self._lock = threading.RLock()
        self.authorizer = AclAuthorizer(super_users, allow_everyone_if_no_acl_found, self._load())

    def _load(self) -> list[AclBinding]:
        doc = load_json(self.fs, self.path, "ACL")
        if doc is None:
            return []
        entries = doc.get("acls")
        if not isinstance(entries, list):
            raise CorruptSecurityFileError(self.path, "no 'acls' list")
        bindings = []
        for number, entry in enumerate(entries):
            try:
                if not isinstance(entry, dict):
                    raise InvalidAclError("not an object")
                bindings.append(AclBinding.from_json(entry).validate())
            except (KeyError, TypeError, InvalidAclError) as exc:
                raise CorruptSecurityFileError(self.path, f"ACL number {number} is invalid: {exc!r}") from None
        return bindings

    def _save(self, bindings: list[AclBinding]) -> None:
        doc = {"version": 1, "acls": [b.to_json() for b in bindings]}
        save_json(self.fs, self.path, doc)

    # -- Kafka's ACL APIs --------------------------------------------------------------------

    def validate(self, binding: AclBinding) -> AclBinding:
        """The binding, if CreateAcls may add it here (InvalidAclError says why not)."""
        return binding.validate()

    def create(self, bindings: Iterable[AclBinding]) -> list[AclBinding]:
        """Add the bindings (every one validated first: one invalid binding adds none); the ones
        that were new. The file is replaced before the authorizer sees them."""
        bindings = [b.validate() for b in bindings]
        with self._lock:
            current = self.authorizer.bindings()
            known = set(current)
            new = []
            for binding in bindings:
                if binding not in known:
                    known.add(binding)
                    new.append(binding)
            if new:
                self._save(current + new)
                self.authorizer.add(new)
            return new

    def delete(self, filters: Iterable[AclBindingFilter]) -> list[list[AclBinding]]:
        """Remove what each filter matches (DeleteAcls: one result per filter, a binding counted
        under the first filter that matches it); the file is replaced before memory changes."""
        filters = [f.validate() for f in filters]
        with self._lock:
            current = self.authorizer.bindings()
            results: list[list[AclBinding]] = []
            gone: set[AclBinding] = set()
            for f in filters:
                matched = [b for b in current if b not in gone and f.matches(b)]
                gone.update(matched)
                results.append(matched)
            if gone:
                self._save([b for b in current if b not in gone])
                for f in filters:
                    self.authorizer.remove(f)
            return results

    def describe(self, filter: AclBindingFilter) -> list[AclBinding]:
        return self.authorizer.bindings(filter)

    # -- checks (the authorizer's) -----------------------------------------------------------

    def authorize(
        self, principal: str, host: str, operation: AclOperation, resource_type: ResourceType, name: str
    ) -> bool:
        return self.authorizer.authorize(principal, host, operation, resource_type, name)

    def authorize_by_resource_type(
        self, principal: str, host: str, operation: AclOperation, resource_type: ResourceType
    ) -> bool:
        return self.authorizer.authorize_by_resource_type(principal, host, operation, resource_type)
