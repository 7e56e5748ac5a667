"""Two small charts as SVG, written with the standard library alone.

People read a memory curve faster than a table, but the helpers must run where no plotting
package is installed (an agent's sandbox, a login node), so the charts are built as SVG
text here: a line chart of memory per rank over iterations against the card's limit
(runtime_memory.py --plot), and stacked bars of each pipeline stage's components against
the limit (estimate_memory.py --plot). Every value is escaped; the file is written to a
temporary name and moved into place, so a failed write never leaves half a chart.
"""

from __future__ import annotations

import math
import os
import tempfile
from collections.abc import Sequence
from pathlib import Path
from xml.sax.saxutils import escape, quoteattr

from memtune.errors import InputError
from memtune.units import GIB

WIDTH, HEIGHT = 880, 460
LEFT, RIGHT, TOP, BOTTOM = 72, 190, 44, 56
PALETTE = (
    "#1f77b4",
    "#ff7f0e",
    "#2ca02c",
    "#9467bd",
    "#8c564b",
    "#e377c2",
    "#17becf",
    "#bcbd22",
    "#7f7f7f",
    "#d62728",
)
LIMIT_COLOR = "#d62728"


class Svg:
    """A list of SVG elements with a fixed canvas."""

    def __init__(self, width: int = WIDTH, height: int = HEIGHT) -> None:
        self.width, self.height = width, height
        self.parts: list[str] = []

    def add(self, tag: str, text: str | None = None, **attrs: str | float) -> None:
        rendered = " ".join(f"{k.rstrip('_').replace('_', '-')}={quoteattr(_num(v))}" for k, v in attrs.items())
        if text is None:
            self.parts.append(f"<{tag} {rendered}/>")
        else:
            self.parts.append(f"<{tag} {rendered}>{escape(text)}</{tag}>")

    def render(self) -> str:
        head = (
            f'<svg xmlns="http://www.w3.org/2000/svg" width="{self.width}" height="{self.height}" '
            f'viewBox="0 0 {self.width} {self.height}" font-family="sans-serif" font-size="12">'
        )
        return (
            "\n".join(
                [head, f'<rect width="{self.width}" height="{self.height}" fill="white"/>', *self.parts, "</svg>"]
            )
            + "\n"
        )


def _num(value: str | float) -> str:
    if isinstance(value, float):
        return f"{value:.2f}".rstrip("0").rstrip(".")
    return str(value)


def nice_ticks(low: float, high: float, count: int = 5) -> list[float]:
    """Round tick values covering [low, high] (1, 2, 5 x 10^k steps)."""
    if high <= low:
        high = low + 1
    raw = (high - low) / max(1, count)
    magnitude = 10 ** math.floor(math.log10(raw))
    step = next(m * magnitude for m in (1, 2, 5, 10) if m * magnitude >= raw)
    start = math.floor(low / step) * step
    ticks = []
    value = start
    while value <= high + step * 0.5:
        ticks.append(round(value, 10))
        value += step
    return ticks


def _frame(svg: Svg, title: str, x_label: str, y_ticks: Sequence[float], y_max: float) -> None:
    plot_w, plot_h = svg.width - LEFT - RIGHT, svg.height - TOP - BOTTOM
    svg.add("text", title, x=LEFT, y=24, font_size=15, font_weight="bold")
    for tick in y_ticks:
        y = TOP + plot_h - plot_h * tick / y_max
        svg.add("line", x1=LEFT, x2=LEFT + plot_w, y1=y, y2=y, stroke="#e6e6e6")
        svg.add("text", f"{tick:g}", x=LEFT - 6, y=y + 4, text_anchor="end", fill="#444")
    svg.add("line", x1=LEFT, x2=LEFT, y1=TOP, y2=TOP + plot_h, stroke="#333")
    svg.add("line", x1=LEFT, x2=LEFT + plot_w, y1=TOP + plot_h, y2=TOP + plot_h, stroke="#333")
    svg.add("text", "GiB", x=16, y=TOP + plot_h / 2, fill="#444")
    svg.add("text", x_label, x=LEFT + plot_w / 2, y=svg.height - 14, text_anchor="middle", fill="#444")


def _limit_line(svg: Svg, limit_bytes: int | None, y_max: float, label: str) -> None:
    if not limit_bytes:
        return
    plot_w, plot_h = svg.width - LEFT - RIGHT, svg.height - TOP - BOTTOM
    y = TOP + plot_h - plot_h * (limit_bytes / GIB) / y_max
    svg.add("line", x1=LEFT, x2=LEFT + plot_w, y1=y, y2=y, stroke=LIMIT_COLOR, stroke_width=2, stroke_dasharray="6,4")
    svg.add("text", f"{label} {limit_bytes / GIB:.1f} GiB", x=LEFT + plot_w + 6, y=y + 4, fill=LIMIT_COLOR)


