"""An experiment's result directory: streamed ``results.csv`` / ``results.jsonl``, point configs, resume.

Layout of ``DIR``::

    experiment.yaml          the experiment file as written (``etsim experiment plot DIR`` reads its plots)
    results.csv              one row per point, ordered by point id once the run ends
    results.jsonl            one JSON object per point: point, axes, repeat, status, error, wall_s, result
    points/<id>/config.yaml  the point's resolved configuration (``etsim run --config`` re-runs it)
    plots/                   the declared plots (PNG, SVG)
    .etsim-results           says etsim wrote this directory: --force deletes only in directories that have it
    .etsim-lock              held (``flock``) by the sweep writing here: a second one is refused, naming the first

Rows are appended and flushed as points finish, each in one write, so a killed sweep leaves every
finished point on disk (at worst a torn last line, dropped when resuming). At the end, and when
interrupted, both files are rewritten in point-id order (write a temporary file, then rename), so
identical inputs give identical files whatever order the points finished in.
"""

from __future__ import annotations

import csv
import io
import json
import math
import os
import shutil
import threading
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import yaml

from etsim.errors import ConfigError, warn
from etsim.experiment.spec import Experiment, Point, point_config
from etsim.experiment.worker import PointOutcome
from etsim.files import lock_directory, make_parent
from etsim.stamp import input_stamp

__all__ = ["LOCK", "MARKER", "ResultsDir", "read_results"]

#: The file that says etsim wrote a result directory (``--force`` deletes nothing elsewhere).
MARKER = ".etsim-results"
#: The file a sweep holds a lock on while it writes the directory.
LOCK = ".etsim-lock"

try:  # the C emitter is ~10x faster; a sweep writes one config per point
    _Dumper: type[yaml.SafeDumper] = yaml.CSafeDumper  # type: ignore[assignment]
except AttributeError:  # pragma: no cover - PyYAML without libyaml
    _Dumper = yaml.SafeDumper


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return repr(value) if math.isfinite(value) else str(value)
    return str(value)


def _csv_line(values: Sequence[str]) -> str:
    buf = io.StringIO()
    csv.writer(buf, lineterminator="\n").writerow(values)
    return buf.getvalue()


def _report_head(line: bytes) -> dict[str, Any] | None:
    """The fields before ``result`` of one results.jsonl line, without parsing the (large) report.

    The writer puts ``"result"`` last; inside a JSON string a quote is escaped, so the first
    ``, "result": `` is the key. None for a line cut short by a kill.
    """
    cut = line.find(b', "result": ')
    if cut < 0 or not line.endswith(b"}\n"):
        return None
    try:
        head = json.loads(line[:cut] + b"}")
    except (json.JSONDecodeError, UnicodeDecodeError):
        return None
    return head if isinstance(head, dict) else None


def _whole_record(line: bytes) -> bool:
    """Whether a results.jsonl line is one complete JSON object (its report included)."""
    try:
        return isinstance(json.loads(line), dict)
    except (json.JSONDecodeError, UnicodeDecodeError, RecursionError):
        return False


def _body(config: str) -> str:
    """The configuration without its comments, but with the stamp of the files it names (:func:`input_stamp`)."""
    lines = config.splitlines(keepends=True)
    return "".join(line for line in lines if not line.startswith("#") or line.startswith(_STAMP))


#: The comment line of ``config.yaml`` stamping the files the point reads: a point whose files changed runs again.
_STAMP = "# inputs: "


def read_results(path: str | os.PathLike[str]) -> tuple[list[str], list[dict[str, str]]]:
    """Header and complete rows of a ``results.csv`` (a torn last row is dropped).

    Raises:
        ConfigError: the file cannot be read or has no header.
    """
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{p}: cannot read: {getattr(exc, 'strerror', None) or exc}") from None
    if not text.endswith("\n"):
        text = text[: text.rfind("\n") + 1]  # a row cut short by a kill
    rows = list(csv.reader(io.StringIO(text)))
    if not rows:
        raise ConfigError(f"{p}: empty (no header)")
    header = rows[0]
    out = [dict(zip(header, row, strict=True)) for row in rows[1:] if len(row) == len(header)]
    bad = [(i + 2, len(row)) for i, row in enumerate(rows[1:]) if len(row) != len(header)]
    if bad:  # (a torn last row was cut above: these were edited or damaged, and their points are not shown)
        line, fields = bad[0]
        warn(f"{p}: {len(bad)} row(s) with a wrong number of fields skipped (line {line}: {fields}, "
             f"expected {len(header)}); their points are left out")  # fmt: skip
    return header, out


