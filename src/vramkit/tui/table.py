"""`vram top`'s process table: a Line API widget on Textual's ScrollView that draws its header and
process lines itself, in the look Textual's DataTable gives a row-cursor table (its CSS component
classes, so the themes and the ASCII look apply as they did).

Its rows are places (row i of the view), not processes: `show(count, values)` says how many there
are and how to build the cells of row i (plain strings, in column order), which happens only
when row i is drawn or asked for. So a refresh of 550 processes with 35 on screen builds 35
rows, and keeps no object per row: DataTable kept a key, a Row, two index entries and a dict of
cells for each, and its module and drawing path (rich's Padding and Styled) besides.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, ClassVar, NamedTuple

from rich.cells import cell_len, set_cell_size
from rich.segment import Segment
from rich.style import Style as RichStyle
from rich.text import Text
from textual import events
from textual._segment_tools import line_crop
from textual.binding import Binding, BindingType
from textual.cache import LRUCache
from textual.geometry import Region, Size, Spacing
from textual.message import Message
from textual.scroll_view import ScrollView
from textual.strip import Strip

from ..i18n import N_
from .bindings import translate


class ColumnKey(NamedTuple):
    """A column's key, as `key.value` (the name DataTable's keys gave it)."""

    value: str


class Column(NamedTuple):
    """A column: its key, its header and the width of its text (the padding is the table's)."""

    key: ColumnKey
    label: Text
    width: int

    def get_render_width(self, table: ProcTable) -> int:
        return self.width + 2 * table.cell_padding


class _Frame(NamedTuple):
    """What a frame of lines is drawn with (ProcTable._new_frame), read once a frame."""

    style: RichStyle  # the table's
    scroll_x: int
    scroll_y: int
    width: int
    cursor_row: int
    hover_row: int  # -2: no row under the mouse is shown (-1: the header)
    columns: tuple[tuple[str, int], ...]  # each column's key and width as drawn
    state: object  # the pseudo classes (focus): the component styles follow them


# A cell's text as drawn, apart from its row's style: (the cell's text, "", "", None), or for a
# text with a style of its own (the flags) (before it, it, after it, its style)
_CellParts = tuple[str, str, str, "RichStyle | None"]
# A row's styles: before a cell's own style, after it, and the two together (ProcTable._row_styles)
_RowStyles = tuple[RichStyle, RichStyle, RichStyle]


def _cells(text: str) -> int:
    """text's cell length, as rich's cell_len gives it. ASCII (nearly every cell) is measured by its
    length: cell_len would keep each text of every second (ELAPSED) in rich's cache of 4,096."""
    return len(text) if text.isascii() and text.isprintable() else cell_len(text)


def _styled(parts: _CellParts, styles: _RowStyles) -> list[tuple[str, RichStyle]]:
    """A cell's texts in its row's styles (and its own, between the two)."""
    before, inside, after, own = parts
    pre, post, around = styles
    if own is None:
        return [(before, around)]
    return [(before, around), (inside, pre + own + post), (after, around)]


LINES_KEPT = 256  # process lines kept between refreshes (a screen's worth, under and off the cursor)


class ProcTable(ScrollView, can_focus=True):
    """The process table: a header of column labels (a click on one posts HeaderSelected) over one
    line a row, a row cursor (up/down/page up/page down, Home/End to the first/last row, a click
    selects a row; Enter or a click on the cursor's row posts RowSelected) and the row under the
    mouse highlighted. The command is clipped to fit, so there is nothing to scroll sideways to.

    Which process is under the cursor is the app's business (it keeps the rows as data and moves
    the cursor with its process). Each cell's text is laid out once per (column, text, width)
    (_cells_drawn) and each line drawn is kept until the next show() (_lines_drawn), which marks
    for drawing only the cells on screen whose text changed."""

    ALLOW_SELECT = False
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("enter", "select_cursor", N_("Select"), show=False),
        Binding("up", "cursor_up", N_("Cursor up"), show=False),
        Binding("down", "cursor_down", N_("Cursor down"), show=False),
        Binding("right", "cursor_right", N_("Scroll right"), show=False),
        Binding("left", "cursor_left", N_("Scroll left"), show=False),
        Binding("pageup", "page_up", N_("Page up"), show=False),
        Binding("pagedown", "page_down", N_("Page down"), show=False),
        Binding("ctrl+home,home", "scroll_top", N_("Top"), show=False),
        Binding("ctrl+end,end", "scroll_bottom", N_("Bottom"), show=False),
    ]
    # DataTable's classes and, for those a row cursor's table uses, its rules: the look is the same
    COMPONENT_CLASSES: ClassVar[set[str]] = {
        "datatable--cursor", "datatable--hover", "datatable--header", "datatable--header-cursor",
        "datatable--header-hover",
    }
    DEFAULT_CSS = """
    ProcTable {
        background: $surface;
        color: $foreground;
        height: auto;
        max-height: 100%;

        &:focus {
            background-tint: $foreground 5%;
            & > .datatable--cursor {
                background: $block-cursor-background;
                color: $block-cursor-foreground;
                text-style: $block-cursor-text-style;
            }
            & > .datatable--header {
                background-tint: $foreground 5%;
            }
        }
        & > .datatable--header {
            text-style: bold;
            background: $panel;
            color: $foreground;
        }
        &:ansi > .datatable--header {
            background: ansi_bright_blue;
            color: ansi_default;
        }
        & > .datatable--cursor {
            background: $block-cursor-blurred-background;
            color: $block-cursor-blurred-foreground;
            text-style: $block-cursor-blurred-text-style;
        }
        & > .datatable--header-cursor {
            background: $accent-darken-1;
            color: $foreground;
        }
        & > .datatable--header-hover {
            background: $accent 30%;
        }
        & > .datatable--hover {
            background: $block-hover-background;
        }
    }
    """

    cell_padding = 1  # blank cells on each side of each column's text
    header_height = 1

    class RowSelected(Message):
        """Enter on the cursor's row, or a click on it."""

        def __init__(self, table: ProcTable, row: int) -> None:
            super().__init__()
            self.table = table
            self.row = row

        @property
        def control(self) -> ProcTable:
            return self.table

    class HeaderSelected(Message):
        """A click on a column's header."""

        def __init__(self, table: ProcTable, column_key: ColumnKey, column_index: int) -> None:
            super().__init__()
            self.table = table
            self.column_key = column_key
            self.column_index = column_index

        @property
        def control(self) -> ProcTable:
            return self.table

    def __init__(self, cell_text: Callable[[str, str], Text], **kwargs: Any) -> None:
        super().__init__(**kwargs)
        translate(self)
        self.cell_text = cell_text  # (column key, shown text) -> the cell as drawn
        self.columns: tuple[Column, ...] = ()
        self._count = 0
        self.cursor_row = 0
        self.hover_row = 0
        self._show_hover = False  # the row under the mouse is highlighted (not after a key)
        self._values: Callable[[int], list[str]] = lambda index: []  # row i's cells, built on demand
        self._built: dict[int, list[str]] = {}  # the rows built since the last show()
        self.rows_built = 0  # rows built, ever (the rest of the rows are never built)
        self._frame: _Frame | None = None  # while a frame is drawn
        self._drawn_with: tuple[object, ...] = ()  # the look of the lines drawn (a _Frame's but the rows)
        self._components: dict[tuple[bool, bool, bool], tuple[RichStyle, RichStyle]] = {}
        self._header: Strip | None = None
        self._header_hover = False
        # process rows' lines, by (row, under the cursor, under the mouse): cleared on show() but
        # for the rows on screen that did not change, when the look changes, and when it holds
        # LINES_KEPT (scrolling far between refreshes). A dict: an LRUCache is a ring of lists, so
        # each one dropped on show() was garbage in reference cycles, its lines with it, until a
        # full collection (~100 lines of ~150 characters at any time at 8 x 200)
        self._lines_drawn: dict[tuple[int, bool, bool], Strip] = {}
        # their cells' texts as drawn, by (column, text, width), without the row's style (one a row,
        # cursor and mouse: its row for the mouse in its meta): kept across refreshes (most texts
        # stay), cleared when the look changes; a screen's worth and some (ELAPSED gives ~30 new
        # texts a second)
        self._cells_drawn: LRUCache[tuple[int, str, int], _CellParts] = LRUCache(640)

    # ------------------------------------------------------------ rows and columns
    @property
    def row_count(self) -> int:
        return self._count

    @property
    def ordered_columns(self) -> list[Column]:
        return list(self.columns)

    @property
    def _table_width(self) -> int:
        return sum(column.width + 2 * self.cell_padding for column in self.columns)

    def set_columns(self, columns: Iterable[tuple[str, Text, int]]) -> None:
        """New columns, (key, header, width of the text) each: the table is emptied, its cursor and
        scrolling back at the top (the caller shows its rows again)."""
        self.columns = tuple(Column(ColumnKey(key), label, width) for key, label, width in columns)
        self._count = 0
        self._values, self._built = (lambda index: []), {}
        self.cursor_row = self.hover_row = 0
        self._clear_drawn()
        self.virtual_size = Size(self._table_width, self.header_height)
        self.refresh()
        self.scroll_to(0, 0, animate=False, force=True)

    def show(self, count: int, values: Callable[[int], list[str]]) -> None:
        """From now on the table has `count` rows, row i's cells being values(i) (built when
        row i is drawn). The cursor stays in its place (the caller moves it with its process)."""
        self._values = values
        before, self._built = self._built, {}
        changed = count != self._count
        if changed:
            self._count = count
            self.virtual_size = Size(self._table_width, count + self.header_height)
            if self.cursor_row >= count:  # back inside the table
                self.move_cursor(row=count - 1)
        self._redraw_changed(before, changed)

    def row_values(self, index: int) -> list[str]:
        """Row `index`'s cells, in column order (built once per show())."""
        cells = self._built.get(index)
        if cells is None:
            cells = self._built[index] = self._values(index)
            self.rows_built += 1
        return cells

    def get_row_at(self, index: int) -> list[str]:
        if not 0 <= index < self._count:
            raise IndexError(f"no row {index}")
        return self.row_values(index)

    def _redraw_changed(self, before: dict[int, list[str]], everything: bool) -> None:
        """Mark for drawing only the cells on screen whose text changed since the rows `before`
        (the terminal gets those, not the table); a row not built before is drawn whole. The
        lines kept are those of rows on screen that did not change: any other may show another
        process when it comes into view."""
        lines, self._lines_drawn = self._lines_drawn, {}
        if everything or not self.is_mounted:
            self.refresh()
            return
        header = self.header_height
        scroll_x, scroll_y = self.scroll_offset
        edges = [0]
        for column in self.columns:
            edges.append(edges[-1] + column.get_render_width(self))
        regions = []
        for row in range(scroll_y, min(self._count, scroll_y + max(0, self.size.height - header))):
            new, old = self.row_values(row), before.get(row)
            changed = [c for c in range(len(new)) if old is None or c >= len(old) or old[c] != new[c]]
            if not changed:
                for key in ((row, c, h) for c in (False, True) for h in (False, True)):
                    line = lines.get(key)
                    if line is not None:
                        self._lines_drawn[key] = line
                continue
            x, right = edges[changed[0]], (self.size.width + scroll_x if old is None else edges[changed[-1] + 1])
            regions.append(Region(x - scroll_x, header + row - scroll_y, right - x, 1))
        if regions:
            self.refresh(*regions)

    def _clear_drawn(self) -> None:
        self._lines_drawn.clear()
        self._cells_drawn.clear()
        self._components.clear()
        self._header = None

    def notify_style_update(self) -> None:
        super().notify_style_update()
        self._clear_drawn()
        self.refresh()

    # ------------------------------------------------------------ the cursor and the mouse
    def move_cursor(self, *, row: int, animate: bool = False, scroll: bool = True) -> None:
        """Put the cursor on `row` (kept inside the table) and, with `scroll`, into view."""
        old, self.cursor_row = self.cursor_row, max(0, min(row, self._count - 1))
        if old != self.cursor_row:
            self._refresh_row(old)
            self._refresh_row(self.cursor_row)
        if scroll:
            self._scroll_cursor_into_view(animate)

    def _refresh_row(self, row: int) -> None:
        y = self.header_height + row - self.scroll_offset.y
        if self.header_height <= y < self.size.height:
            self.refresh(Region(0, y, self.size.width, 1))

    def _scroll_cursor_into_view(self, animate: bool = False) -> None:
        header = self.header_height
        region = Region(int(self.scroll_x), header + self.cursor_row, self._table_width, 1)
        self.scroll_to_region(region, animate=animate, spacing=Spacing(header, 0, 0, 0), force=True)

    def _set_hover(self, shown: bool, row: int | None = None) -> None:
        """Show (or not) the highlight of the row under the mouse: the mouse shows it, a key hides it."""
        old = (self.hover_row if self._show_hover else None)
        self._show_hover = shown
        if row is not None:
            self.hover_row = row
        new = self.hover_row if shown else None
        if old != new:
            for changed in (old, new):
                if changed == -1:
                    self.refresh(Region(0, 0, self.size.width, self.header_height))
                elif changed is not None:
                    self._refresh_row(changed)

    def _on_mouse_move(self, event: events.MouseMove) -> None:
        meta = event.style.meta
        row = meta.get("row") if meta else None
        self._set_hover(row is not None, row)

    def _on_leave(self, event: events.Leave) -> None:
        self._set_hover(False)

    async def _on_click(self, event: events.Click) -> None:
        meta = event.style.meta
        row = meta.get("row")
        self._set_hover(row is not None, row)
        if row is None or "column" not in meta:
            return
        if row == -1:  # a header; not the blank right of the last one
            if not meta.get("out_of_bounds", False):
                column = self.columns[meta["column"]]
                self.post_message(self.HeaderSelected(self, column.key, meta["column"]))
            return
        again = row == self.cursor_row
        self.move_cursor(row=row, scroll=False)
        if again:
            self._post_selected()
        self._scroll_cursor_into_view(animate=True)
        event.stop()

    def _post_selected(self) -> None:
        if self._count:
            self.post_message(self.RowSelected(self, self.cursor_row))

    def action_select_cursor(self) -> None:
        self._set_hover(False)
        self._post_selected()

    def action_cursor_up(self) -> None:
        self._set_hover(False)
        self.move_cursor(row=self.cursor_row - 1)

    def action_cursor_down(self) -> None:
        self._set_hover(False)
        self.move_cursor(row=self.cursor_row + 1)

    def action_cursor_left(self) -> None:
        self._set_hover(False)
        self.action_scroll_left()

    def action_cursor_right(self) -> None:
        self._set_hover(False)
        self.action_scroll_right()

    def action_page_down(self) -> None:
        """A page down: the rows scroll by a page, the cursor a page further (at most the last)."""
        self._set_hover(False)
        height = self.scrollable_content_region.height - self.header_height
        self.scroll_relative(y=height, animate=False, force=True)
        self.move_cursor(row=self.cursor_row + min(max(0, height), self._count - 1 - self.cursor_row))

    def action_page_up(self) -> None:
        self._set_hover(False)
        height = self.scrollable_content_region.height - self.header_height
        self.scroll_relative(y=-height, animate=False)
        self.move_cursor(row=self.cursor_row - min(max(0, height), self.cursor_row))

    def action_scroll_top(self) -> None:
        self._set_hover(False)
        self.move_cursor(row=0)

    def action_scroll_bottom(self) -> None:
        self._set_hover(False)
        self.move_cursor(row=self._count - 1)

    # ------------------------------------------------------------ drawing
    def render_lines(self, crop: Region) -> list[Strip]:
        self._frame = self._new_frame()
        try:
            return super().render_lines(crop)
        finally:
            self._frame = None

    def _new_frame(self) -> _Frame:
        """What every line of this frame is drawn with, read once: each of Textual's reactive
        attributes and DOMNode.rich_style costs a chain of lookups."""
        columns = tuple((column.key.value, column.width + 2 * self.cell_padding) for column in self.columns)
        scroll_x, scroll_y = self.scroll_offset
        frame = _Frame(self.rich_style, scroll_x, scroll_y, self.size.width, self.cursor_row,
                       self.hover_row if self._show_hover else -2, columns, self.get_pseudo_class_state())
        drawn_with = (frame.style, frame.scroll_x, frame.width, frame.columns, frame.state)
        if drawn_with != self._drawn_with:  # another look: nothing drawn before is right
            self._drawn_with = drawn_with
            self._clear_drawn()
        return frame

    def render_line(self, y: int) -> Strip:
        frame = self._frame or self._new_frame()  # (a line asked for outside a frame: its own)
        if y < self.header_height:
            return self._header_line(frame)
        row = y - self.header_height + frame.scroll_y
        if row >= self._count:
            return Strip.blank(frame.width, frame.style)
        cursor, hover = row == frame.cursor_row, row == frame.hover_row
        key = (row, cursor, hover)
        strip = self._lines_drawn.get(key)
        if strip is None:
            if len(self._lines_drawn) >= LINES_KEPT:
                self._lines_drawn.clear()
            strip = self._lines_drawn[key] = self._process_line(row, cursor, hover, frame)
        return strip

    def _component(self, header: bool, hover: bool, cursor: bool) -> tuple[RichStyle, RichStyle]:
        """The cursor's and the mouse's styles on a cell, and what of them goes over the cell's own
        style (the cursor's colour): as DataTable layers them."""
        key = (header, hover, cursor)
        styles = self._components.get(key)
        if styles is None:
            get = self.get_component_rich_style
            style = RichStyle()
            if hover:
                style += get("datatable--hover")
                if header:
                    style += get("datatable--header-hover")
            if cursor:
                style += get("datatable--cursor")
                if header:
                    style += get("datatable--header-cursor")
            styles = self._components[key] = (style, RichStyle.from_color(color=style.color))
        return styles

    def _header_line(self, frame: _Frame) -> Strip:
        hover = frame.hover_row == -1
        if self._header is None or self._header_hover != hover:  # (another look clears it: _new_frame)
            header_style = self.get_component_styles("datatable--header").rich_style
            component, post = self._component(True, hover, False)
            runs = []
            for index, (column, (__, width)) in enumerate(zip(self.columns, frame.columns)):
                pre = header_style + RichStyle.from_meta({"row": -1, "column": index}) + component
                label = column.label
                runs.extend(_styled(self._layout(label, label.plain, width), (pre, post, pre + post)))
            extend = header_style + component + RichStyle.from_meta({"row": -1, "column": 0, "out_of_bounds": True})
            self._header = self._line([Segment(text, style) for text, style in runs if text], extend, frame)
            self._header_hover = hover
        return self._header

    def _process_line(self, row: int, cursor: bool, hover: bool, frame: _Frame) -> Strip:
        """A process row's line, from the frame's values: each cell's text (kept by _cells_drawn) in
        the row's style, runs of one style in one segment."""
        runs: list[tuple[str, RichStyle | None]] = []  # (text, style), no two of one style in a row
        values = self.row_values(row)
        styles = self._row_styles(row, frame.style, cursor, hover)
        for column, (key, width) in enumerate(frame.columns):
            value = values[column] if column < len(values) else ""
            cell_key = (column, value, width)
            parts = self._cells_drawn.get(cell_key)
            if parts is None:
                parts = self._cells_drawn[cell_key] = self._layout(self.cell_text(key, value), value, width)
            for text, style in _styled(parts, styles):
                if runs and runs[-1][1] == style:
                    runs[-1] = (runs[-1][0] + text, style)
                elif text:
                    runs.append((text, style))
        component = self._component(False, hover, cursor)[0]
        extend = frame.style + component + RichStyle.from_meta({"row": row, "column": 0, "out_of_bounds": True})
        return self._line([Segment(text, style) for text, style in runs], extend, frame)

    def _line(self, segments: list[Segment], extend: RichStyle, frame: _Frame) -> Strip:
        """The cells' segments as a line of the table's width, the rest in `extend`."""
        table_width = sum(width for __, width in frame.columns)
        segments.append(Segment(" " * max(0, frame.width - table_width), extend))
        if frame.scroll_x == 0:  # (always: the command is cut to fit) measured here, not by Textual,
            # which measures through rich's cell-length cache: it would keep each row's text, whose
            # ELAPSED changes every second (~400 texts of ~120 characters in the first 30 s at 8 x 200)
            line, length = segments, sum(_cells(segment.text) for segment in segments)
        else:
            line, length = line_crop(segments, frame.scroll_x, frame.scroll_x + frame.width, frame.width), None
        return Strip(line, length).adjust_cell_length(frame.width, frame.style).simplify()

    def _layout(self, text: Text, value: str, width: int) -> _CellParts:
        """A cell's text laid out as rich draws it in its padded column (one line, cut to the column,
        justified), apart from the row's style."""
        inner = width - 2 * self.cell_padding
        value = value.split("\n", 1)[0]  # a row is one line high
        size = _cells(value)
        if size > inner:  # cut to the column, as rich crops a line that does not wrap
            value = set_cell_size(value, inner)
            size = inner
        own = text.style if isinstance(text.style, RichStyle) else RichStyle.parse(text.style) if text.style else None
        pad, fill = " " * self.cell_padding, " " * (inner - size)
        right = text.justify == "right"
        if own is None or not value:
            return (pad + (fill + value if right else value + fill) + pad, "", "", None)
        return (pad + fill, value, pad, own) if right else (pad, value, fill + pad, own)

    def _row_styles(self, row: int, base_style: RichStyle, cursor: bool, hover: bool) -> _RowStyles:
        """A process row's styles: the table's, the mouse meta (the row; column 0 in every cell, so
        that a row has one style, not one a cell), the cursor's and the mouse's."""
        component, post = self._component(False, hover, cursor)
        pre = base_style + RichStyle.from_meta({"row": row, "column": 0}) + component
        return pre, post, pre + post
