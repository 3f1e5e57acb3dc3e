"""The ``plots`` of an experiment: each plot's spec, checked against the axes and result columns."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import fields
from typing import Any

from etsim.experiment.points import Axis, PlotSpec, label
from etsim.simulation.inputs import error_at

__all__ = ["PlotSpec", "parse_plots", "zip_partners"]


def parse_plots(
    where: str, value: Any, axes: Sequence[Axis], numeric: Sequence[str], zip_value: Any = None
) -> list[PlotSpec]:
    """Validate an experiment's ``plots`` entry against its axes and numeric result columns.

    *zip_value* is the experiment's ``zip`` entry: an axis zipped with a plotted or pinned one needs no pin.

    Raises:
        ConfigError: naming *where* and the plot key.
    """
    return _plots(where, value, list(axes), list(numeric), zip_partners(zip_value))


def zip_partners(zip_value: Any) -> dict[str, frozenset[str]]:
    """Axis key → the other keys of its ``zip`` group (the axes whose value its value decides)."""
    groups = zip_value if isinstance(zip_value, list) else [zip_value]
    partners: dict[str, frozenset[str]] = {}
    for group in groups:
        if isinstance(group, Mapping):
            keys = frozenset(str(k) for k in group)
            for key in keys:
                partners[key] = keys - {key}
    return partners


def _plots(
    where_file: str, value: Any, axes: list[Axis], numeric: list[str], zipped: Mapping[str, frozenset[str]]
) -> list[PlotSpec]:
    """Every plot of the ``plots`` entry *value* (none when it is absent), each checked in turn."""
    if value is None:
        return []
    if not isinstance(value, list):
        raise error_at(where_file, ["plots"], "expected a list of plots")
    plots: list[PlotSpec] = []
    for i, entry in enumerate(value):
        plots.append(_plot(where_file, f"plots[{i}]", entry, axes, numeric, zipped, plots))
    return plots


def _plot(
    where_file: str,
    key: str,
    entry: Any,
    axes: list[Axis],
    numeric: list[str],
    zipped: Mapping[str, frozenset[str]],
    earlier: Sequence[PlotSpec],
) -> PlotSpec:
    """The plot of one entry (at *key*); *earlier* are the plots before it, whose names it must not take."""
    if not isinstance(entry, Mapping):
        raise error_at(where_file, [key], f"expected a mapping {{x: AXIS, y: COLUMN, …}}, got {entry!r}")
    known = {f.name for f in fields(PlotSpec)}
    for name in entry:
        if name not in known:
            raise error_at(where_file, [f"{key}.{name}"], f"unknown plot key; valid: {', '.join(sorted(known))}")
    for name in ("x", "y"):
        if name not in entry:
            raise error_at(where_file, [f"{key}.{name}"], "missing")
    kwargs: dict[str, Any] = dict(entry)
    by_key = {a.key: a for a in axes}
    used = _drawn_axes(where_file, key, kwargs, axes, numeric)
    kwargs["where"] = _pinned_axes(where_file, key, kwargs.get("where") or {}, axes, used, zipped)
    baseline = kwargs.get("baseline")
    if baseline is not None:
        if not kwargs.get("series"):
            raise error_at(where_file, [f"{key}.baseline"], "a baseline is one series: give the plot a series axis")
        baseline = label(baseline)
        if baseline not in by_key[kwargs["series"]].labels:
            values = ", ".join(by_key[kwargs["series"]].labels)
            raise error_at(
                where_file, [f"{key}.baseline"], f"{baseline!r} is not a value of {kwargs['series']}: {values}"
            )
        kwargs["baseline"] = baseline
    if kwargs.get("relative", "slowdown") not in ("slowdown", "speedup"):
        raise error_at(where_file, [f"{key}.relative"], "expected slowdown or speedup")
    for name in ("logx", "logy"):
        if name in kwargs and kwargs[name] is not None and not isinstance(kwargs[name], bool):
            raise error_at(where_file, [f"{key}.{name}"], "expected true or false")
    formats = kwargs.get("formats", ["png", "svg"])
    if not isinstance(formats, list) or not formats or any(f not in ("png", "svg", "pdf") for f in formats):
        raise error_at(where_file, [f"{key}.formats"], "expected a list of png, svg, pdf")
    kwargs["formats"] = tuple(formats)
    kwargs["name"] = _plot_name(where_file, key, kwargs, earlier)
    for name in ("title", "xlabel", "ylabel"):
        if kwargs.get(name) is not None:
            kwargs[name] = str(kwargs[name])
    return PlotSpec(**kwargs)


def _drawn_axes(
    where_file: str, key: str, kwargs: Mapping[str, Any], axes: list[Axis], numeric: list[str]
) -> list[Any]:
    """The plot's x, series and facet (None where not given), checked: axes, all different, and y a numeric column."""
    axis_keys = [a.key for a in axes]
    for name in ("x", "series", "facet"):
        v = kwargs.get(name)
        if v is not None and v not in axis_keys:
            raise error_at(
                where_file, [f"{key}.{name}"], f"{v!r} is not an axis; axes: {', '.join(axis_keys) or 'none'}"
            )
    if kwargs["y"] not in numeric:
        raise error_at(
            where_file,
            [f"{key}.y"],
            f"{kwargs['y']!r} is not a result column; numeric columns: {', '.join(numeric)}",
        )
    used = [kwargs.get(n) for n in ("x", "series", "facet")]
    if len([u for u in used if u]) != len({u for u in used if u}):
        raise error_at(where_file, [key], "x, series and facet must be different axes")
    return used