class ResultsDir:
    """Writes one experiment's results; see the module docstring.

    Args:
        directory: the result directory (created).
        experiment: the experiment whose points are written.
    """

    def __init__(self, directory: str | os.PathLike[str], experiment: Experiment) -> None:
        self.dir = Path(directory)
        self.experiment = experiment
        self.columns = experiment.columns
        self.csv_path = self.dir / "results.csv"
        self.jsonl_path = self.dir / "results.jsonl"
        self.rows: dict[str, str] = {}
        """Point id → CSV line."""
        self.reports: dict[str, tuple[int, int]] = {}
        """Point id → (offset, length) of its line in ``results.jsonl``: reports of large workloads are
        large, so they stay on disk and the final sort copies them from there."""
        self.status: dict[str, str] = {}
        self._points = {p.id: p for p in experiment.points}
        self._csv: io.TextIOWrapper | None = None
        self._jsonl: io.BufferedWriter | None = None
        self._jsonl_end = 0
        self._lock: int | None = None

    # --- opening --------------------------------------------------------------------------------------------

    def config_text(self, point: Point) -> str:
        """The ``config.yaml`` of *point* (paths relative to its directory)."""
        directory = self.dir.resolve() / "points" / point.id
        axes = ", ".join(f"{a}={v}" for a, v in zip(self.experiment.axis_keys, point.labels, strict=True))
        header = f"# etsim experiment {self.experiment.name}, point {point.id}"
        header += f" (repeat {point.repeat})" if self.experiment.repeat > 1 else ""
        header += f": {axes}\n" if axes else "\n"
        header += f"# re-run alone: etsim run --config {self.dir / 'points' / point.id / 'config.yaml'}\n"
        config = point_config(point.spec, directory)
        stamp = input_stamp(config, directory)
        header += f"{_STAMP}{stamp}\n" if stamp else ""
        body = yaml.dump(config, Dumper=_Dumper, sort_keys=False, default_flow_style=None, width=120)
        return header + body

    def open(self, run: Iterable[Point], *, resume: bool, force: bool) -> list[Point]:
        """Prepare the directory; return the points of *run* that still need running.

        Without *resume* an existing ``results.csv`` is an error unless *force* (which starts over).
        With *resume*, rows of finished points whose configuration is unchanged are kept; failed,
        missing and changed points run again. The returned points' configurations are written by
        :meth:`write_configs`.

        Raises:
            ConfigError: results exist and neither flag was given, or they were written for other axes.
        """
        if resume and force:
            raise ConfigError("--resume keeps earlier results and --force discards them: pass one of them")
        make_parent(self.csv_path)  # a clear error when a component of the directory is a file
        self._take_lock()
        try:
            return self._open(run, resume=resume, force=force)
        except BaseException:
            self._release_lock()
            raise

    def _open(self, run: Iterable[Point], *, resume: bool, force: bool) -> list[Point]:
        if os.path.exists(self.csv_path) and not resume:
            if not force:
                raise ConfigError(
                    f"{self.csv_path} exists: pass --resume to finish that sweep or --force to start over"
                )
            if not os.path.isfile(self.dir / MARKER):
                raise ConfigError(
                    f"{self.dir} holds a results.csv that etsim did not write (no {MARKER} file): --force deletes "
                    "only etsim's own results; choose another --out"
                )
            for name in ("results.csv", "results.jsonl", "experiment.yaml"):
                (self.dir / name).unlink(missing_ok=True)
            for name in ("points", "plots"):
                path = self.dir / name
                if os.path.isdir(path) and not path.is_symlink():
                    shutil.rmtree(path, ignore_errors=True)
        for name in ("points", "plots"):
            if os.path.exists(self.dir / name) and not os.path.isdir(self.dir / name):
                raise ConfigError(f"{self.dir / name} is a file, where the results keep a directory")
        kept: set[str] = set()
        if resume and os.path.exists(self.csv_path):
            kept = self._load_previous()
        try:
            (self.dir / MARKER).write_text("etsim experiment results: --force may replace them\n", encoding="utf-8")
            (self.dir / "experiment.yaml").write_text(self.experiment.text, encoding="utf-8")
            todo = [p for p in run if p.id not in kept]
            self._rewrite()
            self._csv = open(self.csv_path, "a", encoding="utf-8", newline="")  # noqa: SIM115 - closed in close()
            try:
                self._jsonl = open(self.jsonl_path, "ab")  # noqa: SIM115
            except OSError:
                self._csv.close()
                raise
        except OSError as exc:
            raise ConfigError(f"{self.dir}: cannot write the results there: {exc.strerror or exc}") from None
        self._jsonl_end = self._jsonl.seek(0, os.SEEK_END)
        return todo

    def _take_lock(self) -> None:
        """Hold the directory's lock until :meth:`close`; a sweep already writing here is named in the error."""
        self._lock = lock_directory(self.dir, "sweep", LOCK)

    def write_configs(self, points: Iterable[Point], stop: threading.Event | None = None) -> None:
        """Write ``points/<id>/config.yaml`` of each point, until *stop* is set.

        A resumed point whose file is missing or differs runs again, so a sweep stopped or killed before
        this finished loses nothing.
        """
        for point in points:
            if stop is not None and stop.is_set():
                return
            directory = self.dir / "points" / point.id
            directory.mkdir(parents=True, exist_ok=True)
            (directory / "config.yaml").write_text(self.config_text(point), encoding="utf-8")

    def _load_previous(self) -> set[str]:
        """Keep the previous rows of points whose configuration is unchanged; return the finished ones."""
        header, rows = read_results(self.csv_path)
        if header != self.columns:
            raise ConfigError(
                f"{self.csv_path} has columns {', '.join(header)}; this experiment writes {', '.join(self.columns)}: "
                "use another --out, or --force to start over"
            )
        unchanged: dict[str, bool] = {}
        for row in rows:  # in file order: a later row of a point (a rerun not yet sorted in) wins
            pid = row["point"]
            point = self._points.get(pid)
            if point is None:
                continue
            if pid not in unchanged:
                config = self.dir / "points" / pid / "config.yaml"
                try:
                    # The comment lines name the result directory as it was spelled: compare the configuration.
                    same = _body(config.read_text(encoding="utf-8")) == _body(self.config_text(point))
                except OSError:
                    same = False
                labels = [row[k] for k in self.experiment.axis_keys]
                unchanged[pid] = same and labels == list(point.labels) and row.get("repeat", "0") == str(point.repeat)
            if unchanged[pid]:
                self.rows[pid] = _csv_line([row[c] for c in self.columns])
                self.status[pid] = row["status"]
        if os.path.exists(self.jsonl_path):
            offset = 0
            with open(self.jsonl_path, "rb") as f:
                for line in f:
                    start, offset = offset, offset + len(line)
                    head = _report_head(line)
                    rid = head.get("point") if head is not None else None
                    ok = isinstance(rid, str) and rid in self.rows and head and head.get("status") == self.status[rid]
                    if ok and _whole_record(line):  # a line spliced from two writers parses as neither
                        self.reports[rid] = (start, len(line))  # type: ignore[index]
        # A row without its report (killed between the two writes) is dropped: the point runs again.
        for pid in [p for p in self.rows if p not in self.reports]:
            del self.rows[pid], self.status[pid]
        return {pid for pid, status in self.status.items() if status == "ok"}

    # --- writing --------------------------------------------------------------------------------------------

    def write(self, outcome: PointOutcome) -> None:
        """Append one finished point to both files (flushed)."""
        point = self._points[outcome.id]
        values: dict[str, Any] = dict(outcome.metrics)
        values["point"] = point.id
        values["status"] = outcome.status
        values["error"] = " | ".join(outcome.error.splitlines())
        said = list(outcome.warnings)
        unlisted = [k for k in outcome.metrics if k.endswith("_ns") and k not in self.columns]
        if unlisted:  # (the columns come from what the workload declares it issues: a run that issued more says so)
            said.append(f"{', '.join(unlisted)}: measured, but the experiment has no column for it (results.jsonl)")
        values["warnings"] = " | ".join(" ".join(w.splitlines()) for w in said)
        values["wall_s"] = round(outcome.wall_s, 6)
        values["repeat"] = point.repeat
        for key, label in zip(self.experiment.axis_keys, point.labels, strict=True):
            values[key] = label
        line = _csv_line([_cell(values.get(c)) for c in self.columns])
        head = {
            "point": point.id,
            "axes": dict(zip(self.experiment.axis_keys, point.labels, strict=True)),
            "repeat": point.repeat,
            "status": outcome.status,
            "error": outcome.error,
            "warnings": list(outcome.warnings),
            "wall_s": values["wall_s"],
        }
        report = json.dumps(head)[:-1] + f', "result": {outcome.report or "null"}}}\n'
        # The report first: a row in the CSV promises its report exists (resume relies on it).
        assert self._csv is not None and self._jsonl is not None
        data = report.encode("utf-8")
        self._jsonl.write(data)
        self._jsonl.flush()
        self._csv.write(line)
        self._csv.flush()
        self.rows[point.id] = line
        self.reports[point.id] = (self._jsonl_end, len(data))
        self._jsonl_end += len(data)
        self.status[point.id] = outcome.status

    def _rewrite(self) -> None:
        """Both files in point-id order, replaced atomically."""
        order = sorted(self.rows)
        tmp = self.csv_path.with_suffix(".csv.tmp")
        tmp.write_text(_csv_line(self.columns) + "".join(self.rows[i] for i in order), encoding="utf-8")
        os.replace(tmp, self.csv_path)
        tmp = self.jsonl_path.with_suffix(".jsonl.tmp")
        index: dict[str, tuple[int, int]] = {}
        with open(tmp, "wb") as out:
            if self.reports:
                with open(self.jsonl_path, "rb") as src:
                    for pid in sorted(self.reports):
                        start, length = self.reports[pid]
                        src.seek(start)
                        index[pid] = (out.tell(), length)
                        out.write(src.read(length))
        os.replace(tmp, self.jsonl_path)
        self.reports = index

    def close(self) -> None:
        """Close the streams and write both files in point-id order."""
        for stream in (self._csv, self._jsonl):
            if stream is not None:
                stream.close()
        self._csv = self._jsonl = None
        try:
            self._rewrite()
        finally:
            self._release_lock()

    def _release_lock(self) -> None:
        if self._lock is not None:
            os.close(self._lock)  # releases the lock
            self._lock = None