def line_chart(
    title: str,
    series: Sequence[tuple[str, Sequence[tuple[float, int]]]],
    limit_bytes: int | None,
    x_label: str = "iteration",
    limit_label: str = "card",
) -> str:
    """Lines of (x, bytes) per named series, in GiB, with the card's limit dashed."""
    svg = Svg()
    points = [pt for _, pts in series for pt in pts]
    y_top = max([b for _, b in points] + [limit_bytes or 0] + [1]) / GIB * 1.08
    ticks = nice_ticks(0, y_top)
    y_max = max(ticks[-1], y_top)
    xs = [x for x, _ in points] or [0.0, 1.0]
    x_low, x_high = min(xs), max(xs)
    if x_high <= x_low:
        x_high = x_low + 1
    _frame(svg, title, x_label, ticks, y_max)
    plot_w, plot_h = svg.width - LEFT - RIGHT, svg.height - TOP - BOTTOM
    for tick in nice_ticks(x_low, x_high, 6):
        if x_low <= tick <= x_high:
            x = LEFT + plot_w * (tick - x_low) / (x_high - x_low)
            svg.add("text", f"{tick:g}", x=x, y=TOP + plot_h + 16, text_anchor="middle", fill="#444")
    _limit_line(svg, limit_bytes, y_max, limit_label)
    for index, (name, pts) in enumerate(series):
        color = PALETTE[index % len(PALETTE)]
        coords = " ".join(
            f"{LEFT + plot_w * (x - x_low) / (x_high - x_low):.1f},{TOP + plot_h - plot_h * (b / GIB) / y_max:.1f}"
            for x, b in pts
        )
        if len(pts) == 1:
            x, b = pts[0]
            svg.add(
                "circle",
                cx=LEFT + plot_w * (x - x_low) / (x_high - x_low),
                cy=TOP + plot_h - plot_h * (b / GIB) / y_max,
                r=3,
                fill=color,
            )
        elif pts:
            svg.add("polyline", points=coords, fill="none", stroke=color, stroke_width=1.6)
        if index < 16:
            y = TOP + 20 + 16 * index
            svg.add(
                "line",
                x1=svg.width - RIGHT + 12,
                x2=svg.width - RIGHT + 30,
                y1=y - 4,
                y2=y - 4,
                stroke=color,
                stroke_width=3,
            )
            svg.add("text", name, x=svg.width - RIGHT + 36, y=y, fill="#222")
    if len(series) > 16:
        svg.add("text", f"(+{len(series) - 16} more)", x=svg.width - RIGHT + 36, y=TOP + 20 + 16 * 16, fill="#666")
    return svg.render()


def stacked_bars(
    title: str,
    bars: Sequence[tuple[str, Sequence[tuple[str, int]]]],
    limit_bytes: int | None,
    x_label: str = "pipeline stage",
    limit_label: str = "card",
) -> str:
    """One bar per label, stacked from its (component, bytes) parts, with the limit dashed."""
    svg = Svg()
    totals = [sum(max(0, b) for _, b in parts) for _, parts in bars] or [0]
    y_top = max(totals + [limit_bytes or 0, 1]) / GIB * 1.08
    ticks = nice_ticks(0, y_top)
    y_max = max(ticks[-1], y_top)
    _frame(svg, title, x_label, ticks, y_max)
    plot_w, plot_h = svg.width - LEFT - RIGHT, svg.height - TOP - BOTTOM
    names: list[str] = []
    for _, parts in bars:
        for name, _ in parts:
            if name not in names:
                names.append(name)
    colors = {name: PALETTE[i % len(PALETTE)] for i, name in enumerate(names)}
    slot = plot_w / max(1, len(bars))
    bar_w = min(60.0, slot * 0.7)
    for index, (label, parts) in enumerate(bars):
        x = LEFT + slot * index + (slot - bar_w) / 2
        base = 0.0
        for name, value in parts:
            if value <= 0:
                continue
            height = plot_h * (value / GIB) / y_max
            y = TOP + plot_h - plot_h * base / y_max - height
            svg.add("rect", x=x, y=y, width=bar_w, height=height, fill=colors[name])
            base += value / GIB
        svg.add("text", label, x=x + bar_w / 2, y=TOP + plot_h + 16, text_anchor="middle", fill="#444")
        svg.add(
            "text",
            f"{base:.1f}",
            x=x + bar_w / 2,
            y=TOP + plot_h - plot_h * base / y_max - 4,
            text_anchor="middle",
            fill="#222",
        )
    _limit_line(svg, limit_bytes, y_max, limit_label)
    for index, name in enumerate(names):
        y = TOP + 20 + 16 * index
        svg.add("rect", x=svg.width - RIGHT + 12, y=y - 10, width=12, height=12, fill=colors[name])
        svg.add("text", name, x=svg.width - RIGHT + 30, y=y, fill="#222")
    return svg.render()


def check_plot_path(path: str, inputs: Sequence[str] = ()) -> Path:
    """The --plot target, refused before any work when it could not be written or would
    overwrite an input: a chart must never replace the log it was drawn from."""
    target = Path(path)
    if target.suffix.lower() != ".svg":
        raise InputError(f"--plot {path}: the chart is SVG; give a file name ending in .svg")
    if target.is_dir():
        raise InputError(f"--plot {path}: is a directory; give a file name such as {Path(path) / 'memory.svg'}")
    parent = target.parent if str(target.parent) else Path(".")
    if not parent.is_dir():
        raise InputError(f"--plot {path}: folder {parent} does not exist; create it or choose another path")
    for given in inputs:
        if given != "-" and Path(given).exists() and target.exists() and os.path.samefile(given, target):
            raise InputError(f"--plot {path}: is one of the inputs; choose another file name")
    return target


def write_svg(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` via a temporary file in the same folder (atomic replace)."""
    parent = path.parent if str(path.parent) else Path(".")
    try:
        handle, temp = tempfile.mkstemp(prefix=".plot-", suffix=".svg", dir=parent)
        try:
            with os.fdopen(handle, "w", encoding="utf-8") as out:
                out.write(text)
            os.replace(temp, path)
        except BaseException:
            Path(temp).unlink(missing_ok=True)
            raise
    except OSError as exc:
        raise InputError(f"--plot {path}: cannot write ({exc.strerror or exc})") from exc