def _pinned_axes(
    where_file: str,
    key: str,
    where: Any,
    axes: list[Axis],
    used: list[Any],
    zipped: Mapping[str, frozenset[str]],
) -> dict[str, str]:
    """The plot's ``where`` as axis → value label, checked; every other axis of several values must be decided.

    An axis is decided when it is drawn (*used*), pinned by ``where``, or zipped with one that is.
    """
    axis_keys = [a.key for a in axes]
    by_key = {a.key: a for a in axes}
    if not isinstance(where, Mapping):
        raise error_at(where_file, [f"{key}.where"], "expected a mapping AXIS: VALUE")
    where = {str(k): label(v) for k, v in where.items()}
    for axis_key, text in where.items():
        if axis_key not in by_key:
            raise error_at(where_file, [f"{key}.where.{axis_key}"], f"not an axis; axes: {', '.join(axis_keys)}")
        if text not in by_key[axis_key].labels:
            raise error_at(
                where_file,
                [f"{key}.where.{axis_key}"],
                f"{text!r} is not a value of the axis; values: {', '.join(by_key[axis_key].labels)}",
            )
    decided = {u for u in used if u} | set(where)  # these axes' values decide their zip partners'
    for a in axes:
        if a.key not in decided and len(a.values) > 1 and not zipped.get(a.key, frozenset()) & decided:
            raise error_at(
                where_file,
                [key],
                f"axis {a.key!r} has {len(a.values)} values but is not the plot's x, series or facet; "
                f"pick one with where: {{{a.key}: VALUE}}",
            )
    return where


def _plot_name(where_file: str, key: str, kwargs: Mapping[str, Any], earlier: Sequence[PlotSpec]) -> str:
    """The plot's file stem: its ``name``, or ``Y_vs_X[_by_SERIES]``; a file name no earlier plot has."""
    name = kwargs.get("name") or f"{kwargs['y']}_vs_{kwargs['x']}" + (
        f"_by_{kwargs['series']}" if kwargs.get("series") else ""
    )
    if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z0-9._-]+", name):
        raise error_at(
            where_file, [f"{key}.name"], f"expected a file name of letters, digits, '.', '_', '-', got {name!r}"
        )
    if any(p.name == name for p in earlier):
        raise error_at(where_file, [f"{key}.name"], f"two plots are named {name!r}")
    return name
