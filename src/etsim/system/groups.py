"""Communicator groups: which global ranks a collective's ``pg_name`` names.

Sources, merged: a comm-group file (JSON ``{"1": [0, 1, 2, 3]}``, or the etsim YAML
equivalent ``groups: {1: [0, 1, 2, 3]}``) and METADATA nodes of PyTorch-derived traces
(``process_group:init``, whose ``inputs.values`` hold a JSON list of
``{pg_name, ranks, …}``). ``pg_name`` "" or "0" means all ranks.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from etsim.chakra.graph import NodeType, Workload
from etsim.errors import ConfigError
from etsim.files import parse_json, parse_yaml, read_text

__all__ = ["GROUPS_ATTR", "CommGroups", "groups_from_metadata", "load_comm_groups"]

#: A GlobalMetadata attribute (a JSON string ``{"pg_name": [ranks], …}``) naming the groups a rank belongs to:
#: what etsim's generators write instead of a METADATA node, which the reference Chakra consumer cannot read.
GROUPS_ATTR = "etsim_comm_groups"


class CommGroups:
    """Group id → tuple of global ranks, with "" / "0" meaning every rank."""

    def __init__(self, num_ranks: int, groups: Mapping[str, tuple[int, ...]] | None = None) -> None:
        self.num_ranks = num_ranks
        self.all = tuple(range(num_ranks))
        self.groups: dict[str, tuple[int, ...]] = {}
        for name, ranks in (groups or {}).items():
            self.add(name, ranks)

    def add(self, name: str, ranks: tuple[int, ...] | list[int], *, source: str = "") -> None:
        """Define group *name*; an empty rank list means all ranks."""
        where = f"{source}: " if source else ""
        members = tuple(ranks) if ranks else self.all
        # (true and false are ints to Python, never ranks)
        bad = [r for r in members if isinstance(r, bool) or not (isinstance(r, int) and 0 <= r < self.num_ranks)]
        if bad:
            raise ConfigError(f"{where}group {name!r}: ranks {bad} are not in 0..{self.num_ranks - 1}")
        if len(set(members)) != len(members):
            raise ConfigError(f"{where}group {name!r}: a rank is listed twice in {list(members)}")
        old = self.groups.get(name)
        if old is not None and old != members:
            raise ConfigError(
                f"{where}group {name!r} is defined twice with different ranks ({list(old)} and {list(members)})"
            )
        self.groups[name] = members

    def resolve(self, pg_name: str | None) -> tuple[int, ...]:
        """The ranks of *pg_name*; raise :class:`ConfigError` naming the known groups if undefined."""
        if not pg_name or pg_name == "0":
            return self.all
        try:
            return self.groups[pg_name]
        except KeyError:
            known = ", ".join(sorted(self.groups)) or "none"
            raise ConfigError(
                f"communicator group pg_name={pg_name!r} is not defined (known groups: {known}); "
                "give a comm-group file (--comm-groups) or METADATA process-group nodes"
            ) from None


def load_comm_groups(path: str | os.PathLike[str], num_ranks: int) -> CommGroups:
    """Read a comm-group file: JSON ``{"1": [0, 1]}`` or YAML ``groups: {1: [0, 1]}``."""
    p = Path(path)
    text = read_text(p, "comm-group file")
    data: Any = parse_json(text, str(p)) if p.suffix == ".json" else parse_yaml(text, str(p))
    if isinstance(data, dict) and set(data) == {"groups"}:
        data = data["groups"]
    elif isinstance(data, dict) and p.suffix != ".json":
        # The YAML form is `groups: {id: [ranks]}`; a bare mapping of ids is accepted too, so a key that
        # is neither an id nor `groups` is a misspelling, not a group.
        for key in data:
            if not str(key).strip().lstrip("-").isdigit():
                raise ConfigError(
                    f"{p}: unknown key {key!r}; expected 'groups' (groups: {{1: [0, 1]}}) or integer group ids"
                )
    if not isinstance(data, dict):
        raise ConfigError(f"{p}: expected a mapping of group id to a list of ranks")
    groups = CommGroups(num_ranks)
    for key, ranks in data.items():
        try:
            gid = int(key)
        except (TypeError, ValueError):
            raise ConfigError(f"{p}: group id {key!r} is not an integer") from None
        if gid <= 0:
            raise ConfigError(f"{p}: group id {gid} must be > 0 (0 means all ranks)")
        if not isinstance(ranks, list):
            raise ConfigError(f"{p}: group {key}: expected a list of ranks, got {ranks!r}")
        groups.add(str(gid), ranks, source=str(p))
    return groups


def groups_from_metadata(workload: Workload, groups: CommGroups) -> None:
    """Add the process groups that METADATA nodes (PyTorch ``process_group:init``) and :data:`GROUPS_ATTR` define."""
    for trace in workload:
        for attr in trace.metadata.attr:
            if attr.name != GROUPS_ATTR:
                continue
            where = f"{trace.path or f'rank {trace.rank}'}: GlobalMetadata attribute {GROUPS_ATTR}"
            try:
                named = json.loads(attr.string_val)
            except json.JSONDecodeError as exc:
                raise ConfigError(f"{where}: not JSON ({exc})") from None
            if not isinstance(named, dict) or not all(isinstance(v, list) for v in named.values()):
                raise ConfigError(f'{where}: expected {{"pg_name": [ranks], …}}, got {attr.string_val[:80]!r}')
            for name, ranks in named.items():
                groups.add(str(name), list(ranks), source=where)
        if not trace.nodes:
            continue
        for pos, node_type in enumerate(trace.types):
            if node_type != NodeType.METADATA_NODE:
                continue
            text = trace.nodes[pos].inputs.values
            if not text:
                continue
            # The value is the Python str() of a one-element list around a JSON list.
            body = text.strip()
            try:
                entries = json.loads(body[2:-2]) if body.startswith("['") or body.startswith('["') else json.loads(body)
            except json.JSONDecodeError:
                continue  # not a process-group definition
            if isinstance(entries, dict):
                entries = [entries]
            if not isinstance(entries, list):
                continue
            for entry in entries:
                if isinstance(entry, dict) and "pg_name" in entry:
                    ranks = entry.get("ranks") or []
                    if not isinstance(ranks, list):
                        raise ConfigError(f"{trace.describe(pos)}: process group ranks must be a list, got {ranks!r}")
                    groups.add(str(entry["pg_name"]), list(ranks), source=trace.describe(pos))
