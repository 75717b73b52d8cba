"""What an audit finds: `Problem`s, gathered in an `AuditReport`; `AuditError` when the audit cannot run."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

ERROR, WARNING = "error", "warning"


@dataclass(frozen=True)
class Problem:
    """One finding. `shard` is the shard's url relative to DATA (or the file concerned), `key` a sample key."""

    kind: str
    shard: str | None = None
    key: str | None = None
    detail: str = ""
    severity: str = ERROR


class AuditError(Exception):
    """The audit cannot run (no manifest, unreadable DATA, bad arguments); the message is one line."""


@dataclass
class AuditReport:
    data: str
    deep: bool
    splits: list[str]
    problems: list[Problem] = field(default_factory=list)  # errors and warnings, in check order
    counts: dict = field(default_factory=dict)  # per split: what the manifest says and what was read
    duplicates: dict = field(default_factory=dict)  # content duplicates: counts and example key groups
    timing: dict = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)  # checks that could not run here, and why

    @property
    def errors(self) -> list[Problem]:
        return [p for p in self.problems if p.severity == ERROR]

    @property
    def warnings(self) -> list[Problem]:
        return [p for p in self.problems if p.severity == WARNING]

    @property
    def ok(self) -> bool:
        return not self.errors

    def to_dict(self) -> dict:
        return {"data": self.data, "ok": self.ok, "deep": self.deep, "splits": self.splits,
                "num_errors": len(self.errors), "num_warnings": len(self.warnings),
                "problems": [asdict(p) for p in self.problems], "counts": self.counts,
                "duplicates": self.duplicates, "timing": self.timing, "notes": self.notes}
